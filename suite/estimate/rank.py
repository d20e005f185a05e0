"""One rank's estimate: the real Worker, strategy and meters, run in the fake world for a few steps.

The steps run through Worker.metered_step, inside the same meters as a measured run (suite/meters), so an
estimate and a measured run are comparable number for number, and their record sections are built by the
same code. The loop's own control messages (stop votes,
loss means, record gathering) are not run: they need peers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from suite.config import RunConfig
from suite.estimate.fake import FakeTensors, fake_world
from suite.meters.clock import StepClock
from suite.run.strategy import local_tensor
from suite.run.train import Worker


class FakeWorker(Worker):
    """The training loop's Worker; its model is built on the meta device and made fake by `.to(device)`."""

    def __init__(self, cfg: RunConfig, fakes: FakeTensors) -> None:
        self.fakes = fakes
        super().__init__(cfg)

    @contextmanager
    def model_scope(self) -> Iterator[None]:
        with torch.device("meta"), self.fakes.active():
            yield


@dataclass
class RankEstimate:
    rank: int
    signature: tuple
    numels: dict
    record: dict
    layout: tuple = ()  # the signature without names: what a rank class is decided on (suite/estimate/classes.py)
    groups: list = field(default_factory=list)  # (process group's own name, label, size, tier) of each labelled one
    steps: int = 0
    results: dict = field(default_factory=dict)  # Metering.results(): each meter's local result
    meters: list = field(default_factory=list)  # the meters' types, to build the record's sections

    @property
    def stepped(self) -> bool:
        return self.steps > 0

    @property
    def flops(self) -> dict:
        return self.results.get("flops") or {"model": 0, "hardware": 0}


def signature(worker: Worker) -> tuple:
    """What a rank's step depends on besides the data: the storage of its local tensors, and its groups.

    Two ranks with equal signatures run the same ops on the same shapes in groups of the same sizes and
    tiers, so one's estimate stands for the other's. Storage, not view: FSDP pads uneven shards, so the
    last ranks' shorter views share the padded size of everyone else's (see `short_views`).
    """
    model = worker.parts.model
    tensors = tuple(
        (kind, name, local_tensor(t).untyped_storage().nbytes(), str(t.dtype))
        for kind, named in (("param", model.named_parameters()), ("buffer", model.named_buffers()))
        for name, t in named
    )
    groups = tuple(sorted((g["name"], g["size"], g["tier"]) for g in worker.ctx.groups))
    return tensors, groups


def layout(worker: Worker) -> tuple:
    """What a rank's memory and bytes depend on, names left out: each local tensor's storage bytes, elements and
    dtype in the model's order, and the sizes and tiers of the labelled groups.

    Ranks of equal layouts run the same ops on the same shapes in groups of the same sizes and tiers: SDP's ranks
    hold different blocks (other names, other holder groups) of the same sizes. Elements as well as storage: the
    last ranks of an uneven FSDP shard hold shorter views of a padded storage, and their optimizer state is
    smaller.
    """
    model = worker.parts.model
    tensors = tuple(
        (kind, local_tensor(t).untyped_storage().nbytes(), local_tensor(t).numel(), str(t.dtype))
        for kind, named in (("param", model.named_parameters()), ("buffer", model.named_buffers()))
        for _, t in named
    )
    groups = tuple(sorted((label.size, label.tier) for _, label in worker.ledger.labels()))
    return tensors, groups


def local_numels(worker: Worker) -> dict[str, int]:
    return {name: local_tensor(p).numel() for name, p in worker.parts.model.named_parameters()}


def estimate_rank(
    cfg: RunConfig, rank: int, gpus_per_node: int, step: Callable[[RankEstimate], bool] | None = None
) -> RankEstimate:
    """Build rank `rank` of `cfg.nproc` on fake tensors and run its steps through the last metered one if
    `step(built)` says so (default: always): whether a rank needs its own steps is known once it is built, and it
    is stepped then, not built a second time to be stepped."""
    fakes = FakeTensors()
    with fake_world(rank, cfg.nproc, gpus_per_node):
        worker = FakeWorker(cfg, fakes)
        worker.build()
        out = RankEstimate(rank, signature(worker), local_numels(worker), worker.recorder.record, layout(worker))
        out.groups = [(name, label.name, label.size, label.tier) for name, label in worker.ledger.labels()]
        if step is None or step(out):
            out.steps = worker.parts.metering.last_step() + 1
            clock = StepClock(worker.device, 0, worker.strategy.comm_period)
            with fakes.active():
                for i in range(out.steps):
                    worker.metered_step(i, clock)
            out.results, out.meters = worker.parts.metering.results(), worker.parts.metering.types()
    return out
