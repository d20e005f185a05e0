"""Shared helpers: launching real runs through the command line, once per distinct command."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from suite.records import FINISHED, read_record

# The same examples on every run, so that a submission lands or not on its own merits: a fuzzer that drew a
# new failing case in CI blocked an unrelated change once. `HYPOTHESIS_PROFILE=explore` draws new ones
# (run it before committing a parser, loader or formula; pin what it finds with @example).
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent
# small and fast: 2,048 tokens per step at 2 ranks x 8 sequences x 128 tokens
TINY = ["--model", "llama-tiny", "--set", "log_every=1", "--set", "eval_every=2", "--set", "eval_batches=2"]
UNMODELLED = TINY[2:]  # TINY less its model, for commands that name their own
# Muon's bf16 Newton-Schulz on llama-tiny's 256-wide matrices takes 8 s a step on a CPU without bf16 kernels (AVX2
# only, as CI's), Polar Express 10-15 s: commands that run a matrix optimizer for what is not about the model's width
# name this narrower one
MUON_MODEL = ("--model", "llama-tiny-w64")


def run_cli(args: list[str], env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "suite", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=timeout,
    )


def spawn_gloo(worker, world: int, folder: Path) -> list:
    """`worker(rank, world, init_file, out)` in `world` processes (one thread each); what each rank saved to
    f"{out}.{rank}" with torch.save, in rank order."""
    import torch
    import torch.multiprocessing as mp

    out = str(folder / "results.pt")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(worker, args=(world, str(folder / "init"), out), nprocs=world, join=True)
    return [torch.load(f"{out}.{r}") for r in range(world)]


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
        record = self._cache[key]
        if expect_ok:  # a shared launch's run (share) is checked here, where its test reads it
            assert record["status"] in FINISHED, record.get("error")
        return record

    def share(self, commands: list[tuple[str, ...]]) -> None:
        """Run those of `commands` (no environment of their own) not run yet in shared launches (SharedRuns), so that
        a module's checks pay one launch per world size; their records lack `_stderr`."""
        todo = [args for args in dict.fromkeys(commands) if (args, ()) not in self._cache]
        if todo:
            folder = self.folder / f"shared{len(self._cache)}"
            for args, record in _shared_records(folder, todo, self.tail).items():
                self._cache[(args, ())] = record


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> Runs:
    return Runs(tmp_path_factory.mktemp("runs"))


def _shared_records(folder: Path, commands: list[tuple[str, ...]], tail: list[str]) -> dict[tuple[str, ...], dict]:
    """The record of each command, every run of one world size in one launch (suite/plan/multirun.py)."""
    from suite.cli import config_from_args, parser
    from suite.plan.multirun import launch_runs
    from suite.run.checks import check_config

    by_world: dict[int, list] = {}
    for i, args in enumerate(dict.fromkeys(commands)):
        argv = ["run", *args, *tail, "--results", str(folder / f"r{i}")]
        cfg = config_from_args(parser(argv).parse_args(argv), argv)
        check_config(cfg)
        by_world.setdefault(cfg.nproc, []).append((args, cfg))
    records = {}
    for group in by_world.values():
        paths = launch_runs([(shlex.join(args), cfg) for args, cfg in group])
        for (args, _), path in zip(group, paths, strict=True):
            records[args] = read_record(path)
    return records


class SharedRuns:
    """Commands of `python -m suite run` that share launches: each made into its config as the command line makes
    it (its parser and checks), then every run of one world size in one launch (suite/plan/multirun.py), as a plan runs
    its runs. On 2 cores a launch is mostly start-up (the launcher's and every worker's imports of torch), and
    tests/test_multirun.py checks that a run of a shared launch records what a launch of its own does."""

    def __init__(self, folder: Path, commands: list[tuple[str, ...]], tail: list[str] = TINY) -> None:
        self._records = _shared_records(folder, commands, tail)

    def __call__(self, *args: str) -> dict:
        record = self._records[args]
        assert record["status"] in FINISHED, record.get("error")
        return record
