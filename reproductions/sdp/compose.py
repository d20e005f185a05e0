"""B-SDP composed with FSDP2: `b-sdp-fsdp-holders` (reading b) and `b-sdp-fsdp-worker --set G=...` (reading a).

How the paper composes SDP with FSDP is not known (docs/sources.md#sdp); both readings are built here
from torch's own pieces (`fully_shard`, `DeviceMesh.from_group`), so `estimate` and the meters run them
unchanged. Blocks a rank does not hold are dropped before sharding (forward masking, as in b-sdp).

- holders (b): world = K ranks, one per SDP worker. Each held block is `fully_shard`-ed over a 1-D mesh of
  exactly its holder ranks; the shared parts (embeddings, final norm, head) over all ranks. FSDP2
  reduce-scatters a block's gradient over that mesh and divides by the mesh size, which is SDP's
  aggregation (sum over holders / holder count), so SDP's own after_backward does nothing. Per-rank
  model state is then FSDP's (each component sharded over c holders holds 1/c of it on each of c ranks);
  the saving is in activations and the unsharded temporaries of blocks a rank does not run.
- worker (a): world = K x G ranks; worker w is ranks w*G .. w*G+G-1, which FSDP-shard w's subnetwork.
  A block held by workers H lives on a 2-D mesh (replicate = H, shard = G): HSDP per holder set. Chosen
  over all-reducing the local shards by hand because FSDP2 then does the whole aggregation: reduce-
  scatter inside the worker, all-reduce of the shard across the holder workers' ranks with the same
  shard index, division by |H| * G (each rank's loss is the mean of its micro-batch, so that is the mean
  over the holders' rows: SDP's holder average at G times the per-worker batch). One holder worker:
  a 1-D shard mesh, no replicate all-reduce.
Deadlock: every rank issues its collectives in increasing block order in forward (decreasing in backward),
and every collective on a holder mesh involves exactly that block's holders, so there is no cycle of
waits; the groups themselves are created in one order on every rank.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from baselines import precision
from baselines.checkpointing import apply_activation_checkpointing
from baselines.fsdp import gradient_sync
from reproductions.sdp.masks import Mask
from reproductions.sdp.method import SHARED, BlockSDP, drop_blocks, maskable_blocks
from suite.params import Param
from suite.run.strategy import Context, local_tensor


def padded_numel(shape: tuple[int, ...], n: int) -> int:
    """FSDP2 shards dim 0, padded to a multiple of the mesh's shard size."""
    return math.ceil(shape[0] / n) * n * math.prod(shape[1:])


class _ShardedBlockSDP(BlockSDP):
    """What the two readings share: b-sdp's mask, FSDP2 on a mesh per holder set, and FSDP2's aggregation.

    A reading says its meshes, its shard slot, the copies of a parameter across ranks and its record text.
    """

    # FSDP2 aggregates over each holder mesh, so b-sdp's choice of aggregation does not apply
    params = {k: v for k, v in BlockSDP.params.items() if k != "aggregation"}
    reading = ""
    G = 1

    # ---- workers and ranks -------------------------------------------------------------------------
    def workers(self, world_size: int) -> int:
        """K: the SDP workers of `world_size` ranks."""
        return world_size

    def setup(self, ctx: Context) -> None:
        self.check(ctx.world_size)
        self.variant["K"] = self.workers(ctx.world_size)

    def check(self, world_size: int) -> None:
        super().check(self.workers(world_size))

    def ranks_of(self, workers: tuple[int, ...]) -> list[list[int]]:
        """The ranks of each of `workers`, one row per worker (G columns)."""
        return [[w * self.G + s for s in range(self.G)] for w in workers]

    def _holder_sets(self) -> list[tuple[int, ...]]:
        everyone = tuple(range(self.mask.workers))
        return sorted({*self.mask.holders, everyone}, key=lambda s: (len(s), s))

    def _meshes(self, ctx: Context) -> dict[tuple[int, ...], DeviceMesh]:
        """The mesh of each holder set this rank is in (every rank creates every group, in one order)."""
        raise NotImplementedError

    def copies(self, name: str) -> int:
        """Full copies of a parameter across ranks."""
        raise NotImplementedError

    # ---- the model ---------------------------------------------------------------------------------
    def _mask_model(self, model: nn.Module, ctx: Context) -> nn.Module:
        """method.py's masking, seen from the SDP worker: worker rank // G of K (the plain rank when G = 1)."""
        self.shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}  # for the formula: all blocks
        worker = dataclasses.replace(ctx, rank=ctx.rank // self.G, world_size=self.variant["K"])
        return super()._mask_model(model, worker)

    def build(self, make_model: Callable[[], nn.Module], ctx: Context) -> nn.Module:
        self.make_model, self.ctx = make_model, ctx
        model = self._mask_model(make_model(), ctx)
        self.names = list(self.component)
        if self.cfg.ac:
            apply_activation_checkpointing(model)
        meshes = self._meshes(ctx)
        policy = precision.fsdp_policy(self.cfg.precision)
        held = list(zip(sorted(self.mine), maskable_blocks(model)))  # after dropping: the held ones, in order
        for index, block in held:
            fully_shard(block, mesh=meshes[self.mask.holders[index]], mp_policy=policy)
        # resharded after forward like the blocks, as the fsdp baseline does: the comparison is like for like
        fully_shard(model, mesh=meshes[tuple(range(self.mask.workers))], mp_policy=policy, reshard_after_forward=True)
        for module in (*(block for _, block in held), model):
            # FSDP2 by default all-gathers this rank's next block before reduce-scattering the current one;
            # ranks with different next blocks would then order two ops on a shared group differently and
            # deadlock. Naming itself as the only module to prefetch (already unsharded: a no-op) turns it off.
            module.set_modules_to_backward_prefetch([module])
        model = model.to(ctx.device)
        self.local = dict(model.named_parameters())
        self.trained = list(self.local)
        self.partial = True  # eval_model always assembles: no rank holds whole tensors
        self.norm_group = dist.new_group() if self.cfg.grad_clip > 0 and ctx.world_size > 1 else None
        if self.norm_group is not None:
            ctx.label_group(self.norm_group, "grad-norm")
        self.refresh_group = None  # forward masking: nothing to refresh
        self.check_group = ctx.cpu_group()
        self.info = self._describe_composition()
        return model

    # ---- the loop's hooks --------------------------------------------------------------------------
    def autocast(self, ctx: Context) -> AbstractContextManager:
        return nullcontext()  # FSDP2's mixed-precision policy instead, as the fsdp baseline does

    def micro_step(self, model: nn.Module, last: bool) -> AbstractContextManager:
        return gradient_sync(model, last)

    def after_backward(self, model: nn.Module, ctx: Context) -> None:
        """Nothing: FSDP2's reduce-scatter (and HSDP all-reduce) over each holder mesh already averaged."""

    @torch.no_grad()
    def clip_grad_norm(self, model: nn.Module, max_norm: float, ctx: Context) -> None:
        """Norm of the whole aggregated gradient from one all-reduce (sum) of per-tensor squared shard norms.

        Every copy's shards partition its tensor, so the sum over ranks is copies x the squared norm.
        """
        squares = torch.zeros(len(self.names), dtype=torch.float32, device=ctx.device)
        for i, n in enumerate(self.names):
            if n in self.local and self.local[n].grad is not None:
                squares[i] = torch.linalg.vector_norm(local_tensor(self.local[n].grad), dtype=torch.float32) ** 2
        if self.norm_group is not None:
            dist.all_reduce(squares, group=self.norm_group)
        copies = torch.tensor([self.copies(n) for n in self.names], dtype=torch.float32, device=ctx.device)
        coef = (max_norm / ((squares / copies).sum().sqrt() + 1e-6)).clamp(max=1.0)
        for p in self.local.values():
            if p.grad is not None:
                local_tensor(p.grad).mul_(coef)  # the local shard: what the optimizer steps on

    @torch.no_grad()
    def eval_model(self, model: nn.Module) -> nn.Module:
        """Plain (unsharded) models: the full one on rank 0, each other rank its own subnetwork.

        Every rank gathers the full tensors of what it holds (full_tensor(): collectives on each holder
        mesh, in parameter order, so in block order on every rank); the first rank of a block's first
        holder sends it to rank 0 when rank 0 lacks it (point-to-point, off the ledger like all of eval).
        """
        ctx = self.ctx
        full = {n: local_tensor(p.full_tensor() if isinstance(p, DTensor) else p) for n, p in model.named_parameters()}
        full.update(dict(model.named_buffers()))
        with torch.device("meta"):
            plain = self.make_model()
        if ctx.rank != 0:
            drop_blocks(plain, self.mine)
        plain = plain.to_empty(device=ctx.device)
        theirs = {**dict(plain.named_parameters()), **dict(plain.named_buffers())}
        for n, t in full.items():
            theirs[n].copy_(t)
        for index in range(self.mask.components):
            holders = self.mask.holders[index]
            if 0 in holders:
                continue
            src = holders[0] * self.G
            names = [n for n in self.names if self.component[n] == index]
            for n in names:
                if ctx.rank == 0:
                    dist.recv(theirs[n], src=src)
                elif ctx.rank == src:
                    dist.send(full[n].contiguous(), dst=0)
        return plain

    # ---- the record --------------------------------------------------------------------------------
    mesh_text = ""
    aggregation_text = ""

    def _holder_meshes(self) -> list:
        return [list(h) for h in self._holder_sets()]

    def _describe_composition(self) -> dict:
        return {
            **self._describe_layout(),
            "fsdp": {
                "reading": self.reading,
                "G": self.G,
                "mesh": self.mesh_text,
                "holder_meshes": self._holder_meshes(),
            },
            "aggregation": self.aggregation_text,
            "grad_clip": "norm of the whole aggregated gradient: all-reduce (sum) of per-tensor squared shard "
            "norms over group grad-norm, divided by each tensor's number of copies",
            "evaluation": "full model gathered on rank 0 (full_tensor() on each holder mesh, then point-to-point "
            "from the first holder), off the ledger; other ranks evaluate their own subnetwork",
            "formula": fsdp_formula_bytes(
                self.mask, self._component_shapes(), self.reading, self.G, self._gather_itemsize(), self.cfg.grad_accum
            ),
        }

    def _component_shapes(self) -> dict[int, list[tuple[int, ...]]]:
        out: dict[int, list[tuple[int, ...]]] = {}
        for n in self.names:
            out.setdefault(self.component[n], []).append(self.shapes[n])
        return out

    def _gather_itemsize(self) -> int:
        dtype = precision.fsdp_policy(self.cfg.precision).param_dtype
        return (dtype or torch.float32).itemsize

    def _mesh_record(self) -> dict:
        return {"sdp_workers": self.mask.workers, "fsdp": self.reading}

    def describe(self, ctx: Context) -> dict:
        return {"strategy": self.name, "mesh": self._mesh_record(), "sdp": self.info}


class HolderShardedBlockSDP(_ShardedBlockSDP):
    """Reading (b): one rank per SDP worker; each held block FSDP-sharded over exactly its holder ranks."""

    name = "b-sdp-fsdp-holders"
    reading = "holders"
    mesh_text = "each block: 1-D over its holder ranks; shared parts: 1-D over all ranks"
    aggregation_text = "FSDP2 reduce-scatter over each holder mesh (mean over holders)"

    def _meshes(self, ctx: Context) -> dict[tuple[int, ...], DeviceMesh]:
        """A 1-D mesh of each holder set this rank is in; every rank creates every group."""
        meshes = {}
        for ranks in self._holder_sets():
            everyone = len(ranks) == ctx.world_size
            group = dist.group.WORLD if everyone else dist.new_group(list(ranks))
            if ctx.rank in ranks:
                ctx.label_group(group, "world" if everyone else f"holders{{{','.join(map(str, ranks))}}}")
                meshes[ranks] = DeviceMesh.from_group(group, ctx.device.type, mesh_dim_names=("holders",))
        return meshes

    def copies(self, name: str) -> int:
        return 1  # each shard lives on one rank of its holder mesh

    def _shard_slot(self, ctx: Context) -> int | None:
        return ctx.rank  # every shard has one copy: nothing for the holder check to compare


class WorkerShardedBlockSDP(_ShardedBlockSDP):
    """Reading (a): K = world / G SDP workers of G ranks, each FSDP-sharding its subnetwork (HSDP per holder set)."""

    name = "b-sdp-fsdp-worker"
    reading = "worker"
    params = {**_ShardedBlockSDP.params, "G": Param(int, 1, "devices per SDP worker", low=1)}
    aggregation_text = "FSDP2 reduce-scatter inside each worker, all-reduce across holder workers (HSDP)"

    def __init__(self, cfg, variant: dict | None = None) -> None:
        super().__init__(cfg, variant)
        self.G = self.variant["G"]
        self.mesh_text = (
            f"each block: (replicate = its holder workers, shard = G = {self.G}) HSDP, a 1-D shard mesh "
            "when one worker holds it; shared parts: (replicate = all K workers, shard = G)"
        )

    def workers(self, world_size: int) -> int:
        if world_size % self.G:
            raise ValueError(
                f"b-sdp-fsdp-worker needs a world size that is a multiple of G: {world_size} ranks cannot "
                f"form workers of G={self.G}; use --nproc {self.G * max(world_size // self.G, 1)} "
                "or a G dividing it"
            )
        return world_size // self.G

    def check(self, world_size: int) -> None:
        k = self.workers(world_size)
        try:
            super().check(world_size)
        except ValueError as err:
            raise ValueError(f"{err} (K = {world_size} ranks / G={self.G} = {k})") from None

    def _meshes(self, ctx: Context) -> dict[tuple[int, ...], DeviceMesh]:
        """(replicate = holder workers, shard = G) per holder set this rank's worker is in."""
        me, slot = divmod(ctx.rank, self.G)
        shard = [dist.new_group(row) for row in self.ranks_of(tuple(range(self.mask.workers)))][me]
        ctx.label_group(shard, "worker-shard")
        meshes = {}
        for workers in self._holder_sets():
            if len(workers) == 1:
                if workers == (me,):
                    meshes[workers] = DeviceMesh.from_group(shard, ctx.device.type, mesh_dim_names=("shard",))
                continue
            rows = self.ranks_of(workers)
            replicate = [dist.new_group([row[s] for row in rows]) for s in range(self.G)][slot]
            if me in workers:
                ctx.label_group(replicate, f"holders{{{','.join(map(str, workers))}}}.replicate")
                meshes[workers] = DeviceMesh.from_group(
                    [replicate, shard], ctx.device.type, mesh=rows, mesh_dim_names=("replicate", "shard")
                )
        return meshes

    def copies(self, name: str) -> int:
        return len(self.holders(self.component[name]))  # one full copy per holder worker

    def _shard_slot(self, ctx: Context) -> int | None:
        return ctx.rank % self.G  # copies of a shard: the same slot in each holder worker

    def _holder_meshes(self) -> list:
        return [self.ranks_of(h) for h in self._holder_sets()]

    def _mesh_record(self) -> dict:
        return {**super()._mesh_record(), "shard": self.G}


def fsdp_formula_bytes(
    mask: Mask,
    shapes: dict[int, list[tuple[int, ...]]],
    reading: str,
    g: int,
    gather_itemsize: int,
    micro_batches: int = 1,
    reduce_itemsize: int = 4,
) -> dict:
    """Per-rank payload bytes of one step, by op, as the ledger counts them (FSDP2, reshard after forward).

    Each held block and the root (shared parts): all-gather forward and backward of its padded tensors
    in every micro-batch (everything is resharded after forward, as in the fsdp baseline), one
    reduce-scatter (gradients sync on the last micro-batch only); none of them on a 1-rank mesh. Shard
    size: the holder count under fsdp=holders, G under fsdp=worker, where a component with |H| > 1
    holder workers adds an all-reduce of the reduced shard (padded / G).
    """
    everyone = tuple(range(mask.workers))
    payload, wire = [], []
    for worker in range(mask.workers):
        ops = {"all_gather": 0, "reduce_scatter": 0, "all_reduce": 0}
        sent = 0.0
        for component in (SHARED, *mask.held[worker]):
            holders = everyone if component == SHARED else mask.holders[component]
            n = len(holders) if reading == "holders" else g
            padded = sum(padded_numel(s, n) for s in shapes[component])
            if n > 1:
                ops["all_gather"] += 2 * micro_batches * padded * gather_itemsize
                ops["reduce_scatter"] += padded * reduce_itemsize
                sent += (2 * micro_batches * gather_itemsize + reduce_itemsize) * padded * (n - 1) / n
            if reading == "worker" and len(holders) > 1:
                ops["all_reduce"] += padded // n * reduce_itemsize
                sent += 2 * padded // n * reduce_itemsize * (len(holders) - 1) / len(holders)
        copies = g if reading == "worker" else 1
        payload += [ops] * copies
        wire += [sent] * copies
    return {
        "payload_bytes_per_rank": payload,
        "wire_bytes_per_rank": wire,
        "note": "per step, payload by op and ring wire bytes in total; the grad-norm all-reduce is recorded separately",
    }
