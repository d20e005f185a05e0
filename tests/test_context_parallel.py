"""Context parallelism (baselines/cp.py) in real gloo runs at 2 and 4 workers: DDP's losses (which are one
process's, tests/test_harness_runs.py) on the same global batch of 16 sequences of 128 tokens, the keys and values
of every block gathered and their gradients reduce-scattered, the whole model on every rank, and a sequence that
cannot be split evenly refused in one line. Gradients: tests/test_sequence_expert_grads.py."""

import pytest

from suite import models

from .conftest import run_cli

pytestmark = pytest.mark.slow

ROWS, SEQ = 16, 128
CFG = models.model_config("llama-tiny")
P = models.num_params(models.build_model("llama-tiny"))
KV = ROWS * SEQ * CFG["n_kv_heads"] * (CFG["dim"] // CFG["n_heads"]) * 4  # one block's keys (or values), fp32


DDP = ("ddp", "--nproc", "2", "--tokens", str(3 * ROWS * SEQ))  # test_harness_runs.py's and others': launched once


def cp(runs, nproc: int, *extra: str) -> dict:
    return runs(*_cp_args(nproc, *extra))


def ddp(runs) -> dict:
    return runs(*DDP)


def _cp_args(nproc: int, *extra: str) -> tuple[str, ...]:
    return ("cp", "--nproc", str(nproc), "--set", f"micro_batch={ROWS}", "--tokens", str(3 * ROWS * SEQ), *extra)


@pytest.fixture(scope="module", autouse=True)
def _shared(runs):
    """One launch per world size for the module's runs (tests/conftest.py, Runs.share)."""
    extras = ((), ("--ac",), ("--precision", "bf16"))
    runs.share([*(_cp_args(2, *e) for e in extras), _cp_args(4), DDP])


def per_step(record: dict, rank: int, op: str) -> float:
    rows = {o["op"]: o for o in record["comm"]["per_rank"][rank]["ops"]}
    return rows[op]["bytes"] / record["comm"]["steps"]


@pytest.mark.parametrize("nproc", [2, 4])
def test_cp_trains_as_one_process_and_gathers_keys_and_values(runs, nproc):
    rec = cp(runs, nproc)
    assert [p["train_loss"] for p in rec["curve"]] == pytest.approx(
        [p["train_loss"] for p in ddp(runs)["curve"]], abs=1e-4
    )
    assert rec["parallel"]["data_replicas"] == 1 and rec["parallel"]["global_batch_tokens"] == ROWS * SEQ
    assert rec["parallel"]["chunk_tokens"] == SEQ // nproc
    L = CFG["n_layers"]
    for rank in range(nproc):
        assert per_step(rec, rank, "all_gather") == 2 * L * KV  # keys and values of the whole sequence
        assert per_step(rec, rank, "reduce_scatter") == 2 * L * KV  # their gradients, back to the chunks' owners
        assert per_step(rec, rank, "all_reduce") == 4 * P  # the replicated parameters' gradients
        assert rec["memory"]["per_rank"][rank]["state_params"] == 4 * P


def losses(record: dict) -> list[float]:
    return [p["train_loss"] for p in record["curve"]]


def test_ac_gathers_keys_and_values_again_in_the_recomputation(runs):
    rec, ref = cp(runs, 2, "--ac"), cp(runs, 2)
    assert losses(rec) == pytest.approx(losses(ref), abs=1e-5)
    L = CFG["n_layers"]
    for rank in range(2):
        assert per_step(rec, rank, "all_gather") == 2 * 2 * L * KV  # forward, then the recomputation's
        assert per_step(rec, rank, "reduce_scatter") == 2 * L * KV
        assert per_step(rec, rank, "all_reduce") == 4 * P


def test_bf16_learns_as_fp32_does_and_gathers_half_the_bytes(runs):
    rec, ref = cp(runs, 2, "--precision", "bf16"), cp(runs, 2)
    assert losses(rec) != losses(ref)  # it does round
    assert losses(rec) == pytest.approx(losses(ref), abs=0.05)
    L = CFG["n_layers"]
    for rank in range(2):
        assert per_step(rec, rank, "all_gather") == L * KV  # keys and values in bf16
        assert per_step(rec, rank, "reduce_scatter") == L * KV
        assert per_step(rec, rank, "all_reduce") == 4 * P  # fp32 master gradients


def test_a_sequence_that_does_not_split_evenly_is_refused_in_one_line(tmp_path):
    proc = run_cli(["run", "cp", "--nproc", "3", "--tokens", "1000", "--results", str(tmp_path)])
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "seq_len 128 cannot be split into 3 equal chunks; use --set seq_len=126" in proc.stderr
