"""The settings of one run, with every default visible here (nanoGPT style).

`--set KEY=VALUE` changes a field below when KEY names one; any other KEY is a method parameter
(`variant`, e.g. `shard=2` for hsdp) that the method itself validates.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

PRECISIONS = ("fp32", "bf16", "fp16", "fp8")


LR_DECAYS = ("constant", "cosine")


def check_lr_decay(cfg: RunConfig) -> None:
    """Cosine decay follows the budget: every rank must read the same fraction, so wall time cannot drive it."""
    if cfg.lr_decay not in LR_DECAYS:
        raise ValueError(f"unknown lr_decay {cfg.lr_decay!r}; use --set lr_decay=constant or lr_decay=cosine")
    if cfg.lr_decay == "cosine" and cfg.time_s is not None:
        raise ValueError("lr_decay=cosine follows a tokens, flops or target budget, not --time; use constant")
    if not 0 <= cfg.min_lr_ratio <= 1:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {cfg.min_lr_ratio}")


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; use --precision {', '.join(PRECISIONS)}")


@dataclass
class RunConfig:
    method: str = "ddp"
    model: str = "llama-tiny"
    nproc: int = 2
    device: str = "cpu"
    # budget: exactly one of tokens / flops / time_s / target (target runs stop at max_tokens at the latest)
    tokens: float | None = None
    flops: float | None = None
    time_s: float | None = None
    target: float | None = None
    max_tokens: float | None = 2_000_000
    seed: int = 0
    results: str = "results/runs"
    # composition with any method
    ac: bool = False
    precision: str = "fp32"
    optimizer: str = "adamw"
    # optimisation
    lr: float = 3e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 10
    # constant after warmup, or cosine over the budget (fraction of tokens or FLOPs spent) down to min_lr_ratio
    lr_decay: str = "constant"
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    # batch: global batch = data-parallel replicas x micro_batch x grad_accum sequences
    micro_batch: int = 8
    grad_accum: int = 1
    seq_len: int = 128
    # data and evaluation
    data: str | None = None
    data_root: str | None = None
    eval_every: int = 50
    eval_batches: int = 4
    eval_batch: int = 8
    evals: str = ""  # comma-separated lm-eval tasks run on the final model (rank 0); image runs add top1
    eval_limit: int | None = None  # at most this many documents per lm-eval task (None: all)
    checkpoint: str | None = None  # where to save the final full model (for `python -m suite evaluate`)
    # metering, all off the clock (suite/meters/schedule.py): FLOPs on step flop_step; memory and communication
    # over one whole period of the method's pattern (Strategy.comm_period) from mem_step and comm_step, after
    # DDP's bucket rebuild on step 1
    meters: bool = True
    flop_step: int = 0
    mem_step: int = 2
    comm_step: int = 2
    clock_warmup: int = 2
    log_every: int = 10
    # checkpoints and faults (suite/checkpoint.py, README "Checkpoints, resuming, faults"): a checkpoint every
    # checkpoint_every steps (0: none); torchrun restarts the workers from the last one up to max_restarts
    # times; a collective that waits longer than collective_timeout_s fails the run instead of hanging it
    checkpoint_every: int = 0
    checkpoint_dir: str = "checkpoints"
    max_restarts: int = 0
    collective_timeout_s: float = 600.0
    # fault injection, for tests and demonstrations: worker kill_rank dies (hang_rank stops answering) as it
    # starts step fault_step, in the first attempt only
    kill_rank: int | None = None
    hang_rank: int | None = None
    fault_step: int | None = None
    resume: bool = False  # continue from the newest checkpoint (`run --resume`, torchrun's restarts)
    # bookkeeping
    reproduction: str = "harness"
    variant: dict = field(default_factory=dict)
    run_id: str | None = None
    command: str = ""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        data = json.loads(text)
        data["betas"] = tuple(data["betas"])
        return cls(**data)

    def record_path(self) -> Path:
        return Path(self.results) / f"{self.run_id}.json"


FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}


def _parse(text: str, like: object):
    if isinstance(like, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if isinstance(like, int):
        return int(float(text)) if float(text).is_integer() else int(text)
    if isinstance(like, float) or like is None:
        try:
            return float(text)
        except ValueError:
            return text
    if isinstance(like, tuple):
        return tuple(float(x) for x in text.split(","))
    return text


def apply_sets(cfg: RunConfig, pairs: list[str]) -> RunConfig:
    """Apply `--set KEY=VALUE` pairs: config fields by name, everything else into `variant`."""
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set takes KEY=VALUE, got {pair!r}")
        key = key.replace("-", "_")
        if key in FIELDS and key not in ("variant", "command", "run_id", "resume"):
            try:
                setattr(cfg, key, _parse(value, getattr(cfg, key)))
            except ValueError as err:
                raise ValueError(f"--set {key}: {err}") from None
        else:
            cfg.variant[key] = value  # the declared Param of the method or optimizer reads it (suite.params)
    return cfg


# RunConfig fields that `python -m suite run` takes as flags of their own; every other field is `--set`
_FLAGS = {
    "model": "--model",
    "nproc": "--nproc",
    "device": "--device",
    "tokens": "--tokens",
    "flops": "--flops",
    "time_s": "--time",
    "target": "--target",
    "max_tokens": "--max-tokens",
    "seed": "--seed",
    "ac": "--ac",
    "precision": "--precision",
    "optimizer": "--optimizer",
    "data": "--data",
    "data_root": "--data-root",
    "meters": "--no-meters",
    "evals": "--evals",
    "checkpoint": "--checkpoint",
}
_NOT_SETTINGS = ("method", "results", "variant", "run_id", "command")
# How a run is kept alive, not what it computes (a resumed run equals the uninterrupted one bit for bit):
# left out of a plan's command, so that a plan run with checkpoints matches the records of one run without
OPERATIONAL = (
    "checkpoint_every",
    "checkpoint_dir",
    "max_restarts",
    "collective_timeout_s",
    "kill_rank",
    "hang_rank",
    "fault_step",
    "resume",
)
# their flags on `python -m suite run`'s command line (each takes a value)
OPERATIONAL_FLAGS = (
    "--checkpoint-every",
    "--max-restarts",
    "--collective-timeout",
    "--kill-rank",
    "--hang-rank",
    "--at-step",
)
# an estimate runs a fixed number of steps on fake tensors: no budget, device, meters switch or evaluation
_NOT_ESTIMATE = (
    "device",
    "tokens",
    "flops",
    "time_s",
    "target",
    "max_tokens",
    "meters",
    "evals",
    "checkpoint",
    "data_root",
)


def _flag_value(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as the same float
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def command_line(cfg: RunConfig, verb: str = "run") -> str:
    """The `python -m suite run|estimate` command that gives `cfg`: the fields that differ from the defaults.

    Plans record it as the command of each run (DESIGN.md: a record names the command that made it).
    """
    if verb not in ("run", "estimate"):
        raise ValueError(f"verb must be run or estimate, got {verb!r}")
    default, skip = RunConfig(), _NOT_SETTINGS + OPERATIONAL + (_NOT_ESTIMATE if verb == "estimate" else ())
    world_flag = "--world-size" if verb == "estimate" else "--nproc"
    parts = ["python", "-m", "suite", verb, cfg.method]
    for name in FIELDS:
        value = getattr(cfg, name)
        if name in skip or (value == getattr(default, name) and name not in ("model", "nproc")):
            continue
        if name in ("ac", "meters"):
            parts += [_FLAGS[name]] if value != getattr(default, name) else []
        elif name in _FLAGS:
            parts += [world_flag if name == "nproc" else _FLAGS[name], _flag_value(value)]
        else:
            parts += ["--set", f"{name}={_flag_value(value)}"]
    parts += [arg for k, v in cfg.variant.items() for arg in ("--set", f"{k}={_flag_value(v)}")]
    return " ".join(parts)
