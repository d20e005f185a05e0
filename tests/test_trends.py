"""Trend findings along a claim's axis (suite/judge/trends.py): a planted line is recovered with its direction
relative to the paper's claim, a flat effect reads flat, the word follows the claim's side, and a projection is
drawn only from 3 points or more on a line that fits."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, replace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.errors import ClaimsError
from suite.extensions import get_reproduction
from suite.judge.claims import Claim, load_claims, parse_claim
from suite.judge.trends import AWAY, FLAT, TOWARD, Point, describe, trend
from suite.report import figures
from tests.report_fixtures import make_record

AXIS = (2, 8, 32, 128)
SPREAD = (-0.01, 0.0, 0.01)  # each arm's seeds around its mean: a standard error of 0.0058 per arm


def _points(favour, xs=AXIS, base: float = 2.0) -> list[Point]:
    """Points whose method beats the baseline by favour(x) nats (lower is better)."""
    return [Point(x, [base - favour(x) + s for s in SPREAD], [base + s for s in SPREAD]) for x in xs]


@settings(deadline=None)  # the first example imports scipy
@given(intercept=st.floats(-0.5, 0.5), slope=st.floats(-0.2, 0.2))
def test_a_planted_line_is_recovered_with_its_direction_and_projection(intercept, slope):
    found = trend(_points(lambda x: intercept + slope * math.log2(x)), "lower", paper_x=512)
    assert found.slope == pytest.approx(slope, abs=1e-9) and found.fit_holds
    assert found.slope_low <= slope <= found.slope_high
    expected = FLAT if found.slope_low <= 0 <= found.slope_high else TOWARD if slope > 0 else AWAY
    assert found.word == expected
    assert abs(slope) < 0.01 or found.word == (TOWARD if slope > 0 else AWAY)  # 0.01 a doubling is far beyond noise
    assert found.projection.label == "extrapolated"
    assert found.projection.value == pytest.approx(intercept + slope * 9, abs=1e-9)
    assert found.projection.low < found.projection.value < found.projection.high


@settings(deadline=None)  # the first example imports scipy
@given(level=st.floats(-0.5, 0.5))
def test_an_effect_that_does_not_move_is_flat(level):
    assert trend(_points(lambda x: level), "lower", paper_x=512).word == FLAT


def test_the_word_follows_the_claims_side_and_where_the_paper_sits():
    growing = _points(lambda x: 0.05 * math.log2(x))
    assert trend(growing, "lower", paper_x=512).word == TOWARD
    assert trend(growing, "higher", paper_x=512).word == AWAY  # higher is better: the method falls behind
    assert trend(growing, "lower", paper_x=1).word == AWAY  # the paper's setting lies below the points


def test_for_an_equivalence_claim_toward_the_paper_is_toward_no_difference():
    closing = _points(lambda x: -0.3 + 0.05 * math.log2(x))  # the method behind, less so at each doubling
    assert trend(closing, "lower", paper_x=512, equivalence=True).word == TOWARD
    widening = _points(lambda x: 0.05 * math.log2(x))  # the method ahead, more so at each doubling
    assert trend(widening, "lower", paper_x=512, equivalence=True).word == AWAY
    assert trend(widening, "lower", paper_x=512).word == TOWARD  # the same points, for a superiority claim


@settings(deadline=None)  # the first example imports scipy
@given(scale=st.sampled_from([0.25, 3.0, 100.0]))
def test_the_slope_is_per_doubling_whatever_the_axis_unit(scale):
    line = lambda x: 0.03 * math.log2(x)  # noqa: E731
    plain = trend(_points(line), "lower")
    scaled = trend([Point(p.x * scale, p.method, p.baseline) for p in _points(line)], "lower")
    assert scaled.slope == pytest.approx(plain.slope) and scaled.word == plain.word


def test_no_projection_from_two_points_from_a_line_that_does_not_fit_or_where_the_points_reach_the_paper():
    assert trend(_points(lambda x: 0.05 * math.log2(x), xs=(2, 8)), "lower", paper_x=512).projection is None
    assert trend(_points(lambda x: 0.05 * math.log2(x)), "lower", paper_x=128).projection is None
    bent = trend(_points(lambda x: 0.3 if x in (2, 128) else 0.0), "lower", paper_x=512)
    straight = trend(_points(lambda x: 0.0), "lower", paper_x=512)
    assert not bent.fit_holds and bent.projection is None
    # the slope's interval widens by the misfit, beyond what the seeds alone give
    assert bent.slope_high - bent.slope_low > 5 * (straight.slope_high - straight.slope_low)


def test_too_few_seeds_or_points_is_a_one_line_error():
    with pytest.raises(ValueError, match="needs 2 seeds or more per arm"):
        trend([Point(2, [1.0], [1.0, 1.1]), Point(4, [1.0, 1.1], [1.0, 1.1])], "lower")
    with pytest.raises(ValueError, match="2 or more distinct points"):
        trend(_points(lambda x: 0.1, xs=(8, 8)), "lower")


def _card(trend: dict | None) -> Claim:
    side = {"world_size": 32}
    entry = {
        "id": "fl-trend",
        "statement": "FL's loss against FSDP's, and how the gap moves with the groups",
        "unit": "nats",
        "source": {"paper": "a paper"},
        "source_status": "none",
        "kind": "quality",
        "better": "lower",
        "metric": {
            "name": "quality",
            "field": "final_val_loss",
            "method": "fl-fsdp",
            "baseline": "fsdp",
            "arm": side,
            "baseline_arm": side,
        },
        "test": "superiority",
        "margin": {"value": 0.0, "source": "strict"},
        "plateau": {"change": 1.0, "source": "synthetic runs of 8 steps"},
        "protocol": "flops",
        "baseline_protocol": "tokens",
        "command": "python -m suite reproduce harness",
    }
    return parse_claim({**entry, **({"trend": trend} if trend else {})}, "test")


def test_a_card_reads_its_trend_from_the_runs_along_its_axis_and_judges_at_its_own_point():
    """Records at 2, 8 and 32 workers whose method gains 0.1 nats a doubling: the card's verdict reads its own 32
    workers only; its trend reads every point and finds the gain, toward the paper's 128."""
    from suite.judge.verdicts import claim_frame, evaluate

    records = [
        make_record(
            m,
            s,
            world_size=w,
            quality=-0.1 * math.log2(w) if m == "fl-fsdp" else 0.0,
            baseline=m == "fsdp",
            protocol="flops" if m == "fl-fsdp" else "tokens",  # each side read under its own protocol
        )
        for w in (2, 8, 32)
        for m in ("fl-fsdp", "fsdp")
        for s in range(3)
    ]
    spec = {"axis": "world_size", "paper": 128, "source": "the paper's groups", "command": "python -m suite x"}
    verdict = evaluate(_card(spec), claim_frame(records))
    assert verdict.n_seeds == 3 and verdict.verdict == "measured, no paper value"
    found = verdict.trend
    assert [e["x"] for e in found["effects"]] == [2, 8, 32] and found["word"] == TOWARD
    assert found["slope"] == pytest.approx(0.1, abs=0.02) and found["projection"]["label"] == "extrapolated"
    assert evaluate(_card(None), claim_frame(records)).trend is None
    one_point = [r for r in records if r["parallel"]["world_size"] == 32]
    assert evaluate(_card(spec), claim_frame(one_point)).trend["reason"].startswith("points with 2 seeds a side at 32")


@pytest.mark.parametrize(
    "trend, message",
    [
        ({"axis": "depth", "paper": 16, "source": "s", "command": "c"}, "trend.axis"),
        ({"axis": "blocks", "paper": 0, "source": "s", "command": "c"}, "trend.paper"),
        ({"axis": "blocks", "paper": 16, "source": "s"}, "expected {axis, paper, source, command}"),
    ],
)
def test_a_bad_trend_on_a_card_is_refused_naming_the_field(trend, message):
    with pytest.raises(ClaimsError, match=re.escape(message)):
        _card(trend)


def test_a_trend_reads_in_one_line_with_its_points_slope_and_projection():
    found = {
        "axis": "world_size",
        "command": "python -m suite reproduce x --preset trend",
        "reason": "",
        **asdict(trend(_points(lambda x: 0.05 * math.log2(x), xs=(2, 8, 32)), "lower", paper_x=128)),
    }
    text = describe(found, "nats")
    assert text.startswith(f"{TOWARD} along world size (the method's advantage, nats, 95% intervals: 2: +0.05 [")
    assert "slope +0.05 a doubling [" in text and "at the paper's 128: +0.35 [" in text
    assert text.endswith("extrapolated)")
    none = {**found, "word": None, "reason": "points with 2 seeds a side at 32; a trend needs 2 or more"}
    assert describe(none, "nats") == (
        "along world size: no finding yet (points with 2 seeds a side at 32; a trend needs 2 or more); "
        "python -m suite reproduce x --preset trend measures the points"
    )


def test_a_trend_is_drawn_with_its_points_line_paper_setting_and_projection_labelled():
    found = {"axis": "width", "paper": 3072, **asdict(trend(_points(lambda x: 0.05 * math.log2(x)), "lower", 3072))}
    chart = figures.trend(found, "nats")
    assert "paper: 3072" in chart.svg and "extrapolated, not a verdict" in chart.svg
    assert chart.caption.endswith("The dotted line is the paper's setting.") and TOWARD in chart.caption
    inside = {**found, **asdict(trend(_points(lambda x: 0.05 * math.log2(x)), "lower", 32))}
    assert "extrapolated" not in figures.trend(inside, "nats").svg  # the paper's setting lies among the points
    assert figures.trend({**found, "word": None}, "nats") is None


def test_a_paper_whose_place_on_the_axis_is_unknown_reads_growth_as_toward_and_draws_no_setting():
    card = _card({"axis": "world_size", "paper": "unknown", "source": "abstract only", "command": "c"})
    assert card.trend.paper is None
    growing = trend(_points(lambda x: 0.05 * math.log2(x)), "lower", None)
    assert growing.word == TOWARD and growing.projection is None
    assert trend(_points(lambda x: -0.05 * math.log2(x)), "lower", None).word == AWAY
    chart = figures.trend({"axis": "world_size", "paper": None, **asdict(growing)}, "nats")
    assert "paper:" not in chart.svg and chart.caption.endswith("The paper's setting is not known.")


def test_a_to_target_card_reads_each_points_tokens_to_that_points_baseline_loss():
    """The field of a to-target card is no record's: each point's seeds read their tokens to the target the
    baseline sets at that point (suite.judge.targets.seed_costs), and the method, 0.3 nats ahead at every point,
    gets there first at each."""
    from suite.judge.verdicts import claim_frame, evaluate

    records = [
        make_record(m, s, world_size=w, steps=16, quality=-0.3 if m == "fl-fsdp" else 0.0, baseline=m == "fsdp")
        for w in (2, 4)
        for m in ("fl-fsdp", "fsdp")
        for s in range(3)
    ]
    card = _card({"axis": "world_size", "paper": 128, "source": "the paper's groups", "command": "python -m suite x"})
    metric = {**card.metric, "name": "to-target", "field": "tokens_to_target", "arm": {"world_size": 4}}
    card = replace(card, metric=metric, protocol=None, baseline_protocol=None)
    found = evaluate(card, claim_frame(records)).trend
    assert [e["x"] for e in found["effects"]] == [2, 4]
    assert all(e["low"] > 0 for e in found["effects"]) and found["unit"] == "tokens", found
    assert "tokens" in describe(found, found["unit"]) and "e+" not in describe(found, found["unit"])
    behind = [{**r, "curve": [{**p, "val_loss": p["val_loss"] and p["val_loss"] + 1.0} for p in r["curve"]]}
              for r in records if r["method"] == "fl-fsdp"]  # fmt: skip
    never = evaluate(card, claim_frame(behind + [r for r in records if r["method"] == "fsdp"])).trend
    assert never["word"] is None and "at 2: 0 and 3; 4: 0 and 3" in never["reason"]


def test_a_trend_on_a_card_whose_seeds_give_no_point_is_refused():
    """A ratio card of bytes pairs records, not seeds' losses: no trend is read from it."""
    path = get_reproduction("matrix-optimizers").claims
    entry = next(e for e in yaml.safe_load(path.read_text())["claims"] if e["metric"]["name"] == "ratio")
    spec = {"axis": "width", "paper": 2048, "source": "s", "command": "c"}
    with pytest.raises(ClaimsError, match="kind: quality, or metric to-target"):
        parse_claim({**entry, "trend": spec}, "test")
    assert any(c.trend and c.metric["name"] == "to-target" for c in load_claims(path))
