"""Real runs on gloo through the command line: bytes, memory, FLOPs, equality, budgets, failures.

Each distinct command launches once per session (tests/conftest.py); the checks share the records.
"""

import math
import os
import socket
import subprocess
import sys
from collections import Counter

import pytest

from baselines.muon import matrix_groups
from suite import models
from suite.config import RunConfig
from suite.meters.flops import transformer_step_flops
from suite.meters.memory import CATEGORIES
from suite.records import read_record

from .conftest import MUON_MODEL, ROOT, TINY, UNMODELLED, SharedRuns

pytestmark = pytest.mark.slow

STEPS3 = ["--tokens", "6144"]  # 3 steps of 2,048 tokens at 2 ranks (the meters' window starts on step 2)


def steps3(nproc: int) -> list[str]:
    """Three steps of 8 sequences of 128 tokens per rank."""
    return ["--tokens", str(3 * nproc * 8 * 128)]


BF16_SMALL = ["--tokens", "768", "--set", "micro_batch=2", "--set", "seq_len=64"]  # 3 steps: the ledger's is step 2
# every command below but those whose test reads the launch itself (its stderr, an environment of its own)
SHARED = [
    *(("ddp", "--nproc", str(n), *steps3(n)) for n in (2, 3, 4)),
    *(("fsdp", "--nproc", str(n), *steps3(n)) for n in (2, 3, 4)),
    ("hsdp", "--nproc", "4", "--set", "micro_batch=4", *STEPS3),
    *((m, "--nproc", "2", "--ac", *STEPS3) for m in ("ddp", "fsdp")),
    *((m, "--nproc", "2", "--precision", "bf16", *BF16_SMALL) for m in ("ddp", "fsdp")),
    ("ddp", "--nproc", "2", "--flops", "1e11"),
    ("ddp", "--nproc", "2", "--time", "3"),
    ("ddp", "--nproc", "2", "--target", "9.0", "--max-tokens", "20000"),
]


# the matrix optimizers' runs, on the narrower model whose Newton-Schulz a CPU without bf16 kernels runs in time
OPTIMIZED = {
    name: ("ddp", "--nproc", "2", *MUON_MODEL, *sets, *STEPS3)
    for name, sets in {
        "adamw": (),
        "muon": ("--optimizer", "muon"),
        "dion": ("--optimizer", "dion"),
        "layerwise": ("--optimizer", "muon", "--set", "layerwise=true"),
    }.items()
}


@pytest.fixture(scope="module", autouse=True)
def _shared(runs):
    """One launch per world size for the module's runs (tests/conftest.py, Runs.share)."""
    runs.share(SHARED)


@pytest.fixture(scope="module")
def optimized(tmp_path_factory) -> SharedRuns:
    return SharedRuns(tmp_path_factory.mktemp("optimized"), list(OPTIMIZED.values()), tail=UNMODELLED)


def ops(record: dict, rank: int = 0) -> dict[tuple[str, str], dict]:
    return {(o["op"], o["group"]): o for o in record["comm"]["per_rank"][rank]["ops"]}


def param_shapes() -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in models.build_model("llama-tiny").parameters()]


def padded_numel(shape: tuple[int, ...], n: int) -> int:
    """FSDP2 shards dim 0 and pads it to a multiple of the group size."""
    rest = math.prod(shape[1:])
    return math.ceil(shape[0] / n) * n * rest


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_ddp_all_reduces_every_gradient_once_per_step(runs, nproc):
    rec = runs("ddp", "--nproc", str(nproc), *steps3(nproc))
    steps = rec["comm"]["steps"]
    param_bytes = 4 * sum(math.prod(s) for s in param_shapes())
    for rank in range(nproc):
        ar = ops(rec, rank)[("all_reduce", "replicate")]
        assert ar["bytes"] == steps * param_bytes
        assert ar["group_size"] == nproc
        assert ar["wire_bytes"] == pytest.approx(2 * (nproc - 1) / nproc * steps * param_bytes)


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_fsdp_gathers_twice_and_reduce_scatters_once(runs, nproc):
    rec = runs("fsdp", "--nproc", str(nproc), *steps3(nproc))
    steps = rec["comm"]["steps"]
    padded = 4 * sum(padded_numel(s, nproc) for s in param_shapes())
    for rank in range(nproc):
        led = ops(rec, rank)
        assert led[("all_gather", "shard")]["bytes"] == 2 * steps * padded  # forward, and backward re-gather
        assert led[("reduce_scatter", "shard")]["bytes"] == steps * padded
        assert led[("all_gather", "shard")]["wire_bytes"] == pytest.approx((nproc - 1) / nproc * 2 * steps * padded)


def test_hsdp_adds_replica_all_reduce_of_the_shard(runs):
    rec = runs("hsdp", "--nproc", "4", "--set", "micro_batch=4", *STEPS3)
    steps = rec["comm"]["steps"]
    padded = 4 * sum(padded_numel(s, 2) for s in param_shapes())
    led = ops(rec)
    assert rec["parallel"]["mesh"] == {"replicate": 2, "shard": 2}
    assert led[("all_gather", "shard")]["bytes"] == 2 * steps * padded
    assert led[("reduce_scatter", "shard")]["bytes"] == steps * padded
    assert led[("all_reduce", "replicate")]["bytes"] == steps * padded // 2


def test_same_loss_under_ddp_fsdp_hsdp(runs):
    ddp = runs("ddp", "--nproc", "2", *STEPS3)
    fsdp = runs("fsdp", "--nproc", "2", *STEPS3)
    hsdp = runs("hsdp", "--nproc", "4", "--set", "micro_batch=4", *STEPS3)
    for rec in (fsdp, hsdp):
        assert rec["parallel"]["global_batch_tokens"] == ddp["parallel"]["global_batch_tokens"] == 2048
        assert [p["step"] for p in rec["curve"]] == [p["step"] for p in ddp["curve"]]
        for a, b in zip(ddp["curve"], rec["curve"]):
            assert b["train_loss"] == pytest.approx(a["train_loss"], abs=1e-4)
            if a["val_loss"] is not None:
                assert b["val_loss"] == pytest.approx(a["val_loss"], abs=1e-4)
    assert ddp["curve"][-1]["train_loss"] < ddp["curve"][0]["train_loss"]


def test_fsdp_state_is_one_nth_and_peak_lower(runs):
    ddp = runs("ddp", "--nproc", "2", *STEPS3)
    fsdp = runs("fsdp", "--nproc", "2", *STEPS3)
    for d, f in zip(ddp["memory"]["per_rank"], fsdp["memory"]["per_rank"]):
        assert f["state_bytes"] * 2 == pytest.approx(d["state_bytes"], rel=0.01)
        assert f["params"] * 2 == pytest.approx(d["params"], rel=0.01)
        assert f["peak_bytes"] < d["peak_bytes"]
        assert sum(f[k] for k in CATEGORIES) == f["peak_bytes"]
        assert f["rss_peak_bytes"] > 0


def test_flops_match_six_n_t_plus_attention(runs):
    rec = runs("ddp", "--nproc", "2", *STEPS3)
    cfg = rec["model"]["config"]
    model = models.build_model("llama-tiny")
    n_blocks = sum(p.numel() for b in models.blocks_of(model) for p in b.parameters() if p.ndim >= 2)
    expected = transformer_step_flops(
        n_blocks, cfg["n_layers"], cfg["dim"], 128, rec["totals"]["tokens"], cfg["vocab_size"]
    )
    assert rec["totals"]["flops"] == pytest.approx(expected, rel=0.02)
    assert rec["totals"]["hardware_flops"] == rec["totals"]["flops"]


@pytest.mark.parametrize("optimizer", ["muon", "dion"])
def test_optimizer_step_flops_are_counted_apart_from_model_flops(optimized, optimizer):
    """Same model and batch: the same model FLOPs per step whatever the optimizer; its own matmuls stand apart."""
    adamw, other = optimized(*OPTIMIZED["adamw"]), optimized(*OPTIMIZED[optimizer])
    assert other["totals"]["steps"] == adamw["totals"]["steps"] == 3
    assert other["totals"]["flops"] == adamw["totals"]["flops"]
    assert other["totals"]["optimizer_flops"] > 0 == adamw["totals"]["optimizer_flops"]
    assert other["totals"]["hardware_flops"] == other["totals"]["flops"]


def test_layerwise_muon_learns_as_muon_and_all_gathers_each_shape_once_a_step(optimized):
    """The same losses as DDP's Muon (the same Newton-Schulz on the same averaged gradients, split over the two
    ranks), the same gradient all-reduce, and one all-gather per matrix shape of world x ceil(N / world) bf16
    matrices."""
    plain, split = optimized(*OPTIMIZED["muon"]), optimized(*OPTIMIZED["layerwise"])
    assert [p["train_loss"] for p in split["curve"]] == [p["train_loss"] for p in plain["curve"]]
    model = models.build_model(MUON_MODEL[1])
    matrices = matrix_groups(model, RunConfig(optimizer="muon"), "muon", None)[0]["params"]
    shapes = Counter(tuple(p.shape) for p in matrices)
    gathers = [o for o in split["comm"]["per_rank"][0]["ops"] if o["op"] == "all_gather"]
    steps = split["comm"]["steps"]
    assert sum(o["count"] for o in gathers) == len(shapes) * steps
    assert sum(o["bytes"] for o in gathers) == steps * sum(
        2 * math.ceil(n / 2) * rows * cols * 2 for (rows, cols), n in shapes.items()
    )
    reduces = {k: v["bytes"] for k, v in ops(split).items() if k[0] == "all_reduce"}
    assert reduces == {k: v["bytes"] for k, v in ops(plain).items() if k[0] == "all_reduce"}
    assert not [o for o in plain["comm"]["per_rank"][0]["ops"] if o["op"] == "all_gather"]


def test_activation_checkpointing_same_losses_less_activation_memory(runs):
    for method in ("ddp", "fsdp"):
        plain = runs(method, "--nproc", "2", *STEPS3)
        ac = runs(method, "--nproc", "2", "--ac", *STEPS3)
        assert [p["train_loss"] for p in ac["curve"]] == pytest.approx(
            [p["train_loss"] for p in plain["curve"]], abs=1e-6
        )
        assert ac["memory"]["per_rank"][0]["activations"] < 0.7 * plain["memory"]["per_rank"][0]["activations"]
        assert ac["totals"]["hardware_flops"] > ac["totals"]["flops"] == plain["totals"]["flops"]


def test_bf16_halves_fsdp_gather_bytes_and_still_learns(runs):
    # one small step each: bf16 matmuls are emulated on CPUs without AVX-512 BF16 (30x slower than fp32);
    # bytes per step do not depend on the batch, and the first loss of a fresh model is about ln(256)
    fp32 = runs("fsdp", "--nproc", "2", *STEPS3)
    bf16 = runs("fsdp", "--nproc", "2", "--precision", "bf16", *BF16_SMALL)
    ddp = runs("ddp", "--nproc", "2", "--precision", "bf16", *BF16_SMALL)

    def per_step(rec, op):
        return ops(rec)[(op, "shard")]["bytes"] / rec["comm"]["steps"]

    assert per_step(bf16, "all_gather") * 2 == per_step(fp32, "all_gather")
    assert per_step(bf16, "reduce_scatter") == per_step(fp32, "reduce_scatter")  # fp32 reduction
    for rec in (bf16, ddp):
        assert rec["curve"][0]["train_loss"] == pytest.approx(fp32["curve"][0]["train_loss"], abs=0.05)


def test_record_fields_and_progress(runs):
    rec = runs("ddp", "--nproc", "2", "--tokens", "8192")
    assert rec["status"] == "complete" and rec["provenance"] == "measured"
    assert rec["totals"]["steps"] == 4 and rec["totals"]["tokens"] == 8192
    assert rec["protocol"] == {**rec["protocol"], "kind": "tokens", "budget": 8192, "reached": True}
    assert rec["throughput"]["tokens_per_s"] > 0 and rec["env"]["backend"] == "gloo"
    # steps 0-1 are warm-up, steps 0 and 2 carry the meters (the ledger and memory on step 2): step 3 is timed
    assert rec["comm"]["steps"] == 1 and rec["throughput"]["timed_steps"] == 1
    assert rec["command"].startswith("python -m suite run ddp")
    assert "step 4" in rec["_stderr"] and "tokens/s" in rec["_stderr"]


# What a worker runs, then the names of its threads still alive as the interpreter begins to exit.
_THREADS_AT_EXIT = """
import os, sys
from suite.cli import main
main(sys.argv[1:])
names = []
for tid in os.listdir("/proc/self/task"):
    try:
        names.append(open(f"/proc/self/task/{tid}/comm").read().strip())
    except OSError:
        pass  # a thread that ended meanwhile
print("threads:", ",".join(sorted(names)))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="lists threads through Linux /proc")
def test_a_worker_ends_gloos_threads_before_the_interpreter_exits(tmp_path):
    # A gloo thread alive at exit can abort the worker (SIGABRT) when it frees a tensor's Python object while the
    # interpreter finalizes (issue 32); a torchrun worker of world size 1 (its environment) has them too.
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
    small = ["--tokens", "384", "--set", "micro_batch=2", "--set", "seq_len=64"]  # 3 steps: meters run on step 2
    proc = subprocess.run(
        [sys.executable, "-c", _THREADS_AT_EXIT, "run", "ddp", *small, *TINY, "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env, "MASTER_PORT": str(_free_port())},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert read_record(proc.stdout.splitlines()[-2])["status"] == "complete"
    threads = proc.stdout.splitlines()[-1]
    assert threads.startswith("threads: ") and "gloo" not in threads, threads


def _users_torchrun(tmp_path) -> subprocess.CompletedProcess:
    argv = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "suite", "run", "ddp"]
    return subprocess.run(
        [sys.executable, *argv, *STEPS3, *TINY, "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )


def test_same_seed_same_curve_bit_for_bit_also_under_users_torchrun(runs, tmp_path):
    first = runs("ddp", "--nproc", "2", *STEPS3)
    proc = _users_torchrun(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    second = read_record(proc.stdout.strip().splitlines()[-1])
    key = [(p["step"], p["train_loss"], p["val_loss"]) for p in first["curve"]]
    assert key == [(p["step"], p["train_loss"], p["val_loss"]) for p in second["curve"]]


def test_flops_time_and_target_budgets(runs):
    by_flops = runs("ddp", "--nproc", "2", "--flops", "1e11")
    per_step = by_flops["totals"]["flops"] / by_flops["totals"]["steps"]
    assert by_flops["totals"]["flops"] >= 1e11 > by_flops["totals"]["flops"] - per_step
    by_time = runs("ddp", "--nproc", "2", "--time", "3")
    assert by_time["totals"]["wall_s"] >= 3 and by_time["protocol"]["kind"] == "time"
    reached = runs("ddp", "--nproc", "2", "--target", "9.0", "--max-tokens", "20000")
    assert reached["protocol"]["reached"] is True and reached["totals"]["steps"] == 2


def test_a_run_that_dies_leaves_a_failed_record(runs):
    rec = runs(
        "test-fail", "--nproc", "2", *STEPS3, env={"SUITE_REPRODUCTIONS": "tests.failing_method"}, expect_ok=False
    )
    assert rec["status"] == "failed"
    assert "injected failure at step 2" in rec["error"]


def test_resnet18_on_digits_counts_samples_and_all_reduces_its_gradients(tmp_path):
    from .conftest import run_cli

    proc = run_cli(
        [
            "run",
            "ddp",
            "--model",
            "resnet18",
            "--nproc",
            "2",
            "--tokens",
            "48",
            "--set",
            "micro_batch=8",
            "--set",
            "eval_every=100",
            "--set",
            "eval_batches=1",
            "--results",
            str(tmp_path),
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = read_record(proc.stdout.strip().splitlines()[-1])
    assert rec["status"] == "complete" and rec["data"]["name"] == "digits"
    assert rec["totals"]["steps"] == 3 and rec["totals"]["tokens"] == 48  # 16 images per step
    assert 0 <= rec["evals"]["top1"]["value"] <= 1 and rec["evals"]["top1"]["n"] > 300
    params = sum(p.numel() for p in models.build_model("resnet18", num_classes=10, in_channels=3).parameters())
    assert ops(rec)[("all_reduce", "replicate")]["bytes"] == rec["comm"]["steps"] * 4 * params
    assert rec["memory"]["per_rank"][0]["params"] == 4 * params


def test_a_run_that_dies_ends_the_console_with_what_happened_and_its_record(tmp_path):
    """Before: the last stderr lines were torch's own (`failed (exitcode: 1) local_rank: ...`); nothing of the
    suite's said what happened or where the record is."""
    from .conftest import run_cli

    proc = run_cli(
        ["run", "test-fail", "--nproc", "2", *STEPS3, "--results", str(tmp_path)],
        env={"SUITE_REPRODUCTIONS": "tests.failing_method"},
    )
    path = proc.stdout.strip().splitlines()[-1]
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last.startswith("error: the run ended failed: ") and path in last, last
    assert "injected failure at step 2" in last
