"""A record and the run.json beside its checkpoints come from a folder anyone may have written (issue 27): a
resume takes from them only what agrees with the record (and, in a plan, with the planned configuration),
never an id or path that leaves its folder, and passes the checks a fresh run gets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from suite.cli import main
from suite.config import RunConfig
from suite.plan import reproduce
from suite.records import load_records, write_record
from suite.run import faults
from suite.run.checkpoint import write_checksums
from suite.run.recorder import failed_record
from tests.test_plan_resume import _plan, launched  # noqa: F401  (a fixture)


def plant(results: Path, checkpoints: Path, cfg: RunConfig, command: str, **saved) -> Path:
    """An incomplete record of `cfg` in `results`, its checkpoint folder with a run.json of `cfg` changed by
    `saved` and one step's loop state; returns the record's path."""
    cfg = dataclasses.replace(cfg, checkpoint_dir=str(checkpoints), checkpoint_every=3, results=str(results))
    rec = failed_record(cfg, cfg.nproc, "killed")
    rec["status"], rec["command"], rec["faults"] = "incomplete", command, faults.section(cfg)
    folder = checkpoints / str(cfg.run_id)
    (folder / "step-000003").mkdir(parents=True)
    (folder / "step-000003" / "loop.json").write_text(json.dumps({"step": 3, "world_size": cfg.nproc, "ranks": []}))
    (folder / "step-000003" / ".metadata").write_bytes(b"")
    write_checksums(folder / "step-000003")
    (folder / "run.json").write_text(dataclasses.replace(cfg, **saved).to_json())
    return write_record(rec, results / f"{Path(str(cfg.run_id)).name}.json")


def _resume(capsys, path: Path) -> tuple[int, str]:
    code = main(["run", "--resume", str(path)])
    return code, capsys.readouterr().err


def test_a_run_id_that_leaves_the_results_folder_is_refused(tmp_path, capsys):
    cfg = RunConfig(method="ddp", tokens=1000, run_id="../escaped-record")
    path = plant(tmp_path / "results", tmp_path / "ck", cfg, "python -m suite run ddp --tokens 1000")
    code, err = _resume(capsys, path)
    assert code == 2 and "'../escaped-record' is not a plain file name" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "escaped-record.json").exists()


def test_a_run_json_that_differs_from_its_record_is_refused_saying_what_differs(tmp_path, capsys):
    cfg = RunConfig(method="ddp", tokens=1000, run_id="r1")
    path = plant(tmp_path / "results", tmp_path / "ck", cfg, "python -m suite run ddp", nproc=3, checkpoint="/x")
    code, err = _resume(capsys, path)
    assert code == 2 and len(err.splitlines()) == 1
    assert "nproc 3 vs 2" in err and "checkpoint '/x' vs None" in err


def _no_launch(monkeypatch) -> None:
    """A refusal is the expected end: a launch (what a regression would do) fails at once instead of training."""
    from suite.run import launch

    def refuse(cfg):
        raise AssertionError("the resume launched its workers")

    monkeypatch.setattr(launch, "launch", refuse)


def test_a_record_whose_method_was_edited_is_not_resumed_as_the_run_of_its_run_json(tmp_path, capsys, monkeypatch):
    """Issue 46: a record saying fsdp beside a run.json (and settings) of ddp resumed the ddp checkpoint and wrote
    a complete record elsewhere, leaving the original incomplete: one run, two records."""
    _no_launch(monkeypatch)
    cfg = RunConfig(method="ddp", tokens=1000, run_id="r5")
    path = plant(tmp_path / "results", tmp_path / "ck", cfg, "python -m suite run ddp")
    rec = json.loads(path.read_text())
    rec["method"] = "fsdp"
    path.write_text(json.dumps(rec))
    code, err = _resume(capsys, path)  # its digest no longer holds (suite/records.py), nor its settings' method
    assert code == 2 and "the digest differs" in err and len(err.splitlines()) == 1


def test_two_resumes_of_one_checkpoint_folder_from_two_records_are_one_too_many(tmp_path, capsys, monkeypatch):
    """A copy of an incomplete record in another results folder resumes the same checkpoints: the checkpoint
    folder has its own lock, so the second is refused naming the first."""
    from suite.run.lock import one_writer

    _no_launch(monkeypatch)

    cfg = RunConfig(method="ddp", tokens=1000, run_id="r6")
    path = plant(tmp_path / "results", tmp_path / "ck", cfg, "python -m suite run ddp")
    copy = tmp_path / "elsewhere" / path.name
    copy.parent.mkdir()
    copy.write_text(path.read_text())
    with one_writer(tmp_path / "ck" / "r6", "the first resume"):
        code, err = _resume(capsys, copy)
    assert code == 2 and "is being written by process" in err and "these checkpoints" in err


def test_a_resumed_run_gets_the_checks_of_a_fresh_one(tmp_path, capsys):
    cfg = RunConfig(method="ddp", tokens=1000, run_id="r2", eval_every=0)  # saved and recorded alike
    code, err = _resume(capsys, plant(tmp_path / "results", tmp_path / "ck", cfg, "python -m suite run ddp"))
    assert code == 2 and "eval_every" in err


def test_a_plan_resumes_only_its_own_configuration(launched, tmp_path, capsys):  # noqa: F811
    plan = _plan()
    planned = reproduce.plan_run(dataclasses.replace(plan.runs[0]), tmp_path)
    # a planted record of the planned command whose record and run.json agree on 3 workers
    evil = dataclasses.replace(planned, nproc=3, run_id="evil-1")
    plant(tmp_path, tmp_path / "ck", evil, planned.command)
    reproduce.run_plan(plan, tmp_path)
    assert "not resuming" in capsys.readouterr().err
    (ddp,) = [r for r in load_records(tmp_path)[0] if r["method"] == "ddp"]
    assert ddp["parallel"]["world_size"] == 2 and ddp["run_id"] != "evil-1"


@pytest.mark.parametrize("changed", [{"nproc": 3}, {"lr": 1.0}, {"checkpoint": "/tmp/elsewhere"}])
def test_a_plan_refuses_a_run_json_that_is_not_the_planned_run(launched, tmp_path, capsys, changed):  # noqa: F811
    plan = _plan()
    planned = reproduce.plan_run(dataclasses.replace(plan.runs[0]), tmp_path)
    evil = dataclasses.replace(planned, run_id="evil-2", **changed)
    plant(tmp_path, tmp_path / "ck", evil, planned.command)  # record and run.json agree with each other
    reproduce.run_plan(plan, tmp_path)
    err = capsys.readouterr().err
    assert "(planned)" in err and f"{next(iter(changed))} " in err
    assert not any(r["run_id"] == "evil-2" and r["status"] == "complete" for r in load_records(tmp_path)[0])


def test_resume_takes_the_nproc_it_was_made_with_and_refuses_another(tmp_path, capsys):
    cfg = RunConfig(method="ddp", tokens=1000, run_id="r3", nproc=3)
    path = plant(tmp_path / "results", tmp_path / "ck", cfg, "python -m suite run ddp --nproc 3")
    code = main(["run", "--resume", str(path), "--nproc", "4"])
    err = capsys.readouterr().err
    assert code == 2 and "was made by 3 workers and resumes with them; drop --nproc" in err


def test_sigterm_of_run_records_the_interruption_without_a_traceback(tmp_path, capsys, monkeypatch):
    import signal

    from torch.distributed.elastic.multiprocessing.api import SignalException

    from suite.run import launch

    def terminated(cfg):  # as the real launcher does: names the run, then the workers are signalled
        cfg.run_id = "terminated-1"
        raise SignalException("Process 1 got signal: 15", sigval=signal.SIGTERM)

    monkeypatch.setattr(launch, "launch", terminated)
    code = main(["run", "ddp", "--tokens", "1000", "--results", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 128 + signal.SIGTERM and "Traceback" not in err
    (rec,) = load_records(tmp_path)[0]
    assert rec["status"] == "incomplete" and "interrupted by SIGTERM" in rec["error"]
    assert out.strip().splitlines()[-1] == rec["_path"]


def test_a_record_path_with_a_line_break_is_printed_on_one_line():
    from suite.records import shown_path

    assert shown_path(Path("results/a\nb.json")) == "'results/a\\nb.json'"
    assert shown_path(Path("results/ab.json")) == "results/ab.json"
