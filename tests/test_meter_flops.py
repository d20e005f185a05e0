import importlib

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop
from torch.utils.flop_counter import FlopCounterMode, flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from suite.meters import flops
from suite.meters.flops import FlopMeter, transformer_step_flops

aten = torch.ops.aten


def attention_flops(backend: SDPBackend, shape: tuple[int, int, int, int]) -> tuple[int, int]:
    """(forward, backward) FLOPs counted for one causal SDPA call run by `backend`."""
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    with sdpa_kernel(backend), FlopCounterMode(display=False) as fwd:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with sdpa_kernel(backend), FlopCounterMode(display=False) as bwd:
        out.sum().backward()
    return fwd.get_total_flops(), bwd.get_total_flops()


def test_cpu_attention_kernels_have_formulas_and_reimport_is_harmless():
    assert aten._scaled_dot_product_flash_attention_for_cpu in flop_registry
    assert aten._scaled_dot_product_flash_attention_for_cpu_backward in flop_registry
    importlib.reload(flops)


def test_cpu_flash_attention_counts_like_the_math_backend():
    shape = (2, 4, 32, 16)
    flash_fwd, flash_bwd = attention_flops(SDPBackend.FLASH_ATTENTION, shape)
    math_fwd, math_bwd = attention_flops(SDPBackend.MATH, shape)
    assert flash_fwd == sdpa_flop_count(shape, shape, shape) > 0
    assert flash_bwd == sdpa_backward_flop_count(shape, shape, shape, shape)
    assert flash_fwd == math_fwd
    # The flash backward recomputes the score matrix (5 matmuls); MATH's autograd runs 4.
    assert 4 * flash_bwd == 5 * math_bwd


class Block(nn.Sequential):
    def __init__(self, dim: int) -> None:
        super().__init__(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))


class Net(nn.Module):
    def __init__(self, dim: int = 32, depth: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 8)
        self.checkpoint: dict | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, **self.checkpoint) if self.checkpoint else block(x)
        return self.head(x)


def measured_step(net: Net, x: torch.Tensor) -> FlopMeter:
    with FlopMeter() as meter:
        net(x).square().mean().backward()
    return meter


def blocks_forward_flops(net: Net, x: torch.Tensor, with_last_linear: bool) -> int:
    """Forward FLOPs of the checkpointed blocks (every block maps dim to dim, so `x` fits each)."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        for block in net.blocks:
            h = x
            for layer in list(block)[: len(block) if with_last_linear else -1]:
                h = layer(h)
    return counter.get_total_flops()


@pytest.fixture
def net_and_input() -> tuple[Net, torch.Tensor]:
    torch.manual_seed(0)
    return Net(), torch.randn(16, 32, requires_grad=True)


def test_without_checkpointing_nothing_is_recomputed(net_and_input):
    net, x = net_and_input
    meter = measured_step(net, x)
    with torch.no_grad(), FlopCounterMode(display=False) as forward_only:
        net(x)
    assert meter.recompute_flops == 0
    assert meter.forward_flops == forward_only.get_total_flops() > 0
    # Every layer here is a Linear whose input needs a gradient: backward is exactly 2x forward.
    assert meter.backward_flops == 2 * meter.forward_flops
    assert meter.hardware_flops == meter.model_flops == meter.get_total_flops()


@pytest.mark.parametrize(
    "checkpoint_kwargs, early_stop, recomputes_last_linear",
    [
        ({"use_reentrant": False}, False, True),
        ({"use_reentrant": True}, True, True),
        # Non-reentrant checkpointing stops recomputing once it has every saved tensor: a block's last
        # Linear only saves its input, so it is not run again.
        ({"use_reentrant": False}, True, False),
    ],
)
def test_checkpointing_adds_recompute_but_keeps_model_flops(
    net_and_input, checkpoint_kwargs, early_stop, recomputes_last_linear
):
    net, x = net_and_input
    plain = measured_step(net, x)
    net.checkpoint = checkpoint_kwargs
    with set_checkpoint_early_stop(early_stop):
        ac = measured_step(net, x)
    assert ac.model_flops == plain.model_flops
    assert ac.forward_flops == plain.forward_flops
    assert ac.recompute_flops == blocks_forward_flops(net, x, recomputes_last_linear) > 0
    assert ac.hardware_flops == ac.get_total_flops() == plain.model_flops + ac.recompute_flops


class TinyTransformer(nn.Module):
    """Pre-norm decoder: embedding, n_layers x (attention + 4x MLP), LM head."""

    def __init__(self, vocab: int, dim: int, n_layers: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.LayerNorm(dim),
                    "qkv": nn.Linear(dim, 3 * dim, bias=False),
                    "proj": nn.Linear(dim, dim, bias=False),
                    "norm2": nn.LayerNorm(dim),
                    "up": nn.Linear(dim, 4 * dim, bias=False),
                    "down": nn.Linear(4 * dim, dim, bias=False),
                }
            )
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        batch, seq, dim = x.shape
        for layer in self.layers:
            q, k, v = layer["qkv"](layer["norm1"](x)).view(batch, seq, 3, self.n_heads, -1).unbind(2)
            att = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            x = x + layer["proj"](att.transpose(1, 2).reshape(batch, seq, dim))
            x = x + layer["down"](F.gelu(layer["up"](layer["norm2"](x))))
        return self.head(self.norm(x))


@settings(max_examples=6, deadline=None)
@given(
    heads=st.integers(1, 4),
    head_dim=st.sampled_from([8, 16]),
    n_layers=st.integers(1, 3),
    seq_len=st.sampled_from([8, 16, 32]),
    vocab=st.integers(16, 128),
    backend=st.sampled_from([SDPBackend.MATH, SDPBackend.FLASH_ATTENTION]),
)
def test_transformer_formula_matches_flop_counter(heads, head_dim, n_layers, seq_len, vocab, backend):
    dim = heads * head_dim
    model = TinyTransformer(vocab, dim, n_layers, heads)
    tokens = torch.randint(vocab, (2, seq_len))
    with sdpa_kernel(backend), FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()).backward()
    n_matrices = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and "embed" not in name)
    n_head = model.head.weight.numel()
    expected = transformer_step_flops(n_matrices - n_head, n_layers, dim, seq_len, tokens.numel(), vocab)
    # The flash backward also recomputes QK^T: 2 * seq_len * dim per token and layer beyond 2x forward.
    flash_extra = 2 * n_layers * seq_len * dim * tokens.numel() if backend == SDPBackend.FLASH_ATTENTION else 0
    assert counter.get_total_flops() == expected + flash_extra


def test_causal_halving_halves_only_attention():
    full = transformer_step_flops(1000, 2, 64, 128, 4096, 256)
    halved = transformer_step_flops(1000, 2, 64, 128, 4096, 256, causal_halved=True)
    assert full - halved == 12 * 2 * 128 * 64 * 4096 // 2


def test_transformer_formula_rejects_nonpositive_sizes():
    with pytest.raises(ValueError, match="seq_len must be positive"):
        transformer_step_flops(1000, 2, 64, 0, 4096, 256)


def test_optimizer_step_flops_are_apart_from_model_flops(net_and_input):
    """A Muon step orthogonalizes every matrix by matmuls: those FLOPs are the optimizer's, never the model's."""
    from baselines.muon import Muon

    net, x = net_and_input
    plain = measured_step(net, x)
    opt = Muon([{"params": [p for p in net.parameters() if p.ndim == 2]}])
    with FlopMeter() as meter:
        net(x).square().mean().backward()
        opt.step()
    assert meter.model_flops == plain.model_flops
    assert meter.forward_flops == plain.forward_flops
    assert meter.optimizer_flops > 0
    assert meter.get_total_flops() == meter.model_flops + meter.optimizer_flops
