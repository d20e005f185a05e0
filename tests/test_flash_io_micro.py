"""flash-io's microbenchmark items, IO meter, plan, Nsight Compute wrapper and bench pair."""

import dataclasses
import importlib
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from reproductions.flash_io import REPRODUCTION, count_io, ncu
from reproductions.flash_io.count import A100_M, block_sizes, sram_peak
from reproductions.flash_io.meter import SECTION, AttentionIoMeter, _Calls
from reproductions.flash_io.micro import (
    BACKENDS,
    attention_flops,
    available_backends,
    dram_bytes,
    io,
    matmul,
    profiled,
    sdpa,
)
from suite.config import RunConfig
from suite.meters.flops import FlopMeter
from suite.models import build_model
from suite.plan.items import run_micro
from suite.plan.micro import Microbench, micro_record
from suite.plan.plans import load_plan
from suite.records import read_record


def _counted(backend, causal, backward, shape=(2, 3, 48, 16)):
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    with FlopMeter() as meter, sdpa_kernel(BACKENDS[backend]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if backward:
            out.sum().backward()
    return meter


@pytest.mark.parametrize("causal", [False, True])
def test_flop_formula_against_flop_counter(causal):
    batch, heads, n, d = 2, 3, 48, 16
    full = attention_flops(batch, heads, n, d, causal=False, backward=False)
    assert full == 4 * batch * n * n * heads * d
    flash = _counted("flash", causal, backward=True)
    # FlopCounterMode counts every score, masked or not; the formula halves a causal forward
    assert flash.forward_flops == full
    assert attention_flops(batch, heads, n, d, causal=causal, backward=False) == full // (2 if causal else 1)
    # the flash backward recomputes S: 2.5x forward, the formula's factor, in FlopCounterMode's own count
    assert flash.backward_flops == attention_flops(batch, heads, n, d, causal=False, backward=True) - full
    # the math backend keeps P from the forward: its backward is 2x forward, without the recomputation
    assert _counted("math", causal, backward=True).backward_flops == 2 * full


def test_cpu_backends_and_sdpa_item_record():
    assert available_backends("cpu")[:2] == ["math", "flash"]
    with pytest.raises(ValueError, match="unknown SDPA backend 'fast'; choose one of: math, flash"):
        sdpa(torch.device("cpu"), "fast", 8, 4, 1, 1)
    item = Microbench(
        "sdpa-t",
        "reproductions.flash_io.micro:sdpa",
        [dict(backend=b, n=n, d=16, batch=1, heads=2, backward=True) for b in ("math", "flash") for n in (64, 256)],
        repeat=2,
    )
    rows = micro_record(item, "flash-io", "test", "/tmp")["micro"]["rows"]
    for row in rows:
        # causal (the item's default): the formula halves the forward, FlopCounterMode does not; math's
        # backward is 2x forward (no recomputation), so its total is 3 / 3.5 of flash's
        shape = row["shape"]
        assert row["time_s_median"] == statistics.median(row["time_s"]) and len(row["time_s"]) == 2
        # the step allocates the output and the three input gradients; math also the N x N attention weights it
        # saves for the backward and their gradient (the inputs exist before the peak is taken)
        tensor = shape["batch"] * shape["heads"] * shape["n"] * shape["d"] * 4
        scores = shape["batch"] * shape["heads"] * shape["n"] ** 2 * 4 if shape["backend"] == "math" else 0
        assert row["peak_bytes"] >= 4 * tensor + 2 * scores
        assert row["flops"] == 2 * row["extra"]["formula_flops"] * (1 if row["shape"]["backend"] == "flash" else 6 / 7)
    peak = {(r["shape"]["backend"], r["shape"]["n"]): r["peak_bytes"] for r in rows}
    # the math backend materialises N x N scores: 4x the sequence, far more than 4x the memory
    assert peak["math", 256] / peak["math", 64] > 2 * peak["flash", 256] / peak["flash", 64]


def test_the_written_micro_record_carries_the_machine_load(tmp_path):
    """A microbenchmark item's record keeps the load average at its start and end where a run keeps it
    (`timing.load_average`): the condition its times were measured under."""
    plan = load_plan("flash-io", "smoke")
    item = dataclasses.replace(next(i for i in plan.micro if i.name == "matmul"), shapes=[dict(n=8)], repeat=1)
    record = read_record(run_micro(plan, item, tmp_path, "1/1")["_path"])
    load = record["timing"]["load_average"]
    assert len(load) == 2 and all(isinstance(x, float) and x >= 0 for x in load), load
    assert "before_s" not in record["timing"]


def test_io_item_executes_and_agrees_with_closed_form():
    out = io(torch.device("cpu"), 64, 8, 1024, causal=True, heads=3)()  # B_c 11, B_r 8: 6 x 8 tiles, executed
    assert (
        out["tiled_executed_elements"] == out["tiled_elements"] == count_io(64, 8, 1024, algorithm="tiled", causal=True)
    )
    assert out["standard_executed_elements"] == out["standard_elements"]
    assert out["tiled_bytes_all_heads"] == 3 * 2 * out["tiled_elements"]
    # the tiles fit M: the executed tracker's peak equals the closed form and stays within the SRAM
    assert out["sram_peak_executed_elements"] == out["sram_peak_elements"] <= out["sram_elements"] == 1024
    big = io(torch.device("cpu"), 16384, 64, 519)()  # one row of each tile, 16,384 x 16,384 tiles: closed form only
    assert big["tiled_executed_elements"] is None and big["tiled_elements"] > big["standard_elements"]
    assert matmul(torch.device("cpu"), 8)()["formula_flops"] == 2 * 8**3


def test_meter_sees_every_attention_call_of_a_step():
    cfg = RunConfig(method="sdpa-flash", seq_len=64, micro_batch=2)
    assert AttentionIoMeter.applies(cfg) and not AttentionIoMeter.applies(RunConfig(method="ddp"))
    model = build_model("llama-tiny")
    calls = []
    with _Calls(calls):
        model(torch.randint(0, 256, (2, 64))).sum().backward()
    assert len(calls) == model.cfg.n_layers
    heads, d = 2 * model.cfg.n_heads, model.cfg.head_dim
    assert calls[0]["batch_heads"] == heads and calls[0]["causal"] and calls[0]["d"] == d
    m = 64 * d  # N d is below the A100's SRAM: counted at the top of Theorem 2's range
    assert calls[0]["sram_elements"] == m < A100_M
    assert calls[0]["tiled_elements"] == heads * count_io(64, d, m, algorithm="tiled", causal=True)
    record = {}
    AttentionIoMeter.section({0: calls}, record, {0: 1})
    section = record[SECTION]
    assert section["standard_bytes"] == 2 * sum(c["standard_elements"] for c in calls)
    assert section["ratio_standard_to_tiled"] == section["standard_bytes"] / section["tiled_bytes"]


def test_smoke_plan_resolves_and_gpu_preset_needs_cuda():
    plan = load_plan("flash-io", "smoke")
    assert {r.method for r in plan.runs} == {"sdpa-math", "sdpa-flash"}
    assert all(r.command.startswith("python -m suite run sdpa-") and r.reproduction == "flash-io" for r in plan.runs)
    names = [item.name for item in plan.micro]
    assert {"io-n", "io-d", "io-m", "io-gpt2", "sdpa-n", "sdpa-gpt2", "matmul"} <= set(names)
    gpt2 = next(i for i in plan.micro if i.name == "io-gpt2").shapes
    assert {(s["n"], s["d"], s["m"], s["heads"]) for s in gpt2} == {(1024, 64, A100_M, 1024)}
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="needs a CUDA device; use --preset smoke"):
            load_plan("flash-io", "gpu")


def test_gpu_items_dry_run_on_cpu(monkeypatch, tmp_path):
    shape = dict(backend="flash", n=32, d=8, batch=1, heads=2, causal=True, dtype="float32")
    out = profiled(torch.device("cpu"), **shape)()
    assert out["kernel_time_s"] > 0 and out["kernels"] == "cpu ops"
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu here
    assert dram_bytes(torch.device("cpu"), **shape)()["ncu"] == "not installed"


def test_ncu_command_runs_the_kernel_and_its_csv_is_summed():
    cmd = ncu.command(backend="flash", n=32, d=8, batch=1, heads=2, causal=True, dtype="float32")
    assert cmd[:3] == ["ncu", "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum"]
    assert "--nvtx-include" in cmd and "attention/" in cmd
    kernel = cmd[cmd.index(sys.executable) :] + ["--device=cpu"]
    assert subprocess.run(kernel, capture_output=True, check=False).returncode == 0
    text = "\n".join(
        [
            "==PROF== Connected to process 1",
            '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"',
            '"0","flash_fwd","dram__bytes_read.sum","byte","1,000"',
            '"0","flash_fwd","dram__bytes_write.sum","byte","200"',
            '"1","flash_bwd","dram__bytes_read.sum","byte","3000"',
            '"1","flash_bwd","dram__bytes_write.sum","byte","400.5"',
        ]
    )
    assert ncu.parse(text) == {
        "dram_bytes_read": 4000.0,
        "dram_bytes_write": 600.5,
        "dram_bytes": 4600.5,
        "kernels": 2,
    }
    with pytest.raises(ValueError, match="no CSV table"):
        ncu.parse("==ERR== permission denied")


def test_backends_are_probed_in_the_dtype_given(monkeypatch):
    seen = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda q, *a, **k: seen.append(q.dtype) or real(q, *a, **k))
    assert "math" in available_backends("cpu", "bfloat16")
    assert set(seen) == {torch.bfloat16}


CALLS: list[int] = []


def counted_calls(device, n):
    """A stand-in for an item that runs an outside profiler: it counts how often it is called."""

    def run() -> dict:
        CALLS.append(n)
        return {"calls": len(CALLS)}

    return run


def test_an_item_run_once_calls_its_function_once_per_shape_and_keeps_that_result():
    # the DRAM item runs Nsight Compute: timed, FLOP and memory calls would profile the same kernels three times
    item = Microbench("once", f"{__name__}:counted_calls", [dict(n=1), dict(n=2)], warmup=3, repeat=5, once=True)
    CALLS.clear()
    rows = micro_record(item, "flash-io", "test", "unused")["micro"]["rows"]
    assert CALLS == [1, 2] and [r["extra"]["calls"] for r in rows] == [1, 2]
    assert all(len(r["time_s"]) == 1 and r["peak_bytes"] is None for r in rows)
    plan_item = next(i for i in load_plan("flash-io", "smoke").micro if i.name == "matmul")
    assert not plan_item.once  # a timed item keeps its warm-up, repeats and meters


def test_pair_names_declared_methods():
    (pair,) = REPRODUCTION.pairs
    assert (pair.method.method, pair.baseline.method) == ("sdpa-flash", "sdpa-math")
    assert pair.method.run_config(Path("/tmp")).seq_len == 1024
    assert {m.name for m in REPRODUCTION.methods} == {"sdpa-flash", "sdpa-math"}


def test_gpu_preset_holds_the_papers_configuration(monkeypatch):
    flash_plan = importlib.import_module("reproductions.flash_io.plan")  # the package's `plan` is the function

    monkeypatch.setattr(flash_plan.torch.cuda, "is_available", lambda: True)
    probed = []
    monkeypatch.setattr(
        flash_plan,
        "available_backends",
        lambda device, dtype="float32": probed.append(dtype) or ["math", "flash", "efficient", "cudnn"],
    )
    plan = load_plan("flash-io", "gpu")
    items = {item.name: item for item in plan.micro}
    # probed in float16 (in float32 CUDA has no flash kernel, and the H200 check lost the flash rows so)
    assert probed == ["float16"]
    assert all(r.device == "cuda" and r.precision == "bf16" for r in plan.runs)
    for name in ("sdpa-gpt2", "profile-gpt2", "dram-gpt2"):
        assert items[name].device == "cuda"
        assert {s["backend"] for s in items[name].shapes} == {"math", "flash", "efficient", "cudnn"}
        assert all((s["n"], s["d"], s["batch"], s["heads"]) == (1024, 64, 64, 16) for s in items[name].shapes)
    assert all(s["dtype"] == "float16" for s in items["sdpa-n"].shapes)
    assert items["matmul"].shapes == [dict(n=8192, dtype="float16")]
    assert load_plan("flash-io", "paper").notes


@pytest.mark.parametrize("preset", ["smoke", "gpu"])
def test_every_tiled_shape_of_the_plan_fits_its_sram(preset, monkeypatch):
    """The tiles of every io and exactness shape the plan sweeps fit M (the paper's block sizes did not:
    114,880 elements at GPT-2's shape against M = 49,152)."""
    flash_plan = importlib.import_module("reproductions.flash_io.plan")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(flash_plan, "available_backends", lambda device, dtype="float32": ["math", "flash"])
    items = [i for i in flash_plan.plan(preset).micro if i.function.endswith((":io", ":exactness"))]
    shapes = [s for i in items for s in i.shapes]
    assert len(shapes) >= 25
    for s in shapes:
        bc, br = block_sizes(s["n"], s["d"], s["m"])
        assert sram_peak(s["n"], s["d"], bc, br) <= s["m"], s
