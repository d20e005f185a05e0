"""The fake world an estimate runs in: torch's fake process group, FakeTensorMode, and shims.

torch provides both halves (the `fake` backend of torch.testing._internal.distributed.fake_pg and
FakeTensorMode); this module joins them and works around what breaks when they meet a training step
in torch 2.14. Each shim is about torch, not about a method, so any strategy built from torch's
pieces runs unchanged:
- groups: there are no peers, so every process group is a fake one, whatever backend the code asks
  for (a gloo group on the fake store crashes the process);
- Work results: the fake backend's Work carries no result, and DDP's reducer reads its all-reduce
  result from the Work's future; each collective's future is completed with its output tensors, as a
  real backend does;
- real stays real: an op whose tensor inputs are all real (the input batch, meta tensors) runs for
  real. Building and sharding a model on the meta device then costs what it costs without fake
  tensors (FSDP2 cuts every parameter into world-size pieces: 512 fake views per parameter would
  take minutes), and `.to(device)` turns it into fake tensors;
- Module.to() on fake parameters: Module._apply swaps them, and swap_tensors refuses any tensor with a
  weak reference, which FakeTensorMode's converter keeps on every tensor it made or converted
  (pytorch#148977, fixed upstream by #196558, which lets swap_tensors ignore those references). The
  converter forgets the two tensors just before a swap; swapping (also from meta) keeps tied weights tied;
- C++ that reads tensor data: DDP checks parameter shapes across ranks, and before its second step
  exchanges its new bucket order in int32 tensors; those run on real (tiny) tensors;
- `.item()` of a fake loss has no value: a ShapeEnv makes it a symbol instead of an error.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from unittest import mock

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from suite.run.world import destroy_world

BACKEND = "fake"


@contextmanager
def fake_world(rank: int, world_size: int, gpus_per_node: int) -> Iterator[None]:
    """This process is rank `rank` of `world_size` (on nodes of `gpus_per_node`) until the block ends."""
    if dist.is_initialized():
        raise RuntimeError("an estimate needs a process without a process group; run it outside torchrun")
    real_new_group = dist.new_group

    def fake_new_group(ranks=None, timeout=None, backend=None, pg_options=None, *args, **kwargs):
        return real_new_group(ranks, timeout, None, None, *args, **kwargs)

    dist.init_process_group(BACKEND, store=FakeStore(), rank=rank, world_size=world_size)
    try:
        # torchrun's variable: the ledger's tiers and HSDP's default shard size read it
        with (
            mock.patch.dict(os.environ, {"LOCAL_WORLD_SIZE": str(gpus_per_node)}),
            mock.patch.object(dist, "new_group", fake_new_group),
        ):
            yield
    finally:
        destroy_world()


def _stays_real(args: tuple, kwargs: dict) -> bool:
    """True for ops on real tensors that do not move meta tensors to a device, and for makers of meta tensors."""
    # a step's ops take a fake tensor (or a list of them) among their first arguments: answered without
    # flattening every argument, a tenth of an estimate's time
    for a in args:
        if isinstance(a, FakeTensor) or (isinstance(a, (list, tuple)) and a and isinstance(a[0], FakeTensor)):
            return False
    tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    device = kwargs.get("device")
    to_meta = device is not None and torch.device(device).type == "meta"
    if not tensors:
        return to_meta
    if any(isinstance(t, FakeTensor) for t in tensors):
        return False
    # meta -> device is where a model built on meta becomes fake
    return to_meta or device is None or not all(t.is_meta for t in tensors)


def _completed(out: tuple) -> tuple:
    tensors, _ = out
    future = torch.futures.Future()
    future.set_result(tensors)
    return tensors, _create_work_from_future(future).boxed()


class _Shims(TorchDispatchMode):
    """Real ops on real tensors, completed Work for collectives, real int32 tensors while `real_ints`."""

    def __init__(self) -> None:
        super().__init__()
        self.real_ints = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _stays_real(args, kwargs) or (self.real_ints and kwargs.get("dtype") == torch.int32):
            with unset_fake_temporarily():
                out = func(*args, **kwargs)
        else:
            out = func(*args, **kwargs)
        if (
            func.namespace == "c10d"
            and isinstance(out, tuple)
            and len(out) == 2
            and isinstance(out[1], torch.ScriptObject)
        ):
            return _completed(out)
        return out


class FakeTensors:
    """One rank's fake tensors: `with fakes.active():` builds and steps on them (see the module docstring)."""

    def __init__(self) -> None:
        self.mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv(), static_shapes=True)
        self.shims = _Shims()

    def _swap_tensors(self, real: Callable) -> Callable:
        converter = self.mode.fake_tensor_converter
        memo, seen = converter.tensor_memo, converter.meta_converter.describer.lookup_tensor

        def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
            for key, value in list(memo.items()):
                if value is t1 or value is t2:
                    del memo[key]
            for t in (t1, t2):
                if t in seen:
                    del seen[t]
            real(t1, t2)

        return swap_tensors

    def _with_real_ints(self, real: Callable) -> Callable:
        def with_real_ints(*args, **kwargs):
            was, self.shims.real_ints = self.shims.real_ints, True
            try:
                return real(*args, **kwargs)
            finally:
                self.shims.real_ints = was

        return with_real_ints

    @staticmethod
    def _unfaked(real: Callable) -> Callable:
        def unfaked(*args, **kwargs):
            with unset_fake_temporarily():
                return real(*args, **kwargs)

        return unfaked

    @contextmanager
    def active(self) -> Iterator[None]:
        """Tensors made inside are fake; meta tensors and real inputs stay real."""
        with ExitStack() as stack:
            stack.enter_context(
                mock.patch.object(torch.utils, "swap_tensors", self._swap_tensors(torch.utils.swap_tensors))
            )
            stack.enter_context(
                mock.patch.object(
                    dist, "_verify_params_across_processes", self._unfaked(dist._verify_params_across_processes)
                )
            )
            stack.enter_context(
                mock.patch.object(dist.Reducer, "_rebuild_buckets", self._with_real_ints(dist.Reducer._rebuild_buckets))
            )
            was_swapping = torch.__future__.get_swap_module_params_on_conversion()
            torch.__future__.set_swap_module_params_on_conversion(True)
            stack.callback(torch.__future__.set_swap_module_params_on_conversion, was_swapping)
            stack.enter_context(self.mode)
            stack.enter_context(self.shims)
            yield
