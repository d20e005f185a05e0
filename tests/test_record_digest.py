"""Records are sealed (issue 46): each write adds a digest of the record's content, and a reader refuses a record
whose digest or internal consistency does not hold, naming the file and the reason. An edited copy of a real
record (another run id, its losses set to 0.001) was once read by `report` as a run and would have fed a card."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from suite.records import RecordError, digest_of, load_records, read_record

ROOT = Path(__file__).parents[1]


def _committed() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "results/*.json"], cwd=ROOT, capture_output=True, text=True).stdout
    paths = [ROOT / n for n in names.split()]
    return [p for p in paths if isinstance(raw := json.loads(p.read_text()), dict) and raw.get("schema") == 1]


def test_every_committed_record_is_sealed_and_its_digest_holds():
    records = _committed()
    assert len(records) > 400
    unsealed = [str(p) for p in records if "digest" not in json.loads(p.read_text())]
    assert not unsealed, unsealed[:5]
    for path in records:
        read_record(path)  # the digest and the consistency checks


@pytest.fixture
def real(tmp_path) -> dict:
    source = next(p for p in _committed() if "baselines-smoke" in str(p))
    return json.loads(source.read_text())


def _planted(tmp_path: Path, record: dict) -> Path:
    path = tmp_path / "results" / f"{record['run_id']}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    return path


def test_an_edited_copy_is_refused_by_the_readers_with_its_file_and_reason(tmp_path, real):
    real["run_id"] = "forged"
    for point in real["curve"]:
        point["train_loss"] = point["val_loss"] = 0.001 if point["val_loss"] is not None else None
    path = _planted(tmp_path, real)
    records, skipped = load_records(path.parent)
    assert records == [] and skipped == [(str(path), f"{path}: {_digest_message()}")]


def _digest_message() -> str:
    return "its content is not what the run wrote (the digest differs): edited or damaged"


def test_an_edited_record_whose_digest_was_removed_still_has_to_agree_with_itself(tmp_path, real):
    del real["digest"]
    method, real["method"] = real["method"], "forged"
    with pytest.raises(RecordError, match=f"disagrees with itself: method is 'forged' but its settings say '{method}'"):
        read_record(_planted(tmp_path, real))


def test_a_finished_record_whose_totals_disagree_with_its_curve_is_refused(tmp_path, real):
    real["totals"]["steps"] = 0
    real["digest"] = digest_of(real)  # resealed: consistency is checked on its own
    with pytest.raises(RecordError, match="its curve ends at step .* its totals say step 0"):
        read_record(_planted(tmp_path, real))


def test_a_record_written_by_the_suite_reads_back_sealed(tmp_path, real):
    from suite.records import write_record

    del real["digest"]
    path = write_record(real, tmp_path / "r.json")
    assert read_record(path)["digest"] == digest_of(real)
