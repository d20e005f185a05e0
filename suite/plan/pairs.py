"""A throughput pair: a method and its baseline, launched one after the other on a tiny fixed shape.

Reproductions declare their pairs (suite.extensions.Reproduction.pairs); benchmarks/ measures them and the
gate compares the ratio method tokens/s / baseline tokens/s against a committed reference.
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
