"""NorMuon, Dion2 and Dion3 (reproductions/dion/normuon.py, dion2.py, dion3.py) on one process: what each step
is made of, the Polar Express orthogonalizer, their `--set` parameters and errors. The numbers themselves are
checked against the reference in tests/test_dion_successors_reference.py."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from baselines.muon import newton_schulz5
from reproductions.dion.dion2 import DION2, Dion2
from reproductions.dion.dion3 import DION3, Dion3
from reproductions.dion.normuon import NORMUON, NorMuon
from reproductions.dion.orthogonalize import polar_express
from suite.config import RunConfig
from suite.run.optim import split_variant


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(2, 64), cols=st.integers(2, 64), seed=st.integers(0, 2**16))
def test_polar_express_singular_values_near_one(rows, cols, seed):
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(rows, cols, generator=gen)
    out = polar_express(g)
    assert out.dtype == torch.bfloat16 and out.shape == g.shape
    s = torch.linalg.svdvals(out.float())
    # a Gaussian matrix's smallest singular value can sit near 0 (square ones); the top of the spectrum is in band
    assert s.max() < 1.2 and s[: max(1, min(rows, cols) // 2)].min() > 0.7


@pytest.mark.parametrize("shape", [(32, 8), (8, 32)])
def test_normuon_first_step_gives_every_row_the_same_norm_and_keeps_the_orthogonal_norm(shape):
    """v starts at 0, so the first step divides each row of O by its own RMS: equal row norms, then scaled back to
    ||O||_F (the neuron-wise normalization; Muon's rows would differ)."""
    x = nn.Parameter(torch.randn(shape))
    g = torch.randn(shape)
    before = x.detach().clone()
    opt = NorMuon([x], lr=0.1, mu=0.0, weight_decay=0.0, adjust_lr="spectral_norm", orthogonalize="newton_schulz")
    x.grad = g
    opt.step()
    update = (before - x.detach()) / (0.1 * (shape[0] / shape[1]) ** 0.5)
    rows = update.norm(dim=1)
    torch.testing.assert_close(rows, rows.mean().expand_as(rows), rtol=1e-4, atol=0)
    assert update.norm() == pytest.approx(newton_schulz5(g).float().norm().item(), rel=1e-5)


@pytest.mark.parametrize("shape,dim", [((6, 20), 0), ((20, 6), 1)])
def test_dion2_moves_and_decays_only_the_selected_slices(shape, dim):
    """Without weight decay only the k slices largest in l1 norm (rows of a wide matrix, columns of a tall one)
    move, and only they leave ef_decay x their value in the momentum."""
    x = nn.Parameter(torch.randn(shape))
    g = torch.randn(shape)
    before = x.detach().clone()
    opt = Dion2([x], lr=0.1, fraction=0.5, ef_decay=0.9, weight_decay=0.0)
    x.grad = g
    opt.step()
    other = 1 - dim  # the dimension summed over for a slice's norm
    chosen = set(g.norm(p=1, dim=other).topk(3).indices.tolist())
    moved = set(((x.detach() - before).abs().sum(dim=other) > 0).nonzero().flatten().tolist())
    assert moved == chosen
    decayed = set((opt.state[x]["momentum"] != g).any(dim=other).nonzero().flatten().tolist())
    assert decayed == chosen


@pytest.mark.parametrize("shape", [(20, 6), (6, 20)])
def test_dion3_moves_the_selected_rows_each_by_the_same_norm(shape):
    """Dion3 picks rows even of a tall matrix; on the first step (v = 0) NorMuon's normalization gives each moved
    row the same norm, and only those rows' momentum is decayed (by mu) and second moment set."""
    x = nn.Parameter(torch.randn(shape))
    g = torch.randn(shape)
    before = x.detach().clone()
    opt = Dion3([x], lr=0.1, fraction=0.5, mu=0.9, weight_decay=0.0)
    x.grad = g
    opt.step()
    chosen = sorted(g.norm(p=1, dim=1).topk(shape[0] // 2).indices.tolist())
    moved = (x.detach() - before).norm(dim=1)
    assert (moved > 0).nonzero().flatten().tolist() == chosen
    torch.testing.assert_close(moved[chosen], moved[chosen].mean().expand(len(chosen)), rtol=1e-4, atol=0)
    state = opt.state[x]
    assert (state["momentum"] != g).any(dim=1).nonzero().flatten().tolist() == chosen
    assert (state["variance"].flatten() > 0).nonzero().flatten().tolist() == chosen


def test_weight_decay_reaches_every_weight():
    x = nn.Parameter(torch.ones(4, 12))
    opt = Dion2([x], lr=0.1, fraction=0.25, weight_decay=0.5)
    x.grad = torch.zeros(4, 12)
    x.grad[0, 0] = 1.0
    opt.step()
    assert (x.detach()[1:] == 0.95).all()  # rows not selected: (1 - lr wd) only


def test_specs_parse_their_parameters():
    _, normuon = split_variant(RunConfig(optimizer="normuon", variant={"nesterov": "true", "beta2": "0.9"}))
    assert normuon == {
        "mu": 0.95, "beta2": 0.9, "nesterov": True, "adjust_lr": "spectral_norm", "orthogonalize": "polar_express",
    }  # fmt: skip
    _, dion2 = split_variant(RunConfig(optimizer="dion2", variant={"orthogonalize": "newton_schulz"}))
    assert dion2 == {"fraction": 0.25, "ef_decay": 0.95, "adjust_lr": "spectral_norm", "orthogonalize": "newton_schulz"}
    _, dion3 = split_variant(RunConfig(optimizer="dion3", variant={"mu": "0.9"}))
    assert dion3 == {
        "fraction": 0.25, "mu": 0.9, "beta2": 0.95, "adjust_lr": "spectral_norm", "orthogonalize": "polar_express",
    }  # fmt: skip
    assert (NORMUON.name, DION2.name, DION3.name) == ("normuon", "dion2", "dion3")


def test_errors_name_the_fix():
    with pytest.raises(ValueError, match="optimizer dion2: fraction must be a number in \\(0, 1\\]"):
        split_variant(RunConfig(optimizer="dion2", variant={"fraction": "0"}))
    with pytest.raises(ValueError, match="optimizer normuon: orthogonalize must be one of polar_express"):
        split_variant(RunConfig(optimizer="normuon", variant={"orthogonalize": "svd"}))
    with pytest.raises(ValueError, match="normuon: parameter of shape \\(4,\\) is not a matrix.*algorithm='adamw'"):
        NorMuon([nn.Parameter(torch.zeros(4))])
    with pytest.raises(ValueError, match="dion2: orthogonalize must be one of"):
        Dion2([nn.Parameter(torch.zeros(2, 2))], orthogonalize="svd")
    with pytest.raises(ValueError, match="dion2: fraction must be in \\(0, 1\\]"):
        Dion2([nn.Parameter(torch.zeros(2, 2))], fraction=1.5)
    with pytest.raises(ValueError, match="dion3: fraction must be in \\(0, 1\\], mu in \\[0, 1\\] and beta2"):
        Dion3([nn.Parameter(torch.zeros(2, 2))], beta2=1.0)
