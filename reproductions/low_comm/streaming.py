"""Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512): DiLoCo whose outer step runs one fragment at a time,
its exchange overlapped with inner steps and sent in 4 bits.

K groups (replicas; DDP inside, one rank each by default) train as in DiLoCo (reproductions/fl_fsdp/method.py).
The model's transformer blocks split into P fragments: strided (fragment j holds blocks j, j + P, ...; the paper's
default) or sequential (consecutive blocks). The parameters outside every block go with the fragment next to them,
the embedding with fragment 0 and the final norm and head with fragment P - 1, as torchtitan's split puts them (the
paper does not say). Fragment p, counting steps t from 1 (Algorithm 2, read literally):

- at every t with (t - t_p) mod H = 0, t_p = floor(p H / P), sends its outer gradient, its global copy minus its
  local parameters, averaged over the K groups (a fragment with t_p > 0 first sends after t_p steps; in any H
  consecutive steps each fragment sends once, so the ledger's period H counts each once);
- tau steps later (tau < H) takes the outer Nesterov step on that average, moving its global copy, and merges it
  into the local fragment: local = alpha local + (1 - alpha) global (Algorithm 2 lines 11-12).

The outer gradient travels as E3M0 (quantize.py), each group's unreduced (an all-gather), summed in FP32 where it
arrives (section 2.4), or as FP32 (`quantize=none`, an all-reduce). Every group evaluates the global copies, the
outer parameters, as the paper's Table 3 does (better than any one replica's).

What differs from the paper: the exchange is a blocking collective at step t here and its result waits tau steps,
so the arithmetic is the paper's and the time the overlap hides is not measured (suite/sim projects it); a run's
checkpoint does not hold an exchange still waiting. Written here because no maintained library runs it on gloo:
torchft's DiLoCo takes fragments from its user, needs its Manager and quantizes (FP8) on CUDA only.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.nn.parallel import DistributedDataParallel

from reproductions.fl_fsdp.averaging import FederatedAverager
from reproductions.fl_fsdp.method import DiLoCo
from reproductions.low_comm import quantize as q
from suite.models import blocks_of, model_config
from suite.params import Param
from suite.run.strategy import Context

PATTERNS = ("strided", "sequential")
FORMATS = ("e3m0", "none")


def fragment_blocks(n_blocks: int, p: int, pattern: str) -> list[list[int]]:
    """The block indices of each of `p` fragments of `n_blocks` blocks."""
    if pattern == "strided":
        return [list(range(j, n_blocks, p)) for j in range(p)]
    size, extra = divmod(n_blocks, p)
    starts = [j * size + min(j, extra) for j in range(p + 1)]
    return [list(range(starts[j], starts[j + 1])) for j in range(p)]


def fragment_params(model: nn.Module, p: int, pattern: str) -> list[list[nn.Parameter]]:
    """`model`'s parameters by fragment (fragment_blocks), the ones outside every block with the fragment next to
    them: before the first block with fragment 0, after it with fragment p - 1."""
    blocks = blocks_of(model)
    owner = {j: f for f, members in enumerate(fragment_blocks(len(blocks), p, pattern)) for j in members}
    of_param = {id(t): owner[j] for j, block in enumerate(blocks) for t in block.parameters()}
    out: list[list[nn.Parameter]] = [[] for _ in range(p)]
    seen_block = False
    for t in model.parameters():
        seen_block |= id(t) in of_param
        out[of_param.get(id(t), p - 1 if seen_block else 0)].append(t)
    return out


def offsets(h: int, p: int) -> list[int]:
    """Each fragment's step offset t_p = floor(p H / P)."""
    return [j * h // p for j in range(p)]


class FragmentAverager(FederatedAverager):
    """One fragment's outer state: its global copy (the anchor) and outer optimizer, an exchange that waits."""

    def __init__(self, *args, fmt: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fmt = fmt
        self.pending: torch.Tensor | None = None

    @torch.no_grad()
    def send(self) -> None:
        """The outer gradient (global copy minus local), averaged over the groups, kept until apply()."""
        delta = self.anchor.detach() - _flatten_dense_tensors(self.local)
        if self.fmt == "none":
            dist.all_reduce(delta, group=self.group)  # sum: gloo has no average
        else:
            message = q.quantize(delta)
            gathered = [torch.empty_like(message) for _ in range(self.k)]
            dist.all_gather(gathered, message, group=self.group)  # each group's unreduced outer gradient
            delta = torch.stack([q.dequantize(m, delta.numel()) for m in gathered]).sum(0)  # FP32, rank order
        self.pending = delta.div_(self.k)

    @torch.no_grad()
    def apply(self, alpha: float, check: bool = False) -> None:
        """The outer step on the waiting average, merged into the local fragment with weight `alpha` on local."""
        self.anchor.grad, self.pending = self.pending, None
        self.outer.step()
        for t, new in zip(self.local, _unflatten_dense_tensors(self.anchor.detach(), self.local)):
            if alpha == 0:
                t.copy_(new)  # DiLoCo's: exactly the global copy
            else:
                t.mul_(alpha).add_(new, alpha=1 - alpha)
        if check:
            self._check_anchor()
        self.rounds += 1

    def _check_anchor(self) -> None:
        anchor = self.anchor.detach()
        if any(not torch.equal(g, anchor) for g in self._gather(anchor)):
            raise AssertionError("the groups' global copies of a fragment differ after its outer step")


class Fragments:
    """Every fragment's averager; `params` and `local` over the whole model, as describe() reads a FederatedAverager."""

    def __init__(self, fragments: list[FragmentAverager]) -> None:
        self.fragments = fragments
        self.params = [t for f in fragments for t in f.params]

    @property
    def local(self) -> list[torch.Tensor]:
        return [t for f in self.fragments for t in f.local]


class StreamingDiLoCo(DiLoCo):
    """DiLoCo's outer step fragment by fragment, staggered over H = F steps, overlapped tau steps, sent in E3M0."""

    name = "streaming-diloco"
    params = {
        **DiLoCo.params,
        "P": Param(int, 2, "fragments the blocks split into", low=1),
        "pattern": Param(str, "strided", "strided (blocks j, j+P, ...) or sequential fragments", PATTERNS),
        "tau": Param(int, 1, "inner steps between a fragment's exchange and its outer step (the overlap)", low=0),
        "alpha": Param(float, 0.5, "the local fragment's weight when the outer step is merged in", low=0, high=1),
        "quantize": Param(str, "e3m0", "the outer gradient's format on the wire", FORMATS),
    }

    def __init__(self, cfg, variant: dict | None = None) -> None:
        super().__init__(cfg, variant)
        v = self.variant
        if v["outer"] == "none":
            raise ValueError("streaming-diloco steps each fragment's global copy: keep an outer optimizer (nesterov)")
        if self.inner != "ddp":
            raise ValueError("streaming-diloco evaluates the global copies on an unsharded model: use inner=ddp")
        if v["average_moments"]:
            raise ValueError("average_moments is FL+FSDP's: drop it for streaming-diloco")
        if not v["tau"] < self.F:
            raise ValueError(f"tau must be below F (a fragment's next exchange comes F steps later): tau < {self.F}")
        if v["P"] > self.F:
            raise ValueError(f"P = {v['P']} fragments need F >= P steps for distinct offsets: raise F or lower P")
        blocks = model_config(cfg.model).get("n_layers")  # a transformer's blocks; other models are checked at build
        if blocks is not None and v["P"] > blocks:
            raise ValueError(f"P = {v['P']} fragments of {cfg.model}'s {blocks} blocks leave one empty: P <= {blocks}")
        self.offsets = offsets(self.F, v["P"])
        self.due: dict[int, int] = {}

    def make_averager(self, model: nn.Module, *args, **kwargs) -> Fragments:
        self.blocks = fragment_blocks(len(blocks_of(model)), self.variant["P"], self.variant["pattern"])
        groups = fragment_params(model, self.variant["P"], self.variant["pattern"])
        if any(not g for g in groups):
            raise ValueError(f"P = {self.variant['P']} fragments leave one empty: lower P to the blocks or fewer")
        return Fragments([FragmentAverager(g, *args, fmt=self.variant["quantize"], **kwargs) for g in groups])

    def after_step(self, model: nn.Module, step: int, ctx: Context) -> None:
        t, v = step + 1, self.variant
        for p, (frag, t_p) in enumerate(zip(self.averager.fragments, self.offsets)):
            if (t - t_p) % self.F == 0:
                frag.send()
                self.due[p] = t + v["tau"]
        for p in [p for p, when in self.due.items() if when == t]:
            self.averager.fragments[p].apply(v["alpha"], check=v["check"])
            del self.due[p]

    def optimizers(self) -> list[torch.optim.Optimizer]:
        averager = getattr(self, "averager", None)
        return [f.outer for f in averager.fragments] if averager is not None else []

    def eval_model(self, model: nn.Module) -> nn.Module:
        """A copy of the model holding every fragment's global copy (the outer parameters)."""
        net = model.module if isinstance(model, DistributedDataParallel) else model
        out = copy.deepcopy(net)
        where = {id(t): i for i, t in enumerate(net.parameters())}
        theirs = list(out.parameters())
        with torch.no_grad():
            for frag in self.averager.fragments:
                for t, value in zip(frag.params, _unflatten_dense_tensors(frag.anchor.detach(), frag.local)):
                    theirs[where[id(t)]].copy_(value)
        return out

    def describe(self, ctx: Context) -> dict:
        d = super().describe(ctx)
        v, k = self.variant, self.dims.K
        sizes = [sum(t.numel() for t in f.local) for f in self.averager.fragments]
        wire = (
            "in E3M0, every group's all-gathered and summed in FP32"
            if v["quantize"] == "e3m0"
            else "in FP32, all-reduced"
        )
        d["fl"]["averaging"] = (
            f"fragment by fragment: fragment p sends at steps t (from 1) with (t - t_p) mod {self.F} = 0 its outer "
            f"gradient ({wire}) over group fed, and {v['tau']} step(s) later takes its outer step, "
            f"local = {v['alpha']:g} local + {1 - v['alpha']:g} global"
        )
        d["fl"]["evaluation"] = "the outer parameters: every fragment's global copy (the paper's Table 3)"
        d["fl"]["streaming"] = {
            "P": v["P"],
            "pattern": v["pattern"],
            "blocks": self.blocks,
            "offsets": self.offsets,
            "elements": sizes,
            "tau": v["tau"],
            "alpha": v["alpha"],
            "quantize": v["quantize"],
            "block": q.BLOCK if v["quantize"] == "e3m0" else None,
            "payload_bytes_per_exchange": [exchange_bytes(n, k, v["quantize"]) for n in sizes],
        }
        return d


def exchange_bytes(n: int, k: int, fmt: str) -> int:
    """The ledger's payload of one fragment's exchange of `n` elements over `k` groups (suite/meters/comm.py: an
    all-gather's is its gathered output, an all-reduce's its tensor)."""
    return k * q.payload_bytes(n) if fmt == "e3m0" else 4 * n
