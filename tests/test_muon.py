"""Muon (baselines/muon.py): Newton-Schulz output, the momentum and shape-scaling variants, groups, errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from baselines.muon import MUON, Muon, adjusted_lr, matrix_groups, newton_schulz5
from suite.config import RunConfig
from suite.models import build_model
from suite.run.optim import split_variant


def _with_spectrum(rows: int, cols: int, spectrum: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    u = torch.linalg.qr(torch.randn(rows, rows, generator=gen)).Q[:, : len(spectrum)]
    v = torch.linalg.qr(torch.randn(cols, cols, generator=gen)).Q[:, : len(spectrum)]
    return u @ torch.diag(spectrum) @ v.mT


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(2, 96),
    cols=st.integers(2, 96),
    scale=st.floats(1e-3, 1e3),
    seed=st.integers(0, 2**16),
)
def test_newton_schulz_singular_values_near_one(rows, cols, scale, seed):
    gen = torch.Generator().manual_seed(seed)
    # singular values spread over a decade; five quintic steps lift any value above about 1e-3 of the
    # Frobenius norm into the band, so the test keeps the smallest at least 0.1 of the largest
    spectrum = scale * (0.1 + 0.9 * torch.rand(min(rows, cols), generator=gen))
    g = _with_spectrum(rows, cols, spectrum, gen)
    out = newton_schulz5(g)
    assert out.dtype == torch.bfloat16 and out.shape == g.shape
    s = torch.linalg.svdvals(out.float())
    # the quintic's fixed band after 5 steps (Keller Jordan: about 0.7 to 1.2), bf16 rounding on top
    assert s.min() > 0.6 and s.max() < 1.25


@pytest.mark.parametrize(
    "variant,expected",
    [("spectral_norm", math.sqrt(32 / 8)), ("rms_norm", 0.2 * math.sqrt(32)), ("max1", math.sqrt(32 / 8))],
)
def test_one_step_is_scaled_newton_schulz_of_the_gradient(variant, expected):
    x = nn.Parameter(torch.randn(32, 8))
    g = torch.randn(32, 8)
    before = x.detach().clone()
    opt = Muon([x], lr=0.1, mu=0.0, nesterov=False, weight_decay=0.0, adjust_lr=variant)
    x.grad = g
    opt.step()
    update = (before - x.detach()) / (0.1 * expected)
    torch.testing.assert_close(update, newton_schulz5(g).float(), rtol=0, atol=1e-5)


def test_max1_and_spectral_norm_differ_on_wide_matrices():
    assert adjusted_lr(1.0, (8, 32), "max1") == 1.0
    assert adjusted_lr(1.0, (8, 32), "spectral_norm") == pytest.approx(0.5)


def test_nesterov_momentum_and_decoupled_weight_decay():
    torch.manual_seed(0)
    x = nn.Parameter(torch.randn(16, 16))
    grads = [torch.randn(16, 16) for _ in range(3)]
    opt = Muon([x], lr=0.05, mu=0.9, nesterov=True, weight_decay=0.1)
    expect, buf = x.detach().clone(), torch.zeros(16, 16)
    for g in grads:
        x.grad = g.clone()
        opt.step()
        buf = 0.9 * buf + g
        expect = expect * (1 - 0.05 * 0.1) - 0.05 * newton_schulz5(g + 0.9 * buf).float()
    torch.testing.assert_close(x.detach(), expect, rtol=0, atol=1e-5)


def test_groups_matrices_on_muon_the_rest_on_adamw():
    model = build_model("llama-tiny")
    cfg = RunConfig(optimizer="muon", lr=0.02)
    groups = matrix_groups(model, cfg, "muon", 3e-3)
    by_name = {g["name"]: g for g in groups}
    assert by_name["matrices"]["algorithm"] == "muon" and by_name["matrices"]["lr"] == 0.02
    assert all(p.ndim == 2 for p in by_name["matrices"]["params"])
    assert by_name["head"]["algorithm"] == by_name["other"]["algorithm"] == "adamw"
    assert by_name["other"]["lr"] == 3e-3 and by_name["other"]["weight_decay"] == 0.0
    embed = model.get_submodule("tok_embeddings").weight if hasattr(model, "tok_embeddings") else None
    if embed is not None:
        assert any(p is embed for p in by_name["other"]["params"])
    counted = sum(p.numel() for g in groups for p in g["params"])
    assert counted == sum(p.numel() for p in model.parameters())


def test_adamw_groups_step_like_torch_adamw():
    torch.manual_seed(0)
    a, b = nn.Parameter(torch.randn(10)), nn.Parameter(torch.randn(10))
    b.data.copy_(a.data)
    ours = Muon([{"params": [a], "algorithm": "adamw", "lr": 0.01, "weight_decay": 0.1, "betas": (0.9, 0.95)}])
    ref = torch.optim.AdamW([b], lr=0.01, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    for _ in range(3):
        g = torch.randn(10)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    torch.testing.assert_close(a.detach(), b.detach())


def test_errors_name_the_fix():
    with pytest.raises(ValueError, match="not a matrix.*algorithm='adamw'"):
        Muon([nn.Parameter(torch.zeros(4))])
    with pytest.raises(ValueError, match="no matrices"):
        Muon([{"params": [], "algorithm": "muon"}, {"params": [nn.Parameter(torch.zeros(2, 2))]}])
    with pytest.raises(ValueError, match="adjust_lr must be one of"):
        Muon([nn.Parameter(torch.zeros(2, 2))], adjust_lr="rms")
    with pytest.raises(ValueError, match="no matrix-shaped weights; use --optimizer adamw"):
        matrix_groups(nn.Sequential(nn.LayerNorm(4)), RunConfig(), "muon", None)
    with pytest.raises(ValueError, match="optimizer muon: adjust_lr must be one of"):
        split_variant(RunConfig(optimizer="muon", variant={"adjust_lr": "bogus"}))


def test_layerwise_is_ddps_only():
    with pytest.raises(ValueError, match="layerwise=true splits Muon's orthogonalizations over DDP's ranks; fsdp"):
        split_variant(RunConfig(method="fsdp", optimizer="muon", variant={"layerwise": "true"}))
    assert (
        split_variant(RunConfig(method="fsdp", optimizer="muon", variant={"layerwise": "false"}))[1]["layerwise"]
        is False
    )
    assert split_variant(RunConfig(method="ddp", optimizer="muon", variant={"layerwise": "true"}))[1]["layerwise"]


def test_spec_parses_its_parameters():
    method, mine = split_variant(RunConfig(optimizer="muon", variant={"adjust_lr": "max1", "nesterov": "false"}))
    assert method == {} and mine == {
        "mu": 0.95,
        "adjust_lr": "max1",
        "nesterov": False,
        "layerwise": False,
    }  # declared defaults too
    assert MUON.name == "muon"
