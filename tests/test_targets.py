"""Time to target (suite/judge/targets.py): the crossing of a validation curve with the baseline's largest final loss,
the `to-target` metric's per-seed ratios, and the reason a verdict gives for seeds that never reach the target."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.judge.metrics import RATIOS
from suite.judge.targets import crossing
from suite.judge.verdicts import claim_frame, evaluate
from tests.report_fixtures import make_record
from tests.test_claims import claim, frame, rows

BATCH = 1024  # tokens per step of the synthetic curves


def curve(*losses: float, every: int = 10) -> tuple[tuple[int, int, float], ...]:
    """A validation curve evaluated every `every` steps: (step, tokens, loss) per evaluation."""
    return tuple((every * (i + 1), every * (i + 1) * BATCH, loss) for i, loss in enumerate(losses))


def to_target(field: str = "tokens_to_target", **fields):
    """A to-target card of method m against ddp without a paper value (the fixture's memory card, reshaped)."""
    spec = {"name": "to-target", "field": field, "method": "m", "baseline": "ddp"}
    return claim(**{"metric": spec, "paper_value": None, "band": None, "seeds_needed": 3, **fields})


# strictly falling losses at strictly increasing token counts: the curves a crossing is defined on. Losses to 6
# decimals: two evaluations within crossing's rounding tolerance (1e-9 relative) would be one loss
loss = st.floats(0.5, 10.0).map(lambda x: round(x, 6))
falling = st.lists(loss, min_size=2, max_size=8, unique=True).map(lambda v: sorted(v, reverse=True))


def _reaches(loss: float, target: float) -> bool:
    """crossing's rule: at or below the target, a loss one rounding above it included (a seed ending at the mean)."""
    return loss <= target or math.isclose(loss, target, rel_tol=1e-9)


@settings(deadline=None)  # a loaded machine, not the crossing, sets the time of an example
@given(falling, st.floats(0.0, 1.0))
def test_a_falling_curve_crosses_between_the_evaluations_that_bracket_the_target(losses, share):
    points = curve(*losses)
    target = losses[-1] + share * (losses[0] - losses[-1])
    step, tokens, at_first = crossing(points, target)
    after = next(i for i, (_, _, loss) in enumerate(points) if _reaches(loss, target))
    assert at_first == (after == 0)
    if after:
        (s0, t0, l0), (s1, t1, l1) = points[after - 1], points[after]
        assert t0 <= tokens <= t1 and s0 <= step <= s1
        # on the straight line between the two evaluations the loss at the crossing is the target
        assert l0 + (tokens - t0) / (t1 - t0) * (l1 - l0) == pytest.approx(target, abs=1e-9)


@settings(deadline=None)
@given(falling)
def test_a_curve_against_itself_as_baseline_crosses_at_its_final_point(losses):
    points = curve(*losses)
    assert crossing(points, losses[-1])[:2] == pytest.approx(points[-1][:2])


def test_a_curve_that_never_falls_to_the_target_has_no_crossing():
    assert crossing(curve(3.0, 2.5, 2.2), 2.1) is None
    assert crossing((), 2.1) is None


def test_a_run_already_below_the_target_at_its_first_evaluation_reads_that_evaluation():
    assert crossing(curve(2.0, 1.9), 2.5) == (10.0, 10.0 * BATCH, True)


def test_to_target_is_drawn_on_the_ratio_axis():
    assert "to-target" in RATIOS


def _sides(method: list[tuple], baseline: list[tuple], **method_fields) -> object:
    return frame(rows("m", method, "val_curve", **method_fields), rows("ddp", baseline, "val_curve"))


# three baseline seeds that end at 2.0, each reaching the target (the largest, 2.0) at its final evaluation, 40 steps
BASELINE = [curve(3.0, 2.6, 2.3, 2.0)] * 3


def test_each_seed_is_paired_with_the_baselines_seed_and_interpolated():
    # the method crosses 2.0 halfway between steps 10 and 20, at step 20, and halfway between 20 and 30
    method = [curve(2.5, 1.5, 1.4, 1.3), curve(2.2, 2.0, 1.8, 1.7), curve(2.6, 2.2, 1.8, 1.7)]
    verdict = evaluate(to_target(), _sides(method, BASELINE))
    assert verdict.verdict == "measured, no paper value" and verdict.n_seeds == 3
    assert verdict.measured == pytest.approx((15 + 20 + 25) / 40 / 3)
    assert "target 2 (the baseline's largest final validation loss over its seeds)" in verdict.reason
    assert "reached by 3 of 3 seeds of the method's arm and 3 of 3 seeds of the baseline's arm" in verdict.reason


def test_the_target_is_the_largest_baseline_final_loss_so_every_baseline_seed_reaches_it():
    baseline = [curve(3.0, 2.6, 2.3, 2.0), curve(3.0, 2.6, 2.3, 2.1), curve(3.0, 2.6, 2.3, 1.9)]
    method = [curve(2.5, 1.5, 1.4, 1.3)] * 3
    verdict = evaluate(to_target(), _sides(method, baseline))
    assert "target 2.1 " in verdict.reason and "3 of 3 seeds of the baseline's arm" in verdict.reason
    assert verdict.n_seeds == 3


def test_cpu_seconds_are_the_steps_to_the_crossing_times_the_cpu_seconds_per_step():
    method = [curve(2.5, 1.5, 1.4, 1.3)] * 3  # step 15
    df = _sides(method, BASELINE)
    df.loc[df["method"] == "m", "cpu_step_s_median"] = 0.3
    df.loc[df["method"] == "ddp", "cpu_step_s_median"] = 0.1
    verdict = evaluate(to_target("cpu_s_to_target"), df)
    assert verdict.measured == pytest.approx(15 * 0.3 / (40 * 0.1))
    df.loc[(df["method"] == "m") & (df["seed"] == 1), "cpu_step_s_median"] = None
    assert "seed 1 records no CPU time per step" in evaluate(to_target("cpu_s_to_target"), df).reason


def test_a_seed_that_never_reaches_the_target_gives_no_value_and_the_reason_says_so():
    method = [curve(2.5, 1.5, 1.4, 1.3), curve(2.6, 2.2, 1.8, 1.7), curve(2.9, 2.5, 2.3, 2.1)]
    verdict = evaluate(to_target(), _sides(method, BASELINE))
    assert verdict.verdict == "inconclusive" and verdict.n_seeds == 2
    assert "2 seeds of m and ddp; the claim needs 3" in verdict.reason
    assert "2 of 3 seeds of the method's arm (seed 2 did not reach the target in 40,960 tokens (final 2.1))" in (
        verdict.reason
    )
    assert len(verdict.run_ids) == 6  # the seed that never reached is evidence too
    # its whole budget (40 steps) against the baseline's 40 steps to the target: the ratio would be above 1
    assert "the 1 seed(s) of the method that ended above the target need more than their whole budget, above 1x" in (
        verdict.reason
    )


# every seed of the method ends above the baseline's 2.0 after 40, 60 and 80 steps: above 1x, 1.5x and 2x its tokens
SHORT = [curve(2.9, 2.5, 2.3, 2.1), curve(2.9, 2.5, 2.3, 2.2, 2.1, 2.05), curve(*[2.9, 2.5] * 3, 2.3, 2.1)]


def test_where_no_seed_reaches_the_target_the_least_lower_bound_is_what_was_measured():
    verdict = evaluate(to_target(), _sides(SHORT, BASELINE))
    assert verdict.verdict == "measured, no paper value" and verdict.measured is None
    assert verdict.floor == pytest.approx(1.0) and verdict.n_seeds == 3 and len(verdict.run_ids) == 6
    assert "above 1 x" in verdict.reason and "reached by 0 of 3 seeds of the method's arm" in verdict.reason
    assert "above 1x to 2x the baseline's tokens" in verdict.reason


@pytest.mark.parametrize(
    ("paper", "better", "word"),
    [(0.5, "lower", "fell short"), (0.5, "higher", "exceeded"), (1.5, "lower", "inconclusive")],
)
def test_a_lower_bound_beyond_the_bands_upper_edge_decides_a_paper_value(paper, better, word):
    """Every seed's value lies above its bound: above the band's upper edge, the claim is decided; inside it, not."""
    card = to_target(paper_value=paper, band={"tolerance": 0.1, "source": "a test band"}, better=better)
    short = [curve(2.9, 2.5, 2.3, 2.2, 2.1, 2.05)] * 3  # each above 1.5x
    verdict = evaluate(card, _sides(short, BASELINE))
    assert verdict.verdict == word and verdict.floor == pytest.approx(1.5)


def test_a_lower_bound_needs_the_seeds_a_claim_asks_for():
    verdict = evaluate(to_target(seeds_needed=4), _sides(SHORT, BASELINE))
    assert verdict.verdict == "inconclusive" and "3 seeds, the claim needs 4" in verdict.reason


def test_a_seed_without_a_bound_leaves_the_card_undecided():
    """A diverged seed or one that reached the target: not every seed is bounded, so no bound decides."""
    method = [*SHORT[:2], curve(2.5, 1.5, 1.4, 1.3)]
    verdict = evaluate(to_target(), _sides(method, BASELINE))
    assert verdict.verdict == "inconclusive" and verdict.floor is None


def test_a_method_below_the_target_at_its_first_evaluation_is_named_as_an_upper_bound():
    verdict = evaluate(to_target(), _sides([curve(1.9, 1.8, 1.7, 1.6)] * 3, BASELINE))
    assert verdict.measured == pytest.approx(10 / 40)
    assert "seed 0 reached it by its first evaluation, at 10,240 tokens (an upper bound)" in verdict.reason


def test_runs_without_evaluations_give_no_value_and_a_baseline_without_them_sets_no_target():
    verdict = evaluate(to_target(), _sides([curve(2.5, 1.5), (), ()], BASELINE))
    assert "1 of 3 seeds of the method's arm" in verdict.reason and "seed 1 has no validation evaluation" in (
        verdict.reason
    )
    blind = evaluate(to_target(), _sides([curve(2.5, 1.5)] * 3, [()] * 3))
    assert blind.verdict == "inconclusive"
    assert "give no value; the baseline has no validation loss to set a target" in blind.reason


def test_diverged_runs_are_read_as_never_reaching_the_target():
    """From records: claim_frame's val_curve, and diverged runs kept for this metric (complete ones only else)."""
    records = [make_record("ddp", s, protocol="flops") for s in range(3)]
    records += [make_record("m", s, protocol="flops", quality=-0.4) for s in range(2)]
    records.append(make_record("m", 2, protocol="flops", quality=-0.4, status="diverged"))
    verdict = evaluate(to_target(seeds_needed=1), claim_frame(records))
    assert "of 3 seeds of the baseline's arm" in verdict.reason
    assert "2 of 3 seeds of the method's arm (seed 2 diverged at" in verdict.reason
    assert 0 < verdict.measured < 1  # a lower loss curve reaches the baseline's final loss sooner


def test_the_new_cards_load_with_their_sides():
    from suite.judge.claims import claims_for

    cards = {c.id: c for name in ("sdp", "fl-fsdp", "dion") for c in claims_for(name)}
    for ident in ("sdp-tokens-to-target", "fl-tokens-to-target-fsdp", "dion-tokens-to-target-vs-adamw"):
        assert cards[ident].metric["name"] == "to-target" and cards[ident].better == "lower"
    assert cards["dion-tokens-to-target-vs-adamw"].paper_range == (0.333, 0.5)


def test_the_report_shows_a_lower_bound_as_one():
    from suite.report.pages import _ours

    verdict = evaluate(to_target(), _sides(SHORT, BASELINE))
    assert _ours(verdict, "x ddp tokens") == "> 1 x ddp tokens (3 seeds, a lower bound)"
