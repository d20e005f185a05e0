"""A disk that fills during a run (issue 46): the record's last write has room kept for it, so the record says what
happened instead of staying as the last checkpoint left it (`incomplete`, no error)."""

from __future__ import annotations

import errno
import json

import pytest

from suite.config import RunConfig
from suite.run import reserve
from suite.run.recorder import failed_record


def _full_once(monkeypatch) -> list[str]:
    """write_record that finds the disk full while the room is held, as a disk filled by the run would."""
    calls, real = [], reserve.write_record

    def write(record, path):
        calls.append("held" if reserve.reserve_path(path).exists() else "freed")
        if calls[-1] == "held":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(record, path)

    monkeypatch.setattr(reserve, "write_record", write)
    return calls


def test_the_room_is_real_blocks_and_goes_with_the_last_write(tmp_path):
    path = tmp_path / "results" / "r1.json"
    reserve.hold(path)
    held = reserve.reserve_path(path)
    assert held.name == ".r1.reserve" and held.stat().st_blocks * 512 >= reserve.RECORD_BYTES
    cfg = RunConfig(tokens=1000, run_id="r1", results=str(path.parent))
    reserve.write_last(failed_record(cfg, 2, "stopped"), path)
    assert not held.exists() and json.loads(path.read_text())["error"] == "stopped"


def test_a_full_disk_frees_the_room_and_writes_the_record_that_names_it(tmp_path, monkeypatch):
    path = tmp_path / "r2.json"
    reserve.hold(path)
    calls = _full_once(monkeypatch)
    cfg = RunConfig(tokens=1000, run_id="r2", results=str(tmp_path))
    error = "checkpoint step-000012 not written (no space left on the disk of 'ck'); the older ones are kept"
    reserve.write_last(failed_record(cfg, 2, error), path)
    assert calls == ["held", "freed"] and json.loads(path.read_text())["error"] == error


def test_a_disk_full_even_without_the_room_raises_for_the_caller_to_say_so(tmp_path, monkeypatch):
    def full(record, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reserve, "write_record", full)
    cfg = RunConfig(tokens=1000, run_id="r3", results=str(tmp_path))
    with pytest.raises(OSError):
        reserve.write_last(failed_record(cfg, 2, "x"), tmp_path / "r3.json")


def test_an_estimate_keeps_no_room_and_a_run_leaves_none(tmp_path):
    """The room is a run's (suite/run/train.py): estimates once left a 16 MiB file beside each of their records."""
    from suite.cli import main

    args = ["estimate", "ddp", "--model", "llama-tiny", "--world-size", "2", "--set", "micro_batch=1"]
    assert main([*args, "--set", "seq_len=32", "--results", str(tmp_path)]) == 0
    assert list(tmp_path.glob("*.json")) and not list(tmp_path.glob(".*.reserve"))
