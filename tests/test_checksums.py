"""Checkpoints carry the size and SHA-256 of every file, verified before loading (issue 27, item 3): a damaged
newest checkpoint is refused by name and the previous intact one is used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.run.checkpoint import CheckpointError, newest_intact, verify, write_checksums


def _checkpoint(folder: Path, step: int) -> Path:
    path = folder / f"step-{step:06d}"
    path.mkdir(parents=True)
    (path / ".metadata").write_bytes(b"metadata")
    (path / "__0_0.distcp").write_bytes(bytes(range(256)) * 64)
    (path / "loop.json").write_text(json.dumps({"step": step}))
    write_checksums(path)
    return path


def _flip(path: Path, at: int = 1000, count: int = 16) -> None:
    data = bytearray(path.read_bytes())
    data[at : at + count] = bytes(b ^ 0xFF for b in data[at : at + count])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda p: _flip(p / "__0_0.distcp"), "__0_0.distcp differs from what was written"),
        (lambda p: (p / "__0_0.distcp").unlink(), "__0_0.distcp is missing"),
        (lambda p: (p / "__0_0.distcp").write_bytes(b"cut"), "__0_0.distcp has 3 bytes, 16384 written"),
        (lambda p: (p / "checksums.json").unlink(), "no checksums.json"),
        (lambda p: (p / "checksums.json").write_text("{}"), "does not cover"),
        (lambda p: _flip(p / "loop.json", at=2, count=1), "loop.json differs"),
    ],
)
def test_a_damaged_checkpoint_is_refused_by_name(tmp_path, damage, message):
    path = _checkpoint(tmp_path, 6)
    verify(path)
    damage(path)
    with pytest.raises(CheckpointError, match=message) as caught:
        verify(path)
    assert "step-000006" in str(caught.value)


def test_the_newest_intact_checkpoint_is_used_and_the_damaged_ones_named(tmp_path):
    _checkpoint(tmp_path, 3)
    newest = _checkpoint(tmp_path, 6)
    assert newest_intact(tmp_path) == (newest, [])
    _flip(newest / "__0_0.distcp")
    path, refused = newest_intact(tmp_path)
    assert path == tmp_path / "step-000003" and len(refused) == 1 and "step-000006" in refused[0]
    _flip(path / "__0_0.distcp")
    assert newest_intact(tmp_path)[0] is None


def test_checksums_name_no_file_outside_the_checkpoint(tmp_path):
    path = _checkpoint(tmp_path / "ck", 3)
    (tmp_path / "outside").write_bytes(b"x")
    sums = json.loads((path / "checksums.json").read_text())
    sums["../../outside"] = {"bytes": 1, "sha256": "0"}
    (path / "checksums.json").write_text(json.dumps(sums))
    with pytest.raises(CheckpointError, match="missing"):
        verify(path)
