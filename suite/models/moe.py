"""A mixture-of-experts LLaMA, single-device: each block's MLP is E SwiGLU experts behind a top-k router.

Routing as in Mixtral: the router scores every expert, each token goes to its k best, and their outputs are
summed with the softmax of those k scores. Dropless (no capacity limit): every token reaches all k of its
experts, so a parallel run that moves rows between ranks computes what this module computes. Every expert
runs on every step, on no rows when none was routed to it, so that each expert parameter gets a gradient.
No load-balancing loss: the loop's loss is the task's alone; an expert-parallel run records the load per
expert instead.

`MoE.apply_experts(rows, counts)` is the one step a parallel strategy replaces from outside: `rows` are the
routed copies of the tokens sorted by expert, `counts` how many each expert gets.
"""

from dataclasses import dataclass

import torch
from torch import nn

from suite.models.llama import Block, FeedForward, Llama, LlamaConfig


@dataclass
class MoeConfig(LlamaConfig):
    n_experts: int = 8
    top_k: int = 2  # experts per token; ffn_dim is each expert's hidden width

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k {self.top_k} must be between 1 and n_experts {self.n_experts}")


# llama-tiny's attention; 8 experts of half its MLP width, 2 per token: the active MLP is llama-tiny's
MOE_CONFIGS: dict[str, MoeConfig] = {
    "llama-tiny-moe": MoeConfig(
        dim=256, n_layers=4, n_heads=8, n_kv_heads=8, vocab_size=256, ffn_dim=320, max_seq_len=1024
    ),
}


def expert_params(cfg: MoeConfig) -> int:
    """Parameters of one expert (a SwiGLU MLP's three matrices)."""
    return 3 * cfg.dim * cfg.ffn_dim


def active_params(cfg: MoeConfig, total: int) -> int:
    """Parameters one token passes through: all but the n_experts - top_k experts it skips in each block."""
    return total - cfg.n_layers * (cfg.n_experts - cfg.top_k) * expert_params(cfg)


def run_experts(experts: nn.ModuleList, rows: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Each expert on its consecutive slice of `rows` (an empty slice included)."""
    return torch.cat([expert(chunk) for expert, chunk in zip(experts, rows.split(counts), strict=True)])


class MoE(nn.Module):
    def __init__(self, cfg: MoeConfig) -> None:
        super().__init__()
        self.n_experts, self.top_k = cfg.n_experts, cfg.top_k
        self.router = nn.Linear(cfg.dim, cfg.n_experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(cfg) for _ in range(cfg.n_experts))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N, dim] -> (weights [N, k], expert indices [N, k])."""
        scores, chosen = self.router(x).topk(self.top_k, dim=-1)
        return scores.float().softmax(dim=-1), chosen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        weights, chosen = self.route(flat)
        order = chosen.flatten().argsort(stable=True)  # routed copies grouped by expert
        counts = torch.bincount(chosen.flatten(), minlength=self.n_experts)
        token = order // self.top_k
        y = self.apply_experts(flat[token], counts)
        weighted = (y * weights.flatten()[order, None]).type_as(flat)
        return torch.zeros_like(flat).index_add(0, token, weighted).view_as(x)

    def apply_experts(self, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return run_experts(self.experts, rows, counts.tolist())

    def init_weights(self, out_std: float) -> None:
        nn.init.normal_(self.router.weight, std=0.02)
        for expert in self.experts:
            expert.init_weights(out_std)


class MoeBlock(Block):
    feed_forward_type = MoE


class MoeLlama(Llama):
    block_type = MoeBlock
