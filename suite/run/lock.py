"""One writer per results folder: a plan, or a resume, holds an exclusive lock on `FOLDER/.lock`.

Two plans in one folder both ran every item and left two complete records of each configuration, which the
verdicts pool as seeds. The lock is the kernel's (flock): it goes with the process that holds it, however that
process ends, so a lock is never stale; the file names the holder's pid for the error a second writer gets.
The workers a holder launches are its children and write under its lock.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from suite.errors import UsageError

NAME = ".lock"  # a dot-name: readers of the folder skip it


@contextmanager
def one_writer(folder: str | Path, what: str) -> Iterator[None]:
    """Hold `folder`'s lock while the block runs; UsageError (naming the holder's pid) if another process holds
    it. `what` says what this writer is, for that error."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise UsageError(
                f"{str(folder)!r} is being written by process {holder} (another plan or resume); wait for it "
                f"to end or give another --results folder ({what})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would race a writer that just opened it)
