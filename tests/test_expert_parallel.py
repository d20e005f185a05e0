"""Expert parallelism (baselines/ep.py) in real gloo runs at 2, 3 and 4 workers: the losses of one process on the
same global batch (16 sequences of 128 tokens, 15 at 3 workers; 3 steps), routing that conserves the routed rows,
the all_to_all bytes of the ledger equal to the count from the recorded loads, each rank's share of the experts
(at 3 workers 2, 3 and 3 of the 8: they do not spread evenly), and a one-line refusal of more ranks than experts."""

import pytest

from baselines.ep import expert_counts
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


def global_rows(nproc: int) -> int:
    """The global batch in sequences: ROWS, or the most below it that `nproc` replicas read in equal parts."""
    return ROWS // nproc * nproc


def _ep_args(nproc: int, *extra: str) -> tuple[str, ...]:
    rows, tokens = ["--set", f"micro_batch={ROWS // nproc}"], ["--tokens", str(STEPS * global_rows(nproc) * SEQ)]
    return ("ep", "--nproc", str(nproc), *rows, *tokens, *extra)


def _one_args(rows: int) -> tuple[str, ...]:
    return ("ddp", "--nproc", "1", "--set", f"micro_batch={rows}", "--tokens", str(STEPS * rows * SEQ))


@pytest.fixture(scope="module", autouse=True)
def _shared(moe_runs):
    """One launch per world size for the module's runs (tests/conftest.py, Runs.share)."""
    ep_runs = [_ep_args(n) for n in (2, 3, 4)] + [_ep_args(2, *e) for e in (("--ac",), ("--precision", "bf16"))]
    moe_runs.share([*ep_runs, *(_one_args(global_rows(n)) for n in (2, 3, 4))])


def ep(moe_runs, nproc: int, *extra: str) -> dict:
    return moe_runs(*_ep_args(nproc, *extra))


def one_process(moe_runs, rows: int = ROWS) -> dict:
    return moe_runs(*_one_args(rows))


def first_expert(nproc: int, rank: int) -> int:
    return sum(expert_counts(CFG.n_experts, nproc)[:rank])


def losses(record: dict) -> list[float]:
    return [p["train_loss"] for p in record["curve"]]


def ledger(record: dict, rank: int, op: str) -> float:
    rows = {o["op"]: o for o in record["comm"]["per_rank"][rank]["ops"]}
    return rows[op]["bytes"] / record["comm"]["steps"]


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_ep_trains_as_one_process_does(moe_runs, nproc):
    rows = global_rows(nproc)
    rec, ref = ep(moe_runs, nproc), one_process(moe_runs, rows)
    assert len(losses(rec)) == STEPS
    assert losses(rec) == pytest.approx(losses(ref), abs=1e-4)
    assert rec["parallel"]["data_replicas"] == nproc and rec["parallel"]["global_batch_tokens"] == rows * SEQ
    assert rec["parallel"]["experts_per_rank"] == expert_counts(CFG.n_experts, nproc)
    assert rec["parallel"]["total_params"] == TOTAL
    assert rec["parallel"]["active_params"] == active_params(CFG, TOTAL) < TOTAL


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_all_to_all_bytes_are_the_routed_rows(moe_runs, nproc):
    rec = ep(moe_runs, nproc)
    load = rec["experts"]["load_per_step"]
    assert len(load) == CFG.n_layers and all(len(block) == CFG.n_experts for block in load)
    assert all(sum(block) == CFG.top_k * global_rows(nproc) * SEQ for block in load)  # every token reaches k experts
    for rank, held in enumerate(expert_counts(CFG.n_experts, nproc)):
        # per block: the row counts (E int64 sent, this rank's experts' counts from every rank received), then rows
        # out and back, forward and backward; a call's payload is the larger of what it sends and what it receives
        counts = 8 * max(CFG.n_experts, nproc * held)
        expected = sum(counts + 4 * r * ROW_BYTES for r in routed(rec, nproc, rank))
        assert ledger(rec, rank, "all_to_all") == expected
        assert ledger(rec, rank, "all_reduce") == 4 * DENSE + 4  # replicated gradients, then the clip's norm
        state = rec["memory"]["per_rank"][rank]["state_params"]
        assert state == 4 * (DENSE + CFG.n_layers * held * expert_params(CFG))


def routed(record: dict, nproc: int, rank: int) -> list[int]:
    """Per block, the larger of the rows rank `rank` sends to and receives from the experts' ranks per step."""
    first, held = first_expert(nproc, rank), expert_counts(CFG.n_experts, nproc)[rank]
    sent = CFG.top_k * (ROWS // nproc) * SEQ  # each rank's routed copies of its own tokens
    load = record["experts"]["load_per_step"]
    return [max(sent, sum(block[first : first + held])) for block in load]


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


def test_more_ranks_than_experts_are_refused_in_one_line(tmp_path):
    # --over-limits: 9 workers are more than this machine allows, a refusal that comes first
    args = ["run", "ep", "--model", MODEL, "--nproc", "9", "--over-limits", "--tokens", "1000"]
    proc = run_cli([*args, "--results", str(tmp_path)])
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "8 experts cannot give each of 9 ranks one; use a --nproc of at most 8" in proc.stderr
    dense = run_cli(["run", "ep", "--nproc", "2", "--tokens", "1000", "--results", str(tmp_path)])
    assert dense.returncode == 2 and "use --model llama-tiny-moe" in dense.stderr
