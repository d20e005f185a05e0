"""The prepared GPU check (benchmarks/gpu_check.py), on a CPU: its commands parse with the suite's own argument
parser and fit the budget; a command that runs out of time is stopped and the check goes on."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_check
from suite.cli import parser
from suite.config import RunConfig
from suite.plan.plans import Plan

RESULTS = Path("results/gpu")


# the plans are built in child processes, as on the node (each imports torch): slow on a busy machine
slow_plans = pytest.mark.slow


@pytest.fixture(scope="module")
def one_gpu() -> list[gpu_check.Step]:
    """The check as a node with one GPU would run it (plans built in child processes, as on the node)."""
    return gpu_check.steps(RESULTS, gpus=1)


def suite_argv(cmd: gpu_check.Command) -> list[str]:
    assert cmd.argv[:3] == [sys.executable, "-m", "suite"], cmd.line()
    return cmd.argv[3:]


@slow_plans
def test_every_suite_command_parses_with_the_suites_own_parser(one_gpu):
    commands = [c for s in one_gpu for c in s.commands if s.name != "install"]
    assert commands
    for cmd in commands:
        args = parser().parse_args(suite_argv(cmd))
        assert args.command in ("run", "estimate", "micro")
        if args.command == "run":
            assert args.device == "cuda" and args.results.startswith(str(RESULTS))


@slow_plans
def test_estimate_is_measured_on_cuda_and_the_baselines_are_shortened(one_gpu):
    by_name = {s.name: s for s in one_gpu}
    estimate = parser().parse_args(suite_argv(by_name["estimate"].commands[0]))
    assert (estimate.method, estimate.model, estimate.nproc, estimate.measure, estimate.measure_device) == (
        "fsdp",
        "llama-134m",
        1,
        True,
        "cuda",
    )
    runs = [parser().parse_args(suite_argv(c)) for c in by_name["baselines"].commands]
    assert runs and {r.method for r in runs} >= {"ddp", "fsdp"}
    for r in runs:
        assert r.tokens == gpu_check.SHORT_STEPS * r.nproc * 8 * 1024  # the preset's micro-batch 8 x 1024 tokens


@slow_plans
def test_presets_sized_on_the_gpu_are_skipped_with_why_where_none_answers(one_gpu):
    by_name = {s.name: s for s in one_gpu}
    for name in ("sdp", "fl-fsdp"):  # sized to one GPU by steps measured there, which this CPU machine cannot do
        assert "measures its steps there, and no GPU answers here" in by_name[name].skipped
    assert {"dion", "flash-io"} <= set(by_name)  # built, or skipped with why (flash-io probes CUDA to build)


@slow_plans
def test_limits_fit_the_budget(one_gpu):
    assert sum(gpu_check.SHARES.values()) <= 600  # one H200 for about 10 minutes in all
    assert {s.name for s in one_gpu} == set(gpu_check.SHARES)
    for step in one_gpu:
        assert all(0 < c.limit_s <= max(step.share_s, gpu_check.RUN_LIMIT_S) for c in step.commands)


def test_one_seed_and_no_sweeps(monkeypatch, tmp_path):
    runs = [
        RunConfig(
            method="b-sdp",
            model="llama-134m",
            device="cuda",
            nproc=2,
            micro_batch=8,
            seq_len=1024,
            seed=s,
            tokens=1e9,
            reproduction=r,
        )
        for s in (0, 1, 2)
        for r in ("sdp", "sdp-sweep")
    ]
    monkeypatch.setattr(
        "suite.plan.plans.load_plan", lambda name, preset: Plan(preset, runs, protocol="tokens", name=name)
    )
    commands = gpu_check.run_commands("sdp", tmp_path)
    assert len(commands) == 1
    args = parser().parse_args(suite_argv(commands[0]))
    assert args.seed == 0 and args.tokens == gpu_check.SHORT_STEPS * 2 * 8 * 1024


def test_a_command_out_of_time_is_stopped_and_the_check_goes_on(tmp_path):
    # the slow command starts a child of its own, as torchrun does: the whole process group must stop
    sleeper = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )
    slow = gpu_check.Command("a", [sys.executable, "-c", sleeper], limit_s=2)
    quick = gpu_check.Command("a", [sys.executable, "-c", "print('done')"], limit_s=30)
    failing = gpu_check.Command("b", [sys.executable, "-c", "raise SystemExit(3)"], limit_s=30)
    plan = [gpu_check.Step("a", [slow, quick], share_s=60), gpu_check.Step("b", [failing], share_s=60)]
    gpu_check.execute(plan, tmp_path, budget_s=120)
    assert slow.status.startswith("timed out") and slow.seconds < 20
    assert quick.status == "ok" and failing.status == "failed (status 3)"
    report = gpu_check.summary(plan, tmp_path, dry_run=False)
    assert [c["status"] for s in report["steps"] for c in s["commands"]] == [slow.status, "ok", "failed (status 3)"]
    assert "timed out" in gpu_check.markdown(report)
    assert (tmp_path / "logs").is_dir() and any("done" in p.read_text() for p in (tmp_path / "logs").iterdir())


def test_a_step_whose_share_is_spent_lists_the_rest_as_not_run(tmp_path):
    first = gpu_check.Command("a", [sys.executable, "-c", "import time; time.sleep(3)"], limit_s=30)
    second = gpu_check.Command("a", [sys.executable, "-c", "pass"], limit_s=30)
    gpu_check.execute([gpu_check.Step("a", [first, second], share_s=7)], tmp_path, budget_s=60)
    assert first.status == "ok" and second.status.startswith("not run")


def test_a_skipped_step_and_unspent_seconds_go_to_the_steps_after_them(tmp_path):
    # on one GPU the multi-GPU presets are skipped: their shares must not be lost to the steps that can run
    skipped = gpu_check.Step("sdp", [], share_s=6, skipped="needs 2 GPUs")
    quick = gpu_check.Step("a", [gpu_check.Command("a", [sys.executable, "-c", "pass"], limit_s=30)], share_s=3)
    sleeper = gpu_check.Command("b", [sys.executable, "-c", "import time; time.sleep(60)"], limit_s=30)
    left = gpu_check.execute([skipped, quick, gpu_check.Step("b", [sleeper], share_s=1)], tmp_path, budget_s=60)
    # alone, step b's 1 s share would not start it; with 6 + 3 s carried it runs until they are spent
    assert sleeper.status.startswith("timed out after") and 5 < float(sleeper.status.split()[3]) <= 10
    assert left == 0.0


def test_dry_run_prints_every_command_with_its_limit(capsys, monkeypatch):
    steps = [gpu_check.Step("estimate", [gpu_check.Command("estimate", [sys.executable, "-m", "suite", "x"], 9)], 10)]
    monkeypatch.setattr(gpu_check, "steps", lambda results, gpus=None, install=True: steps)
    assert gpu_check.main(["--dry-run", "--gpus", "1"]) == 0
    out = capsys.readouterr().out
    assert f"[9 s] {shlex.join([sys.executable, '-m', 'suite', 'x'])}" in out
    with pytest.raises(SystemExit):
        gpu_check.main(["--gpus", "1"])  # a real check uses the GPUs it finds
