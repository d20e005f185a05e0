"""The orthogonalizers NorMuon, Dion2 and Dion3 choose from: Polar Express (the reference's default) or Muon's.

Polar Express (Amsel, Persson, Musco, Gower 2025, arXiv 2505.16932) replaces Newton-Schulz's one fixed
quintic with five tuned ones, p_t(X) = a_t X + b_t (X X^T) X + c_t (X X^T)^2 X, from the paper's 5-step
schedule (safety factor 2e-2, cushion 2; the 1.02 safety is inside every polynomial but the last). In bf16,
on the matrix divided by 1.02 x its Frobenius norm + eps, through the smaller Gram matrix (X^T X for a tall
X, multiplied on the right), as microsoft/dion's polar_express computes it (read, not copied).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from baselines.muon import newton_schulz5

POLAR_EXPRESS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
SAFETY = 1.02
EPS = 1e-8


def polar_express(g: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """The polar factor of g (singular values near 1), in bf16."""
    x = g.bfloat16()
    x = x / (x.norm() * SAFETY + eps)
    tall = g.size(0) > g.size(1)
    for a, b, c in POLAR_EXPRESS:
        gram = x.mT @ x if tall else x @ x.mT
        poly = b * gram + c * (gram @ gram)
        x = a * x + (x @ poly if tall else poly @ x)
    return x


ORTHOGONALIZERS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "polar_express": polar_express,
    "newton_schulz": newton_schulz5,  # the suite's Muon's: a matched comparison with Muon
}


def orthogonalizer(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name not in ORTHOGONALIZERS:
        raise ValueError(f"orthogonalize must be one of {', '.join(ORTHOGONALIZERS)}, got {name!r}")
    return ORTHOGONALIZERS[name]
