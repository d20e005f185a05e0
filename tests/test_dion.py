"""Dion (reproductions/dion/dion.py) in one process: the algorithm step by step, rank, seeds, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from reproductions.dion.dion import Dion, orthonormalize, rank_of
from reproductions.dion.spec import DION
from suite.config import RunConfig
from suite.run.optim import split_variant
from tests.conftest import run_cli


def _spectrum_matrix(rows: int, cols: int, ratio: float = 0.6) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    k = min(rows, cols)
    u = torch.linalg.qr(torch.randn(rows, rows, generator=gen)).Q[:, :k]
    v = torch.linalg.qr(torch.randn(cols, cols, generator=gen)).Q[:, :k]
    return u @ torch.diag(torch.tensor([ratio**i for i in range(k)])) @ v.mT


@pytest.mark.parametrize("shape", [(12, 8), (8, 12), (10, 10)])
def test_full_rank_mu_zero_converges_to_the_orthonormalized_gradient(shape):
    """With mu = 0 and the same gradient every step, the warm-started power iteration is orthogonal
    iteration on G G^T: the update P Q^T becomes U V^T, the gradient's polar factor (all singular values 1)."""
    torch.manual_seed(0)
    g = _spectrum_matrix(*shape)
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    x = nn.Parameter(torch.zeros(shape))
    opt = Dion([x], lr=1.0, mu=0.0, rank_fraction=1.0)
    for _ in range(20):
        before = x.detach().clone()
        x.grad = g.clone()
        opt.step()
    update = (before - x.detach()) / math.sqrt(shape[0] / shape[1])
    torch.testing.assert_close(update, u @ vh, rtol=0, atol=1e-4)


def test_first_step_follows_the_algorithm():
    """One step from a seeded Q, computed here with plain QR (the update does not depend on the sketch)."""
    rows, cols, fraction, mu, lr, wd = 24, 16, 0.25, 0.9, 0.05, 0.1
    torch.manual_seed(3)
    x = nn.Parameter(torch.randn(rows, cols))
    g = torch.randn(rows, cols)
    x0 = x.detach().clone()
    torch.manual_seed(7)
    r = rank_of((rows, cols), fraction)
    q = torch.randn(cols, r)
    torch.manual_seed(7)
    opt = Dion([x], lr=lr, mu=mu, rank_fraction=fraction, weight_decay=wd)
    x.grad = g.clone()
    opt.step()
    p = torch.linalg.qr(g @ q).Q
    rr = g.mT @ p
    q_new = rr / (rr.norm(dim=0) + 1e-8)
    expect = x0 * (1 - lr * wd) - lr * math.sqrt(rows / cols) * p @ q_new.mT
    torch.testing.assert_close(x.detach(), expect, rtol=0, atol=1e-5)
    torch.testing.assert_close(opt.state[x]["momentum"], g - (1 - mu) * p @ rr.mT, rtol=0, atol=1e-5)
    assert opt.state[x]["Q"].shape == (cols, r) == (16, 4)


def test_wide_matrices_work_transposed():
    torch.manual_seed(0)
    x = nn.Parameter(torch.randn(6, 20))
    opt = Dion([x], lr=0.1, rank_fraction=0.5)
    x.grad = torch.randn(6, 20)
    opt.step()
    assert opt.state[x]["Q"].shape == (6, 3)  # (cols, r) of the working orientation, 20 x 6


def test_randomized_cholesky_qr_is_orthonormal_and_spans_p():
    p = torch.randn(300, 20) @ torch.diag(torch.logspace(0, -4, 20))  # condition number 1e4
    s = torch.randn(128, 300) / math.sqrt(128)
    q = orthonormalize(p, s)
    torch.testing.assert_close(q.mT @ q, torch.eye(20), rtol=0, atol=1e-4)
    torch.testing.assert_close(q @ (q.mT @ p), p, rtol=0, atol=1e-4)


def test_seed_fixes_the_run_and_zero_gradient_only_decays():
    def run(seed: int) -> torch.Tensor:
        torch.manual_seed(0)
        x = nn.Parameter(torch.randn(16, 8))
        g = torch.randn(16, 8)
        torch.manual_seed(seed)
        opt = Dion([x], lr=0.1, rank_fraction=0.5)
        for _ in range(3):
            x.grad = g.clone()
            opt.step()
        return x.detach()

    assert torch.equal(run(1), run(1)) and not torch.equal(run(1), run(2))
    x = nn.Parameter(torch.ones(8, 8))
    opt = Dion([x], lr=0.1, weight_decay=0.5)
    x.grad = torch.zeros(8, 8)
    opt.step()
    torch.testing.assert_close(x.detach(), torch.full((8, 8), 0.95))


def test_rank_is_a_ceiling_of_the_fraction():
    assert rank_of((64, 48), 0.25) == 12 and rank_of((48, 64), 1 / 16) == 3 and rank_of((5, 3), 0.01) == 1


def test_errors_name_the_fix():
    for bad in (0.0, 1.5, -0.25):
        with pytest.raises(ValueError, match=r"rank_fraction must be in \(0, 1\]"):
            Dion([nn.Parameter(torch.zeros(4, 4))], rank_fraction=bad)
    with pytest.raises(ValueError, match="no matrices"):
        Dion([{"params": [], "algorithm": "dion"}, {"params": [nn.Parameter(torch.zeros(2, 2))]}])
    with pytest.raises(ValueError, match="not a matrix.*algorithm='adamw'"):
        Dion([nn.Parameter(torch.zeros(4, 4)), nn.Parameter(torch.zeros(4))])
    with pytest.raises(ValueError, match="optimizer dion: rank_fraction must be a number in \\(0, 1\\]"):
        split_variant(RunConfig(optimizer="dion", variant={"rank_fraction": "2"}))
    assert DION.params["rank_fraction"].parse("rank_fraction", "0.25") == 0.25


def test_cli_rejects_a_bad_rank_fraction_in_one_line():
    proc = run_cli(["run", "ddp", "--optimizer", "dion", "--set", "rank_fraction=0", "--tokens", "1024"])
    assert proc.returncode == 2
    assert "rank_fraction must be a number in (0, 1]" in proc.stderr and "Traceback" not in proc.stderr
