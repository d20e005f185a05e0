"""The process's own memory: resident set size, its peak, and glibc's allocator settings (Linux's /proc).

Apart from the tensor meter (memory.py) so that commands which only read the peak RSS (the microbenchmarks) or
the allocator's settings (every record) do not import torch.distributed._tools, 1.6 s of dynamo and inductor.
"""

import ctypes
import ctypes.util
import os
import re
from collections.abc import Mapping
from pathlib import Path

import psutil

# glibc reads these at process start (mallopt's parameters as environment variables)
_MALLOC_ENV = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
    "MALLOC_ARENA_MAX",
    "MALLOC_ARENA_TEST",
    "MALLOC_PERTURB_",
    "MALLOC_CHECK_",
)
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_ENVIRON = Path("/proc/self/environ")


def process_rss_bytes() -> int:
    """Resident set size of this process now."""
    return psutil.Process().memory_info().rss


def reset_peak_rss() -> bool:
    """Restart the process's peak-RSS count (Linux); False where the kernel does not allow it."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_rss_bytes() -> int | None:
    """Peak RSS since the last `reset_peak_rss()` (or process start); None without /proc."""
    try:
        match = re.search(r"^VmHWM:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


def _start_environ() -> Mapping[str, str]:
    # glibc read the environment the process was started with, not os.environ as changed since
    try:
        pairs = _ENVIRON.read_bytes().split(b"\0")
    except OSError:
        return os.environ
    return dict(p.decode(errors="replace").split("=", 1) for p in pairs if b"=" in p)


def allocator_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The malloc tunings in `environ` (default: this process's start environment); {} at the defaults."""
    env = _start_environ() if environ is None else environ
    found = {k: env[k] for k in _MALLOC_ENV if k in env}
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t.startswith("glibc.malloc.")]
    if tunables:
        found["GLIBC_TUNABLES"] = ":".join(tunables)
    return found


def allocator_is_default(environ: Mapping[str, str] | None = None) -> bool:
    """True when nothing tunes glibc's malloc for this process (or for workers started with `environ`).

    The suite never changes a setting itself (suite/meters/memory.py's docstring), so timed steps run at the defaults
    exactly when the process started without a tuning."""
    return not allocator_settings(environ)


def release_free_heap() -> None:
    # Free pages kept by glibc's arenas would set the peak RSS before the step begins; malloc_trim returns
    # them without changing any threshold. Other C libraries keep their own behaviour.
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
