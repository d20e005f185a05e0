"""The launchers of `reproduce` (issue 42 item 4): the local and SLURM launchers are peers behind one interface
(suite/plan/launchers.py), neither importing the other, and the local launcher's `--dry-run` prints the plan,
its commands, what --results already holds (skipped) and the claim cards, writing nothing."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from suite.cli import main
from suite.config import RunConfig
from suite.plan import dry_run, launchers, reproduce, slurm
from suite.plan.folder import plan_run
from suite.plan.plans import Estimate, Plan, load_plan
from suite.records import write_record
from suite.run.recorder import failed_record

A100 = "4xA100-nvlink-4x200gbIB"


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setenv("SUITE_REPRODUCTIONS", "tests.tiny_plan")


def _complete(cfg: RunConfig, folder: Path) -> Path:
    """The record a finished run of `cfg` leaves in `folder`."""
    rec = failed_record(dataclasses.replace(cfg, run_id="done-before"), cfg.nproc, "")
    rec["status"], rec["error"] = "complete", None
    return write_record(rec, folder / "done-before.json")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("made", [lambda: reproduce.LocalLauncher(), lambda: slurm.SlurmLauncher(slurm.SlurmOptions())])
def test_both_launchers_satisfy_the_interface(made):
    launcher = made()
    assert isinstance(launcher, launchers.Launcher) and isinstance(launcher.on_this_machine, bool)
    for name in ("run", "dry_run"):
        want = inspect.signature(getattr(launchers.Launcher, name))
        assert inspect.signature(getattr(type(launcher), name)) == want, name


def _imported(module) -> set[tuple[str, str]]:
    """(module, name) of every `from X import name` in the module's source, function bodies included."""
    tree = ast.parse(Path(module.__file__).read_text())
    return {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


def test_neither_launcher_imports_the_other_nor_a_private_name_of_the_modules_below():
    for module, other in ((reproduce, "suite.plan.slurm"), (slurm, "suite.plan.reproduce")):
        imports = _imported(module)
        assert not any(source == other for source, _ in imports), module.__name__
        assert not [name for source, name in imports if source.startswith("suite.plan") and name.startswith("_")]


def test_local_dry_run_writes_nothing_and_names_the_skipped_items(tiny, tmp_path, capsys):
    results, report = tmp_path / "results", tmp_path / "report"
    results.mkdir()
    ddp, flaky = [plan_run(cfg, results) for cfg in load_plan("test-plan", "smoke").runs]
    done = _complete(ddp, results)
    before = _files(results)
    argv = ["reproduce", "test-plan", "--preset", "smoke", "--results", str(results), "--report", str(report)]
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert _files(results) == before and not report.exists()  # no record, lock, summary or report
    assert out.startswith("plan test-plan, preset smoke, protocol: equal tokens;")
    assert f"skip [1/3] {ddp.command}: complete record {done}\n" in out
    assert f"[2/3] {flaky.command}\n" in out
    assert f"[3/3] python -m suite micro test-plan matmul --preset smoke --results {results}\n" in out
    assert "claims of test-plan: 0 cards" in out

    assert main([*argv, "--dry-run", "--fresh"]) == 0  # --fresh: every item would run again
    assert "skip [" not in capsys.readouterr().out and _files(results) == before


def test_a_dry_run_lists_estimates_and_their_projections(tmp_path, capsys):
    est = Estimate(RunConfig(method="fsdp", model="llama-tiny", nproc=8, reproduction="demo"), topologies=(A100,))
    plan = Plan("smoke", [], protocol="equal tokens", notes=["a note"], estimates=[est], name="demo")
    dry_run.show_plan(plan, tmp_path, fresh=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "note: a note" and lines[2].startswith("[1/1] python -m suite estimate fsdp")
    assert lines[3] == f"[1/1 projection] onto {A100} at mfu 0.4, from the estimate's new record"
    assert not list(tmp_path.iterdir())
