"""Verdicts that say what their evidence is (issue 25, items 10, 11, 14, 16): compound claims take their weakest
half, settings and deterministic seeds are not seeds, our own formulas "match the model", a count or an estimate
without a paper value is not "measured", and records say which commit they come from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from suite.judge import verdicts as verdicts_module
from suite.judge.claims import ClaimsError, claims_for, load_claims
from suite.judge.metrics import METRICS
from suite.judge.verdicts import claim_frame, evaluate, judge_all, verdict_rows
from suite.records import load_records
from suite.report import glance
from tests.report_fixtures import SDP_CLAIMS_YAML, make_record, toy_reproduction, write_records
from tests.test_claims import RATIO, claim, frame, rows

ROOT = Path(__file__).resolve().parent.parent


def _claims_file(tmp_path: Path, **changes: dict) -> Path:
    """The fixture's claims file with fields of some claims (by id) replaced."""
    doc = yaml.safe_load(SDP_CLAIMS_YAML)
    for entry in doc["claims"]:
        entry.update(changes.get(entry["id"], {}))
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _memory_and_quality(quality_seeds: int) -> list[dict]:
    """B-SDP at a third of DDP's memory (1 seed: the memory card reproduces), and `quality_seeds` seeds each."""
    records = [make_record("ddp", s, protocol="flops") for s in range(max(1, quality_seeds))]
    records += [
        make_record("b-sdp", s, protocol="flops", variant={"C": 0.5}, memory_scale=0.5)
        for s in range(max(1, quality_seeds))
    ]
    return records


# item 11: a compound claim takes the weaker of its halves' verdicts and links both


def test_a_compound_claim_takes_its_weakest_half_and_names_it(tmp_path):
    path = _claims_file(tmp_path, **{"sdp-memory": {"requires_claims": ["sdp-quality"]}})
    verdicts = {c.id: v for c, v in judge_all(load_claims(path), _memory_and_quality(1))}
    memory, quality = verdicts["sdp-memory"], verdicts["sdp-quality"]
    assert quality.verdict == "inconclusive"  # one seed per arm, the quality half needs 3
    assert memory.verdict == "inconclusive" and memory.parts == (("sdp-quality", "inconclusive"),)
    assert "this card's half reproduced" in memory.reason and "sdp-quality: inconclusive" in memory.reason
    plain = {c.id: v for c, v in judge_all(load_claims(_claims_file(tmp_path)), _memory_and_quality(1))}
    assert plain["sdp-memory"].verdict == "reproduced" and plain["sdp-memory"].parts == ()


@pytest.mark.parametrize(
    "halves, weakest",
    [
        (("reproduced", "exceeded"), "reproduced"),
        (("exceeded", "fell short"), "fell short"),
        (("inconclusive", "not testable here"), "not testable here"),
        (("reproduced", "matches the model"), "matches the model"),
        (("reproduced", "measured, no paper value"), "measured, no paper value"),
        (("fell short", "not testable here"), "fell short"),
    ],
)
def test_strength_orders_every_verdict_from_weakest(halves, weakest):
    assert sorted(verdicts_module.STRENGTH) == sorted(verdicts_module.VERDICTS)
    assert min(halves, key=verdicts_module.STRENGTH.index) == weakest


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"sdp-memory": {"requires_claims": ["sdp-nothing"]}}, "'sdp-nothing' is not another claim of this file"),
        ({"sdp-memory": {"requires_claims": ["sdp-memory"]}}, "'sdp-memory' is not another claim of this file"),
        (
            {
                "sdp-memory": {"requires_claims": ["sdp-quality"]},
                "sdp-quality": {"requires_claims": ["sdp-inter-node"]},
            },
            "'sdp-quality' is compound itself",
        ),
        ({"sdp-memory": {"requires_claims": "sdp-quality"}}, "requires_claims: expected a list"),
        ({"sdp-memory": {"requires_claims": [3]}}, "requires_claims: 3 is not a claim id"),
    ],
)
def test_compound_halves_are_checked_when_the_claims_load(tmp_path, changes, message):
    with pytest.raises(ClaimsError, match=message):
        load_claims(_claims_file(tmp_path, **changes))


def test_the_sdp_memory_range_card_needs_its_quality_half():
    cards = {c.id: c for c in claims_for("sdp")}
    assert cards["sdp-memory-range"].requires_claims == ("sdp-quality-flop-matched",)


# item 14 (b, c): settings are not seeds; seeds of a deterministic estimate are one value


def test_settings_are_not_counted_as_seeds():
    """Three settings of one seed each, at different values (0.60, 0.62, 0.64): the band judges their range, not a
    t-interval over three "seeds", and the card has one seed. Before (issue 41 item 11) all three gave 0.6, so the
    reason was "0.6" whether or not the settings were pooled as seeds, and its check could not fail."""
    settings = [{"setting": f"micro_batch={m}"} for m in (4, 8, 12)]
    values = zip(settings, (60.0, 62.0, 64.0), strict=True)
    df = frame(*(part for s, m in values for part in (rows("m", [m], **s), rows("ddp", [100.0], **s))))
    v = evaluate(claim(metric=RATIO), df)
    assert v.interval == pytest.approx((0.60, 0.64)) and "range over 3 settings" in v.reason, v.reason
    assert v.n_seeds == 1 and v.spread is None and "seeds" not in v.reason, v.reason
    assert evaluate(claim(metric=RATIO, seeds_needed=2), df).verdict == "inconclusive"


def test_an_estimate_repeated_over_seeds_is_one_value():
    check = "tests/test_sdp_fsdp.py::test_estimate_equals_the_measured_run"
    c = claim(metric=RATIO, evidence=["measured", "estimated"], estimator_check=check)
    est = {"provenance": "estimated", "evidence": "estimated"}
    v = evaluate(c, frame(rows("m", [60.0, 60.0 + 1e-14, 60.0], **est), rows("ddp", [100.0] * 3, **est)))
    assert v.n_seeds == 1 and v.spread is None and v.interval[0] == v.interval[1] and len(v.run_ids) == 6
    # measured seeds stay seeds
    assert evaluate(c, frame(rows("m", [59.0, 60.0, 61.0]), rows("ddp", [100.0] * 3))).n_seeds == 3


# item 14 (d): a card that checks the suite's own formula matches the model, never "reproduced"


def test_a_derived_card_inside_its_band_matches_the_model():
    derived = {"source_status": "derived, not a paper number", "metric": RATIO}
    inside = evaluate(claim(**derived), frame(rows("m", [60.0]), rows("ddp", [100.0])))
    assert inside.verdict == "matches the model" and "the suite's own derivation" in inside.reason
    outside = evaluate(claim(**derived), frame(rows("m", [90.0]), rows("ddp", [100.0])))
    assert outside.verdict == "fell short" and "the suite's own derivation" in outside.reason


@pytest.mark.parametrize(
    "folder, card",
    [("fl-fsdp-smoke", "fl-bytes-fsdp"), ("dion-smoke", "dion-ddp-bytes-low-rank")],
)
def test_committed_cards_of_our_own_formulas_match_the_model(folder, card):
    rows_ = {r["claim"]: r for r in verdict_rows(load_records(ROOT / "results" / folder)[0])}
    assert rows_[card]["verdict"] == "matches the model"


def test_every_verdict_word_has_a_colour_and_a_badge_in_verdict_order():
    from suite.report.pages import css_token

    css = (ROOT / "suite" / "report" / "templates" / "style.css").read_text()
    assert "matches the model" in verdicts_module.VERDICTS
    for word in verdicts_module.VERDICTS:
        assert word in glance.COLOURS and f".badge-{css_token(word)}" in css
    verdicts = [(None, verdicts_module.Verdict(w)) for w in ("fell short", "matches the model", "reproduced")]
    assert glance.counts(verdicts) == [
        (glance.PAPER, [("reproduced", 1), ("fell short", 1)]),
        (glance.OWN, [("matches the model", 1)]),
    ]


# item 14 (e): a card decided by an estimate without a paper value does not say "measured"


def test_an_estimate_without_a_paper_value_says_estimated():
    records, _ = load_records(ROOT / "results" / "fl-fsdp-smoke")
    verdicts = {c.id: v for c, v in judge_all(claims_for("fl-fsdp"), records)}
    memory = verdicts["fl-state-memory"]
    assert memory.provenance == "estimated" and memory.verdict == "estimated, no paper value"
    assert memory.reason.startswith("the paper gives no value to compare with; 128 (estimated")


# item 14 (a): an exactness claim judges its worst shape


def test_the_committed_exactness_card_judges_the_largest_error():
    records, _ = load_records(ROOT / "results" / "flash-io-smoke")
    exact = {c.id: v for c, v in judge_all(claims_for("flash-io"), records)}["flash-io-exact"]
    errors = METRICS["micro"](claim_frame(records), method="exactness", field="max_abs_error").values
    assert len(errors) > 1 and exact.n_seeds == 1 and exact.measured == max(errors)


# item 10: N-SDP's LLaMA state is judged against what the design's masks hold


def _nsdp_pair(tmp_path: Path, state: float) -> list[dict]:
    """n-sdp (2 workers, each holding half of 4 components of 10 parameters beside 20 shared) and ddp."""
    ddp = make_record("ddp", 0, protocol="tokens")
    nsdp = make_record("n-sdp", 0, protocol="flops", variant={"C": 0.5})
    nsdp["parallel"]["sdp"] = {"shared_params": 20, "block_params": [10] * 4, "held": [[0, 1], [2, 3]]}
    for record, state_bytes in ((ddp, 60_000), (nsdp, round(60_000 * state))):
        for rank in record["memory"]["per_rank"]:
            rank["state_bytes"] = state_bytes
    write_records(tmp_path, [ddp, nsdp])
    return load_records(tmp_path)[0]


@pytest.mark.parametrize("state, verdict", [(40 / 60, "matches the model"), (0.5, "exceeded")])
def test_the_nsdp_llama_card_judges_state_against_the_masks_prediction(tmp_path, state, verdict):
    card = next(c for c in claims_for("sdp") if c.id == "sdp-nsdp-llama-state")
    assert card.paper_value == 1.0 and card.derived and card.metric["name"] == "state-vs-design"
    v = evaluate(card, claim_frame(_nsdp_pair(tmp_path, state)))
    assert v.measured == pytest.approx(state / (40 / 60), rel=1e-6) and v.verdict == verdict


# item 16: where records come from


@pytest.mark.parametrize(
    "shas, dirty, said",
    [
        (["abcdef0123", "abcdef0123"], [False, False], "one clean commit abcdef0"),
        (["abcdef0123", "1234567890"], [False, False], "mixed commits (2)"),
        (["abcdef0123", "abcdef0123"], [False, True], "dirty tree"),
        (["abcdef0123", "1234567890", None], [True, None, False], "mixed commits (3), commit not recorded, dirty tree"),
        (["abcdef0123"], [None], "tree state not recorded"),
        ([], [], ""),
    ],
)
def test_origin_says_mixed_commits_or_a_dirty_tree(shas, dirty, said):
    assert verdicts_module.origin(shas, dirty) == said


def _two_commits() -> list[dict]:
    records = _memory_and_quality(1)
    for r, sha in zip(records, ("a" * 40, "b" * 40)):
        r["env"] |= {"git_sha": sha, "git_dirty": False}
    return records


def test_a_card_of_records_from_two_commits_says_so(tmp_path, capsys, monkeypatch):
    from suite.cli import main

    folder = tmp_path / "toy_commits"
    toy_reproduction(folder)
    monkeypatch.setenv("SUITE_REPRODUCTIONS", str(folder))
    records = _two_commits()
    for r in records:
        r["reproduction"] = "toy"
    write_records(tmp_path / "results", records)
    assert main(["verdicts", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-1] == "records" and out[1].endswith("mixed commits (2)")
    assert out[-1] == f"{tmp_path / 'results'}: mixed commits (2)"
    assert main(["verdicts", str(tmp_path / "results"), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)[0]["commits"] == "mixed commits (2)" and "mixed commits" in captured.err


def test_the_report_says_where_the_records_come_from(tmp_path):
    from suite.report.build import build_report_for

    claims = {"harness": load_claims(_claims_file(tmp_path, **{"sdp-memory": {"requires_claims": ["sdp-quality"]}}))}
    index = build_report_for(_two_commits(), [], tmp_path / "site", claims)
    page = next((tmp_path / "site" / "reproductions").glob("*.html")).read_text()
    assert "records: " in index.read_text() and "badge-records-mixed" in index.read_text()
    assert page.count("mixed commits (2)") >= 2  # the page's records, and the card's
    assert '<a href="#claim-sdp-quality">sdp-quality</a>' in page  # the compound card links its other half
    clean = make_record("ddp", 0) | {"env": {**make_record("ddp", 0)["env"], "git_dirty": False}}
    build_report_for([clean], [], tmp_path / "clean", {})
    assert "one clean commit 0123456" in (tmp_path / "clean" / "index.html").read_text()


def test_a_verdict_names_the_commits_of_its_own_records():
    df = claim_frame(_two_commits())
    v = evaluate(claim(), df)
    assert v.commits == "mixed commits (2)" and set(df["git_sha"]) == {"a" * 40, "b" * 40}
