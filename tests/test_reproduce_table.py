"""The table `reproduce` prints after a plan: arm labels, one block per kind of evidence, then the verdicts."""

from __future__ import annotations

from suite.judge.claims import load_claims
from suite.plan import summary
from tests.report_fixtures import SDP_CLAIMS_YAML, make_record

LONG = {"C": 0.5, "K": 4, "aggregation": "groups", "fsdp": "worker+ac+bf16"}  # one value each: labels leave them out


def _plan_records() -> list[dict]:
    records = []
    for seed in range(3):
        records.append(make_record("ddp", seed, reproduction="sdp", protocol="flops"))
        records.append(make_record("b-sdp", seed, reproduction="sdp", protocol="flops", variant=LONG, memory_scale=0.5))
    estimate = make_record("b-sdp", 0, reproduction="sdp", protocol="flops", variant=LONG, provenance="estimated")
    projection = make_record("b-sdp", 0, reproduction="sdp", protocol="flops", variant=LONG, provenance="simulated")
    estimate["throughput"]["tokens_per_s"] = 107_205.0  # what a fake step's timing would say: never shown
    return [*records, estimate, projection]


def _blocks(text: str) -> dict[str, list[str]]:
    return {block.splitlines()[0].split(",")[0]: block.splitlines() for block in text.split("\n\n")}


def test_rows_are_arms_in_aligned_columns_one_block_per_kind_of_evidence():
    blocks = _blocks(summary.table(_plan_records()))
    assert list(blocks) == ["measured (cpu)", "estimated", "simulated"]
    for title, header, rule, *rows in blocks.values():
        assert len(rule) == len(header) and all(len(row) == len(header) for row in rows), title
        assert all(row.split()[0] in ("ddp", "b-sdp") for row in rows)
    measured = blocks["measured (cpu)"]
    assert (
        measured[0] == "measured (cpu), 6 records: runs measured on CPUs"
        and "tokens/s" in measured[1]
        and "CPU s/step" in measured[1]
    )
    assert all("measured (cpu)" in row for row in measured[3:])
    assert not any("aggregation" in line or "worker+ac" in line for b in blocks.values() for line in b)


def test_estimates_show_no_time_and_projections_say_theirs_is_projected():
    blocks = _blocks(summary.table(_plan_records()))
    estimated, simulated = "\n".join(blocks["estimated"]), "\n".join(blocks["simulated"])
    assert "tokens/s" not in estimated and "107,205" not in estimated and "peak MiB/rank" in estimated
    assert "projected tokens/s" in blocks["simulated"][1] and "not measured" in blocks["simulated"][0]
    assert "estimated" in blocks["estimated"][3] and "simulated" in simulated


def test_the_verdicts_are_counted_after_the_table(tmp_path, monkeypatch):
    (tmp_path / "claims.yaml").write_text(SDP_CLAIMS_YAML)
    monkeypatch.setattr(summary, "claims_for", lambda name: load_claims(tmp_path / "claims.yaml"))
    line = summary.verdict_summary(_plan_records())
    assert line.startswith("verdicts of sdp: reproduced ") and "not testable here 1" in line
