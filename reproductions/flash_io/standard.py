"""Standard attention for one head, counted the same way: S and P materialised in HBM (arXiv 2205.14135,
Algorithm 0 forward, Algorithm 3 backward).

Each step is one kernel that reads its operands from HBM and writes its result there. The scale tau and the
causal mask are fused into the kernel that writes S; softmax reads S and writes P in one pass. Operands of a
product are counted once each (the paper's accounting; see count.py).
"""

from __future__ import annotations

import math

import torch

from reproductions.flash_io.hbm import Hbm


def forward(hbm: Hbm, causal: bool) -> None:
    """S, P and O into HBM from Q, K, V there."""
    q, k = hbm.load("Q"), hbm.load("K")
    s = (q @ k.T) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    hbm.store("S", s)
    p = torch.softmax(hbm.load("S"), dim=-1)
    hbm.store("P", p)
    p, v = hbm.load("P"), hbm.load("V")
    hbm.store("O", p @ v)


def backward(hbm: Hbm, causal: bool) -> None:
    """dQ, dK, dV into HBM from Q, K, V, P, dO there (the mask lives in P's zeros)."""
    tau = 1 / math.sqrt(hbm.tensors["Q"].shape[-1])
    p, do = hbm.load("P"), hbm.load("dO")
    hbm.store("dV", p.T @ do)
    do, v = hbm.load("dO"), hbm.load("V")
    hbm.store("dP", do @ v.T)
    p, dp = hbm.load("P"), hbm.load("dP")
    hbm.store("dS", p * (dp - (p * dp).sum(dim=1, keepdim=True)))
    ds, k = hbm.load("dS"), hbm.load("K")
    hbm.store("dQ", tau * ds @ k)
    ds, q = hbm.load("dS"), hbm.load("Q")
    hbm.store("dK", tau * ds.T @ q)
