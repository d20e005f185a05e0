"""Derived payload of layer-wise distributed Muon under DDP, the value its bytes card is checked against.

Per step each rank sends DDP's gradient all-reduce (every parameter, float32) and, per shape held by more than one
matrix, one all-gather of world x ceil(N / world) bf16 matrices of that shape (baselines/muon.py pads each shape's
list with zero matrices to a multiple of the world; a shape held by one matrix is orthogonalized on every rank and
not gathered). The ledger's count of each all-gather is checked against this per shape in
tests/test_muon_layerwise.py; the card checks the whole step's payload against it.
"""

from __future__ import annotations

import math
from collections import Counter

from torch import nn

from suite.models import build_model
from suite.run.optim import param_groups

FP32, BF16 = 4, 2


def matrix_shapes(model: nn.Module) -> Counter:
    """How many matrices of each shape the matrix optimizers step in `model` (param_groups' `matrices`)."""
    return Counter(tuple(p.shape) for p in param_groups(model)["matrices"])


def layerwise_gather_bytes(shapes: Counter, world: int) -> int:
    """Bytes one rank's all-gathers of layer-wise Muon carry per step (the ledger's payload convention)."""
    return sum(world * math.ceil(n / world) * rows * cols * BF16 for (rows, cols), n in shapes.items() if n > 1)


def layerwise_ratio(model: str, world: int) -> float:
    """DDP + layer-wise Muon's payload per rank per step over DDP + Muon's (the gradient all-reduce alone)."""
    built = build_model(model)
    gradient = sum(p.numel() for p in built.parameters()) * FP32
    return (gradient + layerwise_gather_bytes(matrix_shapes(built), world)) / gradient
