"""Expert parallelism (baselines/ep.py) in real gloo runs at 2 and 4 workers: the losses of one process on the
same global batch (16 sequences of 128 tokens, 3 steps), routing that conserves the routed rows, the
all_to_all bytes of the ledger equal to the count from the recorded loads, each rank's share of the experts,
and a one-line refusal of experts that do not spread evenly."""

import pytest

from suite import models
from suite.models.moe import MoeConfig, active_params, expert_params

from .conftest import TINY, Runs, run_cli

pytestmark = pytest.mark.slow

MODEL = "llama-tiny-moe"
ROWS, SEQ, STEPS = 16, 128, 3
CFG = MoeConfig(**models.model_config(MODEL))
TOTAL = models.num_params(models.build_model(MODEL))
DENSE = TOTAL - CFG.n_layers * CFG.n_experts * expert_params(CFG)  # everything but the experts
ROW_BYTES = CFG.dim * 4  # one routed fp32 row


@pytest.fixture(scope="module")
def moe_runs(tmp_path_factory) -> Runs:
    return Runs(tmp_path_factory.mktemp("moe"), tail=[*TINY, "--model", MODEL])


def ep(moe_runs, nproc: int, *extra: str) -> dict:
    rows, tokens = ["--set", f"micro_batch={ROWS // nproc}"], ["--tokens", str(STEPS * ROWS * SEQ)]
    return moe_runs("ep", "--nproc", str(nproc), *rows, *tokens, *extra)


def one_process(moe_runs) -> dict:
    return moe_runs("ddp", "--nproc", "1", "--set", f"micro_batch={ROWS}", "--tokens", str(STEPS * ROWS * SEQ))


def losses(record: dict) -> list[float]:
    return [p["train_loss"] for p in record["curve"]]


def ledger(record: dict, rank: int, op: str) -> float:
    rows = {o["op"]: o for o in record["comm"]["per_rank"][rank]["ops"]}
    return rows[op]["bytes"] / record["comm"]["steps"]


@pytest.mark.parametrize("nproc", [2, 4])
def test_ep_trains_as_one_process_does(moe_runs, nproc):
    rec, ref = ep(moe_runs, nproc), one_process(moe_runs)
    assert len(losses(rec)) == STEPS
    assert losses(rec) == pytest.approx(losses(ref), abs=1e-4)
    assert rec["parallel"]["data_replicas"] == nproc and rec["parallel"]["global_batch_tokens"] == ROWS * SEQ
    assert rec["parallel"]["total_params"] == TOTAL
    assert rec["parallel"]["active_params"] == active_params(CFG, TOTAL) < TOTAL


@pytest.mark.parametrize("nproc", [2, 4])
def test_all_to_all_bytes_are_the_routed_rows(moe_runs, nproc):
    rec = ep(moe_runs, nproc)
    load = rec["experts"]["load_per_step"]
    assert len(load) == CFG.n_layers and all(len(block) == CFG.n_experts for block in load)
    assert all(sum(block) == CFG.top_k * ROWS * SEQ for block in load)  # every token reaches k experts
    per_rank = CFG.n_experts // nproc
    sent = CFG.top_k * ROWS // nproc * SEQ  # each rank's routed copies of its own tokens
    for rank in range(nproc):
        received = [sum(block[rank * per_rank : (rank + 1) * per_rank]) for block in load]
        # per block: the row counts (E int64 each way), then rows out and back, forward and backward; a call's
        # payload is the larger of what it sends and what it receives
        expected = sum(8 * CFG.n_experts + 4 * max(sent, r) * ROW_BYTES for r in received)
        assert ledger(rec, rank, "all_to_all") == expected
        assert ledger(rec, rank, "all_reduce") == 4 * DENSE + 4  # replicated gradients, then the clip's norm
        state = rec["memory"]["per_rank"][rank]["state_params"]
        assert state == 4 * (DENSE + CFG.n_layers * per_rank * expert_params(CFG))


def routed(record: dict, nproc: int, rank: int) -> list[int]:
    """Per block, the larger of the rows rank `rank` sends to and receives from the experts' ranks per step."""
    per_rank = CFG.n_experts // nproc
    sent = CFG.top_k * ROWS // nproc * SEQ
    load = record["experts"]["load_per_step"]
    return [max(sent, sum(block[rank * per_rank : (rank + 1) * per_rank])) for block in load]


def test_ac_repeats_the_forward_exchanges_but_not_the_load(moe_runs):
    rec, ref = ep(moe_runs, 2, "--ac"), ep(moe_runs, 2)
    assert losses(rec) == pytest.approx(losses(ref), abs=1e-5)
    assert rec["experts"]["load_per_step"] == ref["experts"]["load_per_step"]  # recomputation routes nothing new
    for rank in range(2):
        # per block the forward's counts and rows out and back once more, in the recomputation
        extra = sum(8 * CFG.n_experts + 2 * r * ROW_BYTES for r in routed(ref, 2, rank))
        assert ledger(rec, rank, "all_to_all") == ledger(ref, rank, "all_to_all") + extra


def test_bf16_learns_as_fp32_does_and_returns_expert_outputs_in_bf16(moe_runs):
    rec, ref = ep(moe_runs, 2, "--precision", "bf16"), ep(moe_runs, 2)
    assert losses(rec) != losses(ref)  # it does round
    assert losses(rec) == pytest.approx(losses(ref), abs=0.05)
    for rank in range(2):
        # the routed rows leave in fp32 (RMSNorm's output under autocast), the experts' outputs return in bf16;
        # their gradients travel back the same ways
        expected = sum(8 * CFG.n_experts + 2 * r * (ROW_BYTES + ROW_BYTES // 2) for r in routed(rec, 2, rank))
        assert ledger(rec, rank, "all_to_all") == expected


def test_experts_that_do_not_spread_evenly_are_refused_in_one_line(tmp_path):
    proc = run_cli(["run", "ep", "--model", MODEL, "--nproc", "3", "--tokens", "1000", "--results", str(tmp_path)])
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "8 experts cannot be spread evenly over 3 ranks; use a --nproc that divides 8" in proc.stderr
    dense = run_cli(["run", "ep", "--nproc", "2", "--tokens", "1000", "--results", str(tmp_path)])
    assert dense.returncode == 2 and "use --model llama-tiny-moe" in dense.stderr
