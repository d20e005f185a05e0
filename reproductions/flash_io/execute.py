"""Run one instrumented algorithm on one head's tensors: outputs, gradients and the elements it moved."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reproductions.flash_io import standard, tiled
from reproductions.flash_io.count import ALGORITHMS, Io, check_shape
from reproductions.flash_io.hbm import Hbm, Sram


@dataclass
class Executed:
    out: torch.Tensor
    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # dQ, dK, dV
    io: Io
    sram_peak: int  # most elements resident on chip at once (tiled; standard's whole-tensor kernels: 0, not modelled)


def execute(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor | None = None,
    m: int | None = None,
    *,
    algorithm: str,
    causal: bool = False,
) -> Executed:
    """Forward (and backward when `grad_out` is given) of softmax(QK^T / sqrt(d)) V for N x d tensors."""
    if q.dim() != 2 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(
            f"one head's Q, K, V must all be N x d, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    n, d = q.shape
    check_shape(n, d, m if algorithm == "tiled" else None)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of: {', '.join(ALGORITHMS)}")
    hbm, sram = Hbm(), Sram()
    for name, t in (("Q", q), ("K", k), ("V", v)):
        hbm.put(name, t.detach())
    run_forward, run_backward = (
        (lambda: tiled.forward(hbm, sram, m, causal), lambda: tiled.backward(hbm, sram, m, causal))
        if algorithm == "tiled"
        else (lambda: standard.forward(hbm, causal), lambda: standard.backward(hbm, causal))
    )
    with torch.no_grad():
        run_forward()
        grads = None
        if grad_out is not None:
            hbm.put("dO", grad_out.detach())
            run_backward()
            grads = (hbm.tensors["dQ"], hbm.tensors["dK"], hbm.tensors["dV"])
    return Executed(hbm.tensors["O"], grads, Io(hbm.reads, hbm.writes), sram.peak)
