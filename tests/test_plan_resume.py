"""Plans resume (issue 16): `reproduce` skips an item whose complete record of the same configuration is in the
results folder, runs the rest, and a new record replaces the older ones of its configuration only once it is
complete. The launcher is replaced by one that writes the record a run would end with (the real launcher is
exercised by tests/test_no_leaks.py); microbenchmark items and estimates are real."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from suite.config import RunConfig
from suite.plan import reproduce
from suite.plan.folder import config_key
from suite.plan.micro import Microbench
from suite.plan.plans import Estimate, Plan
from suite.plan.summary import table
from suite.records import load_records, read_record, write_record
from suite.run.recorder import failed_record

A100 = "4xA100-nvlink-4x200gbIB"


class FakeLaunch:
    """Writes the record a run ends with: `complete`, `failed`, or raises `interrupt` (a signal mid-run)."""

    def __init__(self) -> None:
        self.outcome: dict[str, str] = {}  # method -> complete | failed | interrupt
        self.launched: list[str] = []
        self.existing: list[list[dict]] = []

    def __call__(self, cfg: RunConfig) -> Path:
        self.launched.append(cfg.method)
        outcome = self.outcome.get(cfg.method, "complete")
        if outcome == "interrupt":
            raise KeyboardInterrupt
        rec = failed_record(cfg, cfg.nproc, "injected" if outcome == "failed" else "")
        rec["status"], rec["error"] = outcome, (None if outcome == "complete" else "injected")
        return write_record(rec, cfg.record_path())


@pytest.fixture
def launched(monkeypatch) -> FakeLaunch:
    fake = FakeLaunch()
    real_run_one = reproduce._run_one

    def run_one(cfg, existing):
        fake.existing.append(existing)
        return real_run_one(cfg, existing)

    monkeypatch.setattr(reproduce, "launch", fake)
    # runs that share a launch (suite/plan/multirun.py) go through the same fake, one after the other
    monkeypatch.setattr(reproduce, "launch_runs", lambda runs: [fake(cfg) for _, cfg in runs])
    monkeypatch.setattr(reproduce, "_run_one", run_one)
    return fake


def _plan(shapes=({"n": 8},)) -> Plan:
    runs = [
        RunConfig(method=m, nproc=2, tokens=1000, seed=s, reproduction="demo") for m, s in (("ddp", 0), ("fsdp", 1))
    ]
    item = Microbench("matmul", "tests.tiny_plan:matmul", [dict(s) for s in shapes], warmup=0, repeat=1)
    return Plan("smoke", runs, protocol="equal tokens", micro=[item], name="demo")


def _by_method(folder: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for rec in load_records(folder)[0]:
        out.setdefault(rec["method"], []).append(rec)
    return out


def test_the_key_is_the_command_without_its_folder():
    key = config_key
    assert key("python -m suite run ddp --seed 1 --results a/b") == key("python -m suite run ddp --seed 1 --results /x")
    assert key("python -m suite run ddp --seed 1 --results a") != key("python -m suite run ddp --seed 2 --results a")
    assert key("python -m suite simulate a/est-1.json --topology T --write a") == key(
        "python -m suite simulate /elsewhere/est-1.json --topology T --write /elsewhere"
    )
    assert key("python -m suite simulate a/est-1.json --topology T") != key(
        "python -m suite simulate a/est-2.json --topology T"
    )
    assert key('python -m suite run "unbalanced') == ('python -m suite run "unbalanced',)


def test_a_plan_resumes_skipping_complete_records_and_rerunning_failed_ones(launched, tmp_path, capsys):
    launched.outcome["fsdp"] = "failed"
    first = reproduce.run_plan(_plan(), tmp_path)
    assert [r["status"] for r in first] == ["complete", "failed", "complete"]
    assert launched.launched == ["ddp", "fsdp"] and launched.existing == []  # one shared launch, nothing to resume
    failed_path = first[1]["_path"]
    capsys.readouterr()

    launched.outcome["fsdp"] = "complete"
    second = reproduce.run_plan(_plan(), tmp_path)
    err = capsys.readouterr().err
    assert launched.launched == ["ddp", "fsdp", "fsdp"]  # only the failed run ran again
    assert [r["status"] for r in second] == ["complete"] * 3
    assert f"skip [1/3] {first[0]['command']}: complete record {first[0]['_path']}" in err
    assert f"skip [3/3] {first[2]['command']}: complete record" in err
    # the seam for resuming from a checkpoint sees the failed record of the configuration it runs again
    assert [r["_path"] for r in launched.existing[-1]] == [failed_path]
    assert not Path(failed_path).exists()  # superseded by the complete one: one record per configuration
    assert {m: len(recs) for m, recs in _by_method(tmp_path).items()} == {"ddp": 1, "fsdp": 1, "matmul": 1}
    assert second[0] == {**read_record(first[0]["_path"]), "_path": first[0]["_path"]}  # the table shows skipped ones


def test_fresh_runs_everything_and_keeps_the_old_record_until_the_new_one_is_complete(launched, tmp_path):
    old = {r["method"]: r["_path"] for r in reproduce.run_plan(_plan(), tmp_path)}
    launched.outcome["fsdp"] = "failed"
    reproduce.run_plan(_plan(), tmp_path, fresh=True)
    assert launched.launched == ["ddp", "fsdp"] * 2
    by = _by_method(tmp_path)
    assert not Path(old["ddp"]).exists() and len(by["ddp"]) == 1  # replaced: the new one is complete
    assert not Path(old["matmul"]).exists() and len(by["matmul"]) == 1
    assert Path(old["fsdp"]).exists()  # the fresh fsdp run failed: the complete record stays beside its failure
    assert sorted(r["status"] for r in by["fsdp"]) == ["complete", "failed"]

    launched.outcome["fsdp"] = "complete"
    reproduce.run_plan(_plan(), tmp_path, fresh=True)
    by = _by_method(tmp_path)
    assert [r["status"] for r in by["fsdp"]] == ["complete"] and not Path(old["fsdp"]).exists()


def test_a_changed_default_or_item_is_not_done(launched, tmp_path):
    first = reproduce.run_plan(_plan(), tmp_path)
    rec = read_record(first[0]["_path"])
    rec["settings"]["lr"] = 1.0  # made when the default learning rate was another: the same command, not the same run
    write_record(rec, first[0]["_path"])
    resumed = read_record(first[1]["_path"])
    resumed["settings"]["resume"] = True  # completed by `run --resume`: the same configuration
    write_record(resumed, first[1]["_path"])
    reproduce.run_plan(_plan(shapes=({"n": 8}, {"n": 16})), tmp_path)
    assert launched.launched == ["ddp", "fsdp", "ddp"]
    by = _by_method(tmp_path)
    assert len(by["ddp"]) == 1 and by["ddp"][0]["settings"]["lr"] == RunConfig.lr
    assert [[row["shape"] for row in r["micro"]["rows"]] for r in by["matmul"]] == [[{"n": 8}, {"n": 16}]]


def test_an_interrupted_plan_keeps_what_it_wrote_and_records_the_interruption(launched, tmp_path):
    launched.outcome["fsdp"] = "interrupt"
    with pytest.raises(reproduce.Interrupted) as caught:
        reproduce.run_plan(_plan(), tmp_path)
    assert caught.value.signum == signal.SIGINT
    by = _by_method(tmp_path)
    assert [r["status"] for r in by["ddp"]] == ["complete"] and "matmul" not in by
    (stopped,) = by["fsdp"]
    assert stopped["status"] == "incomplete" and "interrupted by SIGINT" in stopped["error"]

    launched.outcome["fsdp"] = "complete"
    reproduce.run_plan(_plan(), tmp_path)
    assert launched.launched == ["ddp", "fsdp", "fsdp"]
    assert [r["status"] for r in _by_method(tmp_path)["fsdp"]] == ["complete"]


def test_two_complete_records_of_one_configuration_are_reported(launched, tmp_path, capsys):
    first = reproduce.run_plan(_plan(), tmp_path)
    copy = Path(first[0]["_path"]).with_name("copy.json")
    write_record({**read_record(first[0]["_path"]), "run_id": "copy"}, copy)  # sealed, as a second run writes it
    capsys.readouterr()
    reproduce.run_plan(_plan(), tmp_path)
    assert "2 complete records of one configuration" in capsys.readouterr().err


@pytest.mark.slow
def test_an_estimate_and_its_projections_resume(tmp_path, capsys):
    cfg = RunConfig(method="ddp", model="llama-tiny", nproc=1, micro_batch=2, seq_len=32, reproduction="demo")
    plan = Plan(
        "smoke", [], protocol="none", estimates=[Estimate(cfg, gpus_per_node=1, topologies=(A100,))], name="demo"
    )
    estimated, simulated = reproduce.run_plan(plan, tmp_path)
    Path(simulated["_path"]).unlink()
    capsys.readouterr()
    again = reproduce.run_plan(plan, tmp_path)
    err = capsys.readouterr().err
    assert again[0]["_path"] == estimated["_path"] and "skip [1/1] python -m suite estimate ddp" in err
    assert again[1]["simulation"]["source_run_id"] == estimated["run_id"]  # projected again from the kept estimate
    fresh = reproduce.run_plan(plan, tmp_path, fresh=True)
    records = load_records(tmp_path)[0]
    # the fresh estimate replaced the old one, and the old one's projection went with it
    assert sorted(r["run_id"] for r in records) == sorted(r["run_id"] for r in fresh)
    assert fresh[1]["simulation"]["source_run_id"] == fresh[0]["run_id"] != estimated["run_id"]


def test_a_diverged_run_is_finished_not_run_again(launched, tmp_path, capsys):
    launched.outcome["fsdp"] = "diverged"  # an lr at the top of a sweep: running it again diverges again
    first = reproduce.run_plan(_plan(), tmp_path)
    assert [r["status"] for r in first] == ["complete", "diverged", "complete"]
    capsys.readouterr()
    second = reproduce.run_plan(_plan(), tmp_path)
    assert launched.launched == ["ddp", "fsdp"]
    assert f"skip [2/3] {first[1]['command']}: diverged record {first[1]['_path']}" in capsys.readouterr().err
    (fsdp,) = [line for line in table(second).splitlines() if line.startswith("fsdp")]
    assert fsdp.endswith("diverged")
