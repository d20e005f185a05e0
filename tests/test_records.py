"""The run record: schema, atomic writing, loading, and clear errors for corrupt files."""

import json
from pathlib import Path

import pytest

from suite.config import RunConfig
from suite.records import RecordError, load_records, read_record, to_dataframe, validate, write_record
from suite.run.recorder import new_record


def _record(run_id: str = "r1") -> dict:
    import torch

    cfg = RunConfig(run_id=run_id, tokens=1000, command="python -m suite run ddp --tokens 1000")
    rec = new_record(cfg, 2, torch.device("cpu"), "gloo", None)
    rec["curve"].append({"step": 1, "tokens": 100, "flops": 1.0, "wall_s": 0.1, "train_loss": 5.0, "val_loss": None})
    return rec


def test_new_record_is_valid_and_incomplete():
    rec = _record()
    validate(rec)
    assert rec["status"] == "incomplete"


def test_write_is_atomic_and_roundtrips(tmp_path):
    path = write_record(_record(), tmp_path / "a" / "r1.json")
    assert read_record(path)["run_id"] == "r1"
    assert [p.name for p in path.parent.iterdir()] == ["r1.json"]


def test_invalid_record_is_never_written(tmp_path):
    rec = _record()
    rec["totals"]["steps"] = -1
    with pytest.raises(RecordError, match="totals/steps"):
        write_record(rec, tmp_path / "bad.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "content, reason",
    [
        ('{"schema": 1, "run_id": ', "not valid JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"schema": 99}), "unknown record schema"),
        (json.dumps({"schema": 1, "run_id": "x"}), "record field"),
    ],
)
def test_corrupt_records_are_skipped_with_reason(tmp_path, content, reason):
    write_record(_record("good"), tmp_path / "good.json")
    (tmp_path / "bad.json").write_text(content)
    records, skipped = load_records(tmp_path)
    assert [r["run_id"] for r in records] == ["good"]
    assert len(skipped) == 1 and reason in skipped[0][1]
    with pytest.raises(RecordError, match=reason):
        read_record(tmp_path / "bad.json")


def test_dataframe_has_one_row_per_record(tmp_path):
    for i in range(3):
        write_record(_record(f"r{i}"), tmp_path / f"r{i}.json")
    df = to_dataframe(load_records(tmp_path)[0])
    assert sorted(df["run_id"]) == ["r0", "r1", "r2"]
    assert {"tokens_per_s", "peak_bytes_max", "comm_bytes_per_rank_step", "final_train_loss"} <= set(df.columns)


def test_summary_rows_carry_the_optimizer_phase_and_wire_bytes():
    from suite.records import summary_row

    rec = _record("r0")
    rec["throughput"]["phases_s_median"] = {"forward_backward": 0.5, "optimizer": 0.04}
    row = summary_row(rec)
    assert row["optimizer_s_median"] == 0.04 and "comm_wire_bytes_per_rank_step" in row
    del rec["throughput"]["phases_s_median"]
    assert summary_row(rec)["optimizer_s_median"] is None


def test_epochs_are_optional_and_checked_when_present(tmp_path):
    rec = _record()
    assert "epochs" not in rec["totals"]  # a record written before the field existed still validates
    validate(rec)
    rec["totals"]["epochs"] = 2.5
    validate(rec)
    rec["totals"]["epochs"] = -1
    with pytest.raises(RecordError, match="totals/epochs"):
        write_record(rec, tmp_path / "bad.json")


def test_committed_records_load_with_or_without_epochs():
    folder = Path(__file__).resolve().parent.parent / "results" / "sdp-smoke"
    records, skipped = load_records(folder)
    assert records and not skipped
    assert all(r["totals"].get("epochs", 0) >= 0 for r in records)
