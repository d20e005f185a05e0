"""The built-in meters as plug-ins (suite/meters/base.py): FLOPs, memory and communication per step.

Each adapts one measuring module (flops.py, memory.py, comm.py) to the meter interface and builds its
record section, for measured runs and estimates alike (an estimate's record says `estimated`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from suite.extensions import declared
from suite.meters import comm_check
from suite.meters.base import Meter, MeterContext
from suite.meters.comm import METHOD as COMM_METHOD
from suite.meters.flops import FlopMeter
from suite.meters.memory import MemoryMeter
from suite.meters.schedule import comm_steps, flop_steps, memory_steps


def _estimated(record: dict) -> bool:
    return record.get("provenance") == "estimated"


class Flops(Meter):
    """Model, hardware and optimizer FLOPs of one step (FlopCounterMode); totals = steps x the sum over ranks."""

    name = "flops"

    def __init__(self, ctx: MeterContext) -> None:
        super().__init__(ctx)
        self.counter = FlopMeter()
        self.counted = False

    def steps(self) -> range:
        return flop_steps(self.ctx.cfg)

    def wrap(self, step: int) -> AbstractContextManager:
        self.counted = True
        return self.counter

    def local(self) -> dict | None:
        if not self.counted:
            return None
        return {
            "model": self.counter.model_flops,
            "hardware": self.counter.hardware_flops,
            "optimizer": self.counter.optimizer_flops,
        }

    @classmethod
    def section(cls, per_rank: dict[int, Any], record: dict, weight: dict[int, int]) -> None:
        counted = {r: v for r, v in per_rank.items() if v}
        model = sum(v["model"] * weight[r] for r, v in counted.items())
        hardware = sum(v["hardware"] * weight[r] for r, v in counted.items())
        # a result restored from a checkpoint written before optimizer FLOPs were counted apart has none
        optimizer = sum(v.get("optimizer", 0) * weight[r] for r, v in counted.items())
        steps = record["totals"]["steps"]
        record["totals"].update(
            {"flops": steps * model, "hardware_flops": steps * hardware, "optimizer_flops": steps * optimizer}
        )
        where = "on fake tensors, " if _estimated(record) else ""
        record["flops_method"] = (
            f"FlopCounterMode {where}on step {record['settings']['flop_step']} of every rank, summed over ranks; "
            "every step has the same shapes, so totals = steps x that count; flops: the model's forward and "
            "backward; hardware_flops: those plus recomputation; optimizer_flops: the optimizer steps' own ops, "
            "never model FLOPs, never spending a budget"
        )


class Memory(Meter):
    """Peak memory and its categories per rank: the maximum over one whole period of steady-state steps."""

    name = "memory"

    def __init__(self, ctx: MeterContext) -> None:
        super().__init__(ctx)
        self.meter: MemoryMeter | None = None

    def steps(self) -> range:
        # emulated workers share one process, and the tracker's module hooks are the process's
        return range(0) if self.ctx.cfg.emulate else memory_steps(self.ctx.cfg, self.ctx.period)

    def wrap(self, step: int) -> AbstractContextManager:
        if self.meter is None:
            self.meter = MemoryMeter(self.ctx.model(), self.ctx.optimizers(), self.ctx.device)
        return self.meter.measure()

    def local(self) -> dict | None:
        return self.meter.result() if self.meter is not None else None

    @classmethod
    def section(cls, per_rank: dict[int, Any], record: dict, weight: dict[int, int]) -> None:
        rows = {r: m for r, m in per_rank.items() if m}
        if not rows:
            mem_step = record["settings"]["mem_step"]
            settings = record["settings"]
            if settings.get("emulate"):
                unmeasured = "emulated workers share one process"
            else:
                unmeasured = f"the run ended before step {mem_step}" if settings["meters"] else "meters off"
            record["memory"] = {"method": f"not measured: {unmeasured}", "per_rank": []}
            return
        method = next(iter(rows.values()))["method"]
        if _estimated(record):
            tracker = method.split(";")[0].replace(" (cpu)", "")
            method = f"estimated: {tracker}, on fake tensors (no data, no allocator; no RSS)"
        else:
            method += "; the maximum over one period of the method's pattern, off the clock"
        per = []
        for rank, m in sorted(rows.items()):
            row = {k: v for k, v in m.items() if k != "method"}
            if _estimated(record):
                row["rss_peak_bytes"] = None  # the estimating process's RSS says nothing of the estimated rank
            per.append({"rank": rank, **row})
        record["memory"] = {"method": method, "per_rank": per}


class Comm(Meter):
    """Every collective of one whole period of steady-state steps, per rank (the ledger)."""

    name = "comm"

    def __init__(self, ctx: MeterContext) -> None:
        super().__init__(ctx)
        self.counted = 0
        # the backend's own count over the same steps, where the run asks for the check (comm_check)
        self.check = comm_check.CountWindow() if ctx.cfg.comm_check else None

    def steps(self) -> range:
        return comm_steps(self.ctx.cfg, self.ctx.period)

    def wrap(self, step: int) -> AbstractContextManager:
        self.counted += 1
        return self.ctx.ledger if self.check is None else _both(self.check, self.ctx.ledger)

    def local(self) -> dict:
        out = {"ops": self.ctx.ledger.ops(), "steps": self.counted}
        if self.check is not None:
            out["check"] = self.check.rows(lambda name: self.ctx.ledger.group_label(name).name)
        return out

    @classmethod
    def section(cls, per_rank: dict[int, Any], record: dict, weight: dict[int, int]) -> None:
        first = next(iter(per_rank.values()), None) or {"steps": 0}
        window = comm_steps_of(record, first["steps"])
        if _estimated(record):
            where = "counted on the fake process group"
        elif record["settings"].get("emulate"):
            where = "counted by the emulated workers' process group as it performs each call, off the clock"
        else:
            where = "off the clock"
        ranks = sorted((r, v) for r, v in per_rank.items() if v is not None)
        record["comm"] = {
            "method": f"{COMM_METHOD}; counted on steps {window} (one period of the method's pattern, "
            f"after DDP's bucket rebuild), {where}",
            "steps": first["steps"],
            "per_rank": [{"rank": r, "ops": v["ops"]} for r, v in ranks],
        }
        if "check" in first:
            differ = [f"rank {r}: {d}" for r, v in ranks for d in comm_check.differences(v["ops"], v["check"])]
            record["comm"]["check"] = {
                "method": comm_check.METHOD,
                "agrees": not differ,
                "differences": differ,
                "per_rank": [{"rank": r, "ops": v["check"]} for r, v in ranks],
            }


@contextmanager
def _both(outer: AbstractContextManager, inner: AbstractContextManager) -> Iterator[None]:
    with outer, inner:
        yield


def comm_steps_of(record: dict, steps: int) -> str:
    start = record["settings"]["comm_step"]
    return f"{start}-{start + steps - 1}" if steps else "none"


BUILTIN: tuple[type[Meter], ...] = (Flops, Memory, Comm)


def meters_for(ctx: MeterContext) -> list[Meter]:
    """The built-in meters, then every meter a reproduction declares that applies to this run."""
    extra = [cls for cls, _ in declared("meters").values() if cls not in BUILTIN]
    return [cls(ctx) for cls in (*BUILTIN, *extra) if cls.applies(ctx.cfg)]
