"""FlashAttention for one head, written with explicit tiles and counted (arXiv 2205.14135).

Forward: Algorithm 1 (with the softmax scale tau = 1/sqrt(d) and the causal mask of Algorithm 2, no dropout);
backward: Algorithm 4 without dropout. Inputs Q, K, V (and dO) lie in HBM as N x d tensors; every tile goes
through `Hbm.load` / `Hbm.store`, which count the elements moved. Tiles entirely above a causal diagonal are
skipped (the mask would zero them; the CUDA kernels skip them too). This is a counting device, not a fast
kernel: it loops over tiles in Python. count.py gives the same counts in closed form.

Rows whose every score in the tiles seen so far is masked keep m = -inf and l = 0; the updates below guard
those rows (the paper's formulas would give NaN there) and are otherwise the paper's, rearranged:
e^{m~_ij - m_new} P~_ij = exp(S_ij - m_new).
"""

from __future__ import annotations

import math

import torch

from reproductions.flash_io.count import block_sizes
from reproductions.flash_io.hbm import Hbm, Sram


def _tiles(n: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def _visited(rows: slice, cols: slice, causal: bool) -> bool:
    """False for a tile entirely above the causal diagonal (every column after every row)."""
    return not causal or cols.start <= rows.stop - 1


def _scores(qi: torch.Tensor, kj: torch.Tensor, rows: slice, cols: slice, causal: bool) -> torch.Tensor:
    s = (qi @ kj.T) / math.sqrt(qi.shape[-1])
    if causal:
        r = torch.arange(rows.start, rows.stop, device=s.device)[:, None]
        c = torch.arange(cols.start, cols.stop, device=s.device)[None, :]
        s = s.masked_fill(c > r, float("-inf"))
    return s


def forward(hbm: Hbm, sram: Sram, m: int, causal: bool) -> None:
    """O, l, m into HBM from Q, K, V there."""
    n, d = hbm.tensors["Q"].shape
    bc, br = block_sizes(n, d, m)
    q = hbm.tensors["Q"]
    hbm.init("O", torch.zeros_like(q))
    hbm.init("l", torch.zeros(n, dtype=q.dtype))
    hbm.init("m", torch.full((n,), float("-inf"), dtype=q.dtype))
    for cols in _tiles(n, bc):
        kj, vj = hbm.load("K", cols), hbm.load("V", cols)
        for rows in _tiles(n, br):
            if not _visited(rows, cols, causal):
                continue
            qi, oi, li, mi = (hbm.load(name, rows) for name in ("Q", "O", "l", "m"))
            s = _scores(qi, kj, rows, cols, causal)
            m_new = torch.maximum(mi, s.amax(dim=1))
            m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(mi - m_safe)
            p = torch.exp(s - m_safe[:, None])
            l_new = alpha * li + p.sum(dim=1)
            l_safe = torch.where(l_new == 0, torch.ones_like(l_new), l_new)
            o_new = ((alpha * li)[:, None] * oi + p @ vj) / l_safe[:, None]
            sram.resident(kj, vj, qi, oi, li, mi, s, p, o_new, l_new, m_new)
            hbm.store("O", o_new, rows)
            hbm.store("l", l_new, rows)
            hbm.store("m", m_new, rows)


def backward(hbm: Hbm, sram: Sram, m: int, causal: bool) -> None:
    """dQ, dK, dV into HBM from Q, K, V, O, dO, l, m there."""
    n, d = hbm.tensors["Q"].shape
    bc, br = block_sizes(n, d, m)
    tau = 1 / math.sqrt(d)
    for name in ("dQ", "dK", "dV"):
        hbm.init(name, torch.zeros_like(hbm.tensors["Q"]))
    for cols in _tiles(n, bc):
        kj, vj = hbm.load("K", cols), hbm.load("V", cols)
        dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)
        for rows in _tiles(n, br):
            if not _visited(rows, cols, causal):
                continue
            qi, oi, doi, dqi, li, mi = (hbm.load(name, rows) for name in ("Q", "O", "dO", "dQ", "l", "m"))
            s = _scores(qi, kj, rows, cols, causal)
            p = torch.exp(s - mi[:, None]) / li[:, None]
            dvj += p.T @ doi
            dp = doi @ vj.T
            di = (doi * oi).sum(dim=1)
            ds = p * (dp - di[:, None])
            dqi += tau * ds @ kj
            dkj += tau * ds.T @ qi
            sram.resident(kj, vj, dkj, dvj, qi, oi, doi, dqi, li, mi, s, p, dp, di, ds)
            hbm.store("dQ", dqi, rows)
        hbm.store("dK", dkj, cols)
        hbm.store("dV", dvj, cols)
