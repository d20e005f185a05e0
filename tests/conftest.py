"""Shared helpers: launching real runs through the command line, once per distinct command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from suite.records import read_record

# The same examples on every run, so that a submission lands or not on its own merits: a fuzzer that drew a
# new failing case in CI blocked an unrelated change once. `HYPOTHESIS_PROFILE=explore` draws new ones
# (run it before committing a parser, loader or formula; pin what it finds with @example).
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent
# small and fast: 2,048 tokens per step at 2 ranks x 8 sequences x 128 tokens
TINY = ["--model", "llama-tiny", "--set", "log_every=1", "--set", "eval_every=2", "--set", "eval_batches=2"]


def run_cli(args: list[str], env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "suite", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=timeout,
    )


class Runs:
    """Launches `python -m suite run ...` and returns its record; each distinct command runs once."""

    def __init__(self, folder: Path, tail: list[str] = TINY) -> None:
        self.folder = folder
        self.tail = tail  # arguments after the command's own: the last of a repeated flag wins
        self._cache: dict[tuple, dict] = {}

    def __call__(self, *args: str, env: dict | None = None, expect_ok: bool = True) -> dict:
        key = (args, tuple(sorted((env or {}).items())))
        if key not in self._cache:
            out = self.folder / f"r{len(self._cache)}"
            proc = run_cli(["run", *args, *self.tail, "--results", str(out)], env=env)
            lines = proc.stdout.strip().splitlines()
            assert lines, f"no output; stderr:\n{proc.stderr[-3000:]}"
            if expect_ok:
                assert proc.returncode == 0, proc.stderr[-3000:]
            record = read_record(lines[-1])
            record["_stderr"] = proc.stderr
            self._cache[key] = record
        return self._cache[key]


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Runs:
    return Runs(tmp_path_factory.mktemp("runs"))
