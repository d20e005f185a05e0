"""E3M0: the 4-bit float Streaming DiLoCo sends its outer gradients in (arXiv 2501.18512 section 2.4).

One sign bit, three exponent bits and no mantissa: a code is 0 or +-2^(e - 7) times its block's scale, e = 1..7, so
the largest magnitude of a block is sent as its scale (fp32, one per BLOCK elements) and the rest round to the
nearest power of two down to 1/64 of it, or to 0. The paper names the format (after Agrawal et al. 2024) and says
the sum is taken in FP32 once received; it gives no block size or scale format, so those are this suite's: a
block of 128 and an fp32 scale, 68 bytes per 128 elements (0.53125 a parameter). Two codes share a byte.

Written here because torch has no E3M0 (its 4-bit float is E2M1, float4_e2m1fn_x2, with no CPU casts) and
torchft's quantized all-reduce is FP8 with Triton kernels on CUDA only.
"""

from __future__ import annotations

import math

import torch

BLOCK = 128
SCALE_BYTES = 4  # one fp32 scale per block
LEVELS = torch.tensor([0.0] + [2.0 ** (e - 7) for e in range(1, 8)])  # magnitudes over the block's scale
_MIDPOINTS = (LEVELS[1:] + LEVELS[:-1]) / 2
_SIGN = 8


def payload_bytes(n: int, block: int = BLOCK) -> int:
    """Bytes of one replica's message for `n` elements: the blocks' scales, then two codes a byte."""
    blocks = math.ceil(n / block)
    return blocks * SCALE_BYTES + blocks * block // 2


def quantize(x: torch.Tensor, block: int = BLOCK) -> torch.Tensor:
    """`x` (flat, float) as one uint8 message: payload_bytes(x.numel()) bytes, the scales first."""
    if block % 2:
        raise ValueError(f"an E3M0 block holds an even number of codes, not {block}")
    blocks = math.ceil(x.numel() / block)
    padded = torch.zeros(blocks * block, dtype=torch.float32, device=x.device)
    padded[: x.numel()] = x.detach().float().reshape(-1)
    rows = padded.view(blocks, block)
    scales = rows.abs().amax(dim=1)
    ratio = rows.abs() / torch.where(scales > 0, scales, 1.0)[:, None]
    codes = torch.bucketize(ratio, _MIDPOINTS.to(x.device)).to(torch.uint8)  # 0..7: the nearest level
    codes |= ((rows < 0) & (codes > 0)).to(torch.uint8) * _SIGN
    flat = codes.reshape(-1)
    packed = flat[0::2] | (flat[1::2] << 4)
    return torch.cat([scales.view(torch.uint8), packed])


def dequantize(message: torch.Tensor, n: int, block: int = BLOCK) -> torch.Tensor:
    """The `n` float32 values a quantize() message carries."""
    blocks = math.ceil(n / block)
    scales = message[: blocks * SCALE_BYTES].view(torch.float32)
    packed = message[blocks * SCALE_BYTES :]
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=1).reshape(blocks, block)
    magnitude = LEVELS.to(message.device)[(codes & 7).long()]
    signed = torch.where((codes & _SIGN) > 0, -magnitude, magnitude)
    return (signed * scales[:, None]).reshape(-1)[:n]
