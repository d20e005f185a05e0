"""Room kept for a run's last record, so that a disk that fills during the run still gets the record saying so.

Without it, the record stayed as the last checkpoint had left it (`incomplete`, no error) because writing the
failure needs room too. Rank 0 of a run (suite/run/train.py; an estimate holds none) keeps a file of RECORD_BYTES
beside the record (a dot name, which readers of a results folder skip) until the record's last write; a write that
finds the disk full frees it and tries once more. The worker frees it as it ends, and the launcher whatever happened
to the workers.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from suite.records import write_record

RECORD_BYTES = 16 * 2**20  # a record and its temporary (a long curve is a few MB)


def reserve_path(record_path: str | Path) -> Path:
    path = Path(record_path)
    return path.with_name(f".{path.stem}.reserve")


def hold(record_path: str | Path) -> None:
    """Claim RECORD_BYTES of disk beside the record (real blocks, not a sparse file); nothing where it cannot."""
    path = reserve_path(record_path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, RECORD_BYTES)
    except OSError:  # a full disk already, or a file system without fallocate: the record takes its chances
        os.close(fd)
        release(record_path)
        return
    os.close(fd)


def release(record_path: str | Path) -> None:
    reserve_path(record_path).unlink(missing_ok=True)


def write_last(record: dict, record_path: str | Path) -> Path:
    """Write the record once more, into the reserved room if the disk is full, and free that room."""
    try:
        return write_record(record, record_path)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        release(record_path)
        return write_record(record, record_path)
    finally:
        release(record_path)
