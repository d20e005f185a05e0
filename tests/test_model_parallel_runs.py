"""Real gloo runs of ZeRO-1, tensor and pipeline parallelism, fp16 and fp8 (issue 29): trajectories equal to
DDP's (which equals one process, tests/test_harness_runs.py), tokens per step, and memory and bytes against
their analytic values at 2 and 4 workers. The DDP runs are test_harness_runs.py's (each distinct command launches
once per session); the others share one launch per world size (tests/conftest.py: SharedRuns).

Every arm trains a global batch of 16 sequences of 128 tokens for 3 steps, so that its losses compare with
`ddp --nproc 2`'s; the meters' window is step 2.
"""

import math

import pytest

from baselines.pp import VIRTUAL, local_stage_ids, stage_bounds
from suite import models
from tests.conftest import SharedRuns

pytestmark = pytest.mark.slow

TOKENS = ["--tokens", "6144"]  # 3 steps of 2,048 tokens
ROWS, SEQ = 16, 128  # global batch of every arm, in sequences and tokens per sequence
CFG = models.model_config("llama-tiny")
ACT = ROWS * SEQ * CFG["dim"] * 4  # one fp32 activation of the whole batch, bytes


def ddp(runs, nproc: int = 2) -> dict:
    """The DDP runs of test_harness_runs.py (the same commands, so launched once)."""
    return runs("ddp", "--nproc", str(nproc), "--tokens", str(3 * nproc * 8 * 128))


def zero1(nproc: int) -> tuple[str, ...]:
    return ("zero1", "--nproc", str(nproc), "--tokens", str(3 * nproc * 8 * 128))


def tp(nproc: int) -> tuple[str, ...]:
    sp = ("--set", "sequence_parallel=true") if nproc == 4 else ()
    return ("tp", "--nproc", str(nproc), "--set", f"micro_batch={ROWS}", *sp, *TOKENS)


def pp(nproc: int, schedule: str, microbatches: int | None = None) -> tuple[str, ...]:
    # a 4th step: the bubble is measured on the step after the other meters'
    steps4 = ("--tokens", str(4 * ROWS * SEQ))
    m = ("--set", f"microbatches={microbatches}") if microbatches else ()
    return ("pp", "--nproc", str(nproc), "--set", f"micro_batch={ROWS}", "--set", f"schedule={schedule}", *m, *steps4)


def precision(name: str) -> tuple[str, ...]:
    return ("ddp", "--nproc", "2", "--precision", name, *TOKENS)


def composition(method: str) -> tuple[str, ...]:
    return (method, "--nproc", "4", "--set", f"micro_batch={ROWS // 2}", *TOKENS)


ZERO1 = [2, 3, 4]  # 3: parameters that do not split evenly
TP = [2, 4]
# 3 ranks: 4 blocks over 3 stages (1, 1, 2) and 4 microbatches, since 16 rows do not split into 3
PP = [(2, "gpipe", None), (4, "1f1b", None), (3, "1f1b", 4), (2, "interleaved", None)]
COMPOSITIONS = ["fsdp-tp", "pp-fsdp"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> SharedRuns:
    """Every run but DDP's, in one launch per world size (the precisions last in theirs)."""
    commands = [zero1(n) for n in ZERO1] + [tp(n) for n in TP] + [pp(*case) for case in PP]
    commands += [composition(m) for m in COMPOSITIONS] + [precision("fp16"), precision("fp8")]
    return SharedRuns(tmp_path_factory.mktemp("shared"), commands)


def ops(record: dict, rank: int = 0) -> dict[tuple[str, str], dict]:
    return {(o["op"], o["group"]): o for o in record["comm"]["per_rank"][rank]["ops"]}


def per_step(record: dict, op: str, group: str, rank: int = 0) -> float:
    return ops(record, rank)[(op, group)]["bytes"] / record["comm"]["steps"]


def losses(record: dict) -> list[float]:
    return [p["train_loss"] for p in record["curve"]]


def params() -> dict[str, int]:
    model = models.build_model("llama-tiny")
    return {name: p.numel() for name, p in model.named_parameters()}


P = sum(params().values())
NORMS = sum(n for name, n in params().items() if "norm" in name)


@pytest.mark.parametrize("nproc", ZERO1)
def test_zero1_trajectory_is_ddps_with_one_nth_of_the_optimizer_state(runs, shared, nproc):
    z, d = shared(*zero1(nproc)), ddp(runs, nproc)
    assert losses(z) == pytest.approx(losses(d), abs=1e-5)
    assert z["parallel"]["global_batch_tokens"] == d["parallel"]["global_batch_tokens"] == nproc * 8 * 128
    tensors = len(params())
    full = 8 * P + 4 * tensors  # AdamW's two moments and one 4-byte step per tensor
    assert d["memory"]["per_rank"][0]["state_optimizer"] == full
    shards = [r["state_optimizer"] for r in z["memory"]["per_rank"]]
    assert sum(shards) == full  # every parameter's state on exactly one rank
    assert max(shards) <= 1.15 * full / nproc  # ZeRO's greedy partition by size is near even
    for rank in range(nproc):
        assert per_step(z, "all_reduce", "replicate", rank) == 4 * P  # DDP's gradient all-reduce
        assert per_step(z, "broadcast", "replicate", rank) == 4 * P  # each updated parameter from its owner


@pytest.mark.parametrize("nproc", TP)
def test_tp_matches_ddp_holds_one_tth_and_exchanges_activations(runs, shared, nproc):
    t, d = shared(*tp(nproc)), ddp(runs)
    assert losses(t) == pytest.approx(losses(d), abs=1e-4)
    assert t["parallel"]["data_replicas"] == 1 and t["parallel"]["global_batch_tokens"] == ROWS * SEQ
    for rank in range(nproc):
        mem = t["memory"]["per_rank"][rank]
        assert mem["state_params"] == 4 * ((P - NORMS) // nproc + NORMS)  # matrices and tables split, norms not
        L = CFG["n_layers"]
        if nproc == 2:  # Megatron: per block one all-reduce each way for attention and MLP; embedding, head
            assert per_step(t, "all_reduce", "tp", rank) == pytest.approx((4 * L + 2) * ACT, abs=4096)
            assert per_step(t, "all_gather", "tp", rank) == ROWS * SEQ * CFG["vocab_size"] * 4  # logits
        else:  # sequence parallel: each all-reduce becomes an all-gather and a reduce-scatter, logits stay sharded
            assert per_step(t, "all_gather", "tp", rank) == pytest.approx((4 * L + 2) * ACT, abs=4096)
            assert per_step(t, "reduce_scatter", "tp", rank) == pytest.approx((4 * L + 2) * ACT, abs=4096)


@pytest.mark.parametrize(("nproc", "schedule", "microbatches"), PP)
def test_pp_matches_ddp_holds_its_stage_and_sends_activations(runs, shared, nproc, schedule, microbatches):
    p, d = shared(*pp(nproc, schedule, microbatches)), ddp(runs)
    assert losses(p)[:3] == pytest.approx(losses(d), abs=1e-4)
    assert p["parallel"]["data_replicas"] == 1 and p["parallel"]["global_batch_tokens"] == ROWS * SEQ
    V = VIRTUAL[schedule]
    assert p["parallel"]["virtual_stages"] == V
    sizes = params()
    L, S = CFG["n_layers"], nproc * V
    for rank in range(nproc):
        mine, boundaries = 0, 0
        for s in local_stage_ids(rank, nproc, V):
            lo, hi = stage_bounds(L, S, s)
            mine += sum(n for name, n in sizes.items() if any(name.startswith(f"layers.{i}.") for i in range(lo, hi)))
            mine += sizes["tok_embeddings.weight"] if s == 0 else 0
            mine += sizes["norm.weight"] + sizes["output.weight"] if s == S - 1 else 0
            boundaries += (s < S - 1) + (s > 0)
        assert p["memory"]["per_rank"][rank]["state_params"] == 4 * mine
        led = ops(p, rank)
        sent = led.get(("send", "pp"), {"bytes": 0})["bytes"] / p["comm"]["steps"]
        # each stage's activations forward to the next stage, their gradients back to the one before
        assert sent == ACT * boundaries
    bubble = p["pipeline"]
    M = microbatches or nproc
    assert bubble["bubble_analytic"] == pytest.approx((nproc - 1) / (V * M + nproc - 1))
    assert len(bubble["per_rank"]) == nproc and all(0 < r["bubble"] < 1 for r in bubble["per_rank"])
    assert 0 < bubble["bubble_measured"] < 1


def test_fp16_scales_the_loss_and_counts_skipped_steps(runs, shared):
    rec = shared(*precision("fp16"))
    scale = rec["precision"]["loss_scale"]
    # no growth within 2,000 steps: the scale falls from 2**16 by one halving per skipped step
    assert scale == 2.0 ** (16 - rec["precision"]["skipped_steps"])
    assert rec["curve"][0]["train_loss"] == pytest.approx(ddp(runs)["curve"][0]["train_loss"], abs=0.05)


def test_fp8_is_labelled_numerics_only_and_learns(runs, shared):
    rec = shared(*precision("fp8"))
    assert "numerics only, not speed" in rec["parallel"]["precision_note"]
    ref = losses(ddp(runs))
    assert losses(rec) != ref  # it does round
    assert losses(rec) == pytest.approx(ref, abs=0.05)


def test_compositions_at_4_workers(runs, shared):
    d = ddp(runs)
    for method in COMPOSITIONS:
        rec = shared(*composition(method))
        assert rec["parallel"]["data_replicas"] == 2 and rec["parallel"]["global_batch_tokens"] == ROWS * SEQ
        assert losses(rec) == pytest.approx(losses(d), abs=1e-4), method
        state = sum(r["state_params"] for r in rec["memory"]["per_rank"])
        assert state == pytest.approx(4 * P, rel=0.02)  # each parameter once, padding aside
    assert math.isfinite(d["curve"][-1]["train_loss"])


def test_fsdp_tp_prints_no_library_warning_a_user_cannot_act_on(runs):
    """Issue 45 item 6: FSDP2's view-tensor warning and DTensor's two-all-reduce advice, understood and filtered by
    name (baselines/compose.py says why), no longer sit between the main job's progress lines."""
    rec = runs("fsdp-tp", "--nproc", "4", "--tokens", "512", "--set", "micro_batch=2", "--set", "seq_len=64")
    assert "returned a view tensor" not in rec["_stderr"] and "sequential all_reduce" not in rec["_stderr"]
