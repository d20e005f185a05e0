"""Killed workers, torchrun restarts, hung collectives and hostile checkpoints, with real processes on gloo."""

from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.cli import main
from suite.records import read_record, write_record
from suite.run.checkpoint import CheckpointError, _SafeReader, read_loop
from tests.conftest import ROOT, run_cli

# 8 steps of 2 x 32-token sequences per worker, a checkpoint every 3 steps. Without the meters: these tests check
# what happens to the run (its losses, record, checkpoints, timings of recovery), none of what the meters measure,
# and the FLOP-counted and memory-tracked steps cost a tiny run about as much as all its other steps
SMALL = ["--no-meters", "--model", "llama-tiny", "--set", "seq_len=32", "--set", "micro_batch=2"]
SMALL += ["--set", "log_every=1"]
SMALL += ["--set", "eval_every=4", "--set", "eval_batches=2", "--checkpoint-every", "3"]


def _run(tmp: Path, name: str, world: int, *extra: str, timeout: float = 300) -> tuple[dict, float, str]:
    """A run's record, the launcher's wall time and its stderr."""
    start = time.perf_counter()
    proc = run_cli(
        ["run", "ddp", "--nproc", str(world), "--tokens", str(8 * 64 * world), *SMALL, *extra]
        + ["--results", str(tmp / name), "--set", f"checkpoint_dir={tmp / 'checkpoints'}"],
        timeout=timeout,
    )
    path = proc.stdout.strip().splitlines()[-1]
    return read_record(path) | {"_path": path}, time.perf_counter() - start, proc.stderr


def _losses(rec: dict) -> list[tuple]:
    return [(p["step"], p["train_loss"], p["val_loss"]) for p in rec["curve"]]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> dict:
    """The uninterrupted 2-worker run the resumed ones are compared with."""
    return _run(tmp_path_factory.mktemp("whole"), "whole", 2)[0]


@pytest.mark.slow
def test_max_restarts_resumes_a_killed_four_worker_run_and_times_its_recovery(tmp_path):
    rec, _, err = _run(tmp_path, "restarted", 4, "--kill-rank", "2", "--at-step", "5", "--max-restarts", "1")
    assert rec["status"] == "complete", rec["error"]
    assert "fault injection: worker 2 killed at step 5" in err
    resume = rec["faults"]["resumes"][0]
    assert resume["how"] == "torchrun restart" and resume["attempt"] == 1 and resume["from_step"] == 3
    assert 0 < resume["restart_s"] < resume["recovery_s"]
    assert [p["step"] for p in rec["curve"]] == list(range(1, 9))


@pytest.mark.slow
def test_a_hung_worker_fails_the_run_within_the_collective_timeout(tmp_path):
    rec, seconds, _ = _run(tmp_path, "hung", 2, "--hang-rank", "1", "--at-step", "5", "--collective-timeout", "5")
    assert rec["status"] == "incomplete"  # a checkpoint at step 3 can resume it
    assert "collective_timeout_s=5" in rec["error"] and "stopped answering" in rec["error"]
    assert rec["settings"]["collective_timeout_s"] == 5 and rec["faults"]["collective_timeout_s"] == 5
    assert seconds < 120


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--kill-rank", "1"], "both --kill-rank"),
        (["--kill-rank", "2", "--at-step", "1"], "0..1"),
        (["--kill-rank", "0", "--hang-rank", "1", "--at-step", "1"], "not both"),
        (["--checkpoint-every", "-1"], "0 (off) or more"),
        (["--collective-timeout", "0"], "positive"),
    ],
)
def test_bad_fault_flags_are_one_line_errors(tmp_path, capsys, flags, message):
    code, err = _main(capsys, "run", "ddp", "--nproc", "2", "--tokens", "100", *flags, "--results", str(tmp_path))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def _main(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_resume_refuses_what_it_cannot_resume(tmp_path, capsys):
    code, err = _main(capsys, "run", "--resume", str(tmp_path / "missing.json"))
    assert code == 2 and "no record at" in err
    (tmp_path / "bad.json").write_text("{not json")
    code, err = _main(capsys, "run", "--resume", str(tmp_path / "bad.json"))
    assert code == 2 and "not valid JSON" in err
    code, err = _main(capsys, "run", "ddp", "--resume", str(tmp_path / "bad.json"))
    assert code == 2 and "the record alone" in err


def test_resume_of_a_complete_or_uncheckpointed_run_names_the_fix(tmp_path, capsys):
    measured = (read_record(p) | {"_path": p} for p in sorted((ROOT / "results/sdp-smoke").glob("*.json")))
    record = next(r for r in measured if r["status"] == "complete" and r["provenance"] == "measured")
    code, err = _main(capsys, "run", "--resume", str(record["_path"]))
    assert code == 2 and "is complete" in err
    rec = {k: v for k, v in record.items() if k != "_path"}
    rec["status"], rec["run_id"] = "incomplete", "never-checkpointed"
    rec["settings"]["checkpoint_dir"] = str(tmp_path)
    write_record(rec, tmp_path / "r.json")  # as the suite writes an interrupted run's record
    code, err = _main(capsys, "run", "--resume", str(tmp_path / "r.json"))
    assert code == 2 and "run it again" in err


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_hostile_checkpoint_metadata_runs_no_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".metadata").write_bytes(pickle.dumps(_Boom()))
    with pytest.raises(CheckpointError, match="os.system|posix.system"):
        _SafeReader(tmp_path).read_metadata()
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("blob", [b"", b"\x80\x04", b"not a pickle", pickle.dumps({"a": 1})[:-3]])
def test_broken_checkpoint_metadata_is_a_checkpoint_error(tmp_path, blob):
    (tmp_path / ".metadata").write_bytes(blob)
    with pytest.raises(CheckpointError, match="unreadable checkpoint metadata"):
        _SafeReader(tmp_path).read_metadata()


@pytest.mark.parametrize(
    "text,message",
    [
        ("{", "not valid JSON"),
        ("[]", "not a checkpoint's loop state"),
        ('{"step": 3, "world_size": 4, "ranks": [{}, {}, {}, {}]}', "resumes with 4 workers only"),
    ],
)
def test_broken_loop_state_is_a_checkpoint_error(tmp_path, text, message):
    (tmp_path / "loop.json").write_text(text)
    with pytest.raises(CheckpointError, match=message):
        read_loop(tmp_path, world=2)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(blob=st.binary(max_size=300))
def test_fuzzed_checkpoint_metadata_only_ever_raises_checkpoint_error(tmp_path_factory, blob):
    folder = tmp_path_factory.mktemp("meta")
    (folder / ".metadata").write_bytes(blob)
    with pytest.raises(CheckpointError):
        _SafeReader(folder).read_metadata()


@settings(max_examples=60, deadline=None)
@given(value=JSON)
def test_fuzzed_loop_state_only_ever_raises_checkpoint_error(tmp_path_factory, value):
    folder = tmp_path_factory.mktemp("loop")
    (folder / "loop.json").write_text(json.dumps(value))
    with pytest.raises(CheckpointError):
        read_loop(folder, world=2)


@pytest.mark.slow
def test_a_plan_run_again_resumes_its_killed_run_from_the_checkpoint(tmp_path):
    results = tmp_path / "results"
    args = ["reproduce", "test-plan", "--preset", "killed", "--results", str(results), "--report", str(tmp_path)]
    env = {"SUITE_REPRODUCTIONS": "tests.tiny_plan", "TEST_CHECKPOINT_DIR": str(tmp_path / "checkpoints")}
    first = run_cli([*args, "--checkpoint-every", "3"], env=env)
    assert first.returncode == 1
    (path,) = results.glob("*.json")
    assert read_record(path)["status"] == "incomplete"
    second = run_cli([*args, "--checkpoint-every", "3"], env=env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"resume {path}" in second.stderr
    (again,) = results.glob("*.json")
    done = read_record(again)
    assert again == path and done["status"] == "complete"
    assert done["faults"]["resumes"][0]["from_step"] == 3 and [p["step"] for p in done["curve"]][-1] == 8


@pytest.mark.slow
def test_a_run_whose_loss_becomes_non_finite_ends_cleanly_as_diverged(tmp_path):
    # lr=100 on llama-tiny: the loss goes 5.5, thousands, then nan (within 6 steps on this stack)
    proc = run_cli(
        ["run", "ddp", "--nproc", "2", "--tokens", "5000", *SMALL[:-2], "--set", "lr=100", "--set", "warmup_steps=0"]
        + ["--results", str(tmp_path)]
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    rec = read_record(proc.stdout.strip().splitlines()[-1])
    assert rec["status"] == "diverged" and "non-finite at step" in rec["error"], rec["error"]
    last = rec["curve"][-1]
    assert last["train_loss"] is None and rec["totals"]["steps"] == last["step"] < 5000 // 128
    assert all(p["train_loss"] is not None for p in rec["curve"][:-1])  # the curve up to there


@pytest.mark.slow
def test_a_killed_worker_leaves_a_resumable_record_and_a_damaged_newest_checkpoint_is_skipped_bit_for_bit(
    tmp_path, whole
):
    """Two tests once, each a killed run and its resume; one killed run now serves both: the record a killed worker
    leaves, and a resume that refuses the damaged newest checkpoint and continues from the one before, equal to the
    uninterrupted run (worker 1 killed and resumed from its newest checkpoint: the plan test below)."""
    # worker 0, which writes the record, dies at step 5 (a killed run as long as the first of the two tests');
    # checkpoints at steps 2 and 4 (the last --checkpoint-every given wins)
    killed, seconds, _ = _run(tmp_path, "killed", 2, "--checkpoint-every", "2", "--kill-rank", "0", "--at-step", "5")
    assert killed["status"] == "incomplete"
    assert "worker 0 was killed by SIGKILL" in killed["error"] and "--resume" in killed["error"]
    # issue 46: an interrupted record once said totals.steps 0 beside a curve of many steps
    assert (killed["totals"]["steps"], killed["totals"]["tokens"]) == (
        killed["curve"][-1]["step"],
        killed["curve"][-1]["tokens"],
    )
    assert seconds < 120  # the launcher stopped the other worker: no hang
    folder = tmp_path / "checkpoints" / killed["run_id"]
    shard = sorted((folder / "step-000004").glob("*.distcp"))[-1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 16] = bytes(16)  # 16 bytes inside a rank's tensors
    shard.write_bytes(bytes(data))
    proc = run_cli(["run", "--resume", killed["_path"]])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"refused checkpoint step-000004: {shard.name} differs" in proc.stderr
    assert "resuming from the previous intact checkpoint, step-000002" in proc.stderr
    done = read_record(killed["_path"])
    assert done["status"] == "complete" and done["error"] is None
    assert _losses(done) == _losses(whole)  # `whole` checkpoints every 3 steps: checkpoints change no loss
    resume = done["faults"]["resumes"][0]
    assert resume["from_step"] == 2 and resume["failure"]["rank"] == 0 and resume["lost_steps"] == 3
    assert resume["recovery_s"] > 0
    assert "step-000004" in resume["refused_checkpoints"][0]
