"""Emulated FP8 training of every block's linear layers: e4m3 inputs and weights, e5m2 output gradients.

Each tensor is scaled per tensor so that its largest magnitude lands on the format's largest finite value,
cast to the float8 dtype, cast back and unscaled (fake quantisation), and the matmul runs in fp32. This gives
FP8 training's rounding and range (the numerics) on a CPU without FP8 matmuls; it is slower than fp32, never
faster, and the record says "numerics only, not speed". Written here because torchao's float8 training needs
CUDA, and torch._scaled_mm on CPU does not take e5m2 gradients by e4m3 weights in every layout.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch import nn

from suite.models import blocks_of

FORWARD, BACKWARD = "float8_e4m3fn", "float8_e5m2"
NOTE = "emulated fp8 (e4m3 forward, e5m2 gradients, per-tensor scaling): numerics only, not speed"


def missing_dtypes() -> list[str]:
    """The float8 dtypes this torch lacks (fp8 is refused where any is missing)."""
    return [name for name in (FORWARD, BACKWARD) if not hasattr(torch, name)]


def fake_quantize(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`t` rounded to `dtype` with a per-tensor scale (amax to the largest finite value), in t's dtype."""
    amax = t.detach().abs().amax().float().clamp(min=1e-12)
    scale = torch.finfo(dtype).max / amax
    return ((t.float() * scale).to(dtype).float() / scale).to(t.dtype)


class _Fp8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        fwd = getattr(torch, FORWARD)
        xq, wq = fake_quantize(x, fwd), fake_quantize(weight, fwd)
        ctx.save_for_backward(xq, wq)
        return F.linear(xq, wq)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xq, wq = ctx.saved_tensors
        gq = fake_quantize(grad, getattr(torch, BACKWARD))
        grad_x = gq @ wq
        grad_w = gq.reshape(-1, gq.shape[-1]).T @ xq.reshape(-1, xq.shape[-1])
        return grad_x, grad_w


def _fp8_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    out = _Fp8Matmul.apply(x, self.weight)
    return out if self.bias is None else out + self.bias


def apply_fp8(model: nn.Module) -> nn.Module:
    """Every linear layer inside the model's blocks computes through emulated fp8 (embedding and head stay fp32,
    as in torchao's recipes)."""
    for block in blocks_of(model):
        for module in block.modules():
            if isinstance(module, nn.Linear):
                module.forward = types.MethodType(_fp8_forward, module)
    return model
