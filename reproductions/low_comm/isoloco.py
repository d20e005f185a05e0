"""IsoLoCo (Horoi, Therien, Wolf, Belilovsky 2026, arXiv 2607.03011): DiLoCo whose averaged pseudo-gradient is made
isotropic, matrix by matrix, before the outer Nesterov step.

K groups train as in DiLoCo (reproductions/fl_fsdp/method.py) and all-reduce their parameters every H = F steps,
the same call and bytes as DiLoCo. The pseudo-gradient Delta = theta_prev - mean(theta_i) is then, for each matrix
(a 2-D parameter), replaced by Iso-C's merge (Marczak et al. 2025, arXiv 2502.04959): with Delta = U S V^T its thin
SVD, Delta_iso = mean(S) U V^T, every singular value set to their mean (zeros counted, r = min(m, n)), which keeps
the nuclear norm and lifts the directions the average shrank. Other parameters (norms' weights) keep the plain
average. `outer=nesterov` is IsoLoCo; `outer=sgd` with `outer_momentum=0` the paper's "DiLoCo SGD with Iso-C".

Which matrices: Iso-C's public code (danielm1405/iso-merging, src/utils/iso.py) takes every 2-D weight, so
`matrices=all` (the default) does; `matrices=blocks` keeps the embedding and head on the plain average, for the
case the paper may treat otherwise (its text was not readable here: docs/sources.md#low-comm). Written here because
no maintained library has it; the SVD is torch.linalg's, and every group computes the same one from the same
average (check=true verifies that the groups agree after each round).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from reproductions.fl_fsdp.averaging import FederatedAverager
from reproductions.fl_fsdp.method import DiLoCo
from suite.models import blocks_of
from suite.params import Param

MATRICES = ("all", "blocks")


def iso(delta: torch.Tensor) -> torch.Tensor:
    """Iso-C's merge of one matrix: its singular values all set to their mean. On a CPU the SVD runs on one thread:
    LAPACK's result depends on how many share it, and Iso-C lifts the smallest singular directions, where that
    difference lives, to the mean (a run of 2 workers at 1 and at 2 threads a worker differed by 2.8e-5 nats after
    one round, even in float64); on one thread it is the same on every machine and rank, and faster here (0.46 s
    against 3.0 s for llama-tiny's 30 matrices on 2 busy cores)."""
    with _one_thread(delta):
        u, s, vh = torch.linalg.svd(delta, full_matrices=False)
        return (u * s.mean()) @ vh


@contextmanager
def _one_thread(t: torch.Tensor) -> Iterator[None]:
    """torch's intra-op threads set to one while a CPU `t` is worked on (a GPU's SVD is cuSOLVER's either way)."""
    if t.is_cuda:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class IsoAverager(FederatedAverager):
    """DiLoCo's averaging; the pseudo-gradient of each of `iso_params` (2-D) made isotropic before the outer step."""

    def __init__(self, params: list[nn.Parameter], *args, iso_params: set[int], **kwargs) -> None:
        super().__init__(params, *args, **kwargs)
        self.iso = [id(p) in iso_params for p in params]

    def pseudo_gradient(self, target: torch.Tensor) -> torch.Tensor:
        delta = super().pseudo_gradient(target)
        start = 0
        for t, is_matrix in zip(self.local, self.iso):
            part = delta.narrow(0, start, t.numel())
            if is_matrix:
                part.copy_(iso(part.view(t.shape)).flatten())
            start += t.numel()
        return delta


def iso_matrices(model: nn.Module, which: str) -> set[int]:
    """The ids of the 2-D parameters Iso-C merges: every one (`all`) or the transformer blocks' (`blocks`)."""
    pool = [t for b in blocks_of(model) for t in b.parameters()] if which == "blocks" else model.parameters()
    return {id(t) for t in pool if t.ndim == 2}


class IsoLoCo(DiLoCo):
    """DiLoCo with Iso-C's isotropic merge of the averaged pseudo-gradient, matrix by matrix, then outer Nesterov."""

    name = "isoloco"
    params = {
        **DiLoCo.params,
        "matrices": Param(str, "all", "2-D parameters Iso-C merges: all, or blocks (not embedding, head)", MATRICES),
    }

    def __init__(self, cfg, variant: dict | None = None) -> None:
        super().__init__(cfg, variant)
        if self.variant["outer"] == "none":
            raise ValueError("isoloco steps the isotropic pseudo-gradient: keep an outer optimizer (nesterov or sgd)")
        if self.inner != "ddp":
            raise ValueError("isoloco takes the SVD of whole matrices, which FSDP shards: use inner=ddp")
        if self.variant["average_moments"]:
            raise ValueError("average_moments is FL+FSDP's: drop it for isoloco")

    def make_averager(self, model: nn.Module, *args, **kwargs) -> IsoAverager:
        iso_params = iso_matrices(model, self.variant["matrices"])
        return IsoAverager(list(model.parameters()), *args, iso_params=iso_params, **kwargs)

    def describe(self, ctx) -> dict:
        d = super().describe(ctx)
        merged = [tuple(p.shape) for p, m in zip(self.averager.params, self.averager.iso) if m]
        d["fl"]["merge"] = {
            "rule": "Iso-C per matrix: Delta_iso = mean(S) U V^T of the averaged pseudo-gradient's thin SVD",
            "matrices": self.variant["matrices"],
            "merged_shapes": [list(s) for s in merged],
            "averaged_elements": sum(p.numel() for p, m in zip(self.averager.params, self.averager.iso) if not m),
        }
        return d
