"""N-SDP (arXiv 2507.09029): forward masking over MLP neurons and conv channels, declared as `n-sdp`.

Written here because no library builds a narrower copy of a layer from chosen neurons: torch's pruning
(torch.nn.utils.prune) multiplies by a mask and keeps the full tensors, which is what forward masking
must avoid. Everything else (holder groups, aggregation, clipping, holder checks, byte formula) is
SubnetworkDP's, run over neuron groups instead of blocks.

- A neuron layer is one per block (RECIPES): a LLaMA SwiGLU neuron is a row of w1 and of w3 and the
  matching column of w2; a Swin-T MLP neuron a row (and bias entry) of mlp.0 and a column of mlp.3; a
  ResNet/WRN BasicBlock channel is an output channel of conv1, a channel of bn1 (weight, bias, running
  statistics) and an input channel of conv2. A block's output stays whole, so its residual add still works.
- Each layer's neurons split into `groups` contiguous groups (sizes differ by at most one). The mask
  (masks.assign) is over the groups, and the same assignment serves every layer: component j is group j
  of every layer, held by the mask's holders of j. Each worker thus trains a narrower copy of the network.
- Forward masking: the full model is built on the host, then every cut module's tensors are replaced by
  index_select copies of the held neurons before the model moves to the device, so the dropped neurons'
  parameters, gradients, optimizer state and activations never exist on the device.
- SubnetworkDP reads a parameter's `.grad`, `.numel()` and `.detach()`; a GroupSlice gives those for one
  group's rows or columns of a local (sliced) tensor, as views, so its aggregation writes straight into
  the real gradient.
- Evaluation assembles the full model on rank 0: each group of each cut tensor from the group's first
  holder (point-to-point), the rest from rank 0's own copy. BatchNorm running statistics are buffers,
  never averaged (as in b-sdp and this suite's DDP): each group's come from its first holder.
Holders stay identical because AdamW is element-wise; a matrix optimizer (Muon, Dion) would see a
different sliced matrix on each holder of a group and must not be combined with n-sdp as it stands.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torchvision.models.resnet import BasicBlock
from torchvision.models.swin_transformer import SwinTransformerBlock

from reproductions.sdp.masks import assign
from reproductions.sdp.method import SHARED, SubnetworkDP
from suite import models
from suite.models.llama import Block
from suite.params import Param
from suite.run.strategy import Context

DEFAULT_GROUPS = 8
# the attribute holding a module's size along its neuron dimension, for an honest repr of a sliced module
SIZE_ATTRS = {0: ("out_features", "out_channels", "num_features"), 1: ("in_features", "in_channels")}


@dataclass(frozen=True)
class Recipe:
    """The modules of one block whose tensors index its neurons, each with that dimension."""

    cuts: tuple[tuple[str, int], ...]
    unit: str
    always_held: str


RECIPES: dict[type[nn.Module], Recipe] = {
    Block: Recipe(
        (("feed_forward.w1", 0), ("feed_forward.w3", 0), ("feed_forward.w2", 1)),
        "MLP neuron group",
        "embeddings, attention, attention and MLP norms, final norm, head",
    ),
    SwinTransformerBlock: Recipe(
        (("mlp.0", 0), ("mlp.3", 1)),
        "MLP neuron group",
        "patch embedding, attention, norms, MLP output bias, patch merging, head",
    ),
    BasicBlock: Recipe(
        (("conv1", 0), ("bn1", 0), ("conv2", 1)),
        "conv channel group",
        "stem, bn2 (a block's output channels stay whole for the residual add; conv2 is split by "
        "its input channels), downsample shortcuts, head",
    ),
}


def neuron_layers(model: nn.Module) -> list[tuple[str, Recipe]]:
    """(block name, its recipe) for every block with a neuron layer, in forward order."""
    layers = [(name, RECIPES[type(m)]) for name, m in model.named_modules() if type(m) in RECIPES]
    if not layers:
        raise ValueError(
            f"n-sdp masks the MLP neurons or conv channels of LLaMA, ResNet/WRN or Swin blocks, and "
            f"{type(model).__name__} has none; use --model llama-tiny (or another llama-*), resnet18, "
            "wrn18 or swin-t"
        )
    return layers


def _modules(block: str, recipe: Recipe) -> list[tuple[str, int]]:
    return [(f"{block}.{sub}", dim) for sub, dim in recipe.cuts]


def layer_width(model: nn.Module, block: str, recipe: Recipe) -> int:
    """Neurons of one block's layer: the first cut module's weight along its neuron dimension."""
    name, dim = _modules(block, recipe)[0]
    return model.get_submodule(name).weight.shape[dim]


def group_bounds(width: int, groups: int) -> list[tuple[int, int]]:
    """(start, length) of each of `groups` contiguous groups of `width` neurons; lengths differ by at most one."""
    edges = [g * width // groups for g in range(groups + 1)]
    return [(a, b - a) for a, b in zip(edges, edges[1:])]


def check_groups(model: nn.Module, groups: int) -> None:
    for block, recipe in neuron_layers(model):
        width = layer_width(model, block, recipe)
        if groups > width:
            raise ValueError(
                f"groups={groups} is more than the {width} neurons of {block}; use --set groups={width} or fewer"
            )


def _neuron_tensors(module: nn.Module, dim: int) -> list[tuple[str, torch.Tensor]]:
    """The module's parameters and buffers that index its neurons: those with a dimension `dim`
    (a Linear's bias is indexed by neurons when they are its outputs, not when they are its inputs)."""
    tensors = (*module.named_parameters(recurse=False), *module.named_buffers(recurse=False))
    return [(name, t) for name, t in tensors if t.ndim > dim]


def cut_tensors(model: nn.Module, groups: int) -> dict[str, tuple[int, list[tuple[int, int]]]]:
    """Full-model name of every tensor that indexes neurons -> (its neuron dimension, each group's (start, length))."""
    out = {}
    for block, recipe in neuron_layers(model):
        bounds = group_bounds(layer_width(model, block, recipe), groups)
        for name, dim in _modules(block, recipe):
            for tensor, _ in _neuron_tensors(model.get_submodule(name), dim):
                out[f"{name}.{tensor}"] = (dim, bounds)
    return out


def local_starts(bounds: list[tuple[int, int]], keep: set[int]) -> dict[int, int]:
    """Where each kept group starts in a sliced tensor: kept groups are concatenated in increasing order."""
    starts, offset = {}, 0
    for g in sorted(keep):
        starts[g] = offset
        offset += bounds[g][1]
    return starts


def _narrow(module: nn.Module, dim: int, index: torch.Tensor) -> None:
    for name, t in _neuron_tensors(module, dim):
        kept = t.detach().index_select(dim, index.to(t.device))
        setattr(
            module, name, nn.Parameter(kept, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else kept
        )
    for attr in SIZE_ATTRS[dim]:
        if hasattr(module, attr):
            setattr(module, attr, len(index))


def slice_neurons(model: nn.Module, keep: set[int], groups: int) -> nn.Module:
    """Replace every cut module's tensors, in place, by copies holding only the neurons of the `keep` groups."""
    for block, recipe in neuron_layers(model):
        bounds = group_bounds(layer_width(model, block, recipe), groups)
        index = torch.cat([torch.arange(bounds[g][0], sum(bounds[g])) for g in sorted(keep)])
        for name, dim in _modules(block, recipe):
            _narrow(model.get_submodule(name), dim, index)
    return model


def piece(name: str, group: int) -> str:
    """The name SubnetworkDP uses for one group's part of a cut parameter."""
    return f"{name}[{group}]"


@dataclass(frozen=True)
class GroupSlice:
    """One group's rows or columns of a local parameter, read by SubnetworkDP as if it were a parameter."""

    param: nn.Parameter
    dim: int
    start: int
    length: int

    @property
    def grad(self) -> torch.Tensor | None:
        g = self.param.grad
        return None if g is None else g.narrow(self.dim, self.start, self.length)

    def numel(self) -> int:
        return self.param.numel() // self.param.shape[self.dim] * self.length

    def detach(self) -> torch.Tensor:
        return self.param.detach().narrow(self.dim, self.start, self.length)


def _tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


class NeuronSDP(SubnetworkDP):
    """N-SDP: groups of MLP neurons or conv channels, forward masking, the same groups in every layer."""

    name = "n-sdp"
    params = {
        **SubnetworkDP.params,
        "groups": Param(int, DEFAULT_GROUPS, "neuron groups per layer, the components the mask is over", low=1),
    }

    def count_components(self) -> int:
        with torch.device("meta"):
            check_groups(models.build_model(self.cfg.model), self.variant["groups"])
        return self.variant["groups"]

    def _mask_model(self, model: nn.Module, ctx: Context) -> nn.Module:
        groups = self.variant["groups"]
        check_groups(model, groups)
        self.layers = neuron_layers(model)
        self.mask = assign(groups, ctx.world_size, self.variant["C"])
        self.mine = set(self.mask.held[ctx.rank])
        self.cuts = cut_tensors(model, groups)
        self.component, self.numel, self.nbytes = {}, {}, {}
        for name, p in model.named_parameters():
            if name not in self.cuts:
                self._add(name, SHARED, p.numel(), p.element_size())
                continue
            dim, bounds = self.cuts[name]
            for g, (_, length) in enumerate(bounds):
                self._add(piece(name, g), g, p.numel() // p.shape[dim] * length, p.element_size())
        self.always_held_blocks = []  # every block is cut; what each worker always holds is in `always_held`
        self.widths = [layer_width(model, block, recipe) for block, recipe in self.layers]
        return slice_neurons(model, self.mine, groups)

    def _add(self, name: str, component: int, numel: int, element_size: int) -> None:
        self.component[name], self.numel[name], self.nbytes[name] = component, numel, numel * element_size

    def _local_params(self, model: nn.Module) -> dict[str, torch.Tensor | GroupSlice]:
        params = dict(model.named_parameters())
        local: dict[str, torch.Tensor | GroupSlice] = {n: params[n] for n in self.component if n in params}
        for name, (dim, bounds) in self.cuts.items():
            if name in params:
                for g, start in local_starts(bounds, self.mine).items():
                    local[piece(name, g)] = GroupSlice(params[name], dim, start, bounds[g][1])
        return local

    @torch.no_grad()
    def eval_model(self, model: nn.Module) -> nn.Module:
        """The full model on rank 0 (other ranks: their own), every group from its first holder."""
        if not self.partial:
            return model
        full = self._empty_full_model() if self.ctx.rank == 0 else None
        theirs = _tensors(full) if full is not None else {}
        for name, t in _tensors(model).items():  # the same order on every rank
            if name in self.cuts:
                self._gather_groups(t, theirs.get(name), *self.cuts[name])
            elif full is not None:
                theirs[name].copy_(t)
        return full if full is not None else model

    def _gather_groups(
        self, local: torch.Tensor, target: torch.Tensor | None, dim: int, bounds: list[tuple[int, int]]
    ) -> None:
        starts = local_starts(bounds, self.mine)
        for g, (start, length) in enumerate(bounds):
            src = self.mask.holders[g][0]
            if target is not None:
                out = target.narrow(dim, start, length)
                if src == self.ctx.rank:
                    out.copy_(local.narrow(dim, starts[g], length))
                else:
                    buffer = torch.empty(out.shape, dtype=out.dtype, device=out.device)
                    dist.recv(buffer, src=src)
                    out.copy_(buffer)
            elif src == self.ctx.rank:
                dist.send(local.narrow(dim, starts[g], length).contiguous(), dst=0)

    def _describe_mask(self) -> dict:
        groups = self.variant["groups"]
        recipe = self.layers[0][1]
        return {
            **super()._describe_mask(),
            "unit": recipe.unit,
            "groups": groups,
            "assignment": "the same in every layer: component j is group j of every neuron layer",
            "always_held": recipe.always_held,
            "neuron_layers": [
                {
                    "block": block,
                    "modules": [m for m, _ in _modules(block, r)],
                    "neurons": width,
                    "group_sizes": [n for _, n in group_bounds(width, groups)],
                }
                for (block, r), width in zip(self.layers, self.widths)
            ],
            "slicing": "cut modules rebuilt from index_select copies of the held neurons on the host, before the "
            "model moves to the device",
            "evaluation": "full model assembled on rank 0, each neuron group of each cut tensor from the group's "
            "first holder (point-to-point, off the ledger), the rest from rank 0; BatchNorm running "
            "statistics are not averaged",
        }
