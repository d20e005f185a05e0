"""Atomic writes: a reader sees the old file or folder or the new one, never half of one.

Everything the suite writes for others to read (records, HTML pages, figures, model checkpoints, checkpoint
folders) is written under a temporary dot-name in the same folder, flushed to disk, then renamed over the
final name; a rename within one file system is atomic on POSIX. The report's pages skip the flush
(`durable=False`): a rebuild regenerates them from the records, and two fsyncs per page were most of the time
of a 1,000-record report on a busy disk (about 20 ms a page, measured); the rename keeps them whole. A writer
killed half-way leaves only its dot-named temporary behind, and every reader of the suite skips dot-names.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

TEMP_SUFFIX = ".tmp"
# mkstemp and mkdtemp make private temporaries (0600, 0700); what they become gets the usual mode instead
_UMASK = os.umask(0o022)
os.umask(_UMASK)


class DiskFull(OSError):
    """A write that ran out of space; its temporary is removed and the older file kept."""


def disk_full(err: OSError, path: Path, written: int) -> OSError:
    """`err` as one line naming the cause, when it is a full disk (ENOSPC, EDQUOT); else `err` itself."""
    if err.errno not in (errno.ENOSPC, errno.EDQUOT):
        return err
    return DiskFull(
        err.errno,
        f"no space left on the disk of {str(path.parent)!r} for {path.name}: {written:,} bytes written and "
        f"more needed ({shutil.disk_usage(path.parent).free:,} free); free some space and run again",
    )


class NotAFile(ValueError):
    """What a reader was given is no regular file (a FIFO, a device, a folder), or one beyond its size limit."""


def read_regular(path: str | Path, limit: int) -> bytes:
    """The bytes of regular file `path`, at most `limit` of them; NotAFile otherwise.

    Opened without blocking, so a FIFO planted under a reader's name cannot hang it, and checked before a
    byte is read, so a link to /dev/zero cannot fill its memory. OSError where it cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile(f"{str(path)!r} is not a regular file (a FIFO, device or socket); remove it")
        if info.st_size > limit:
            raise NotAFile(f"{str(path)!r} has {info.st_size:,} bytes, more than the {limit:,} a reader takes")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while read
        raise NotAFile(f"{str(path)!r} has more than the {limit:,} bytes a reader takes")
    return data


def is_temporary(path: str | Path) -> bool:
    """A name that readers skip: a dot-name (this module's temporaries are all dot-names)."""
    return Path(path).name.startswith(".")


def atomic_write(path: str | Path, write: Callable[[IO], None], binary: bool = False, durable: bool = True) -> Path:
    """Write through `write(file)` into a temporary file in the same folder, fsync (unless not `durable`: a
    crash of the machine may then lose it, a killed writer still leaves the old file or the new one), then
    rename onto path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        written = Path(tmp).stat().st_size if Path(tmp).exists() else 0
        Path(tmp).unlink(missing_ok=True)
        raise disk_full(err, path, written) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        _fsync_dir(path.parent)
    return path


def write_text(path: str | Path, text: str, durable: bool = True) -> Path:
    """atomic_write of a string (UTF-8)."""
    return atomic_write(path, lambda f: f.write(text), durable=durable)


def save_figure(fig: Any, path: str | Path, **savefig_kwargs: Any) -> Path:
    """A matplotlib figure saved atomically, in the format its file name ends with (png, svg, pdf)."""
    path = Path(path)
    kwargs = {"format": path.suffix.lstrip(".") or "png", **savefig_kwargs}
    return atomic_write(path, lambda f: fig.savefig(f, **kwargs), binary=True)


def temporary_folder(path: str | Path, token: str | None = None) -> Path:
    """The dot-named temporary beside folder `path` that `publish_folder` renames onto it.

    Ranks of one distributed save must agree on it: give them the same `token` (say, the step); without one
    the name is unique to this call.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if token is None:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent))
        tmp.chmod(0o777 & ~_UMASK)
        return tmp
    tmp = path.parent / f".{path.name}.{token}{TEMP_SUFFIX}"
    tmp.mkdir(exist_ok=True)
    return tmp


def publish_folder(tmp: str | Path, path: str | Path) -> Path:
    """Flush every file under `tmp` to disk and rename it onto `path`, replacing an older folder there.

    An older folder is first renamed to a dot-name and removed after, so at every moment `path` is absent,
    the old folder or the new one: complete either way.
    """
    tmp, path = Path(tmp), Path(path)
    entries = list(tmp.rglob("*"))
    for entry in entries:
        if entry.is_file():
            _fsync_file(entry)
    for folder in [*(e for e in entries if e.is_dir()), tmp]:
        _fsync_dir(folder)
    old = None
    if path.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", suffix=TEMP_SUFFIX, dir=path.parent))
        os.replace(path, old)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return path


@contextmanager
def atomic_folder(path: str | Path, token: str | None = None) -> Iterator[Path]:
    """Yield a temporary folder to fill; on a clean exit it replaces `path`, on an error it is removed.

        with atomic_folder(ckpt / "step-000100") as tmp:
            torch.distributed.checkpoint.save(state, checkpoint_id=tmp)

    A distributed save fills `temporary_folder(path, token)` on every rank and lets one rank call
    `publish_folder` after a barrier instead.
    """
    tmp = temporary_folder(path, token)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    publish_folder(tmp, path)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    """Make a rename inside `path` durable (a crash after it cannot bring the old name back)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
