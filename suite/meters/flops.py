"""FLOPs of a training step, counted by PyTorch's FlopCounterMode, with recomputation kept apart.

FlopCounterMode counts every op with a formula, but leaves two gaps this module fills:
- the CPU attention kernel (`aten._scaled_dot_product_flash_attention_for_cpu` and its backward) has no
  formula and counts as 0; we register formulas built from flop_counter's own sdpa helpers. Like
  FlopCounterMode's CUDA kernels, attention is counted in full even under a causal mask (not halved), and
  the flash backward includes its recomputation of the score matrix (2.5x the forward; the MATH backend's
  four autograd matmuls count 2x);
- recomputation from activation checkpointing is folded into its total. FlopMeter splits it out: an op is
  recomputation when the autograd engine is running a backward (`_current_graph_task_id() != -1`) with
  grad mode on. The engine runs backward formulas with grad mode off (it follows `create_graph`), while
  torch.utils.checkpoint (reentrant and not, checkpoint_wrapper, selective AC) re-runs the forward under
  `enable_grad`. This sees checkpointed functions as well as modules; it would misfile a backward run with
  `create_graph=True` as recomputation, which a training step does not do;
- an optimizer step runs outside any graph task too, so Muon's and Dion's matmuls (Newton-Schulz, power
  iteration) would count as forward FLOPs of the model. FlopMeter books every op run inside any
  `torch.optim.Optimizer.step` (torch's global step hooks, which every Optimizer subclass calls, outer
  optimizers too) as optimizer FLOPs: counted, never model FLOPs, never spending a budget. The hooks are the
  process's, so a step counts only when it runs in the thread that entered the meter (emulated workers,
  suite/run/emulate.py, are threads of one process, each with its own meter).
"""

import threading

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.flop_counter import (
    FlopCounterMode,
    flop_registry,
    register_flop_formula,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)
from typing_extensions import Self

aten = torch.ops.aten


def _cpu_flash_attention_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_attention_backward_flop(
    grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _register_cpu_attention_formulas() -> None:
    # flop_registry is global: a reload of this module, or a torch that adds these formulas itself,
    # must not raise torch's "duplicate registrations" error.
    formulas = {
        aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_attention_flop,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_attention_backward_flop,
    }
    for op, formula in formulas.items():
        if op not in flop_registry:
            register_flop_formula(op)(formula)


_register_cpu_attention_formulas()


def _phase(in_optimizer: bool) -> str:
    if in_optimizer:
        return "optimizer"
    if torch._C._current_graph_task_id() == -1:
        return "forward"
    return "recompute" if torch.is_grad_enabled() else "backward"


class FlopMeter(FlopCounterMode):
    """FlopCounterMode (display off) that also sorts each counted op into forward, backward, recompute or
    optimizer.

    model_flops = forward + backward (what the model needs, the same with or without checkpointing);
    hardware_flops = model_flops + recompute_flops (what the device ran for the model);
    optimizer_flops: every optimizer step's own ops, apart from both.
    """

    def __init__(self) -> None:
        super().__init__(display=False)
        self._by_phase = dict.fromkeys(("forward", "backward", "recompute", "optimizer"), 0)
        self._optimizer_depth = 0
        self._hooks: list = []

    def __enter__(self) -> Self:
        self._by_phase = dict.fromkeys(self._by_phase, 0)
        self._optimizer_depth = 0
        self._thread = threading.get_ident()
        self._hooks = [
            register_optimizer_step_pre_hook(self._enter_step),
            register_optimizer_step_post_hook(self._exit_step),
        ]
        super().__enter__()
        return self

    def __exit__(self, *args) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        return super().__exit__(*args)

    def _enter_step(self, optimizer, args, kwargs) -> None:
        if threading.get_ident() == self._thread:
            self._optimizer_depth += 1

    def _exit_step(self, optimizer, args, kwargs) -> None:
        if threading.get_ident() == self._thread:
            self._optimizer_depth -= 1

    def _count_flops(self, func_packet, out, args, kwargs):
        # The parent adds each op's count to every enclosing module and to "Global", which always encloses.
        before = self.flop_counts["Global"][func_packet]
        out = super()._count_flops(func_packet, out, args, kwargs)
        self._by_phase[_phase(self._optimizer_depth > 0)] += self.flop_counts["Global"][func_packet] - before
        return out

    @property
    def forward_flops(self) -> int:
        return self._by_phase["forward"]

    @property
    def backward_flops(self) -> int:
        return self._by_phase["backward"]

    @property
    def recompute_flops(self) -> int:
        return self._by_phase["recompute"]

    @property
    def optimizer_flops(self) -> int:
        return self._by_phase["optimizer"]

    @property
    def model_flops(self) -> int:
        return self.forward_flops + self.backward_flops

    @property
    def hardware_flops(self) -> int:
        return self.model_flops + self.recompute_flops


def transformer_step_flops(
    n_params_nonembedding: int,
    n_layers: int,
    dim: int,
    seq_len: int,
    tokens: int,
    vocab_size: int,
    causal_halved: bool = False,
) -> int:
    """Analytic FLOPs of one forward + backward of a decoder-only transformer over `tokens` tokens.

    Counts 2 FLOPs per multiply-add and takes backward = 2x forward (Kaplan et al. 2020, section 2.1;
    Hoffmann et al. 2022, appendix F):
    - weights: forward 2 * N per token, backward 4 * N, so 6 * N * tokens. N counts the weight
      matrices of the blocks (Kaplan's N = 12 * n_layers * dim**2 for a 4x MLP); it excludes the token
      embedding (a lookup), the LM head (its own term below), and norms and biases (no matmul; counting
      them overstates a model of dim 8 by 6%, one of dim 512 by 0.1%);
    - attention scores and mixing, per token and layer: QK^T costs 2 * seq_len * dim and softmax(.)V
      another 2 * seq_len * dim, so 4 * seq_len * dim forward and 12 * seq_len * dim with backward;
      halved when `causal_halved` (kernels that skip masked blocks; FlopCounterMode does not halve);
    - LM head: a dim x vocab_size matmul, 6 * vocab_size * dim * tokens.
    """
    sizes = {
        "n_params_nonembedding": n_params_nonembedding,
        "n_layers": n_layers,
        "dim": dim,
        "seq_len": seq_len,
        "tokens": tokens,
        "vocab_size": vocab_size,
    }
    for name, value in sizes.items():
        if value <= 0:
            raise ValueError(f"transformer_step_flops: {name} must be positive, got {value}")
    weights = 6 * n_params_nonembedding * tokens
    attention = 12 * n_layers * seq_len * dim * tokens
    if causal_halved:
        attention //= 2
    head = 6 * vocab_size * dim * tokens
    return weights + attention + head
