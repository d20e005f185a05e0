"""An independent count of the collectives: a process-group backend that wraps gloo and counts every call it runs.

The ledger (suite/meters/comm.py) counts at the dispatcher. This counts where the collectives are executed, the
backend every process group hands its calls to: DDP's reducer, FSDP2, DTensor's redistributions, functional
collectives and `torch.distributed` calls all end here. Run with `--set comm_check=true` (CPU), a run counts both
over the ledger's steps and its record says whether they agree, per rank, op and group (record["comm"]["check"]).

Written here because torch ships no counting backend: its CommDebugMode counts at the dispatcher as the ledger
does, and the profiler's gloo events carry no sizes. The method names are the ones torch's Python backend
trampoline calls, which gloo's backend also has; each call is handed to gloo's method of the same name.
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.distributed as dist

from suite.meters.comm import tensor_bytes

BACKEND = "counted_gloo"
METHOD = (
    "a process-group backend wrapping gloo that counts each call it executes (count, and bytes by the ledger's "
    "rule: all-gather's output, reduce-scatter's input, the buffer otherwise), over the ledger's steps"
)
# backend group name -> its backend, for the groups of this process
_BACKENDS: dict[str, CountingBackend] = {}


class CountingBackend(torch._C._distributed_c10d.Backend):
    """gloo, counting (op -> [calls, bytes]) every collective this rank runs on the group."""

    def __init__(self, inner: dist.ProcessGroupGloo, rank: int, size: int) -> None:
        super().__init__(rank, size)
        self.inner = inner
        self.counts: Counter = Counter()

    def _count(self, op: str, payload: int) -> None:
        self.counts[(op, "count")] += 1
        self.counts[(op, "bytes")] += payload

    def allreduce(self, tensors, opts):
        self._count("all_reduce", tensor_bytes(tensors))
        return self.inner.allreduce(tensors, opts)

    def allreduce_coalesced(self, tensors, opts):
        self._count("all_reduce", tensor_bytes(tensors))
        return self.inner.allreduce_coalesced(tensors, opts)

    def allgather(self, outputs, inputs, opts):
        self._count("all_gather", max(tensor_bytes(outputs), tensor_bytes(inputs)))
        return self.inner.allgather(outputs, inputs, opts)

    def all_gather_single(self, output, input, opts):
        self._count("all_gather", tensor_bytes(output))
        return self.inner.all_gather_single(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        self._count("all_gather", tensor_bytes(outputs))
        return self.inner.all_gather_single_coalesced(outputs, inputs, opts)

    def allgather_coalesced(self, outputs, inputs, opts):
        self._count("all_gather", max(tensor_bytes(outputs), tensor_bytes(inputs)))
        return self.inner.allgather_coalesced(outputs, inputs, opts)

    def reduce_scatter(self, outputs, inputs, opts):
        self._count("reduce_scatter", tensor_bytes(inputs))
        return self.inner.reduce_scatter(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts):
        self._count("reduce_scatter", tensor_bytes(input))
        return self.inner.reduce_scatter_single(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        self._count("reduce_scatter", tensor_bytes(inputs))
        return self.inner.reduce_scatter_single_coalesced(outputs, inputs, opts)

    def broadcast(self, tensors, opts):
        self._count("broadcast", tensor_bytes(tensors))
        return self.inner.broadcast(tensors, opts)

    def alltoall(self, outputs, inputs, opts):
        self._count("all_to_all", max(tensor_bytes(outputs), tensor_bytes(inputs)))
        return self.inner.alltoall(outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_splits, input_splits, opts):
        self._count("all_to_all", max(tensor_bytes(output), tensor_bytes(input)))
        return self.inner.all_to_all_single(output, input, output_splits, input_splits, opts)

    def gather(self, outputs, inputs, opts):
        self._count("gather", max(tensor_bytes(outputs), tensor_bytes(inputs)))
        return self.inner.gather(outputs, inputs, opts)

    def scatter(self, outputs, inputs, opts):
        self._count("scatter", max(tensor_bytes(outputs), tensor_bytes(inputs)))
        return self.inner.scatter(outputs, inputs, opts)

    def reduce(self, tensors, opts):
        self._count("reduce", tensor_bytes(tensors))
        return self.inner.reduce(tensors, opts)

    def send(self, tensors, dst, tag):
        self._count("send", tensor_bytes(tensors))
        return self.inner.send(tensors, dst, tag)

    def recv(self, tensors, src, tag):
        self._count("recv", tensor_bytes(tensors))
        return self.inner.recv(tensors, src, tag)

    def recv_anysource(self, tensors, tag):
        self._count("recv", tensor_bytes(tensors))
        return self.inner.recv_anysource(tensors, tag)

    def barrier(self, opts):  # the ledger skips barriers too
        return self.inner.barrier(opts)

    def getBackendName(self) -> str:
        return BACKEND

    @property
    def supports_coalescing(self) -> bool:
        # torch reads this attribute, and the base class's answer asks this object again (a recursion): gloo runs
        # a batch of sends and receives one by one
        return False


def _create(options, _backend_options) -> CountingBackend:
    inner = dist.ProcessGroupGloo(options.store, options.group_rank, options.group_size, options.timeout)
    backend = CountingBackend(inner, options.group_rank, options.group_size)
    _BACKENDS[options.group_id] = backend
    return backend


def register() -> str:
    """Registers the counting backend once per process; the backend name init_process_group takes."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])
    return BACKEND


def forget() -> None:
    """Let go of the backends of a world that ended: a gloo backend's threads live as long as a reference to it."""
    _BACKENDS.clear()


class CountWindow:
    """The backends' counts over the steps it is entered for (the ledger's steps), by (op, group name)."""

    def __init__(self) -> None:
        self.totals: Counter = Counter()
        self._start: dict[str, Counter] = {}

    def __enter__(self) -> CountWindow:
        self._start = {name: Counter(b.counts) for name, b in _BACKENDS.items()}
        return self

    def __exit__(self, *exc) -> None:
        for name, backend in _BACKENDS.items():
            diff = Counter(backend.counts)
            diff.subtract(self._start.get(name, Counter()))
            for (op, field), n in diff.items():
                if n:
                    self.totals[(op, name, field)] += n

    def rows(self, group_label) -> list[dict]:
        """One row per (op, group): the group named by `group_label` (group name -> the ledger's label)."""
        keys = sorted({(op, name) for op, name, _ in self.totals})
        return [
            {
                "op": op,
                "group": group_label(name),
                "count": self.totals[(op, name, "count")],
                "bytes": self.totals[(op, name, "bytes")],
            }
            for op, name in keys
        ]


def differences(ledger_ops: list[dict], counted: list[dict]) -> list[str]:
    """Where the ledger's rows and the backend's disagree, in words ([] where they agree)."""
    ledger, backend = _table(ledger_ops), _table(counted)
    return [
        f"{op} on {group}: ledger {_shown(ledger.get((op, group)))}, backend {_shown(backend.get((op, group)))}"
        for op, group in sorted(set(ledger) | set(backend))
        if ledger.get((op, group)) != backend.get((op, group))
    ]


def _table(rows: list[dict]) -> dict[tuple[str, str], tuple[int, int]]:
    return {(r["op"], r["group"]): (r["count"], r["bytes"]) for r in rows}


def _shown(entry: tuple[int, int] | None) -> str:
    return "none" if entry is None else f"{entry[0]} calls, {entry[1]:,} bytes"
