"""Memory of one training step on this rank: the peak, and what it is made of at that moment.

PyTorch's MemTracker (FSDPMemTracker when the root is an FSDP2 module) tags every tensor storage it sees
as parameter, gradient, optimizer state, activation or temporary, and keeps the category totals at the
moment of the peak. This module only adds what it lacks for a training loop:
- frozen parameters, which it would try to hook for gradients and fail on;
- the mapping of its categories onto the five of the run record (`MEMTRACKER_CATEGORIES`,
  `FSDP_CATEGORIES`);
- steps of several micro-batches: the trackers take a second forward of a top-level module for a
  second iteration and raise, so its stale per-module stats are dropped first;
- optimizer-step temporaries: the trackers file every tensor made inside `optimizer.step()` as
  optimizer state; at the peak we count as optimizer state no more than the state left after the step,
  and the rest as other;
- the device peak (`torch.cuda.max_memory_allocated`) on CUDA and, since the CPU allocator keeps no
  statistics, the process's resettable peak RSS (Linux /proc: clear_refs, VmHWM).

Tensors made before the step and not owned by the model or optimizer (the input batch, DDP's gradient
buckets) are not seen by the tracker; on CUDA they land in `other` (peak minus the tracked categories),
on CPU only in the RSS peak.
"""

import contextlib
import re
from collections.abc import Iterator
from functools import wraps
from pathlib import Path

import psutil
import torch
from torch import nn
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker, _FSDPRefType
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType
from torch.distributed.fsdp import FSDPModule

CATEGORIES = ("params", "grads", "optimizer", "activations", "other")

MEMTRACKER_CATEGORIES = {
    _MemRefType.PARAM: "params",
    _MemRefType.BUFFER: "other",
    _MemRefType.GRAD: "grads",
    _MemRefType.ACT: "activations",
    _MemRefType.TEMP: "other",
    _MemRefType.OPT: "optimizer",
    _MemRefType.OTH: "other",
}

# Sharded parameters and gradients are this rank's local shards: the tracker sizes a DTensor by the
# storage of its local tensor.
FSDP_CATEGORIES = {
    _FSDPRefType.SHARDED_PARAM: "params",
    _FSDPRefType.UNSHARDED_PARAM: "other",
    _FSDPRefType.BUFFER: "other",
    _FSDPRefType.SHARDED_GRAD: "grads",
    _FSDPRefType.UNSHARDED_GRAD: "other",
    _FSDPRefType.ACT: "activations",
    _FSDPRefType.TEMP: "other",
    _FSDPRefType.ALL_GATHER: "other",
    _FSDPRefType.REDUCE_SCATTER: "other",
    _FSDPRefType.OPT: "optimizer",
    _FSDPRefType.INP: "other",
}

_TOTAL = "Total"
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def process_rss_bytes() -> int:
    """Resident set size of this process now."""
    return psutil.Process().memory_info().rss


def reset_peak_rss() -> bool:
    """Restart the process's peak-RSS count (Linux); False where the kernel does not allow it."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_rss_bytes() -> int | None:
    """Peak RSS since the last `reset_peak_rss()` (or process start); None without /proc."""
    try:
        match = re.search(r"^VmHWM:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


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


class _StepMemTracker(_FrozenParams, MemTracker):
    def _pre_fw_hook(self, module: nn.Module, inputs) -> None:
        _forget_repeated_top_module(self, module)
        super()._pre_fw_hook(module, inputs)


class _StepFSDPMemTracker(_FrozenParams, FSDPMemTracker):
    def _fsdp_state_pre_forward(self, fsdp_mod, orig_fsdp_state_pre_fw):
        pre_forward = super()._fsdp_state_pre_forward(fsdp_mod, orig_fsdp_state_pre_fw)

        @wraps(orig_fsdp_state_pre_fw)
        def inner(*args, **kwargs):
            _forget_repeated_top_module(self, fsdp_mod)
            return pre_forward(*args, **kwargs)

        return inner


def _by_category(snapshot: dict, mapping: dict) -> dict[str, int]:
    # A category this torch adds and the mapping lacks is counted as other, so the five still sum to Total.
    out = dict.fromkeys(CATEGORIES, 0)
    for ref, nbytes in snapshot.items():
        if ref != _TOTAL:
            out[mapping.get(ref, "other")] += nbytes
    return out


class MemoryMeter:
    """Measures one training step (forwards, backwards, optimizer step, zero_grad) on this rank.

    `with meter.measure(): step()` then `meter.result()`: `peak_bytes` and its five categories at the
    peak (they sum to it), `rss_peak_bytes`, and `state_bytes` (params + grads + optimizer state left
    after the step, the model state that FSDP divides by the number of shards).
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"MemoryMeter: model must be an nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"MemoryMeter: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        device = torch.device(device)
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"MemoryMeter: device must be cpu or cuda, got {device}")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("MemoryMeter: device is cuda but CUDA is not available here; pass device='cpu'")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.model = model
        self.optimizer = optimizer
        self.device = device
        self.fsdp = isinstance(model, FSDPModule)
        self._result: dict | None = None

    def _tracker(self) -> MemTracker:
        if self.fsdp:
            return _StepFSDPMemTracker(self.model, self.optimizer)
        tracker = _StepMemTracker()
        tracker.track_external(self.model, self.optimizer)
        return tracker

    def _method(self, rss_resettable: bool) -> str:
        tracker = "FSDPMemTracker" if self.fsdp else "MemTracker"
        if self.device.type == "cuda":
            peak = f"cuda max_memory_allocated; {tracker} categories at its peak, other = the rest"
        else:
            peak = f"{tracker} peak of live tensor bytes with its categories"
        rss = "/proc VmHWM peak RSS over the step" if rss_resettable else "no resettable peak RSS"
        return f"{peak} ({self.device.type}); {rss}"

    @contextlib.contextmanager
    def measure(self) -> Iterator[None]:
        """Wrap exactly one training step."""
        self._result = None
        tracker = self._tracker()
        rss_resettable = reset_peak_rss()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        with tracker:
            yield
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._result = self._summarize(tracker, rss_resettable)

    def _summarize(self, tracker: MemTracker, rss_resettable: bool) -> dict:
        mapping = FSDP_CATEGORIES if self.fsdp else MEMTRACKER_CATEGORIES
        at_peak = _by_category(tracker.get_tracker_snapshot("peak").get(self.device, {}), mapping)
        after = _by_category(tracker.get_tracker_snapshot("current").get(self.device, {}), mapping)
        optimizer_temporaries = max(0, at_peak["optimizer"] - after["optimizer"])
        at_peak["optimizer"] -= optimizer_temporaries
        at_peak["other"] += optimizer_temporaries
        if self.device.type == "cuda":
            peak_bytes = torch.cuda.max_memory_allocated(self.device)
            at_peak["other"] = peak_bytes - sum(at_peak[c] for c in CATEGORIES if c != "other")
        else:
            peak_bytes = sum(at_peak.values())
        return {
            "method": self._method(rss_resettable),
            "peak_bytes": peak_bytes,
            **at_peak,
            "rss_peak_bytes": peak_rss_bytes() if rss_resettable else None,
            "state_bytes": after["params"] + after["grads"] + after["optimizer"],
        }

    def result(self) -> dict:
        """The measurement of the last step wrapped by `measure()`."""
        if self._result is None:
            raise RuntimeError("MemoryMeter.result(): wrap one training step in `with meter.measure():` first")
        return dict(self._result)
