"""A reproduction is one folder: the suite finds it, runs its plan, report and bench pair, and lists it.

The throwaway reproduction below lives in a temporary folder named by SUITE_REPRODUCTIONS: one method, one
optimizer (with a parameter through --set), one meter of its own, one microbenchmark item, one claim and one
bench pair.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from suite import extensions
from suite.records import load_records
from tests.conftest import ROOT, run_cli

TOY = textwrap.dedent(
    '''
    """A throwaway reproduction for the tests."""

    from pathlib import Path

    import torch

    from baselines.ddp import DDP
    from suite.config import RunConfig, command_line
    from suite.extensions import Reproduction
    from suite.meters.base import Meter
    from suite.plan.micro import Microbench
    from suite.run.optim import OptimizerSpec
    from suite.params import Param
    from suite.plan.pairs import Config, Pair
    from suite.plan.plans import Plan


    class ToyDDP(DDP):
        name = "toy-ddp"
        baseline = False


    def build_sgd(model, cfg, ctx, params):
        return torch.optim.SGD(model.parameters(), lr=params.get("toy_lr", cfg.lr), momentum=0.9)


    class NormMeter(Meter):
        """The parameters' norm after step 3, on each rank: a reproduction's own record section."""

        name = "toy_norm"

        @classmethod
        def applies(cls, cfg):
            return cfg.reproduction == "toy"

        def steps(self):
            return range(3, 4)

        def after(self, step):
            self.norm = float(sum(p.detach().float().norm() ** 2 for p in self.ctx.model().parameters()) ** 0.5)

        def local(self):
            return getattr(self, "norm", None)

        @classmethod
        def section(cls, per_rank, record, weight):
            record["toy_norm"] = {"per_rank": [per_rank[r] for r in sorted(per_rank)]}


    def matmul(device, n):
        a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
        return lambda: {"elements_out": (a @ b).numel()}


    def plan(preset):
        runs = [
            RunConfig(method=m, nproc=2, model="llama-tiny", tokens=5 * 2 * 4 * 64, micro_batch=4, seq_len=64,
                      eval_every=5, eval_batches=1, reproduction="toy", optimizer="toy-sgd",
                      variant={"toy_lr": 0.01})
            for m in ("ddp", "toy-ddp")
        ]
        for cfg in runs:
            cfg.command = command_line(cfg)
        items = [Microbench("matmul", "toy_repro:matmul", [{"n": 32}, {"n": 64}], repeat=3)]
        return Plan(preset, runs, protocol="equal tokens", micro=items)


    def own_page(results, report):
        page = Path(report) / "toy.html"
        page.write_text(f"<p>{len(list(Path(results).glob('*.json')))} records</p>")
        return page


    REPRODUCTION = Reproduction(
        name="toy",
        description="a throwaway reproduction",
        methods=(ToyDDP,),
        optimizers=(OptimizerSpec("toy-sgd", build_sgd, "SGD with momentum", {"toy_lr": Param(float, None, "lr")}),),
        meters=(NormMeter,),
        plan=plan,
        claims=Path(__file__).with_name("claims.yaml"),
        pairs=(Pair("toy-ddp/ddp", Config("toy-ddp", steps=6), Config("ddp", steps=6)),),
        report=own_page,
    )
    '''
)

CLAIMS = textwrap.dedent(
    """
    claims:
      - id: toy-state
        statement: toy-ddp holds the same model state per rank as DDP
        paper_value: 1.0
        unit: x DDP state bytes per rank
        source: {paper: none, version: test}
        source_status: a test claim
        metric: {name: ratio, field: state_bytes_max, method: toy-ddp, baseline: ddp, model: llama-tiny}
        protocol: tokens
        kind: ratio
        better: lower
        band: {tolerance: 0.05, source: the same model and wrapper as DDP}
        command: python -m suite reproduce toy --preset smoke
        what_would_test: the toy at any size
        regime: {any_scale: {because: "the same model and wrapper hold the same state at any size", source: a test}}
    """
)


@pytest.fixture
def toy(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "toy_repro"
    folder.mkdir()
    (folder / "__init__.py").write_text(TOY)
    (folder / "claims.yaml").write_text(CLAIMS)
    monkeypatch.setenv(extensions.ENV, str(folder))
    return folder


def _tree() -> set[str]:
    out = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(out.stdout.splitlines())


def test_discovery_finds_in_tree_and_named_folders(toy):
    found = extensions.reproductions()
    assert {"baselines", "sdp", "toy"} <= set(found)
    assert found["toy"].module == "toy_repro"
    assert "toy-ddp" in extensions.declared("methods") and "toy-sgd" in extensions.declared("optimizers")


def test_a_folder_without_init_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(extensions.ENV, str(tmp_path / "empty"))
    with pytest.raises(extensions.ExtensionError, match="without __init__.py"):
        extensions.reproductions()


def test_in_tree_reproductions_are_named_by_their_folder_and_described_by_their_docstring():
    import ast

    for name, rep in extensions.reproductions().items():
        if not rep.module.startswith(f"{extensions.PACKAGE}."):
            continue
        folder = ROOT / extensions.PACKAGE / rep.module.rpartition(".")[2]
        assert name == folder.name.replace("_", "-")
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
        assert rep.description == doc.splitlines()[0]  # what nox -l shows (noxfile.py reads it without importing)


def test_an_in_tree_declaration_that_repeats_its_name_is_refused(monkeypatch):
    import types

    module = types.ModuleType("reproductions.copied", "A copied reproduction.")
    module.REPRODUCTION = extensions.Reproduction(name="copied")
    monkeypatch.setitem(__import__("sys").modules, "reproductions.copied", module)
    with pytest.raises(extensions.ExtensionError, match="leave both out: the folder names it"):
        extensions._load("reproductions.copied")
    module.REPRODUCTION = extensions.Reproduction()
    assert extensions._load("reproductions.copied").name == "copied"


def test_list_names_every_reproduction_with_its_description(toy):
    proc = run_cli(["reproduce", "--list"])
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert {"baselines", "sdp", "toy"} <= set(lines)
    assert "a throwaway reproduction" in lines["toy"] and "1 methods, 1 optimizers, 1 meters" in lines["toy"]


@pytest.mark.slow
def test_throwaway_reproduction_runs_its_plan_report_and_pair_touching_only_its_folder(toy, tmp_path):
    before = _tree()
    results, report = toy / "results", toy / "report"
    proc = run_cli(["reproduce", "toy", "--results", str(results), "--report", str(report)], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records, skipped = load_records(results)
    assert not skipped
    runs = [r for r in records if r.get("kind") != "microbenchmark"]
    assert sorted(r["method"] for r in runs) == ["ddp", "toy-ddp"]
    for rec in runs:
        assert rec["status"] == "complete"
        assert rec["optimizer"]["name"] == "toy-sgd" and rec["optimizer"]["params"] == {"toy_lr": 0.01}
        assert rec["variant"]["optimizer"] == "toy-sgd"
        norms = rec["toy_norm"]["per_rank"]  # DDP keeps the replicas identical: one norm on both ranks
        assert len(norms) == 2 and norms[0] == norms[1] > 0
    (micro,) = [r for r in records if r.get("kind") == "microbenchmark"]
    assert micro["provenance"] == "measured" and micro["command"].startswith("python -m suite micro toy matmul")
    assert [row["extra"]["elements_out"] for row in micro["micro"]["rows"]] == [32 * 32, 64 * 64]
    assert all(row["flops"] == 2 * row["shape"]["n"] ** 3 for row in micro["micro"]["rows"])
    html = (report / "index.html").read_text()
    assert "toy" in html
    assert (report / "toy.html").read_text() == f"<p>{len(records)} records</p>"  # the reproduction's own page
    assert "toy-state" in json.dumps(sorted(p.name for p in report.rglob("*"))) or "toy-state" in "".join(
        p.read_text() for p in report.rglob("*.html")
    )

    from benchmarks.measure import PairMeter

    pair = extensions.get_reproduction("toy").pairs[0]
    measured = PairMeter(toy / "bench")(pair)
    assert measured["ratio"] > 0 and measured["method"]["config"] == "toy-ddp-n2"
    assert _tree() == before
