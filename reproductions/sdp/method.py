"""Subnetwork Data Parallelism (arXiv 2507.09029): `b-sdp` (forward masking) and `bb-sdp` (backward masking).

Written here because no public implementation exists (docs/sources.md#sdp). Each of the K ranks holds
the residual blocks its mask gives it (masks.py) and every part outside the blocks (embeddings, final
norm, head: "shared", held by all and recorded). After backward the gradient of each component is
summed over its holders and divided by their number, so holders apply the same update and stay
bit-identical:
- `aggregation=groups`: one process group per distinct holder set; each rank all-reduces one flat
  buffer per holder set it belongs to (the shared parts go with the set of all ranks);
- `aggregation=dense`: one zero-filled all-reduce of the whole model over all ranks, then division by
  the (static) holder counts: simpler, and as many bytes as DDP.
Forward masking replaces a dropped block by the identity path before the model reaches the device, so
its parameters, gradients, optimizer state and activations never exist on that rank. Backward masking
keeps the full forward, turns the weights of the blocks a rank does not hold into buffers (no gradient,
no optimizer state; the memory meter files them under `other`) and, after the step, refreshes them by a
broadcast from their first holder.
Gradient clipping uses the norm of the whole aggregated gradient, made identical on every rank by an
all-reduce (max) of per-tensor norms: clipping by each rank's own part would make holders diverge.
Evaluation runs on the full model, assembled on rank 0 from the first holder of every block it lacks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
import torch.distributed as dist
from torch import nn

from baselines import precision
from baselines.checkpointing import apply_activation_checkpointing
from reproductions.sdp.masks import Mask, assign
from suite import models
from suite.models import blocks_of
from suite.params import Param
from suite.run.strategy import Context, Strategy, local_tensor

AGGREGATIONS = ("groups", "dense")
SHARED = -1  # component index of the parts every rank holds


class SkippedBlock(nn.Module):
    """A dropped residual block: the identity path, with no parameters."""

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return x


def maskable_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks a worker may drop: those whose output has the shape of their input, so the identity
    path can stand in. A ResNet block with a projection shortcut (`downsample`: stride or width change)
    is not one; every worker holds it, with the shared parts."""
    return [b for b in blocks_of(model) if getattr(b, "downsample", None) is None]


def count_blocks(model_name: str) -> int:
    """Maskable blocks of `model_name`, counted on the meta device (no memory, no RNG)."""
    with torch.device("meta"):
        return len(maskable_blocks(models.build_model(model_name)))


def component_of_params(model: nn.Module) -> dict[str, int]:
    """Parameter name -> index of the block holding it, or SHARED."""
    names = {id(m): n for n, m in model.named_modules()}
    owner = {}
    for index, block in enumerate(maskable_blocks(model)):
        for name, _ in block.named_parameters(prefix=names[id(block)]):
            owner[name] = index
    return {name: owner.get(name, SHARED) for name, _ in model.named_parameters()}


def drop_blocks(model: nn.Module, keep: set[int]) -> nn.Module:
    """Replace every block whose index is not in `keep` by SkippedBlock, in place."""
    names = {id(m): n for n, m in model.named_modules()}
    for index, block in enumerate(maskable_blocks(model)):
        if index not in keep:
            parent, _, attr = names[id(block)].rpartition(".")
            setattr(model.get_submodule(parent), attr, SkippedBlock())
    return model


def freeze_blocks(model: nn.Module, keep: set[int]) -> nn.Module:
    """Backward masking: blocks not in `keep` still run forward, but get no gradient and no optimizer state.

    Their weights become buffers of the same name rather than parameters with requires_grad off: the
    optimizer, gradient clipping and PyTorch's MemTracker (which hooks every parameter's gradient) then
    all see only what this rank trains.
    """
    for index, block in enumerate(maskable_blocks(model)):
        if index in keep:
            continue
        for module in block.modules():
            for name, param in list(module.named_parameters(recurse=False)):
                delattr(module, name)
                module.register_buffer(name, param.detach())
    return model


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def _scatter(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


class SubnetworkDP(Strategy):
    """What forward- and backward-masked SDP share: masks, holder groups, aggregation, clipping, checks."""

    baseline = False
    forward_masked = True
    eval_on_every_rank = False  # eval_model gives rank 0 the whole plain model
    params = {
        "C": Param(float, 0.5, "fraction of the model each worker holds", low=0, high=1, low_open=True),
        "K": Param(int, None, "the number of SDP workers (default and only value: --nproc)", low=1),
        "aggregation": Param(str, "groups", "holders sum gradients in their own groups, or densely", AGGREGATIONS),
        "check_every": Param(int, None, "steps between holder checks (default: off)", low=0),
    }

    # ---- checks and set-up ------------------------------------------------------------------------
    def check(self, world_size: int) -> None:
        if "K" in self.variant and self.variant["K"] != world_size:
            raise ValueError(
                f"K={self.variant['K']} but the run has {world_size} workers; "
                f"drop --set K (it defaults to the number of workers) or use --nproc {self.variant['K']}"
            )
        assign(self.count_components(), world_size, self.variant["C"])

    def count_components(self) -> int:
        """The mask's L: maskable blocks of the configured model (a subclass may mask other units)."""
        return count_blocks(self.cfg.model)

    def setup(self, ctx: Context) -> None:
        self.check(ctx.world_size)
        self.variant["K"] = ctx.world_size

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        self.make_model, self.ctx = make_model, ctx
        model = self._mask_model(make_model(), ctx).to(ctx.device)
        if self.cfg.ac:
            apply_activation_checkpointing(model)
        self._make_groups(ctx)
        self._plan_buckets(model, ctx)
        self.info = self._describe_mask()
        return model

    def _mask_model(self, model: nn.Module, ctx: Context) -> nn.Module:
        """Choose the mask, map every parameter to its component, and drop or freeze what this rank lacks."""
        maskable = maskable_blocks(model)
        self.mask = assign(len(maskable), ctx.world_size, self.variant["C"])
        self.mine = set(self.mask.held[ctx.rank])
        self.component = component_of_params(model)
        self.numel = {n: p.numel() for n, p in model.named_parameters()}
        self.nbytes = {n: p.numel() * p.element_size() for n, p in model.named_parameters()}
        names = {id(m): n for n, m in model.named_modules()}
        self.always_held_blocks = [names[id(b)] for b in blocks_of(model) if b not in maskable]
        return (drop_blocks if self.forward_masked else freeze_blocks)(model, self.mine)

    def holders(self, component: int) -> tuple[int, ...]:
        return tuple(range(self.mask.workers)) if component == SHARED else self.mask.holders[component]

    def _make_groups(self, ctx: Context) -> None:
        """One group per distinct holder set of two or more ranks, created in the same order on every rank."""
        everyone = tuple(range(ctx.world_size))
        sets = sorted({self.holders(c) for c in set(self.component.values())}, key=lambda s: (len(s), s))
        self.groups: dict[tuple[int, ...], dist.ProcessGroup | None] = {}
        for ranks in sets:
            if len(ranks) == 1:
                continue
            group = None if ranks == everyone else dist.new_group(list(ranks))
            self.groups[ranks] = group
            if ctx.rank in ranks:
                ctx.label_group(group, "world" if ranks == everyone else f"holders{{{','.join(map(str, ranks))}}}")
        self.partial = self.mask.effective_coverage < 1
        self.norm_group = dist.new_group() if self.partial and self.cfg.grad_clip > 0 else None
        if self.norm_group is not None:
            ctx.label_group(self.norm_group, "grad-norm")
        self.refresh_group = dist.new_group() if self.partial and not self.forward_masked else None
        if self.refresh_group is not None:
            ctx.label_group(self.refresh_group, "param-refresh")
        self.check_group = ctx.cpu_group()

    def _plan_buckets(self, model: nn.Module, ctx: Context) -> None:
        trained = self._local_params(model)
        self.names = list(self.component)  # full-model order
        self.trained = [n for n in self.names if n in trained]
        self.local = {**dict(model.named_buffers()), **trained}  # with bb-sdp's frozen blocks
        self.buckets = [
            (ranks, group, [n for n in self.trained if self.holders(self.component[n]) == ranks])
            for ranks, group in self.groups.items()
            if ctx.rank in ranks
        ]

    def _local_params(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """What this rank trains, by the names `component` uses."""
        return dict(model.named_parameters())

    # ---- the loop's hooks ------------------------------------------------------------------------------
    def autocast(self, ctx: Context) -> AbstractContextManager:
        return precision.autocast(ctx.device, self.cfg.precision)

    @torch.no_grad()
    def after_backward(self, model: nn.Module, ctx: Context) -> None:
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if self.variant["aggregation"] == "dense":
            self._aggregate_dense(ctx)
        else:
            self._aggregate_groups()

    def _aggregate_groups(self) -> None:
        for ranks, group, names in self.buckets:
            grads = [self.local[n].grad for n in names]
            flat = _flat(grads).div_(len(ranks))
            dist.all_reduce(flat, group=group)
            _scatter(flat, grads)

    def _aggregate_dense(self, ctx: Context) -> None:
        """Zero-filled all-reduce of the whole model's gradient, then division by each part's holder count."""
        if ctx.world_size == 1:
            return
        sizes = [self.numel[n] for n in self.names]
        flat = torch.zeros(sum(sizes), device=ctx.device, dtype=self.local[self.trained[0]].grad.dtype)
        offsets = dict(zip(self.names, torch.tensor([0, *sizes]).cumsum(0).tolist()))
        for n in self.trained:
            flat[offsets[n] : offsets[n] + self.local[n].numel()].copy_(self.local[n].grad.reshape(-1))
        dist.all_reduce(flat)
        for n in self.trained:
            g = self.local[n].grad
            g.copy_(flat[offsets[n] : offsets[n] + g.numel()].view_as(g)).div_(len(self.holders(self.component[n])))

    @torch.no_grad()
    def clip_grad_norm(self, model: nn.Module, max_norm: float, ctx: Context) -> None:
        if self.norm_group is None:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=True)
            return
        norms = torch.zeros(len(self.names), dtype=torch.float32, device=ctx.device)
        for i, n in enumerate(self.names):
            if n in self.trained:
                norms[i] = torch.linalg.vector_norm(self.local[n].grad)
        # holders have identical gradients, so the max over ranks is each tensor's norm
        dist.all_reduce(norms, op=dist.ReduceOp.MAX, group=self.norm_group)
        total = torch.linalg.vector_norm(norms)
        nn.utils.clip_grads_with_norm_([self.local[n] for n in self.trained], max_norm, total, foreach=True)

    @torch.no_grad()
    def after_step(self, model: nn.Module, step: int, ctx: Context) -> None:
        if self.refresh_group is not None:
            self._refresh(ctx)
        every = self.variant.get("check_every", 0)
        if every and (step + 1) % every == 0:
            self._check_holders(step, ctx)

    def _refresh(self, ctx: Context) -> None:
        """Backward masking: every rank runs the full forward, so it needs the blocks it does not train."""
        for index in range(self.mask.components):
            ranks = self.mask.holders[index]
            if len(ranks) == ctx.world_size:
                continue
            params = [self.local[n] for n in self.names if self.component[n] == index]
            flat = _flat(params)
            dist.broadcast(flat, src=ranks[0], group=self.refresh_group)
            if ctx.rank not in ranks:
                _scatter(flat, params)

    def _shard_slot(self, ctx: Context) -> int | None:
        """Which shard of each component this rank holds; None when it holds whole components."""
        return None

    def _check_holders(self, step: int, ctx: Context) -> None:
        """Every copy of a component (or of one shard of it) must be bit-identical; compared by digest,
        off the ledger."""
        slot = self._shard_slot(ctx)
        digests = {}
        for c in sorted(set(self.component.values())):
            names = [n for n in self.names if self.component[n] == c and n in self.local]
            if names:
                h = hashlib.sha256()
                for n in names:
                    h.update(local_tensor(self.local[n]).detach().cpu().numpy().tobytes())
                digests[(c, slot)] = h.hexdigest()
        was, ctx.ledger.enabled = ctx.ledger.enabled, False
        gathered = [None] * ctx.world_size
        dist.all_gather_object(gathered, digests, group=self.check_group)
        ctx.ledger.enabled = was
        for key in digests:
            copies = {r: d[key] for r, d in enumerate(gathered) if key in d}
            if len(set(copies.values())) > 1:
                name = "shared parts" if key[0] == SHARED else f"block {key[0]}"
                shard = "" if slot is None else f"shard {slot} of "
                raise RuntimeError(
                    f"SDP holders diverged after step {step}: {shard}{name} differs across ranks {sorted(copies)}"
                )
        self.info["holder_checks"] = self.info.get("holder_checks", 0) + 1

    @torch.no_grad()
    def eval_model(self, model: nn.Module) -> nn.Module:
        """The full model on rank 0, assembled from the first holder of each block (other ranks: their own)."""
        if not self.forward_masked or not self.partial:
            return model
        ctx = self.ctx
        missing = [i for i in range(self.mask.components) if 0 not in self.mask.holders[i]]
        if not missing:
            return model
        full = self._empty_full_model() if ctx.rank == 0 else None
        if full is not None:
            theirs = {**dict(full.named_parameters()), **dict(full.named_buffers())}
            for name, t in (*model.named_parameters(), *model.named_buffers()):
                theirs[name].copy_(t)
        full_blocks = maskable_blocks(full) if full is not None else []
        my_blocks = maskable_blocks(model)
        held = sorted(self.mine)
        for index in missing:
            src = self.mask.holders[index][0]
            if ctx.rank == 0:
                for t in (*full_blocks[index].parameters(), *full_blocks[index].buffers()):
                    dist.recv(t, src=src)
            elif ctx.rank == src:
                block = my_blocks[held.index(index)]
                for t in (*block.parameters(), *block.buffers()):
                    dist.send(t.detach().contiguous(), dst=0)
        return full if full is not None else model

    def _empty_full_model(self) -> nn.Module:
        with torch.device("meta"):
            full = self.make_model()
        return full.to_empty(device=self.ctx.device)

    # ---- the record ------------------------------------------------------------------------------------
    def _describe_layout(self) -> dict:
        """The mask and what it splits, the same under every way of aggregating."""
        shared = [n for n in self.names if self.component[n] == SHARED]
        return {
            **self.mask.describe(),
            "masking": "forward" if self.forward_masked else "backward",
            "unit": "residual block",
            "shared": shared,
            "always_held_blocks": self.always_held_blocks,
            "shared_params": sum(self.numel[n] for n in shared),
            "block_params": [
                sum(self.numel[n] for n in self.names if self.component[n] == b) for b in range(self.mask.components)
            ],
            "optimizer_state_of_non_held": False,
        }

    def _describe_mask(self) -> dict:
        return {
            **self._describe_layout(),
            "aggregation": self.variant["aggregation"],
            "grad_clip": "norm of the whole aggregated gradient (all-reduce max of per-tensor norms, group grad-norm)",
            "evaluation": "full model assembled on rank 0 from the first holder of each block (point-to-point, "
            "off the ledger); other ranks evaluate their own subnetwork, which the record does not use",
            "formula": formula_bytes(
                self.mask, self._component_bytes(), self.variant["aggregation"], self.forward_masked
            ),
        }

    def _component_bytes(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for n in self.names:
            out[self.component[n]] = out.get(self.component[n], 0) + self.nbytes[n]
        return out

    def describe(self, ctx: Context) -> dict:
        return {"strategy": self.name, "mesh": {"sdp_workers": ctx.world_size}, "sdp": self.info}


def formula_bytes(mask: Mask, component_bytes: dict[int, int], aggregation: str, forward_masked: bool) -> dict:
    """Per-rank bytes of one step's gradient aggregation (and bb-sdp's refresh), derived in docs/sources.md#sdp.

    wire: 2 * sum over held components of bytes * (c - 1) / c + 2 * bytes(shared) * (K - 1) / K (ring
    all-reduce); payload: the bytes each rank hands to its all-reduces. Dense: the whole model over K.
    """
    k = mask.workers
    shared = component_bytes.get(SHARED, 0)
    total = sum(component_bytes.values())
    payload, wire = [], []
    for rank in range(k):
        if aggregation == "dense":
            p = total if k > 1 else 0
            w = 2 * total * (k - 1) / k
        else:
            held = [(component_bytes[j], len(mask.holders[j])) for j in mask.held[rank]]
            p = sum(b for b, c in held if c > 1) + (shared if k > 1 else 0)
            w = sum(2 * b * (c - 1) / c for b, c in held) + 2 * shared * (k - 1) / k
        if not forward_masked:
            refreshed = [component_bytes[j] for j in range(mask.components) if len(mask.holders[j]) < k]
            p += sum(refreshed)
            w += sum(refreshed) * (k - 1) / k
        payload.append(p)
        wire.append(w)
    ddp = 2 * total * (k - 1) / k
    return {
        "payload_bytes_per_rank": payload,
        "wire_bytes_per_rank": wire,
        "ddp_wire_bytes_per_rank": ddp,
        "ddp_payload_bytes_per_rank": total if k > 1 else 0,
        "note": "per step, gradient aggregation (and bb-sdp's parameter refresh); the grad-norm all-reduce "
        "is recorded separately",
    }


class BlockSDP(SubnetworkDP):
    """B-SDP: whole residual blocks, forward masking; compose.py adds the two ways of composing it with FSDP2."""

    name = "b-sdp"


class BackwardBlockSDP(SubnetworkDP):
    """B_beta-SDP: whole residual blocks, full forward, masked gradients and aggregation."""

    name = "bb-sdp"
    forward_masked = False
