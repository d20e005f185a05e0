"""Plans on SLURM (issue 16): `reproduce NAME --launcher slurm` writes one batch script per run (srun starting
torchrun with a c10d rendezvous on the job's first node), submits it, waits, and gathers the records.

The real path runs with stand-ins for sbatch, squeue, srun and scontrol on PATH (tests/stand_in/): they run
each job's script on this machine, so the test proves the script starts torchrun and the record lands. The
queue bookkeeping (timeouts, a rerun waiting for jobs still queued, records that never arrive) is tested with
sbatch and squeue replaced in-process."""

from __future__ import annotations

import dataclasses
import os
import shlex
import socket
import sys
from pathlib import Path

import pytest

from suite.cli import main
from suite.config import RunConfig
from suite.errors import UsageError
from suite.plan import slurm
from suite.plan.folder import config_key, plan_run
from suite.plan.plans import load_plan
from suite.records import load_records, write_record
from suite.run.recorder import REPOSITORY, failed_record
from tests.conftest import run_cli

STAND_IN = Path(__file__).with_name("stand_in")


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setenv("SUITE_REPRODUCTIONS", "tests.tiny_plan")


def _reproduce(results: Path, *extra: str) -> list[str]:
    """The plan's command; its report goes beside the results folder, never into the repository's reports/."""
    report = ["--report", str(results.parent / f"{results.name}-report")] if "--report" not in extra else []
    return ["reproduce", "test-plan", "--preset", "slurm", "--launcher", "slurm", "--results", str(results)] + [
        *report,
        *extra,
    ]


def test_dry_run_prints_the_scripts_and_submits_nothing(tiny, tmp_path, capsys):
    extra = ("--dry-run", "--partition", "gpu", "--time", "01:30:00", "--account", "proj", "--rdzv-port", "29611")
    assert main(_reproduce(tmp_path, *extra)) == 0
    out = capsys.readouterr().out
    (cfg,) = [plan_run(c, tmp_path) for c in load_plan("test-plan", "slurm").runs]
    sbatch = [line.split()[1] for line in out.splitlines() if line.startswith("#SBATCH")]
    assert sbatch == [
        "--job-name=suite-test-plan-slurm-1",
        "--nodes=1",
        "--ntasks-per-node=1",
        "--partition=gpu",
        "--time=01:30:00",
        "--account=proj",
        f"--chdir={REPOSITORY}",
        f"--output={tmp_path.resolve()}/slurm/suite-test-plan-slurm-1-%j.out",
    ]
    assert 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in out
    assert 'srun --nodes="$SLURM_NNODES" --ntasks-per-node=1' in out
    launch = shlex.split(out[out.index("srun ") :].split("\n\n")[0].replace("\\\n", " "))
    torchrun = launch[launch.index(str(Path(sys.executable).with_name("torchrun"))) :]
    assert torchrun[1:12] == [
        "--nnodes",
        "$SLURM_NNODES",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "$head:29611",
        "--rdzv-id",
        "$SLURM_JOB_ID",
        "-m",
    ]
    # the run's own command, so its record names the same command as a local run's
    assert ["python", *torchrun[12:]] == ["python", "--", "suite", *shlex.split(cfg.command)[3:]]
    assert "and here, not on the cluster: 1 estimates and microbenchmark items" in out
    assert not (tmp_path / "slurm").exists()


def test_gpu_jobs_ask_for_their_gpus_and_nodes_fit_the_workers():
    cfg = plan_run(RunConfig(method="fsdp", nproc=16, device="cuda", tokens=1e6), Path("results/x"))
    script = slurm.batch_script(cfg, "job", slurm.SlurmOptions(gpus_per_node=8), Path("/log"), "header")
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --gpus-per-node=8\n" in script
    assert "--nproc-per-node 8" in script and "--results results/x\n" in script
    assert slurm.layout(4, slurm.SlurmOptions()) == (1, 4)
    assert slurm.layout(8, slurm.SlurmOptions(nodes=2)) == (2, 4)
    with pytest.raises(UsageError, match="divides 6"):
        slurm.layout(6, slurm.SlurmOptions(gpus_per_node=4))
    with pytest.raises(UsageError, match="does not fit --nodes 3"):
        slurm.layout(8, slurm.SlurmOptions(nodes=3))


def test_jobs_checkpoint_and_restart_as_the_plan_asks_and_their_records_still_match_the_plan():
    cfg = plan_run(RunConfig(method="ddp", nproc=4, tokens=1e6, checkpoint_every=50, max_restarts=2), Path("r"))
    script = slurm.batch_script(cfg, "job", slurm.SlurmOptions(), Path("/log"), "header")
    assert "--nproc-per-node 4 --max-restarts 2 \\" in script and "--checkpoint-every 50 --results r\n" in script
    run_words = script.split("suite ", 2)[-1].strip()
    assert config_key(f"python -m suite {run_words}") == config_key(cfg.command)


class FakeQueue:
    """sbatch and squeue in-process: submitted jobs stay queued until `finish` (whose records may never come)."""

    def __init__(self) -> None:
        self.queue: list[str] = []
        self.submitted: list[str] = []

    def __call__(self, *argv: str) -> str:
        if argv[0] == "sbatch":
            job = str(7000 + len(self.submitted))
            self.submitted.append(argv[-1])
            self.queue.append(job)
            return f"{job};cluster\n"
        assert argv[0] == "squeue"
        return "".join(f"{job}\n" for job in self.queue)


def test_a_rerun_waits_for_queued_jobs_and_gathers_what_arrived(tiny, tmp_path, monkeypatch, capsys):
    fake = FakeQueue()
    monkeypatch.setattr(slurm, "_slurm", fake)
    assert main(_reproduce(tmp_path, "--wait-timeout", "0")) == 1
    err = capsys.readouterr().err
    assert "submitted [1/2]" in err and "job 7000" in err and "still in the queue after 0s: job 7000" in err
    assert len(fake.submitted) == 1 and Path(fake.submitted[0]).read_text().startswith("#!/bin/bash")

    assert main(_reproduce(tmp_path, "--wait-timeout", "0")) == 1  # still queued: waited for, not submitted again
    assert "in the queue [1/2]" in capsys.readouterr().err and len(fake.submitted) == 1

    (cfg,) = [plan_run(c, tmp_path) for c in load_plan("test-plan", "slurm").runs]
    rec = failed_record(dataclasses.replace(cfg, run_id="from-the-job"), cfg.nproc, "")
    rec["status"], rec["error"] = "complete", None
    write_record(rec, tmp_path / "from-the-job.json")  # what the job's rank 0 writes
    fake.queue.clear()
    assert main(_reproduce(tmp_path, "--poll", "0.01")) == 0
    assert "skip [2/2] python -m suite micro" in capsys.readouterr().err
    assert (tmp_path / "slurm" / "jobs.jsonl").read_text() == ""
    assert main(_reproduce(tmp_path)) == 0  # everything done: nothing submitted
    assert len(fake.submitted) == 1 and "skip [1/2]" in capsys.readouterr().err


def test_a_record_that_never_arrives_is_reported(tiny, tmp_path, monkeypatch, capsys):
    fake = FakeQueue()
    monkeypatch.setattr(slurm, "_slurm", fake)
    monkeypatch.setattr(slurm, "queued", lambda: set())  # the job ended at once, and wrote nothing
    assert main(_reproduce(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "did not arrive: job 7000 python -m suite run ddp" in err and "suite-test-plan-slurm-1-7000.out" in err


def test_no_sbatch_is_one_line_naming_the_fix(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(_reproduce(tmp_path)) == 2
    assert "no sbatch on PATH" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_stand_in_sbatch_runs_the_script_and_the_record_lands(tiny, tmp_path):
    env = {
        "PATH": os.pathsep.join([str(STAND_IN), str(Path(sys.executable).parent), os.environ["PATH"]]),
        "STAND_IN_SLURM_STATE": str(tmp_path / "queue"),
        "SUITE_REPRODUCTIONS": "tests.tiny_plan",
    }
    results = tmp_path / "results"
    args = _reproduce(results, "--poll", "0.5", "--rdzv-port", str(_free_port()), "--report", str(tmp_path / "report"))
    proc = run_cli(args, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "submitted [1/2]" in proc.stderr and "here, not on the cluster" in proc.stderr
    (cfg,) = [plan_run(c, results) for c in load_plan("test-plan", "slurm").runs]
    runs = [r for r in load_records(results)[0] if r.get("kind") != "microbenchmark"]
    assert [(r["status"], r["command"], r["parallel"]["world_size"]) for r in runs] == [("complete", cfg.command, 2)]
    (log,) = (results / "slurm").glob("suite-test-plan-slurm-1-*.out")
    assert Path(runs[0]["_path"]).name in log.read_text()  # rank 0 of the job printed the record's path

    again = run_cli(args, env=env, timeout=300)
    assert again.returncode == 0 and "skip [1/2]" in again.stderr and "submitted" not in again.stderr


def test_slurm_options_without_the_slurm_launcher_are_refused(tiny, tmp_path, capsys):
    # --dry-run is both launchers' now (tests/test_reproduce_launchers.py), so --partition stands beside --nodes
    assert main(["reproduce", "test-plan", "--results", str(tmp_path), "--partition", "gpu", "--nodes", "2"]) == 2
    assert "--nodes, --partition: options of --launcher slurm" in capsys.readouterr().err
