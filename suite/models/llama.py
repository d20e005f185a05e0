"""A LLaMA-style decoder in plain torch, single-device (torchtitan style).

Written by hand because no maintained library ships a small, dependency-free LLaMA whose blocks a
strategy can wrap from outside (DDP, FSDP2 per block, activation checkpointing per block) and whose
weights can be materialised after meta-device construction. The model knows nothing of parallelism.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class LlamaConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    ffn_dim: int
    max_seq_len: int
    tie_embeddings: bool = False
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        for field in ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_dim", "max_seq_len"):
            if getattr(self, field) < 1:
                raise ValueError(f"LlamaConfig.{field} must be >= 1, got {getattr(self, field)}")
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} (dim / n_heads) must be even for RoPE")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


# Llama 3 shapes keep Meta's published values; max_seq_len is the RoPE table length, not the
# 128K context of Llama 3.1/3.2 (that needs their RoPE scaling, which this model does not implement).
LLAMA_CONFIGS: dict[str, LlamaConfig] = {
    "llama-tiny": LlamaConfig(
        dim=256, n_layers=4, n_heads=8, n_kv_heads=8, vocab_size=256, ffn_dim=640, max_seq_len=1024
    ),
    # llama-tiny with 8 blocks: the smallest LLaMA on which SDP's C = 3/8 holds whole blocks (3 of 8)
    "llama-tiny-8l": LlamaConfig(
        dim=256, n_layers=8, n_heads=8, n_kv_heads=8, vocab_size=256, ffn_dim=640, max_seq_len=1024
    ),
    # llama-tiny with 16 blocks, llama-1b's depth: SDP's 1B runs hold whole blocks of 16 at 8 workers (issue 43)
    "llama-tiny-16l": LlamaConfig(
        dim=256, n_layers=16, n_heads=8, n_kv_heads=8, vocab_size=256, ffn_dim=640, max_seq_len=1024
    ),
    # llama-tiny at a quarter and half its width (FFN 2.5x the width, as llama-tiny's): Dion's trend along width
    "llama-tiny-w64": LlamaConfig(
        dim=64, n_layers=4, n_heads=8, n_kv_heads=8, vocab_size=256, ffn_dim=160, max_seq_len=1024
    ),
    "llama-tiny-w128": LlamaConfig(
        dim=128, n_layers=4, n_heads=8, n_kv_heads=8, vocab_size=256, ffn_dim=320, max_seq_len=1024
    ),
    "llama-50m": LlamaConfig(
        dim=512, n_layers=12, n_heads=8, n_kv_heads=8, vocab_size=256, ffn_dim=2048, max_seq_len=1024
    ),
    "llama-134m": LlamaConfig(
        dim=768, n_layers=12, n_heads=12, n_kv_heads=12, vocab_size=32000, ffn_dim=2048, max_seq_len=2048
    ),
    "llama-500m": LlamaConfig(
        dim=1280, n_layers=24, n_heads=20, n_kv_heads=4, vocab_size=32000, ffn_dim=3584, max_seq_len=2048
    ),
    "llama-1b": LlamaConfig(
        dim=2048,
        n_layers=16,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=128256,
        ffn_dim=8192,
        max_seq_len=8192,
        tie_embeddings=True,
        rope_theta=500000.0,
    ),
    "llama-8b": LlamaConfig(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=128256,
        ffn_dim=14336,
        max_seq_len=8192,
        rope_theta=500000.0,
    ),
}


def rope_tables(cfg: LlamaConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, [max_seq_len, head_dim / 2], in fp32."""
    inv_freq = cfg.rope_theta ** -(torch.arange(0, cfg.head_dim, 2, device=device, dtype=torch.float32) / cfg.head_dim)
    angles = torch.outer(torch.arange(cfg.max_seq_len, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent pairs of x [B, T, H, D] (Meta's convention), computing in fp32."""
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    cos, sin = cos[: x.shape[1], None, :].float(), sin[: x.shape[1], None, :].float()
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q = apply_rope(self.wq(x).view(B, T, self.n_heads, self.head_dim), cos, sin)
        k = apply_rope(self.wk(x).view(B, T, self.n_kv_heads, self.head_dim), cos, sin)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim)
        out = self.attend(*(t.transpose(1, 2) for t in (q, k, v)))
        return self.wo(out.transpose(1, 2).reshape(B, T, -1))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of q [B, H, T, D] over k, v [B, H_kv, T, D]; context parallelism replaces this step."""
        # Repeat K/V heads explicitly rather than pass enable_gqa: every SDPA backend and the FLOP
        # counter of every torch >= 2.6 then sees plain multi-head attention.
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def init_weights(self, out_std: float) -> None:
        for linear in (self.wq, self.wk, self.wv):
            nn.init.normal_(linear.weight, std=0.02)
        nn.init.normal_(self.wo.weight, std=out_std)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def init_weights(self, out_std: float) -> None:
        nn.init.normal_(self.w1.weight, std=0.02)
        nn.init.normal_(self.w3.weight, std=0.02)
        nn.init.normal_(self.w2.weight, std=out_std)


class Block(nn.Module):
    """One pre-norm residual block: the unit a strategy wraps (FSDP2, checkpointing) or drops."""

    feed_forward_type: type[nn.Module] = FeedForward  # a mixture of experts in suite.models.moe

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.feed_forward = self.feed_forward_type(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))

    def init_weights(self, out_std: float) -> None:
        self.attention_norm.reset_parameters()
        self.attention.init_weights(out_std)
        self.ffn_norm.reset_parameters()
        self.feed_forward.init_weights(out_std)


class Llama(nn.Module):
    block_type: type[Block] = Block

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        device = torch.get_default_device()
        # Build on meta and draw every weight once, in init_weights, so that direct construction and
        # meta -> to_empty -> init_weights consume the RNG identically and give the same model.
        with torch.device("meta"):
            self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
            self.layers = nn.ModuleList(self.block_type(cfg) for _ in range(cfg.n_layers))
            self.norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
            self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
            self.register_buffer("rope_cos", torch.empty(cfg.max_seq_len, cfg.head_dim // 2), persistent=False)
            self.register_buffer("rope_sin", torch.empty(cfg.max_seq_len, cfg.head_dim // 2), persistent=False)
        self.to_empty(device=device)
        self.init_weights()

    def init_weights(self) -> None:
        """(Re)draw all parameters from the global RNG, recompute the RoPE tables, tie the head.

        Weights are N(0, 0.02); the residual output projections (wo, w2) are scaled by
        1/sqrt(2 n_layers) so that the residual stream's variance does not grow with depth (GPT-2).
        """
        with torch.no_grad():
            cos, sin = rope_tables(self.cfg, self.rope_cos.device)
            self.rope_cos.copy_(cos)
            self.rope_sin.copy_(sin)
        if self.cfg.tie_embeddings:
            # Tied here, not in __init__: to_empty from meta gives each module its own parameter.
            self.output.weight = self.tok_embeddings.weight
        nn.init.normal_(self.tok_embeddings.weight, std=0.02)
        out_std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        for layer in self.layers:
            layer.init_weights(out_std)
        self.norm.reset_parameters()
        if not self.cfg.tie_embeddings:
            nn.init.normal_(self.output.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] -> logits [B, T, vocab_size]."""
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be [batch, seq_len], got shape {tuple(tokens.shape)}")
        if tokens.shape[1] > self.cfg.max_seq_len:
            raise ValueError(
                f"sequence length {tokens.shape[1]} exceeds max_seq_len {self.cfg.max_seq_len}; "
                "build the model with a larger max_seq_len"
            )
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.rope_cos, self.rope_sin)
        return self.output(self.norm(h))

    def num_params(self, exclude_embedding: bool = False) -> int:
        """Parameter count; exclude_embedding drops the input lookup table, which costs no FLOPs.

        A table tied to the output head stays counted, since the head multiplies by it.
        """
        total = sum(p.numel() for p in self.parameters())
        if exclude_embedding and not self.cfg.tie_embeddings:
            total -= self.tok_embeddings.weight.numel()
        return total
