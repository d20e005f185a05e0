"""Files a reader finds in a results folder or as claims.yaml cannot hang it or fill its memory (issue 27,
item 6): regular files only, with a size limit, and YAML with a bounded number of aliases."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager

import pytest

from suite.judge.claims import ClaimsError, load_claims
from suite.records import RecordError, load_records, read_record
from tests.report_fixtures import make_record, write_records


@contextmanager
def within(seconds: int):
    """A hang or a runaway read becomes a failure here instead of a stuck test run."""

    def fail(*_):
        raise TimeoutError(f"still reading after {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_fifo_or_a_link_to_a_device_is_skipped_not_read(tmp_path):
    write_records(tmp_path, [make_record("ddp", 0)])
    os.mkfifo(tmp_path / "x.json")  # opened for reading, it waits for a writer that never comes
    (tmp_path / "z.json").symlink_to("/dev/zero")  # read to its end, it never ends
    with within(20):
        records, skipped = load_records(tmp_path)
    assert len(records) == 1
    assert sorted((os.path.basename(p), "not a regular file" in why) for p, why in skipped) == [
        ("x.json", True),
        ("z.json", True),
    ]


def test_a_record_beyond_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from suite import records

    (path,) = write_records(tmp_path, [make_record("ddp", 0)])
    monkeypatch.setattr(records, "MAX_RECORD_BYTES", 100)
    with pytest.raises(RecordError, match="more than the 100 a reader takes"):
        read_record(path)


def test_a_yaml_alias_bomb_is_refused(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    (tmp_path / "claims.yaml").write_text("\n".join(lines + ["claims: [*a9]"]) + "\n")
    with within(20), pytest.raises(ClaimsError, match="expand to more than 100,000 values"):
        load_claims(tmp_path / "claims.yaml")


def test_a_fifo_as_claims_yaml_is_refused(tmp_path):
    os.mkfifo(tmp_path / "claims.yaml")
    with within(20), pytest.raises(ClaimsError, match="not a regular file"):
        load_claims(tmp_path / "claims.yaml")


def test_a_link_named_json_is_refused_as_a_link_not_followed(tmp_path):
    """Before: a link to a record elsewhere (an edited copy) was read as this folder's evidence."""
    elsewhere = tmp_path / "elsewhere"
    (real,) = write_records(elsewhere, [make_record("ddp", 0)])
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "run.json").symlink_to(real)
    records, skipped = load_records(folder)
    assert records == [] and [("run.json", "a link" in why) for why in (w for _, w in skipped)] == [("run.json", True)]
