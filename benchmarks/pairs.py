"""The throughput pairs the CI gate checks: each method beside its baseline, both measured in one run.

Machines differ and drift, so the gate never compares absolute speed: it compares the ratio
method tokens/s / baseline tokens/s, taken from launches made minutes apart on the same machine.

A method that lands adds its pair to PAIRS (its reproduction issue asks for it), for example

    Pair("b-sdp/ddp", Config("b-sdp", sets=(("C", 0.5),)), DDP),

with `tolerance=` where its ratio is noisier than 10%, and `short=True` only if CI's five-minute gate
must watch it. The same change refreshes results/bench/reference.json (README, "Throughput gate");
until then the gate says "no reference" and fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from suite.config import RunConfig, apply_sets

# the tiny fixed shape every configuration trains: 2 warm-up steps, then 8 timed steps
MODEL = "llama-tiny"
MICRO_BATCH = 8
SEQ_LEN = 128
WARMUP = 2
STEPS = 10


@dataclass(frozen=True)
class Config:
    """One launch: a method with its composition options, trained for `steps` steps."""

    method: str
    nproc: int = 2
    ac: bool = False
    precision: str = "fp32"
    meters: bool = True
    sets: tuple[tuple[str, object], ...] = ()  # config fields or method parameters, as `--set KEY=VALUE`
    steps: int = STEPS

    @property
    def key(self) -> str:
        """A name unique to these settings: the benchmark's id and the gate's lookup key."""
        parts = [self.method, f"n{self.nproc}", *(f"{k}{v}" for k, v in self.sets)]
        if self.ac:
            parts.append("ac")
        if self.precision != "fp32":
            parts.append(self.precision)
        if not self.meters:
            parts.append("nometers")
        return "-".join(parts)

    def run_config(self, results: Path) -> RunConfig:
        """The harness's config; the token budget assumes every rank is a data replica (ddp, fsdp, hsdp)."""
        cfg = RunConfig(
            method=self.method,
            model=MODEL,
            nproc=self.nproc,
            ac=self.ac,
            precision=self.precision,
            meters=self.meters,
            results=str(results),
            micro_batch=MICRO_BATCH,
            seq_len=SEQ_LEN,
            clock_warmup=WARMUP,
            eval_every=self.steps + 1,
            reproduction="bench",
        )
        apply_sets(cfg, [f"{k}={v}" for k, v in self.sets])
        cfg.tokens = self.steps * self.nproc * cfg.micro_batch * cfg.grad_accum * cfg.seq_len
        return cfg


@dataclass(frozen=True)
class Pair:
    """A method and its baseline; the gate fails when their ratio falls by more than `tolerance`."""

    name: str
    method: Config
    baseline: Config
    tolerance: float = 0.10
    short: bool = False  # part of CI's short gate (`nox -s bench -- --short --compare`)


DDP = Config("ddp")
FSDP = Config("fsdp")

# Order matters: a pair whose baseline (or method) is the configuration just measured reuses that
# launch, so keep pairs that share a configuration next to each other.
# Tolerances: on a quiet 2-core machine single rounds of a pair fell up to 12.5% below their 3-round
# median (fsdp-ac/fsdp, hsdp/ddp) and 7.7% (b-sdp/ddp); those pairs get 15%, the steadier ones 10%.
PAIRS: list[Pair] = [
    Pair("meters/no-meters", DDP, Config("ddp", meters=False), short=True),
    Pair("fsdp/ddp", FSDP, DDP, short=True),
    Pair("fsdp-ac/fsdp", Config("fsdp", ac=True), FSDP, tolerance=0.15),
    Pair("ddp-ac/ddp", Config("ddp", ac=True), DDP, short=True),
    # bf16 steps are 8-25x slower than fp32 on this AVX2-only CPU (no bf16 kernels): fewer steps
    Pair("ddp-bf16/ddp", Config("ddp", precision="bf16", steps=5), DDP),
    Pair("hsdp/ddp", Config("hsdp", nproc=4), Config("ddp", nproc=4), tolerance=0.15),
    # SDP (reproductions/sdp): 2 of llama-tiny's 4 blocks per worker, against DDP at the same world size
    Pair("b-sdp/ddp", Config("b-sdp", sets=(("C", 0.5),)), DDP, tolerance=0.15, short=True),
    Pair(
        "b-sdp-dense/b-sdp",
        Config("b-sdp", sets=(("C", 0.5), ("aggregation", "dense"))),
        Config("b-sdp", sets=(("C", 0.5),)),
    ),
]


def selected(short: bool, pairs: list[Pair] = PAIRS) -> list[Pair]:
    return [p for p in pairs if p.short or not short]
