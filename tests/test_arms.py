"""Arms (suite/arms.py): what a record is an arm of, and claims that name both sides as arms."""

from __future__ import annotations

import json

import pytest

from suite.arms import arm_config, arm_key, arm_of, differences, stored_key_holds
from suite.judge.claims import ClaimsError
from suite.judge.verdicts import claim_frame, evaluate
from tests.report_fixtures import make_record
from tests.test_claims import claim, frame, quality_claim, rows


def _arm_rows(method: str, values: list[float], field: str, optimizer: str, **overrides) -> list[dict]:
    """Rows of one arm: `method` with `optimizer` (its own arm key), one per seed."""
    config = {"method": method, "optimizer": optimizer, "world_size": overrides.pop("world_size", 2)}
    extra = {"arm": arm_key(config), "arm_config": json.dumps(config), "arm_label": f"{method} {optimizer}"}
    return rows(method, values, field, **extra, **overrides)


def test_the_seed_and_the_results_folder_do_not_change_the_arm_but_the_optimizer_does():
    a, b = make_record("ddp", 0), make_record("ddp", 1)
    assert arm_of(a)["key"] == arm_of(b)["key"]
    dion = make_record("ddp", 0, variant={"optimizer": "dion", "rank_fraction": 0.25})
    assert arm_of(dion)["key"] != arm_of(a)["key"]
    assert "variant.optimizer (None / dion)" in differences(arm_config(a), arm_config(dion))


def test_a_fine_tunes_starting_point_is_part_of_its_arm_and_unset_changes_no_earlier_key():
    before = make_record("ddp", 0)
    unset, tuned = make_record("ddp", 0), make_record("ddp", 0)
    unset["settings"] = {**before.get("settings", {}), "init_from": None}
    tuned["settings"] = {**before.get("settings", {}), "init_from": "checkpoints/base.pt"}
    assert arm_key(arm_config(unset)) == arm_key(arm_config(before))
    assert arm_key(arm_config(tuned)) != arm_key(arm_config(before))


def test_emulation_is_an_arm_of_its_own_and_a_stored_unset_emulate_reads_as_the_earlier_key():
    real, emulated = make_record("ddp", 0), make_record("ddp", 0)
    emulated["settings"] = {**real.get("settings", {}), "emulate": True}
    assert arm_key(arm_config(emulated)) != arm_key(arm_config(real))
    written_with_it = make_record("ddp", 0)
    cfg = {**arm_config(real), "emulate": False}
    written_with_it["arm"] = {"key": arm_key(cfg), "config": cfg, "label": "ddp"}
    assert arm_of(written_with_it)["key"] == arm_of(real)["key"] == arm_key(arm_config(real))
    assert stored_key_holds(written_with_it)
    written_with_it["arm"]["key"] = arm_of(real)["key"]
    assert not stored_key_holds(written_with_it)


def test_world_size_makes_another_arm():
    assert arm_of(make_record("ddp", 0, world_size=2))["key"] != arm_of(make_record("ddp", 0, world_size=4))["key"]


def test_two_arms_of_one_method_never_pool_as_seeds():
    records = [make_record("ddp", s, protocol="flops") for s in range(3)]
    records += [make_record("ddp", s, protocol="flops", variant={"optimizer": "dion"}, quality=-0.1) for s in range(3)]
    df = claim_frame(records)
    loose = quality_claim(metric={"name": "quality", "field": "final_val_loss", "method": "ddp", "baseline": "ddp"})
    with pytest.raises(ClaimsError, match=r"matches 2 arms .* differ in variant\.optimizer \(None / dion\)"):
        evaluate(loose, df)
    named = quality_claim(
        metric={
            "name": "quality",
            "field": "final_val_loss",
            "method": "ddp",
            "variant": {"optimizer": "dion"},
            "baseline": "ddp",
            "baseline_variant": {"optimizer": None},
        }
    )
    verdict = evaluate(named, df)
    assert verdict.n_seeds == 3 and len(verdict.run_ids) == 6


def test_runs_at_two_world_sizes_are_two_arms_unless_the_claim_names_one():
    records = [make_record("b-sdp", s, world_size=w, protocol="flops") for w in (2, 4) for s in range(2)]
    records += [make_record("ddp", s, world_size=w, protocol="flops") for w in (2, 4) for s in range(2)]
    df = claim_frame(records)
    spec = {"name": "ratio", "field": "peak_bytes_max", "method": "b-sdp", "baseline": "ddp", "model": "llama-tiny"}
    with pytest.raises(ClaimsError, match=r"world_size \(2 / 4\)"):
        evaluate(claim(metric=spec, seeds_needed=1), df)
    two = evaluate(claim(metric={**spec, "arm": {"world_size": 2}, "baseline_arm": {"world_size": 2}}), df)
    assert two.n_seeds == 2 and set(df.set_index("run_id").loc[list(two.run_ids), "world_size"]) == {2}


def test_the_plateau_reads_the_baseline_arm_not_every_run_of_its_method():
    """Both sides are ddp: Dion's own still-falling seeds must not count as "the baseline changed"."""
    c = quality_claim(
        metric={
            "name": "quality",
            "field": "final_val_loss",
            "method": "ddp",
            "optimizer": "dion",
            "baseline": "ddp",
            "baseline_optimizer": "adamw",
        },
        plateau={"change": 0.02, "source": "the rule"},
    )
    dion = _arm_rows("ddp", [2.00, 2.01, 2.02], "final_val_loss", "dion", val_change_last_fifth=0.075)
    adamw = _arm_rows("ddp", [2.30, 2.31, 2.29], "final_val_loss", "adamw", val_change_last_fifth=0.01)
    verdict = evaluate(c, frame(dion, adamw))
    assert "runs too short" not in verdict.reason and verdict.verdict == "reproduced"


def test_a_misspelt_metric_field_is_refused_when_the_claims_load():
    with pytest.raises(ClaimsError, match=r"metric\.field: 'final_val_los' is not a field of the records"):
        claim(metric={"name": "ratio", "field": "final_val_los", "method": "b-sdp", "baseline": "ddp"})


def test_an_arm_field_that_no_record_has_is_refused_when_the_claims_load():
    with pytest.raises(ClaimsError, match=r"metric\.arm\.nprocs: not an arm field"):
        claim(metric={"name": "ratio", "field": "peak_bytes_max", "method": "b", "baseline": "d", "arm": {"nprocs": 2}})
