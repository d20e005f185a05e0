"""Values that passed the checks and then failed inside the workers are refused before launch (issue 27,
item 7): one line, exit status 2, no worker started."""

from __future__ import annotations

import signal

import pytest

from suite.cli import main
from suite.run import launch, limits


def _run(capsys, tmp_path, *flags: str) -> tuple[int, str]:
    code = main(["run", "ddp", "--nproc", "2", "--tokens", "1000", "--results", str(tmp_path / "r"), *flags])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--set", "eval_every=0"], "eval_every must be at least 1"),
        (["--set", "log_every=0"], "log_every must be at least 1"),
        (["--set", "eval_batches=0"], "eval_batches must be at least 1"),
        (["--set", "eval_batch=0"], "eval_batch must be at least 1"),
        (["--set", "seq_len=100000"], "beyond llama-tiny's max_seq_len 1024"),
        (["--set", "micro_batch=100000"], "need at least"),
        (["--collective-timeout", "inf"], "finite number of seconds"),
    ],
)
def test_values_workers_cannot_run_are_one_line_errors(tmp_path, capsys, flags, message):
    code, err = _run(capsys, tmp_path, *flags)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_target_no_loss_can_reach_is_refused(tmp_path, capsys):
    code = main(["run", "ddp", "--target", "-1", "--results", str(tmp_path)])  # ran on to the token cap
    err = capsys.readouterr().err
    assert code == 2 and "above 0" in err and len(err.strip().splitlines()) == 1


def test_more_workers_than_the_cores_can_drive_need_over_limits(tmp_path, capsys):
    many = str(limits.WORKERS_PER_CORE * limits.cores() + 1)
    code = main(["run", "ddp", "--nproc", many, "--tokens", "1000", "--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--over-limits" in err and len(err.strip().splitlines()) == 1


def test_over_limits_lifts_the_machine_checks_only(tmp_path, monkeypatch):
    from suite.config import RunConfig

    cfg = RunConfig(micro_batch=100000, tokens=1000, results=str(tmp_path))
    with pytest.raises(ValueError, match="need at least"):
        limits.check(cfg)
    limits.check(cfg, machine=False)
    cfg.eval_every = 0
    with pytest.raises(ValueError, match="eval_every"):
        limits.check(cfg, machine=False)


def test_unwritable_or_foreign_checkpoint_paths_are_refused(tmp_path, capsys):
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("not a model")
    code, err = _run(capsys, tmp_path, "--checkpoint", str(unrelated))
    assert code == 2 and "exists and is not a model checkpoint" in err
    assert unrelated.read_text() == "not a model"
    code, err = _run(capsys, tmp_path, "--checkpoint", str(unrelated / "model.pt"))
    assert code == 2 and "is not a writable folder" in err
    code, err = _run(capsys, tmp_path, "--checkpoint-every", "2", "--set", f"checkpoint_dir={unrelated}/ck")
    assert code == 2 and "checkpoint_dir" in err and len(err.strip().splitlines()) == 1


def test_a_full_disk_is_refused_before_launch(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(limits.shutil, "disk_usage", lambda path: type("U", (), {"free": 0})())
    code, err = _run(capsys, tmp_path)
    assert code == 2 and "no space left on the disk of" in err and "0 bytes free" in err


def test_a_worker_the_oom_killer_took_is_recorded_as_out_of_memory():
    assert "out-of-memory killer" in launch.exit_text(-signal.SIGKILL, oom=True)
    assert launch.exit_text(-signal.SIGKILL) == "was killed by SIGKILL"


def test_a_resume_asks_room_for_one_checkpoint_when_the_newest_is_already_on_the_disk(tmp_path, monkeypatch):
    """Before: after the disk was freed, `run --resume` asked room for two checkpoints although the newest of them
    was already in the folder, and was refused."""
    import shutil
    from collections import namedtuple

    from suite.config import RunConfig

    cfg = RunConfig(tokens=1000, results=str(tmp_path / "r"), checkpoint_every=5, checkpoint_dir=str(tmp_path / "c"))
    one = limits.checkpoint_bytes(cfg)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10 * one, 8 * one, one + one // 2))
    with pytest.raises(ValueError, match="no space left"):
        limits.check_paths(cfg)
    cfg.run_id = "r1"
    newest = tmp_path / "c" / "r1" / "step-000010"
    newest.mkdir(parents=True)
    (newest / "loop.json").write_text("{}")
    limits.check_paths(cfg)


@pytest.mark.parametrize(
    "budget,message",
    [
        (["--tokens", "1e18"], "--tokens 1e+18 takes at least"),
        (["--flops", "1e30"], "--flops 1e+30 takes at least"),
        (["--target", "2", "--max-tokens", "1e17"], "--max-tokens 1e+17 takes at least"),
        (["--time", "1e8"], "--time 1e+08 is 3.17 years"),
    ],
)
def test_a_budget_no_machine_can_finish_is_refused_with_its_time(tmp_path, capsys, budget, message):
    """Issue 46: `--tokens 1e18` trained with an ETA of 4e14 s. The time is a lower bound (a rate above this
    machine's peak), so a budget it refuses could not finish here in LONGEST_S."""
    code = main(["run", "ddp", "--nproc", "2", *budget, "--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "--over-limits" in err and len(err.strip().splitlines()) == 1, err


def test_a_long_but_finishable_budget_passes_and_over_limits_lifts_the_refusal(tmp_path):
    from suite.config import RunConfig

    cfg = RunConfig(tokens=1e9, results=str(tmp_path))  # llama-tiny: hours here, not months
    limits.check(cfg)
    cfg.tokens = 1e18
    with pytest.raises(ValueError, match="takes at least"):
        limits.check(cfg)
    limits.check(cfg, machine=False)
