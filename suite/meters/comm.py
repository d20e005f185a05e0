"""Communication ledger: every collective this rank issues, with its group, payload and wire bytes.

Counted at the dispatcher (a TorchDispatchMode over the `c10d` and `_c10d_functional` ops) because DDP's
reducer and FSDP2 call those ops directly, not through `torch.distributed.all_reduce`; CommDebugMode
sees them too but records no bytes, so this one small mode is written here.

`bytes` is the logical payload of one call: the full buffer the collective acts on (all-reduce: the
tensor; all-gather: the gathered output; reduce-scatter: the unreduced input). `wire_bytes` is what one
rank sends by the ring algorithm's formula (all-reduce 2(n-1)/n, all-gather / reduce-scatter /
broadcast / all-to-all (n-1)/n of the payload). Gloo has no native reduce-scatter and all-reduces the
full tensor instead, so on gloo the true wire traffic of a reduce-scatter is higher than the formula:
the formula is NCCL's, and the record says so.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

METHOD = (
    "TorchDispatchMode over c10d/_c10d_functional ops, DTensor ops let through to DTensor's dispatch so that the "
    "collectives inside them are counted; bytes = logical payload per call; "
    "wire_bytes = per-rank ring formula (all-reduce 2(n-1)/n, gather/scatter/broadcast (n-1)/n); "
    "on gloo reduce-scatter runs as a full all-reduce, so its real wire traffic exceeds the formula"
)

_NAMESPACES = frozenset({"c10d", "_c10d_functional"})
_SKIP = frozenset({"wait_tensor", "barrier", "monitored_barrier_"})
_OP_NAMES = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "allgather": "all_gather",
    "allgather_base": "all_gather",
    "allgather_coalesced": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "broadcast": "broadcast",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
    "all_to_all_single": "all_to_all",
    "send": "send",
    "recv": "recv",
    "recv_any_source": "recv",
    "gather": "gather",
    "scatter": "scatter",
    "reduce": "reduce",
}


def wire_bytes(op: str, payload: int, group_size: int) -> float:
    """Bytes one rank sends for `payload` by the ring algorithm (send/recv: the payload itself)."""
    n = group_size
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * payload * (n - 1) / n
    if op in ("send", "recv"):
        return float(payload)
    return payload * (n - 1) / n


@dataclass(frozen=True)
class GroupLabel:
    name: str
    tier: str
    ranks: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.ranks)


def tier_of(ranks: list[int]) -> str:
    """intra-node when every rank of the group is on one node (torchrun numbers ranks node by node)."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size() if dist.is_initialized() else 1))
    return "intra-node" if len({r // max(local, 1) for r in ranks}) <= 1 else "inter-node"


def tensor_bytes(value: object) -> int:
    """Bytes of a tensor, or of every tensor in a (nested) list or tuple; 0 for anything else."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


_local = threading.local()  # this thread's entered ledger, and whether its backend counts instead of the dispatcher


def count_in_backend() -> None:
    """This thread's collectives are counted by the backend that performs them (emulated workers,
    suite/run/emulate.py, whose group is Python and so bypasses the dispatcher for c10d ops): the dispatcher
    path stands aside so that a functional collective, seen there too, is counted once."""
    _local.backend_counts = True


def count(op: str, group_name: str, payload: int) -> None:
    """One collective performed by a backend that counts (count_in_backend), booked in this thread's ledger
    when one is entered and enabled."""
    ledger = getattr(_local, "ledger", None)
    if ledger is not None and ledger.enabled:
        ledger.add(op, group_name, payload)


def _op_name(func) -> str:
    raw = func._schema.name.split("::", 1)[1]
    return _OP_NAMES.get(raw.strip("_"), _OP_NAMES.get(raw, raw.strip("_")))


class CommLedger(TorchDispatchMode):
    """Counts collectives while active; `label_group` names a group and its tier for the record."""

    def __init__(self) -> None:
        super().__init__()
        self._labels: dict[str, GroupLabel] = {}
        self._totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self.enabled = True

    def label_group(self, group: dist.ProcessGroup | None, name: str, tier: str | None = None) -> GroupLabel:
        group = group or dist.group.WORLD
        ranks = tuple(dist.get_process_group_ranks(group))
        label = GroupLabel(name, tier or tier_of(ranks), ranks)
        self._labels[group.group_name] = label
        return label

    def labels(self) -> list[tuple[str, GroupLabel]]:
        """The labelled groups, in the order they were labelled: (the process group's own name, its label)."""
        return list(self._labels.items())

    def group_label(self, group_name: str) -> GroupLabel:
        if group_name not in self._labels:
            group = dist.distributed_c10d._resolve_process_group(group_name)
            ranks = tuple(dist.get_process_group_ranks(group))
            fallback = "world" if group == dist.group.WORLD else f"group{group_name}"
            self._labels[group_name] = GroupLabel(fallback, tier_of(ranks), ranks)
        return self._labels[group_name]

    def __enter__(self):
        self._outer = getattr(_local, "ledger", None)
        _local.ledger = self
        return super().__enter__()

    def __exit__(self, *exc):
        _local.ledger = self._outer
        return super().__exit__(*exc)

    def add(self, op: str, group_name: str, payload: int) -> None:
        """Book one call of `op` on the group named `group_name` carrying `payload` bytes (see the module)."""
        self.group_label(group_name)
        entry = self._totals[(op, group_name)]
        entry[0] += 1
        entry[1] += payload

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, DTensor) for t in types):
            # a mode runs before a tensor subclass: stepping aside lets DTensor's dispatch run with this mode still
            # on the stack, so the collectives it issues inside (redistributions, the norm of clip_grad_norm_) come
            # back here as plain-tensor ops (torch's CommDebugMode does the same)
            return NotImplemented
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.enabled and func.namespace in _NAMESPACES and not getattr(_local, "backend_counts", False):
            self._record(func, args, kwargs, out)
        return out

    def _record(self, func, args, kwargs, out) -> None:
        name = func._schema.name.split("::", 1)[1]
        if name in _SKIP or name.strip("_") in _SKIP:
            return
        inputs = outputs = 0
        group_name = None
        for arg, value in zip(
            func._schema.arguments, list(args) + [kwargs.get(a.name) for a in func._schema.arguments[len(args) :]]
        ):
            if isinstance(value, torch.ScriptObject) and group_name is None:
                try:
                    group_name = dist.ProcessGroup.unbox(value).group_name
                except RuntimeError:
                    pass
            elif arg.name == "group_name":
                group_name = value
            elif "output" in arg.name:
                outputs += tensor_bytes(value)
            else:
                inputs += tensor_bytes(value)
        if func.namespace == "_c10d_functional":
            outputs = tensor_bytes(out)
        if group_name is not None:
            self.add(_op_name(func), group_name, max(inputs, outputs))

    def ops(self) -> list[dict]:
        """The ledger as record rows, one per (op, group)."""
        rows = []
        for (op, group_name), (count, payload) in sorted(self._totals.items()):
            label = self.group_label(group_name)
            rows.append(
                {
                    "op": op,
                    "group": label.name,
                    "tier": label.tier,
                    "group_size": label.size,
                    "count": count,
                    "bytes": payload,
                    "wire_bytes": wire_bytes(op, payload, label.size),
                }
            )
        return rows

    def reset(self) -> None:
        self._totals.clear()
