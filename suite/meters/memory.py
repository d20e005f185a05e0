"""Memory of training steps on this rank: the peak, what it is made of at that moment, and the model state.

PyTorch's MemTracker (FSDPMemTracker when the root is an FSDP2 module) tags every tensor storage it sees
as parameter, gradient, optimizer state, activation or temporary, and keeps the category totals at the
moment of the peak. This module only adds what it lacks for a training loop:
- frozen parameters, which it would try to hook for gradients and fail on;
- the mapping of its categories onto the six of the run record (`MEMTRACKER_CATEGORIES`,
  `FSDP_CATEGORIES`): FSDP2's sharded and not-yet-reduced gradients are grads, its all-gather and
  reduce-scatter buffers are `comm_buffers`, its temporarily unsharded parameters are other;
- several optimizers (an outer optimizer's momentum is optimizer state too); FSDPMemTracker takes one,
  so the others' state is registered with it here and their steps are flagged as optimizer steps;
- DDP's gradient buckets (gradient_as_bucket_view=False, the default: separate storage from
  param.grad). The reducer allocated them before a steady step, so the tracker first meets one when
  backward writes a gradient into it, and filed it as a temporary (other) from then on; here a storage
  first met as the written operand of an in-place or out= op is registered as `comm_buffers` instead,
  and the buckets not yet written at the peak are added from their sizes in DDP's own logging data. On
  the step where DDP rebuilds its buckets (its second) the tracker sees the new ones made in the forward
  and files them as activations; they are moved to `comm_buffers` there;
- the model state taken while the gradients are alive: at the end of every optimizer step (a step
  post-hook, before zero_grad(set_to_none=True) frees the gradients), the largest over the steps;
- the peak of the device only: the trackers also keep each module's own peak, by walking every tracked module
  after every op (a third of the cProfile of a DDP llama-1b estimate); nothing here reads those, so it is skipped
  and the device's peak and its categories come out as before;
- steps of several micro-batches: the trackers take a second forward of a top-level module for a
  second iteration and raise, so its stale per-module stats are dropped first;
- optimizer-step temporaries: the trackers file every tensor made inside `optimizer.step()` as
  optimizer state; at the peak we count as optimizer state no more than the state left after the step,
  and the rest as other;
- the device peak (`torch.cuda.max_memory_allocated`) on CUDA and, since the CPU allocator keeps no
  statistics, the process's resettable peak RSS (Linux /proc: clear_refs, VmHWM).

FSDP2 on gloo is exact in its state, bytes and calls but not always in its peak: gloo's worker thread wakes the
caller of a finished collective before it drops its own reference to the collective's tensors, so whether a
block's reduce-scatter buffer is still alive at a later op depends on thread timing. Six identical runs of
llama-tiny, FSDP with activation checkpointing, 2 ranks, peaked at 35,415,476 bytes on 9 of 12 ranks and at
36,531,380 (one more sharded block gradient alive, fewer activations) on 3, and the split is read at the moment
of the peak, so temporaries can differ with it; nothing in the step can wait for the worker thread without adding
a collective.

The input batch, made before the step, is not seen by the tracker; on CUDA it lands in `other` (peak minus
the named categories), on CPU only in the RSS peak.

The allocator stays at its defaults (issue 19). The launcher used to start every worker with
MALLOC_MMAP_THRESHOLD_=65536 MALLOC_TRIM_THRESHOLD_=0, so that the RSS peak was the tensors' own; it is
dropped, not confined to the metered step, because of these measurements (bare llama-tiny loop,
micro-batch 8 x 128, AdamW and clipping, 1 process, 2 threads; medians of 8 steps):
- time: on a quiet host (issue 19) 216-217 ms per step without them, 371-445 ms with them; `suite run` at 2
  workers DDP 448 vs 781 ms, FSDP 563 vs 959 ms. Here (2-core host shared with other jobs, wall times of
  1-6 s per step, not comparable) the system (kernel) time per step was 110-145 ms with them, 5-10 ms without;
- the tracker's peak: 130.2 MB in every setting (it counts tensors, not pages);
- peak RSS of the metered step: 866 MB with the variables; 903-922 MB with the defaults, where the
  reset peak already starts at 909-926 MB (arenas kept from earlier steps); 899-907 MB with the defaults
  and `malloc_trim(0)` before the step (it starts at 772 MB). Setting the thresholds with mallopt around
  the metered step only gave 880-905 MB and cannot be undone: an explicit threshold turns glibc's dynamic
  threshold off for the rest of the process, so the timed steps after it would not run at the defaults.
So the metered step only returns free heap pages (`malloc_trim(0)`, which changes no setting) before the
peak-RSS count restarts; every record lists `allocator_settings()` (empty at the defaults) under env.allocator.
"""

import contextlib
from collections.abc import Iterator, Sequence
from functools import wraps

import torch
from torch import nn
from torch.distributed._tools.common_utils import get_untyped_storages
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker, _FSDPRefType
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType
from torch.distributed.fsdp import FSDPModule
from torch.nn.parallel import DistributedDataParallel
from torch.utils._pytree import tree_leaves

from suite.meters.process import peak_rss_bytes, release_free_heap, reset_peak_rss

# They sum to `peak_bytes`.
CATEGORIES = ("params", "grads", "optimizer", "activations", "comm_buffers", "other")
# Taken at the end of an optimizer step, gradients alive; `state_bytes` is their sum.
STATE_PARTS = {"params": "state_params", "grads": "state_grads", "optimizer": "state_optimizer"}

MEMTRACKER_CATEGORIES = {
    _MemRefType.PARAM: "params",
    _MemRefType.BUFFER: "other",
    _MemRefType.GRAD: "grads",
    _MemRefType.ACT: "activations",
    _MemRefType.TEMP: "other",
    _MemRefType.OPT: "optimizer",
    # the only tensors registered as Other here: DDP's buckets, met when backward first writes into them
    _MemRefType.OTH: "comm_buffers",
}

# Sharded parameters and gradients are this rank's local shards: the tracker sizes a DTensor by the
# storage of its local tensor. An unsharded gradient is the block's gradient before its reduce-scatter.
FSDP_CATEGORIES = {
    _FSDPRefType.SHARDED_PARAM: "params",
    _FSDPRefType.UNSHARDED_PARAM: "other",
    _FSDPRefType.BUFFER: "other",
    _FSDPRefType.SHARDED_GRAD: "grads",
    _FSDPRefType.UNSHARDED_GRAD: "grads",
    _FSDPRefType.ACT: "activations",
    _FSDPRefType.TEMP: "other",
    _FSDPRefType.ALL_GATHER: "comm_buffers",
    _FSDPRefType.REDUCE_SCATTER: "comm_buffers",
    _FSDPRefType.OPT: "optimizer",
    _FSDPRefType.INP: "other",
}

_TOTAL = "Total"


def _forget_repeated_top_module(tracker: MemTracker, module: nn.Module) -> None:
    # A top-level module running forward again outside backward is the next micro-batch of this step.
    fqn = tracker._mod_tracker.get_known_fqn(module)
    if (
        module in tracker.memory_tracking
        and not tracker._mod_tracker.is_bw
        and tracker._mod_tracker.parents == {"Global", fqn}
    ):
        del tracker.memory_tracking[module]


class _NoHook:
    def remove(self) -> None:
        pass


class _FrozenParams:
    """Frozen parameters (requires_grad=False) get no gradient hook: torch's tracker would try to hook them and
    raise, though they never have a gradient; they are still counted as parameters."""

    def _track_module_params_and_buffers(self, module: nn.Module, install_grad_hooks: bool = True) -> tuple[int, int]:
        for param in module.parameters():
            if not param.requires_grad and param not in self._param_to_grad_hook_handles:
                self._param_to_grad_hook_handles[param] = (_NoHook(), _NoHook())
        return super()._track_module_params_and_buffers(module, install_grad_hooks)


class _DevicePeakOnly:
    """The device's peak and its snapshot, as torch's `_update_peak_stats` keeps them, without the per-module
    peaks it also updates after every op (see the module docstring)."""

    def _update_peak_stats(self, peak_state) -> None:
        for dev, dev_snap in self._curr_mem_snap.items():
            if self._peak_mem.get(dev, 0) < dev_snap[_TOTAL]:
                self._peak_mem[dev] = dev_snap[_TOTAL]
                self._peak_mem_snap[dev] = dict(dev_snap)


def _written(func, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors an op writes into (in-place self, out=)."""
    found = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            found += [t for t in tree_leaves(value) if isinstance(t, torch.Tensor)]
    return found


class _StepMemTracker(_DevicePeakOnly, _FrozenParams, MemTracker):
    def __init__(self, adopt_written: bool = False) -> None:
        super().__init__()
        self.adopt_written = adopt_written

    def _pre_fw_hook(self, module: nn.Module, inputs) -> None:
        _forget_repeated_top_module(self, module)
        super()._pre_fw_hook(module, inputs)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # Storage written but never seen existed before the step untracked: under DDP, its buckets. Without
        # this the tracker would file the bucket as a temporary made by the op that writes into it.
        if self.adopt_written:
            for t in _written(func, args, kwargs or {}):
                if not any(st in self._WINFO for st in get_untyped_storages(t)):
                    self._update_and_maybe_create_winfos(t, _MemRefType.OTH)
        return super().__torch_dispatch__(func, types, args, kwargs)


class _StepFSDPMemTracker(_DevicePeakOnly, _FrozenParams, FSDPMemTracker):
    def _fsdp_state_pre_forward(self, fsdp_mod, orig_fsdp_state_pre_fw):
        pre_forward = super()._fsdp_state_pre_forward(fsdp_mod, orig_fsdp_state_pre_fw)

        @wraps(orig_fsdp_state_pre_fw)
        def inner(*args, **kwargs):
            _forget_repeated_top_module(self, fsdp_mod)
            return pre_forward(*args, **kwargs)

        return inner


def _by_category(snapshot: dict, mapping: dict) -> dict[str, int]:
    # A category this torch adds and the mapping lacks is counted as other, so the six still sum to Total.
    out = dict.fromkeys(CATEGORIES, 0)
    for ref, nbytes in snapshot.items():
        if ref != _TOTAL:
            out[mapping.get(ref, "other")] += nbytes
    return out


def ddp_bucket_bytes(ddp: DistributedDataParallel) -> int:
    """Bytes of DDP's gradient buckets on this rank; 0 where they are the gradients' own storage."""
    if ddp.gradient_as_bucket_view:
        return 0
    data = ddp._get_ddp_logging_data()
    # the sizes before and after DDP's rebuild sum to the same bytes: every parameter is in one bucket
    sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes", "")
    return sum(int(s) for s in str(sizes).split(",") if s.strip())


def _optimizer_list(optimizers) -> list[torch.optim.Optimizer]:
    found = [optimizers] if isinstance(optimizers, torch.optim.Optimizer) else list(optimizers)
    for opt in found:
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"MemoryMeter: optimizers must be torch.optim.Optimizer, got {type(opt).__name__}")
    if not found:
        raise ValueError("MemoryMeter: give at least one optimizer")
    return found


class MemoryMeter:
    """Measures training steps (forwards, backwards, optimizer steps, zero_grad) on this rank.

    `with meter.measure(): step()`, on one or several steps, then `meter.result()`: `peak_bytes` and its six
    categories (`CATEGORIES`, they sum to it) at the highest peak of the measured steps, `rss_peak_bytes`
    (the highest), and the model state while the gradients are alive (`state_params`, `state_grads`,
    `state_optimizer` and their sum `state_bytes`, the state that FSDP divides by the number of shards),
    the largest seen at the end of an optimizer step.

    `model` may be the DDP wrapper, whose buckets are then counted as `comm_buffers`; `optimizers` is every
    optimizer the run owns (one optimizer alone is accepted too).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
        device: torch.device,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"MemoryMeter: model must be an nn.Module, got {type(model).__name__}")
        device = torch.device(device)
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"MemoryMeter: device must be cpu or cuda, got {device}")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("MemoryMeter: device is cuda but CUDA is not available here; pass device='cpu'")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.ddp = model if isinstance(model, DistributedDataParallel) else None
        self.model = model.module if self.ddp else model
        self.optimizers = _optimizer_list(optimizers)
        self.device = device
        self.fsdp = isinstance(self.model, FSDPModule)
        self.mapping = FSDP_CATEGORIES if self.fsdp else MEMTRACKER_CATEGORIES
        self._steps: list[dict] = []

    def _tracker(self) -> MemTracker:
        if not self.fsdp:
            tracker = _StepMemTracker(adopt_written=self.ddp is not None)
            tracker.track_external(self.model, *self.optimizers)
            return tracker
        tracker = _StepFSDPMemTracker(self.model, self.optimizers[0])
        for opt in self.optimizers[1:]:  # FSDPMemTracker knows one optimizer; its track_external does nothing
            tracker._track_optimizer_states(_FSDPRefType.OPT, opt)
        return tracker

    def _method(self, rss_resettable: bool) -> str:
        tracker = "FSDPMemTracker" if self.fsdp else "MemTracker"
        if self.device.type == "cuda":
            peak = f"cuda max_memory_allocated; {tracker} categories at its peak, other = the rest"
        else:
            peak = f"{tracker} peak of live tensor bytes with its categories"
        rss = "/proc VmHWM peak RSS over the step" if rss_resettable else "no resettable peak RSS"
        buckets = "; DDP buckets from its logging data as comm_buffers" if self.ddp else ""
        return f"{peak} ({self.device.type}); {rss}; state at the end of each optimizer step{buckets}"

    @contextlib.contextmanager
    def _state_at_optimizer_steps(self, tracker: MemTracker, state: dict[str, int]) -> Iterator[None]:
        """Keeps in `state` the largest params + grads + optimizer seen at the end of an optimizer step."""
        opt_ref = _FSDPRefType.OPT if self.fsdp else _MemRefType.OPT

        def pre(opt, args, kwargs) -> None:
            tracker._in_opt = True  # what this step allocates is optimizer state or its temporaries

        def post(opt, args, kwargs) -> None:
            tracker._track_optimizer_states(opt_ref, opt)  # state made in this step, before we read it
            tracker._in_opt = False
            now = _by_category(tracker.get_tracker_snapshot().get(self.device, {}), self.mapping)
            if sum(now[c] for c in STATE_PARTS) >= sum(state.values()):
                state.update({field: now[c] for c, field in STATE_PARTS.items()})

        handles = [
            h for opt in self.optimizers for h in (opt.register_step_pre_hook(pre), opt.register_step_post_hook(post))
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    @contextlib.contextmanager
    def measure(self) -> Iterator[None]:
        """Wrap one training step; wrap several to get their maximum."""
        tracker = self._tracker()
        state: dict[str, int] = {}
        rebuilt_before = self.ddp is not None and self.ddp._has_rebuilt_buckets
        release_free_heap()
        rss_resettable = reset_peak_rss()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        with tracker, self._state_at_optimizer_steps(tracker, state):
            yield
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        rebuilt = self.ddp is not None and self.ddp._has_rebuilt_buckets and not rebuilt_before
        self._steps.append(self._summarize(tracker, state, rss_resettable, rebuilt))

    def _summarize(self, tracker: MemTracker, state: dict[str, int], rss_resettable: bool, rebuilt: bool) -> dict:
        at_peak = _by_category(tracker.get_tracker_snapshot("peak").get(self.device, {}), self.mapping)
        after = _by_category(tracker.get_tracker_snapshot("current").get(self.device, {}), self.mapping)
        optimizer_temporaries = max(0, at_peak["optimizer"] - after["optimizer"])
        at_peak["optimizer"] -= optimizer_temporaries
        at_peak["other"] += optimizer_temporaries
        at_peak["comm_buffers"] += self._ddp_buckets(at_peak, rebuilt)
        if self.device.type == "cuda":
            peak_bytes = torch.cuda.max_memory_allocated(self.device)
            at_peak["other"] = peak_bytes - sum(at_peak[c] for c in CATEGORIES if c != "other")
        else:
            peak_bytes = sum(at_peak.values())
        # no optimizer step in the measured step: the state left after it
        state = state or {field: after[c] for c, field in STATE_PARTS.items()}
        return {
            "method": self._method(rss_resettable),
            "peak_bytes": peak_bytes,
            **at_peak,
            "rss_peak_bytes": peak_rss_bytes() if rss_resettable else None,
            "state_bytes": sum(state.values()),
            **state,
        }

    def _ddp_buckets(self, at_peak: dict[str, int], rebuilt: bool) -> int:
        """DDP's bucket bytes that the tracker had not filed as comm_buffers at the peak; they are alive through the
        whole step. The buckets rebuilt in this step's forward are in the tracker's activations; on a steady step
        it has seen those written before the peak."""
        if self.ddp is None:
            return 0
        buckets = ddp_bucket_bytes(self.ddp)
        if rebuilt:
            at_peak["activations"] -= min(buckets, at_peak["activations"])
        return max(0, buckets - at_peak["comm_buffers"])

    def result(self) -> dict:
        """The measured steps: the categories of the one with the highest peak, the largest RSS peak and state."""
        if not self._steps:
            raise RuntimeError("MemoryMeter.result(): wrap one training step in `with meter.measure():` first")
        out = dict(max(self._steps, key=lambda s: s["peak_bytes"]))
        fullest = max(self._steps, key=lambda s: s["state_bytes"])
        out.update({k: fullest[k] for k in ("state_bytes", *STATE_PARTS.values())})
        rss = [s["rss_peak_bytes"] for s in self._steps if s["rss_peak_bytes"] is not None]
        out["rss_peak_bytes"] = max(rss, default=None)
        out["steps"] = len(self._steps)
        return out
