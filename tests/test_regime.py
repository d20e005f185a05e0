"""The paper's regime (claims.yaml `regime`): only records inside it say reproduced, exceeded or fell short; records
outside it give a small-scale finding with their scale beside the word, and the paper's claim stays not testable
here. Checked on made-up cards and on every committed verdict, against the records themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.judge import verdicts as verdicts_module
from suite.judge.claims import ClaimsError
from suite.judge.regime import count_words
from suite.judge.verdicts import SMALL_SCALE, evaluate, judge_all
from suite.records import load_records
from suite.report import glance
from tests.test_claims import RATIO, claim, frame, quality_claim, rows

ROOT = Path(__file__).resolve().parents[1]
PAPER_WORDS = ("reproduced", "exceeded", "fell short")
AT_1B = {"params": {"min": 1_000_000_000, "source": "the paper's 1B"}}


def _ratio_frame(values: list[float], params: int = 3_148_032, world_size: int = 4):
    at = {"params": params, "world_size": world_size, "model": "llama-tiny"}
    return frame(rows("m", values, **at), rows("ddp", [100.0] * len(values), **at))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(1.0, 300.0), min_size=1, max_size=4),
    st.sampled_from(["lower", "higher"]),
    st.integers(1_000, 999_999_999),
)
def test_records_below_the_regime_never_say_a_paper_word(values, better, params):
    band = {"tolerance": 0.05, "source": "s"}
    card = claim(metric=RATIO, better=better, band=band, regime=AT_1B, what_would_test="1B on GPUs")
    inside = claim(metric=RATIO, better=better, band=band)  # the fixture's regime: any scale
    v = evaluate(card, _ratio_frame(values, params))
    plain = evaluate(inside, _ratio_frame(values, params))
    assert v.verdict not in (*PAPER_WORDS, "inconclusive") and v.paper_verdict == "not testable here"
    assert v.verdict == SMALL_SCALE.get(plain.verdict, plain.verdict)
    assert v.outside.startswith("llama-tiny has") and "the paper's 1B" in v.outside
    assert v.word_at == f"{v.verdict} (llama-tiny {count_words(params)}, 4 workers, cpu)"
    assert "What would test it: 1B on GPUs" in v.reason


def test_records_inside_the_regime_keep_the_paper_word():
    card = claim(metric=RATIO, regime=AT_1B, what_would_test="1B")
    v = evaluate(card, _ratio_frame([60.0], params=1_235_814_400))
    assert v.verdict == "reproduced" and v.paper_verdict == "reproduced" and not v.small_scale
    assert v.word_at == "reproduced" and v.regime == "params at least 1B (the paper's 1B)"


@pytest.mark.parametrize(
    "regime, at, why",
    [
        ({"workers": {"min": 8, "source": "s"}}, {"world_size": 4}, "4 workers"),
        ({"device": {"is": "cuda", "source": "s"}}, {}, "records on cpu"),
        (
            {"gpu": {"is": "A100", "source": "s"}},
            {"device": "cuda", "device_name": "NVIDIA H200"},
            "records on NVIDIA H200",
        ),
        ({"groups": {"min": 128, "source": "s"}}, {"variant": json.dumps({"K": 2})}, "2 groups"),
        (
            {"params": {"min": 1, "source": "s"}, "protocol": {"paper": "wall-clock", "here": "tokens", "source": "s"}},
            {},
            "it judges tokens, not the paper's protocol, wall-clock (s)",
        ),
    ],
)
def test_each_checked_entry_puts_records_outside(regime, at, why):
    card = claim(metric=RATIO, regime=regime, what_would_test="w")
    v = evaluate(card, frame(rows("m", [60.0], **at), rows("ddp", [100.0], **at)))
    assert v.verdict == "holds at small scale" and v.outside.startswith(why)


def test_an_estimate_at_the_papers_size_but_not_on_its_hardware_decides_nothing():
    """An estimate of GPU memory made on fake tensors (device cpu) at the paper's size: no small-scale finding, and
    no paper word either."""
    regime = {**AT_1B, "device": {"is": "cuda", "source": "peak GPU memory"}}
    card = claim(metric=RATIO, regime=regime, what_would_test="w", evidence=["measured", "estimated"],
                 estimator_check="tests/test_sdp_fsdp.py::test_estimate_equals_the_measured_run")  # fmt: skip
    at = {"params": 1_235_814_400, "world_size": 8, "provenance": "estimated", "evidence": "estimated"}
    v = evaluate(card, frame(rows("m", [60.0], **at), rows("ddp", [100.0], **at)))
    assert v.verdict == "inconclusive" and v.paper_verdict == "inconclusive" and not v.small_scale
    assert v.reason.startswith("reproduced if judged here") and "does not stand for the paper's hardware" in v.reason


def test_a_quality_card_outside_its_regime_is_a_small_scale_finding():
    card = quality_claim(regime=AT_1B, what_would_test="1B")
    runs = frame(
        rows("b-sdp", [2.40, 2.41, 2.42], field="final_val_loss", params=3_148_032),
        rows("ddp", [2.60, 2.61, 2.59], field="final_val_loss", params=3_148_032),
    )
    v = evaluate(card, runs)
    assert v.verdict == "holds at small scale" and v.p_value < 0.05


def test_workers_emulated_in_one_process_are_named_beside_their_count():
    card = quality_claim(regime=AT_1B, what_would_test="1B")
    runs = frame(
        rows("b-sdp", [2.40, 2.41, 2.42], field="final_val_loss", world_size=128, emulated=True),
        rows("ddp", [2.60, 2.61, 2.59], field="final_val_loss", world_size=128, emulated=True),
    )
    assert "128 workers (emulated in one process)" in evaluate(card, runs).at
    runs.loc[runs["method"] == "ddp", "emulated"] = False
    assert "128 workers (some emulated in one process)" in evaluate(card, runs).at


def test_a_compound_with_a_half_outside_the_regime_is_a_small_scale_finding():
    own = verdicts_module.Verdict("reproduced", commits="one clean commit aaaaaaa")
    half = verdicts_module.Verdict(
        "does not hold at small scale", outside="llama-tiny has 3.1M parameters", at="llama-tiny 3.1M, 4 workers, cpu"
    )
    half = verdicts_module.replace(half, commits="one clean commit bbbbbbb")
    card = claim(requires_claims=["q"])
    v = verdicts_module._compound(card, {card.id: own, "q": half})
    assert v.verdict == "does not hold at small scale" and v.paper_verdict == "not testable here"
    assert v.commits == f"{card.id}: one clean commit aaaaaaa; q: one clean commit bbbbbbb"


@pytest.mark.parametrize(
    "regime, message",
    [
        (None, "regime: missing; a claim with a paper value states the paper's regime"),
        ({"params": {"min": 1e9}}, "regime.params: expected {min: X, source"),
        ({"params": {"min": -1, "source": "s"}}, "regime.params.min: must be a finite number > 0"),
        ({"device": {"is": "tpu", "source": "s"}}, "regime.device.is: expected cuda or cpu"),
        ({"rank": {"note": "1/4", "source": "s"}}, "regime: no checked entry"),
        ({"size": {"min": 1, "source": "s"}}, "regime.size: not a regime entry"),
        ({"protocol": {"paper": "p"}}, "regime.protocol: expected"),
        (
            {"params": {"min": 1, "source": "s"}, "any_scale": {"because": "b", "source": "s"}},
            "regime.any_scale: a claim for any size checks no bound",
        ),
    ],
)
def test_a_bad_regime_is_one_line_naming_the_entry(regime, message):
    with pytest.raises(ClaimsError, match=message.replace("{", r"\{").replace("(", r"\(")):
        claim(regime=regime)


def test_a_regime_needs_what_would_test_it():
    with pytest.raises(ClaimsError, match="what_would_test: missing; a claim with a regime says what would test it"):
        claim(what_would_test=None)


def _committed() -> list[tuple[str, object, object, list[dict]]]:
    from suite.judge.claims import claims_for

    records, _ = load_records(ROOT / "results")
    by_name: dict[str, list[dict]] = {}
    for r in records:
        by_name.setdefault(r.get("reproduction") or "", []).append(r)
    out = []
    for name, recs in sorted(by_name.items()):
        by_id = {r["run_id"]: r for r in recs}
        for c, v in judge_all(claims_for(name), recs):
            out.append((name, c, v, [by_id[i] for i in v.run_ids if i in by_id]))
    return out


@pytest.mark.slow
def test_no_committed_paper_word_comes_from_records_outside_the_regime():
    """Read from the records themselves, not from the verdict's own account: every committed card that says
    reproduced, exceeded or fell short of a paper's value has every deciding record at or above each model size,
    worker count and device its regime names; every small-scale finding names its scale in its word."""
    checked, small = 0, 0
    for _, c, v, recs in _committed():
        if v.small_scale:
            small += 1
            assert v.at and v.word_at.endswith(f"({v.at})") and v.paper_verdict == "not testable here", c.id
            continue
        if v.verdict not in PAPER_WORDS or c.regime is None or c.regime.any_scale:
            continue
        checked += 1
        assert not c.regime.here, c.id
        for bound in c.regime.checked:
            sized = [r["model"]["params"] for r in recs if r["model"]["params"] > 0]
            if bound.name == "params":
                assert sized and min(sized) >= bound.value, (c.id, min(sized or [0]), bound)
            if bound.name == "workers":
                assert min(r["parallel"]["world_size"] for r in recs) >= bound.value, c.id
            if bound.name == "device":
                assert {r["env"]["device"] for r in recs} == {bound.value}, c.id
    # no committed record lies in a paper's regime yet (the estimates at its size are not on its hardware): every
    # paper word today is about any size (flash-io's exactness and linear memory); the loop checks those a GPU adds
    assert small >= 20


def test_the_site_counts_split_the_papers_regime_from_small_scale_findings():
    small = verdicts_module.Verdict("holds at small scale", outside="o", at="llama-tiny 3.1M, 1 worker, cpu")
    groups = glance.counts([(None, verdicts_module.Verdict("not testable here")), (None, small)])
    assert groups == [
        (glance.PAPER, [("not testable here", 1)]),
        (f"{glance.SMALL} (llama-tiny 3.1M, 1 worker, cpu)", [("holds at small scale", 1)]),
    ]
