"""The sides of a comparison (suite/judge/sides.py): read once from a card, labelled by what sets them apart, and a
card whose sides can never pair refused when its claims load (issue 42 item 2)."""

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from suite.errors import ClaimsError
from suite.extensions import reproductions
from suite.judge import claims as claims_module
from suite.judge.sides import BY_SETTING, SETTING_KEYS, UNPAIRED, Sides
from tests.report_fixtures import SDP_CLAIMS_YAML

NEWCOMER = {"name": "ratio", "field": "tokens_per_s", "method": "ddp", "baseline": "ddp"}


def _card(metric: dict, which: int = 0):
    reproductions()  # the reproductions' own metrics (sdp's ratio-global-batch) registered, as `suite` loads them
    entry = yaml.safe_load(SDP_CLAIMS_YAML)["claims"][which]
    entry["metric"] = metric
    return claims_module.parse_claim(entry, "test")


def test_a_ratio_card_at_two_micro_batches_is_refused_with_the_metric_that_pairs_it():
    metric = {**NEWCOMER, "arm": {"micro_batch": 8}, "baseline_arm": {"micro_batch": 16}}
    with pytest.raises(ClaimsError) as err:
        _card(metric)
    message = str(err.value)
    assert ".metric: its sides can never pair" in message and "micro_batch=8" in message
    assert "'ratio-global-batch'" in message and "give both sides one micro_batch" in message
    assert "\n" not in message


def test_sides_that_share_their_settings_load_and_a_quality_card_never_pairs():
    assert _card({**NEWCOMER, "arm": {"micro_batch": 8}, "baseline_arm": {"micro_batch": 8}}).metric["arm"]
    assert _card({**NEWCOMER, "arm": {"micro_batch": 8}})  # the baseline's runs may be at 8 too
    unpaired = {"name": "quality", "field": "final_val_loss", "method": "ddp", "baseline": "ddp"}
    assert _card({**unpaired, "arm": {"micro_batch": 8}, "baseline_arm": {"micro_batch": 16}}, which=1)


def test_labels_show_every_field_that_sets_the_sides_apart():
    sides = Sides.of({**NEWCOMER, "arm": {"micro_batch": 8, "data": "stdlib"}, "baseline_arm": {"micro_batch": 16}})
    assert sides.labels() == "ddp micro_batch=8 data=stdlib and ddp micro_batch=16"
    dion = Sides.of({"method": "ddp", "baseline": "ddp", "optimizer": "dion", "baseline_optimizer": "muon"})
    assert dion.labels() == "ddp dion and ddp muon"
    assert Sides.of({"method": "b-sdp", "field": "x"}).labels() == "b-sdp"


fixes = st.dictionaries(st.sampled_from([*SETTING_KEYS, "lr", "world_size"]), st.integers(0, 2), max_size=4)


@given(fixes, fixes)
def test_a_conflict_is_a_paired_setting_both_sides_fix_apart(mine: dict, theirs: dict):
    sides = Sides.of({"method": "a", "baseline": "b", "arm": mine, "baseline_arm": theirs})
    apart = {k for k in SETTING_KEYS if k in mine and k in theirs and mine[k] != theirs[k]}
    conflict = BY_SETTING.conflict(sides)
    assert (conflict is None) == (not apart)
    assert conflict is None or conflict[0] in apart
    assert UNPAIRED.conflict(sides) is None
    assert set(sides.differing()) == {k for k in {*mine, *theirs} if mine.get(k) != theirs.get(k)}


NEWCOMER_TOY = '''"""A newcomer's toy: DDP at two micro-batch sizes."""

from pathlib import Path

from suite.config import RunConfig
from suite.extensions import Reproduction
from suite.plan.plans import Plan


def plan(preset):
    runs = [RunConfig(method="ddp", nproc=2, seed=s, tokens=20480, micro_batch=b) for b in (8, 16) for s in (0, 1, 2)]
    return Plan(preset, runs, protocol="equal tokens")


REPRODUCTION = Reproduction(plan=plan, claims=Path(__file__).with_name("claims.yaml"))
'''


def test_reproduce_refuses_an_unpairable_card_before_it_runs_anything(tmp_path):
    from tests.conftest import run_cli

    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "__init__.py").write_text(NEWCOMER_TOY)
    metric = {**NEWCOMER, "arm": {"micro_batch": 16}, "baseline_arm": {"micro_batch": 8}}
    card = {
        "id": "toy-throughput", "statement": "s", "kind": "mechanism", "better": "higher", "source": {"paper": "none"},
        "source_status": "a test", "metric": metric, "command": "python -m suite reproduce toy --preset smoke",
    }  # fmt: skip
    (folder / "claims.yaml").write_text(yaml.safe_dump({"claims": [card]}))
    results = tmp_path / "results"
    proc = run_cli(["reproduce", "toy", "--results", str(results)], env={"SUITE_REPRODUCTIONS": str(folder)})
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "its sides can never pair" in proc.stderr and "give both sides one micro_batch" in proc.stderr
    assert not list(results.glob("*.json"))
