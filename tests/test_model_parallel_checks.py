"""Model-parallel and precision methods refuse what they cannot run, in one line, before any worker starts;
emulated fp8 rounds like fp8."""

import math
import re
import types

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from baselines import fp8
from baselines.pp import stage_bounds
from suite.config import RunConfig
from suite.run.strategy import get_strategy

from .conftest import run_cli


def _check(method: str, nproc: int, precision: str = "fp32", **variant) -> None:
    cfg = RunConfig(method=method, nproc=nproc, precision=precision, variant=dict(variant))
    get_strategy(cfg).check(nproc)


@pytest.mark.parametrize(
    ("method", "nproc", "variant", "words"),
    [
        ("tp", 3, {}, "does not divide llama-tiny's n_heads (8)"),
        ("pp", 5, {}, "5 stages but llama-tiny has 4 blocks"),
        ("pp", 4, {"microbatches": 2}, "2 microbatches cannot fill 4 stages"),
        ("pp", 2, {"microbatches": 3}, "micro_batch 8 cannot be split into 3 microbatches"),
        (
            "pp",
            3,
            {"schedule": "interleaved"},
            "3 ranks x 2 virtual stages need 6 blocks but llama-tiny has 4; use --nproc 2 or --set schedule=1f1b",
        ),
        (
            "pp",
            2,
            {"schedule": "interleaved", "microbatches": 3},
            "the interleaved schedule needs microbatches a multiple of the 2 stages, got 3; use --set microbatches=4",
        ),
        ("ep", 2, {}, "llama-tiny has none: use --model llama-tiny-moe"),
        ("fsdp-tp", 3, {}, "3 workers cannot be split into groups of 2; use --nproc 4"),
        ("pp-fsdp", 6, {"stages": 4}, "6 workers cannot be split into groups of 4; use --nproc 8"),
        ("pp-fsdp", 4, {"schedule": "interleaved"}, "pp-fsdp runs one stage per rank; use --set schedule=1f1b"),
        ("cp", 3, {}, "seq_len 128 cannot be split into 3 equal chunks; use --set seq_len=126"),
    ],
)
def test_bad_shapes_are_one_line(method, nproc, variant, words):
    with pytest.raises(ValueError, match=re.escape(words)) as err:
        _check(method, nproc, **variant)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("method", ["fsdp", "tp", "pp", "ep", "cp"])
@pytest.mark.parametrize("mode", ["fp16", "fp8"])
def test_precisions_a_method_does_not_implement_are_refused(method, mode):
    with pytest.raises(ValueError, match=re.escape(f"method {method} runs in fp32, bf16, not {mode}")):
        _check(method, 2, mode)


def test_fp8_needs_its_dtypes(monkeypatch):
    monkeypatch.delattr(torch, "float8_e5m2")
    with pytest.raises(ValueError, match="needs torch.float8_e5m2"):
        _check("ddp", 2, "fp8")


@pytest.mark.parametrize(
    ("args", "words"),
    [(["tp"], "n_heads"), (["pp", "--set", "schedule=interleaved"], "use --nproc 2 or --set schedule=1f1b")],
)
def test_cli_exit_status_2_before_launch(tmp_path, args, words):
    proc = run_cli(["run", *args, "--nproc", "3", "--tokens", "1000", "--results", str(tmp_path)], timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and words in proc.stderr


@given(st.integers(1, 32), st.integers(2, 8))
def test_stages_cover_every_block_once(n_layers, stages):
    bounds = [stage_bounds(n_layers, stages, s) for s in range(stages)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n_layers
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))


@given(st.floats(1e-3, 1e3), st.integers(0, 2**31))
def test_fake_quantize_keeps_e4m3_precision_and_the_maximum(scale, seed):
    t = torch.randn(64, generator=torch.Generator().manual_seed(seed)) * scale
    q = fp8.fake_quantize(t, torch.float8_e4m3fn)
    amax = t.abs().max()
    # e4m3 has 3 mantissa bits: relative error at most 2**-4 for values above its subnormal range
    big = t.abs() > amax * 2**-6
    assert torch.all((q - t)[big].abs() <= t[big].abs() * 2**-4 + 1e-12)
    assert q.abs().max() == pytest.approx(amax.item(), rel=2**-4)


def test_fp8_linear_gradients_are_rounded_but_close():
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 16, bias=False)
    x = torch.randn(4, 8, 32, requires_grad=True)
    ref = lin(x)
    ref.sum().backward()
    gw, gx = lin.weight.grad.clone(), x.grad.clone()
    lin.weight.grad, x.grad = None, None
    wrapped = torch.nn.Sequential(lin)
    lin.forward = types.MethodType(fp8._fp8_forward, lin)
    out = wrapped(x)
    out.sum().backward()
    assert not torch.equal(out, ref)  # it does round
    assert torch.allclose(out, ref, rtol=0.15, atol=0.15 * ref.abs().max().item())
    for got, want in ((lin.weight.grad, gw), (x.grad, gx)):
        assert (got - want).norm() / want.norm() < 0.1
    assert math.isfinite(out.sum().item())
