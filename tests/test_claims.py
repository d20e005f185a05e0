"""Claims: claims.yaml validation and the verdict logic (tolerance bands, seeds, Welch tests, requirements)."""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from suite import claims as claims_module
from suite.claims import claim_frame, evaluate, load_claims
from tests.report_fixtures import SDP_CLAIMS_YAML, make_record


@lru_cache(maxsize=1)
def _template_row() -> dict:
    return claim_frame([make_record("ddp", 0, protocol="flops")]).iloc[0].to_dict()


def rows(method: str, values: list[float], field: str = "peak_bytes_max", **overrides) -> list[dict]:
    """Summary rows shaped like claim_frame's, one per seed, with `field` set to each value."""
    out = []
    for seed, value in enumerate(values):
        row = dict(
            _template_row(),
            method=method,
            seed=seed,
            run_id=f"{method}-{seed}-{overrides.get('evidence', '')}",
        )
        row.update(overrides)
        row[field] = value
        out.append(row)
    return out


def frame(*groups: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([r for g in groups for r in g])


def claim(**fields):
    """A valid claim (the fixture's memory claim) with some fields replaced; None removes a field."""
    entry = yaml.safe_load(SDP_CLAIMS_YAML)["claims"][0]
    entry.update(fields)
    return claims_module._claim({k: v for k, v in entry.items() if v is not None}, "test")


def quality_claim(**fields):
    entry = yaml.safe_load(SDP_CLAIMS_YAML)["claims"][1]
    entry["metric"] = {k: v for k, v in entry["metric"].items() if k != "variant"}
    entry.update(fields)
    return claims_module._claim(entry, "test")


def test_load_claims_reads_every_field(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text(SDP_CLAIMS_YAML)
    memory, quality, inter_node = load_claims(path)
    assert memory.paper_value == 0.6 and memory.tolerance == 0.1 and memory.protocol == "flops"
    assert str(memory.source) == "arXiv 2507.09029, Table 3, v5" and memory.source_status == "unverified"
    assert memory.metric == {
        "name": "ratio",
        "field": "peak_bytes_max",
        "method": "b-sdp",
        "baseline": "ddp",
        "variant": {"C": 0.5},
    }
    assert quality.paper_value == "2.437 vs 2.452" and quality.seeds_needed == 3 and quality.tolerance == 0.0
    assert inter_node.requires == ("cuda", "network", "world_size>=8") and "2 nodes" in inter_node.what_would_test


def test_paper_value_range_is_kept(tmp_path):
    assert claim(paper_value=[0.4, 0.72]).paper_range == (0.4, 0.72)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"statement": None}, "statement: missing"),
        ({"kind": "speed"}, "kind:"),
        ({"protocol": "equal-steps"}, "protocol:"),
        ({"metric": {"name": "median", "field": "x", "method": "a"}}, "metric.name:"),
        (
            {"metric": {"name": "ratio", "field": "x", "method": "a", "baseline": "b", "colour": 1}},
            "metric.colour:",
        ),
        ({"metric": {"name": "ratio", "method": "a", "baseline": "b"}}, "metric.field: missing"),
        (
            {"metric": {"name": "ratio", "field": "x", "method": "a", "baseline": "b", "variant": 3}},
            "metric.variant:",
        ),
        ({"paper_value": "much less"}, "paper_value:"),
        ({"paper_value": [0.7, 0.4]}, "paper_value:"),
        ({"tolerance": None}, "tolerance: missing"),
        ({"tolerance": -1}, "tolerance:"),
        ({"tolerance": True}, "tolerance: expected"),
        ({"requires": ["gpu"]}, "requires:"),
        ({"requires": ["cuda"]}, "what_would_test: missing"),
        ({"source": {"table": "T1"}}, "source.paper: missing"),
        ({"source": {"paper": "p", "page": 3}}, "source.page:"),
        ({"command": None}, "command: missing"),
        ({"seeds": 3}, "seeds: unknown field"),
        ({"kind": "quality"}, "metric.name: a quality claim cannot use"),
    ],
)
def test_invalid_claim_names_the_field(change, field):
    with pytest.raises(ValueError) as err:
        claim(**change)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_quality_claim_needs_three_seeds_and_a_direction():
    with pytest.raises(ValueError, match=r"seeds_needed: 2 is too few"):
        quality_claim(seeds_needed=2)
    with pytest.raises(ValueError, match=r"metric.better: 'smaller'"):
        quality_claim(metric={"name": "quality", "field": "f", "method": "a", "baseline": "b", "better": "smaller"})


def test_bad_files_give_one_line_errors(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text("claims:\n  - id: a\n    statement: [unclosed\n")
    with pytest.raises(ValueError, match=r"not valid YAML at line \d"):
        load_claims(path)
    path.write_text("claims: 3\n")
    with pytest.raises(ValueError, match="expected a list of claims"):
        load_claims(path)
    entry = yaml.safe_load(SDP_CLAIMS_YAML)["claims"][0]
    path.write_text(yaml.safe_dump([entry, entry]))
    with pytest.raises(ValueError, match=r"unique; repeated: \['sdp-memory'\]"):
        load_claims(path)


def test_claims_for_reads_the_claims_a_reproduction_declares(tmp_path, monkeypatch):
    folder = tmp_path / "fl_fsdp"
    folder.mkdir()
    (folder / "claims.yaml").write_text(SDP_CLAIMS_YAML)
    (folder / "__init__.py").write_text(
        "from pathlib import Path\nfrom suite.extensions import Reproduction\n"
        "REPRODUCTION = Reproduction('fl-fsdp', 'test', claims=Path(__file__).with_name('claims.yaml'))\n"
    )
    monkeypatch.setenv("SUITE_REPRODUCTIONS", str(folder))
    assert claims_module.claims_for("fl-fsdp")[0].id == "sdp-memory"
    assert claims_module.claims_for("harness") == []


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.05, 2.0), min_size=1, max_size=5), st.floats(0.1, 1.5), st.floats(0.0, 0.3))
def test_ratio_claim_passes_exactly_within_its_tolerance(ratios, paper, tolerance):
    c = claim(
        paper_value=paper,
        tolerance=tolerance,
        metric={"name": "ratio", "field": "peak_bytes_max", "method": "m", "baseline": "ddp"},
    )
    v = evaluate(c, frame(rows("m", [100.0 * r for r in ratios]), rows("ddp", [100.0] * len(ratios))))
    measured = float(np.mean(ratios))
    assert v.n_seeds == len(ratios) and v.measured == pytest.approx(measured)
    assert v.ratio_to_paper == pytest.approx(measured / paper)
    if abs(measured - paper) < tolerance - 1e-9:
        assert v.verdict == "reproduced"
    elif abs(measured - paper) > tolerance + 1e-9:
        assert v.verdict == "not reproduced"


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.data())
def test_fewer_seeds_than_needed_is_inconclusive(needed, data):
    have = data.draw(st.integers(1, needed - 1))
    c = claim(
        seeds_needed=needed,
        metric={"name": "ratio", "field": "peak_bytes_max", "method": "m", "baseline": "ddp"},
    )
    v = evaluate(c, frame(rows("m", [60.0] * have), rows("ddp", [100.0] * needed)))
    assert v.verdict == "inconclusive" and v.n_seeds == have and f"needs {needed}" in v.reason


def test_ratio_pairs_seeds_and_ignores_unpaired_ones():
    c = claim(metric={"name": "ratio", "field": "peak_bytes_max", "method": "m", "baseline": "ddp"})
    v = evaluate(c, frame(rows("m", [60.0, 50.0, 70.0]), rows("ddp", [100.0, 100.0])))
    assert v.n_seeds == 2 and v.measured == pytest.approx(0.55)
    assert v.spread == pytest.approx(np.std([0.6, 0.5], ddof=1))


def _quality_verdict(better: str, method: list[float], baseline: list[float], margin: float = 0.0):
    c = quality_claim(
        metric={
            "name": "quality",
            "field": "final_val_loss",
            "method": "m",
            "baseline": "ddp",
            "better": better,
        },
        tolerance=margin,
    )
    return evaluate(c, frame(rows("m", method, "final_val_loss"), rows("ddp", baseline, "final_val_loss")))


def test_quality_claim_uses_one_sided_welch_tests():
    better = _quality_verdict("lower", [2.00, 2.01, 2.02], [2.30, 2.31, 2.29])
    assert better.verdict == "reproduced" and better.p_value < 0.05 and better.baseline == pytest.approx(2.30)
    assert _quality_verdict("lower", [2.30, 2.31, 2.29], [2.00, 2.01, 2.02]).verdict == "not reproduced"
    noisy = _quality_verdict("lower", [2.0, 2.4, 2.2], [2.1, 2.3, 2.25])
    assert noisy.verdict == "inconclusive" and "noise too large" in noisy.reason
    # A margin turns "better than" into "no worse than by more than the margin".
    assert _quality_verdict("lower", [2.05, 2.06, 2.04], [2.00, 2.01, 2.02], margin=0.2).verdict == "reproduced"
    assert _quality_verdict("higher", [0.80, 0.81, 0.82], [0.70, 0.71, 0.69]).verdict == "reproduced"


def test_quality_claim_without_spread_compares_means():
    assert _quality_verdict("lower", [2.0] * 3, [2.1] * 3).verdict == "reproduced"
    assert _quality_verdict("lower", [2.0] * 3, [2.0] * 3).verdict == "inconclusive"


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # nearly equal seeds, drawn on purpose
@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(1.0, 3.0), min_size=3, max_size=5),
    st.lists(st.floats(1.0, 3.0), min_size=3, max_size=5),
)
def test_quality_verdict_does_not_depend_on_the_sign_convention(method, baseline):
    lower = _quality_verdict("lower", method, baseline)
    higher = _quality_verdict("higher", [-x for x in method], [-x for x in baseline])
    assert lower.verdict == higher.verdict
    assert (lower.p_value is None) == (higher.p_value is None)
    if lower.p_value is not None:
        assert lower.p_value == pytest.approx(higher.p_value)


def test_unmet_requirements_make_a_claim_not_testable_here():
    c = claim(
        requires=["cuda", "world_size>=8"],
        what_would_test="8 GPUs: python -m suite reproduce sdp --preset gpu",
        metric={"name": "ratio", "field": "peak_bytes_max", "method": "m", "baseline": "ddp"},
    )
    v = evaluate(c, frame(rows("m", [60.0]), rows("ddp", [100.0])))
    assert v.verdict == "not testable here" and "needs cuda, world_size>=8" in v.reason and "8 GPUs" in v.reason
    gpu = {"device": "cuda", "evidence": "measured (gpu)", "world_size": 8}
    small = {"device": "cuda", "evidence": "measured (gpu)", "world_size": 2}
    met = evaluate(
        c,
        frame(
            rows("m", [60.0], **gpu),
            rows("ddp", [100.0], **gpu),
            rows("m", [10.0], **small),
            rows("ddp", [100.0], **small),
        ),
    )
    # Runs below the required scale do not count towards the claim.
    assert met.verdict == "reproduced" and met.measured == pytest.approx(0.6) and met.provenance == "measured (gpu)"


def test_network_requirement_needs_inter_node_traffic():
    c = claim(
        requires=["network"],
        what_would_test="two nodes",
        metric={"name": "ratio", "field": "peak_bytes_max", "method": "m", "baseline": "ddp"},
    )
    assert evaluate(c, frame(rows("m", [60.0]), rows("ddp", [100.0]))).verdict == "not testable here"
    crossed = {"inter_node": True}
    assert evaluate(c, frame(rows("m", [60.0], **crossed), rows("ddp", [100.0], **crossed))).verdict == "reproduced"


def test_inter_node_tier_in_the_ledger_is_seen():
    df = claim_frame([make_record("ddp", 0, tier="inter-node"), make_record("ddp", 1)])
    assert list(df["inter_node"]) == [True, False]
    assert df["evals.hellaswag"].between(0.3, 0.31).all()


def test_measured_runs_win_and_kinds_are_never_pooled():
    c = claim(metric={"name": "ratio", "field": "peak_bytes_max", "method": "m", "baseline": "ddp"})
    est = {"provenance": "estimated", "evidence": "estimated"}
    both = evaluate(
        c,
        frame(rows("m", [60.0]), rows("ddp", [100.0]), rows("m", [10.0], **est), rows("ddp", [100.0], **est)),
    )
    assert both.measured == pytest.approx(0.6) and both.provenance == "measured (cpu)"
    only = evaluate(c, frame(rows("m", [10.0], **est), rows("ddp", [100.0], **est)))
    assert only.provenance == "estimated" and "from estimated numbers" in only.reason


def test_protocol_status_and_variant_select_the_runs():
    c = claim()  # b-sdp at C=0.5 vs ddp, equal FLOPs
    match = {"protocol": "flops", "variant": json.dumps({"C": 0.5})}
    df = frame(
        rows("b-sdp", [60.0], **match),
        rows("ddp", [100.0], protocol="flops"),
        rows("b-sdp", [10.0], protocol="tokens", variant=json.dumps({"C": 0.5})),
        rows("b-sdp", [20.0], protocol="flops", variant=json.dumps({"C": 0.75})),
        rows("b-sdp", [30.0], status="failed", **match),
    )
    assert evaluate(c, df).measured == pytest.approx(0.6)
    assert evaluate(c, df[df["method"] == "ddp"]).verdict == "inconclusive"


def test_baseline_protocol_takes_the_baselines_runs_of_another_protocol():
    match = {"protocol": "flops", "variant": json.dumps({"C": 0.5})}
    df = frame(
        rows("b-sdp", [60.0], **match), rows("ddp", [100.0], protocol="tokens"), rows("ddp", [50.0], protocol="time")
    )
    assert evaluate(claim(), df).verdict == "inconclusive"  # no DDP run under the FLOP budget
    assert evaluate(claim(baseline_protocol="tokens"), df).measured == pytest.approx(0.6)
    with pytest.raises(ValueError, match="baseline_protocol: needs a protocol"):
        claim(baseline_protocol="tokens", protocol=None)


def test_unknown_metric_field_is_a_clear_error():
    c = claim(metric={"name": "ratio", "field": "peak_memory", "method": "m", "baseline": "ddp"})
    with pytest.raises(ValueError, match="metric field 'peak_memory' is not a summary field"):
        evaluate(c, frame(rows("m", [1.0]), rows("ddp", [1.0])))


def test_verdict_on_real_records_carries_hardware_and_scale():
    records = [make_record("ddp", s, protocol="flops") for s in range(2)]
    records += [make_record("b-sdp", s, protocol="flops", variant={"C": 0.5}, memory_scale=0.5) for s in range(2)]
    v = evaluate(claim(), claim_frame(records))
    assert v.verdict == "reproduced" and v.n_seeds == 2 and 0.5 < v.measured < 0.7
    assert v.hardware == "cpu" and "llama-tiny (3,150,000 params)" in v.scale and len(v.run_ids) == 4


def test_mechanism_claim_reads_an_eval_of_one_arm():
    c = claim(
        kind="mechanism",
        paper_value=1,
        tolerance=0,
        metric={"name": "value", "field": "evals.holders_identical", "method": "m"},
    )
    assert evaluate(c, frame(rows("m", [1.0, 1.0], "evals.holders_identical"))).verdict == "reproduced"
    assert evaluate(c, frame(rows("m", [1.0, 0.0], "evals.holders_identical"))).verdict == "not reproduced"
    # No run reported that evaluation: no data rather than an error.
    assert evaluate(c, frame(rows("m", [1.0]))).verdict == "inconclusive"


def test_a_verdict_is_one_of_four():
    with pytest.raises(ValueError, match="not one of"):
        claims_module.Verdict("probably")


def test_a_simulated_gpu_does_not_make_cuda_claims_testable():
    c = claim(
        requires=["cuda"],
        what_would_test="a GPU",
        metric={"name": "ratio", "field": "peak_bytes_max", "method": "m", "baseline": "ddp"},
    )
    sim = {"provenance": "simulated", "evidence": "simulated", "device": "cuda"}
    assert evaluate(c, frame(rows("m", [60.0], **sim), rows("ddp", [100.0], **sim))).verdict == "not testable here"
    gpu = {"device": "cuda", "evidence": "measured (gpu)"}
    assert evaluate(c, frame(rows("m", [60.0], **gpu), rows("ddp", [100.0], **gpu))).verdict == "reproduced"
