"""The settings of one run: each field declared once, with its flag, help, default and kind (nanoGPT style).

Every command-line flag of `run`, `estimate` and `reproduce`, the command a record carries, the arm a record
belongs to and the lists of operational fields are generated from these declarations (suite/cli.py reads them).
A field's kind says what it is:

- arm: part of what is compared (docs/architecture.md, Arms): two runs that differ in one are different arms;
- seed: the seed (seeds pool inside an arm);
- record: changes no number but is part of the command (where data is read from, where the model is saved,
  log cadence, the reproduction that records it);
- operational: how a run is kept alive (checkpoints, restarts, timeouts, fault injection): left out of a plan's
  command and of the arm, since a resumed run equals the uninterrupted one bit for bit;
- output: where and under what id the record is written.

`--set KEY=VALUE` changes a field that has no flag of its own; any other KEY is a parameter of the method or
optimizer (`variant`), read by its declared suite.params.Param.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
LR_DECAYS = ("constant", "cosine")
KINDS = ("arm", "seed", "record", "operational", "output")


@dataclass(frozen=True)
class Range:
    """Where a number must lie: a run setting's (setting(within=...)) or a method parameter's (suite/params.py)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the range excludes `low` itself
    high_open: bool = False
    text: str = ""  # the words a setting's error uses for it, where the bounds alone say too little ("0 (off) or more")

    def contains(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (self.high is not None and (value > self.high or (self.high_open and value == self.high)))

    def words(self) -> str:
        """The range as a setting's error says it: "at least 1", "above 0", "in [0, 2**63)"."""
        if self.text:
            return self.text
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"in {left}{_bound(self.low)}, {_bound(self.high)}{right}"
        if self.low is not None:
            return f"{'above' if self.low_open else 'at least'} {_bound(self.low)}"
        return f"{'below' if self.high_open else 'at most'} {_bound(self.high)}"


def _bound(value: float) -> str:
    """A bound as written: a large power of two as 2**k (the seed's 2**63), any other as %g."""
    if isinstance(value, int) and value > 2**32 and value & (value - 1) == 0:
        return f"2**{value.bit_length() - 1}"
    return f"{value:g}"


# torch keeps a collective's timeout as int64 milliseconds in C++; a month is long enough
MAX_TIMEOUT_S = 30 * 86400.0


def _cosine_follows_the_budget(cfg: RunConfig) -> None:
    """Cosine decay follows the budget: every rank must read the same fraction, so wall time cannot drive it."""
    if cfg.lr_decay == "cosine" and cfg.time_s is not None:
        raise ValueError("lr_decay=cosine follows a tokens, flops or target budget, not --time; use constant")


def _betas(cfg: RunConfig) -> None:
    """Adam's two decay rates, each in [0, 1)."""
    if len(cfg.betas) != 2 or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in cfg.betas):
        raise ValueError(f"betas must be two numbers in [0, 1), got {cfg.betas}; use --set betas=0.9,0.95")


def _cpu_backend(cfg: RunConfig) -> None:
    """The counting backend wraps gloo, the CPU backend."""
    if cfg.comm_check and cfg.device != "cpu":
        raise ValueError("comm_check counts on a gloo backend: use it with --device cpu")


def _emulable(cfg: RunConfig) -> None:
    """Threads share one process: nothing of one worker can be killed, hung or restarted alone."""
    if cfg.emulate and (cfg.kill_rank is not None or cfg.hang_rank is not None or cfg.max_restarts):
        raise ValueError("--emulate runs every worker in one process: drop --kill-rank, --hang-rank and --max-restarts")
    if cfg.emulate and cfg.comm_check:
        raise ValueError("comm_check counts in a gloo backend, which emulated workers do not use: drop one of them")


def _one_fault(cfg: RunConfig) -> None:
    """A fault injection names one worker of this run and the step it happens at."""
    if cfg.kill_rank is not None and cfg.hang_rank is not None:
        raise ValueError("inject one fault per run: --kill-rank or --hang-rank, not both")
    rank = cfg.kill_rank if cfg.kill_rank is not None else cfg.hang_rank
    if (rank is None) != (cfg.fault_step is None):
        raise ValueError("fault injection takes both --kill-rank (or --hang-rank) R and --at-step S")
    if rank is not None and not (0 <= rank < cfg.nproc and cfg.fault_step >= 0):
        raise ValueError(f"--kill-rank/--hang-rank must name a worker in 0..{cfg.nproc - 1} and --at-step be >= 0")


def setting(
    default: Any = None,
    help: str = "",
    *,
    kind: str = "arm",
    flag: str | None = None,
    type: type | None = None,
    group: str | None = None,
    estimate: bool = True,
    reproduce: bool = False,
    settable: bool = True,
    choices: tuple[str, ...] | None = None,
    metavar: str | None = None,
    factory: Any = None,
    within: Range | None = None,
    allowed: tuple[str, ...] | None = None,
    requires: Callable[[RunConfig], None] | None = None,
) -> Any:
    """One RunConfig field with what the command line, the record and the arm need to know of it.

    flag: its own command-line flag (otherwise `--set NAME=VALUE`); type: the flag's type where the default is
    None; group: the help section it is listed in; estimate: whether `estimate` takes it (an estimate runs a fixed
    number of steps on fake tensors: no budget, device, meters or evaluation); reproduce: whether `reproduce`
    passes it to every run of a plan; settable: whether `--set` may change it. The checks (check_settings):
    within, the range a number must lie in; allowed, the values a text may take (checked with the fix named, where
    `choices` makes the flag's parser refuse them); requires, a check of what this setting needs of the others."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    meta = {
        "help": help,
        "kind": kind,
        "flag": flag,
        "type": type,
        "group": group,
        "estimate": estimate,
        "reproduce": reproduce,
        "settable": settable,
        "choices": choices,
        "metavar": metavar,
        "within": within,
        "allowed": allowed,
        "requires": requires,
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


BUDGET = "budget (exactly one)"
FAULTS = "checkpoints and faults (docs/faults.md)"


@dataclass
class RunConfig:
    method: str = setting("ddp", "a baseline (ddp, fsdp, hsdp) or a method", settable=False)
    model: str = setting("llama-tiny", "model name (suite/models)", flag="--model")
    nproc: int = setting(2, "workers on this machine", flag="--nproc", within=Range(1))
    device: str = setting("cpu", "cpu (gloo) or cuda (NCCL)", flag="--device", choices=("cpu", "cuda"), estimate=False)
    # budget: exactly one of tokens / flops / time_s / target (target runs stop at max_tokens at the latest)
    tokens: float | None = setting(
        help="global tokens over all workers",
        flag="--tokens",
        type=float,
        group=BUDGET,
        estimate=False,
        within=Range(0, low_open=True),
    )
    flops: float | None = setting(
        help="model FLOPs over all workers",
        flag="--flops",
        type=float,
        group=BUDGET,
        estimate=False,
        within=Range(0, low_open=True),
    )
    time_s: float | None = setting(
        help="training wall-clock seconds",
        flag="--time",
        type=float,
        group=BUDGET,
        estimate=False,
        within=Range(0, low_open=True),
    )
    target: float | None = setting(
        help="validation loss to reach (stops at --max-tokens)",
        flag="--target",
        type=float,
        group=BUDGET,
        estimate=False,
        within=Range(0, low_open=True),  # a cross-entropy
    )
    max_tokens: float | None = setting(
        2_000_000,
        "token cap of a --target run",
        flag="--max-tokens",
        type=float,
        estimate=False,
        within=Range(0, low_open=True),
    )
    seed: int = setting(
        0, "seed of initialisation and data order", kind="seed", flag="--seed", within=Range(0, 2**63, high_open=True)
    )
    results: str = setting("results/runs", "folder for the run record", kind="output", flag="--results", settable=False)
    # composition with any method
    ac: bool = setting(False, "activation checkpointing of every block", flag="--ac")
    precision: str = setting(
        "fp32", "fp32, bf16, fp16 (with a loss scaler) or fp8 (emulated)", flag="--precision", allowed=PRECISIONS
    )
    optimizer: str = setting("adamw", "an optimizer (adamw, muon, dion, ...)", flag="--optimizer")
    # optimisation
    lr: float = setting(3e-3, "peak learning rate", within=Range(0))
    weight_decay: float = setting(0.1, "decoupled weight decay", within=Range(0))
    betas: tuple[float, float] = setting((0.9, 0.95), "Adam betas, as b1,b2", requires=_betas)
    warmup_steps: int = setting(10, "linear warmup steps", within=Range(0))
    # constant after warmup, or cosine over the budget (fraction of tokens or FLOPs spent) down to min_lr_ratio
    lr_decay: str = setting(
        "constant",
        "constant or cosine (over the budget) after warmup",
        allowed=LR_DECAYS,
        requires=_cosine_follows_the_budget,
    )
    min_lr_ratio: float = setting(0.1, "cosine's final learning rate over the peak", within=Range(0, 1))
    grad_clip: float = setting(1.0, "gradient norm clipping (0: off)", within=Range(0))
    # batch: global batch = data-parallel replicas x micro_batch x grad_accum sequences
    micro_batch: int = setting(8, "sequences per rank per micro-step", within=Range(1))
    grad_accum: int = setting(1, "micro-steps per optimizer step", within=Range(1))
    seq_len: int = setting(128, "tokens per sequence", within=Range(2))
    # data and evaluation
    data: str | None = setting(
        help="text (embedded), stdlib (embedded, 11 MB), stdlib-AREA (a library area), fineweb, fineweb-edu, digits "
        "(embedded), cifar10, cifar100",
        flag="--data",
        type=str,
    )
    data_root: str | None = setting(
        help="folder of local data files (FineWeb parquet, CIFAR)",
        kind="record",
        flag="--data-root",
        type=str,
        estimate=False,
    )
    eval_every: int = setting(50, "steps between validation evaluations", within=Range(1))
    eval_batches: int = setting(4, "validation batches per evaluation", within=Range(1))
    eval_batch: int = setting(8, "sequences per validation batch", within=Range(1))
    evals: str = setting(
        "",
        "lm-eval tasks on the final model (rank 0): local (heldout_next) or hub names; image runs add top1",
        flag="--evals",
        estimate=False,
    )
    eval_limit: int | None = setting(
        help="at most this many documents per lm-eval task (default: all)", type=int, within=Range(1)
    )
    checkpoint: str | None = setting(
        help="save the final full model here (for `python -m suite evaluate`)",
        kind="record",
        flag="--checkpoint",
        type=str,
        estimate=False,
    )
    # a model file that --checkpoint wrote: the run starts from its weights instead of a fresh initialisation
    # (a fine-tune); part of the arm, so runs from two starting points are never pooled as seeds
    init_from: str | None = setting(
        help="start from the weights of a model file --checkpoint wrote (a fine-tune)", type=str, estimate=False
    )
    save_every: int = setting(
        0,
        "with --checkpoint PATH, also save the model every N steps as PATH-stepNNNNNN (a trajectory; 0: off)",
        kind="record",
        estimate=False,
        within=Range(0, text="0 (off) or more"),
    )
    # metering, all off the clock (suite/meters/schedule.py): FLOPs on step flop_step; memory and communication
    # over one whole period of the method's pattern (Strategy.comm_period) from mem_step and comm_step, after
    # DDP's bucket rebuild on step 1
    meters: bool = setting(True, "turn the meters off", flag="--no-meters", estimate=False)
    # --nproc logical workers as threads of one process (suite/run/emulate.py): the same arithmetic as real ranks,
    # but memory and time are the process's, so an emulated run is an arm of its own
    emulate: bool = setting(
        False,
        "run the --nproc workers as threads of one process: a data-parallel run's losses at worker counts the "
        "cores could not hold (no memory meter; time is the process's)",
        flag="--emulate",
        estimate=False,
        requires=_emulable,
    )
    flop_step: int = setting(0, "the step FLOPs are counted on", within=Range(0))
    mem_step: int = setting(2, "the first step memory is tracked on", within=Range(0))
    comm_step: int = setting(2, "the first step collectives are counted on", within=Range(0))
    comm_check: bool = setting(
        False,
        "count the collectives a second time in the backend (suite/meters/comm_check.py) and record whether the "
        "ledger agrees",
        kind="record",
        estimate=False,
        requires=_cpu_backend,
    )
    clock_warmup: int = setting(2, "steps before the clock starts", within=Range(0))
    log_every: int = setting(10, "steps between progress lines", kind="record", within=Range(1))
    # checkpoints and faults (suite/run/checkpoint.py, docs/faults.md): a checkpoint every
    # checkpoint_every steps (0: none); torchrun restarts the workers from the last one up to max_restarts
    # times; a collective that waits longer than collective_timeout_s fails the run instead of hanging it
    checkpoint_every: int = setting(
        0,
        "DCP checkpoint cadence in steps (0: none)",
        kind="operational",
        flag="--checkpoint-every",
        group=FAULTS,
        reproduce=True,
        metavar="STEPS",
        estimate=False,
        within=Range(0, text="0 (off) or more"),
    )
    checkpoint_dir: str = setting("checkpoints", "folder of the checkpoints", kind="operational", estimate=False)
    max_restarts: int = setting(
        0,
        "torchrun restarts the workers from the last checkpoint",
        kind="operational",
        flag="--max-restarts",
        group=FAULTS,
        reproduce=True,
        estimate=False,
        within=Range(0, text="0 (off) or more"),
    )
    collective_timeout_s: float = setting(
        600.0,
        "a collective waiting longer fails the run",
        kind="operational",
        flag="--collective-timeout",
        group=FAULTS,
        metavar="SECONDS",
        estimate=False,
        within=Range(
            0, MAX_TIMEOUT_S, low_open=True, text=f"a positive, finite number of seconds up to {MAX_TIMEOUT_S:g}"
        ),
    )
    # fault injection, for tests and demonstrations: worker kill_rank dies (hang_rank stops answering) as it
    # starts step fault_step, in the first attempt only
    kill_rank: int | None = setting(
        help="fault injection: worker R dies at --at-step",
        kind="operational",
        flag="--kill-rank",
        type=int,
        group=FAULTS,
        metavar="R",
        estimate=False,
        requires=_one_fault,
    )
    hang_rank: int | None = setting(
        help="fault injection: worker R stops answering",
        kind="operational",
        flag="--hang-rank",
        type=int,
        group=FAULTS,
        metavar="R",
        estimate=False,
        requires=_one_fault,
    )
    fault_step: int | None = setting(
        help="the step a fault happens at",
        kind="operational",
        flag="--at-step",
        type=int,
        group=FAULTS,
        metavar="S",
        estimate=False,
        requires=_one_fault,
    )
    # continue from the newest checkpoint (`run --resume`, torchrun's restarts)
    resume: bool = setting(False, kind="operational", settable=False, estimate=False)
    # bookkeeping
    reproduction: str = setting("harness", "the reproduction that records the run (plans set it)", kind="record")
    variant: dict = setting(help="method and optimizer parameters", settable=False, factory=dict)
    run_id: str | None = setting(kind="output", settable=False)
    command: str = setting("", kind="output", settable=False)

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


def check_settings(cfg: RunConfig) -> None:
    """Every setting's declared checks (setting(within=, allowed=, requires=)); ValueError naming the fix."""
    requirements: list[Callable[[RunConfig], None]] = []
    for name, f in FIELDS.items():
        value, meta = getattr(cfg, name), f.metadata
        shown = meta["flag"] or name
        fix = "" if meta["flag"] else f" (--set {name}=N)"
        if value is not None and meta["allowed"] is not None and value not in meta["allowed"]:
            use = f"--set {name}=" if not meta["flag"] else f"{meta['flag']} "
            raise ValueError(f"unknown {name} {value!r}; use {use}{', '.join(meta['allowed'])}")
        if isinstance(value, float) and not math.isfinite(value) and meta["within"] is None:
            raise ValueError(f"{shown} must be a finite number, got {value}{fix}")
        if value is not None and meta["within"] is not None and not meta["within"].contains(value):
            unit = f" of {meta['metavar'].lower()}" if meta["metavar"] else ""
            finite = "" if math.isfinite(value) or meta["within"].text else f"a finite number{unit} "
            raise ValueError(f"{shown} must be {finite}{meta['within'].words()}, got {value}{fix}")
        if meta["requires"] is not None and meta["requires"] not in requirements:
            requirements.append(meta["requires"])
    for requirement in requirements:
        requirement(cfg)


def kind_of(name: str) -> str:
    return FIELDS[name].metadata["kind"]


def names(kind: str) -> tuple[str, ...]:
    """The fields of one kind, in declaration order."""
    return tuple(n for n in FIELDS if kind_of(n) == kind)


def field_type(name: str) -> type:
    """The type a field's text is read as: its declared `type`, or its default's."""
    f = FIELDS[name]
    if f.metadata["type"] is not None:
        return f.metadata["type"]
    default = f.default_factory() if f.default is dataclasses.MISSING else f.default
    return type(default)


def _parse(text: str, kind: type):
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"expected a whole number, got {text!r}") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {text!r}") from None
    if kind is tuple:
        try:
            return tuple(float(x) for x in text.split(","))
        except ValueError:
            raise ValueError(f"expected numbers separated by commas, got {text!r}") from None
    return text


def apply_sets(cfg: RunConfig, pairs: list[str]) -> RunConfig:
    """Apply `--set KEY=VALUE` pairs: config fields by name, everything else into `variant`."""
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set takes KEY=VALUE, got {pair!r}")
        key = key.replace("-", "_")
        if key in FIELDS and FIELDS[key].metadata["settable"]:
            try:
                setattr(cfg, key, _parse(value, field_type(key)))
            except ValueError as err:
                raise ValueError(f"--set {key}: {err}") from None
        elif key in FIELDS:
            raise ValueError(f"--set {key}: not a setting; {FIELDS[key].metadata['help'] or 'set by the suite'}")
        else:
            cfg.variant[key] = value  # the declared Param of the method or optimizer reads it (suite.params)
    return cfg


# How a run is kept alive, not what it computes (a resumed run equals the uninterrupted one bit for bit):
# left out of a plan's command, so that a plan run with checkpoints matches the records of one run without
OPERATIONAL = names("operational")
OPERATIONAL_FLAGS = tuple(FIELDS[n].metadata["flag"] for n in OPERATIONAL if FIELDS[n].metadata["flag"])
# what a record's settings do not compare on: where the record went, under what id, and the method's own fields
NOT_SETTINGS = ("method", "variant", *names("output"))
ARM = tuple(n for n in names("arm") if n not in ("method", "variant"))  # with method and variant, the arm
# arm fields added after records existed: part of an arm only where set (not None or False), so every earlier
# arm keeps its key
ARM_WHERE_SET = ("init_from", "emulate")


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

    Plans record it as the command of each run (docs/architecture.md: a record names the command that made it).
    """
    if verb not in ("run", "estimate"):
        raise ValueError(f"verb must be run or estimate, got {verb!r}")
    default = RunConfig()
    parts = ["python", "-m", "suite", verb, cfg.method]
    for name, f in FIELDS.items():
        meta, value = f.metadata, getattr(cfg, name)
        if name in NOT_SETTINGS or meta["kind"] == "operational" or (verb == "estimate" and not meta["estimate"]):
            continue
        if value == getattr(default, name) and name not in ("model", "nproc"):
            continue
        flag = meta["flag"]
        if verb == "estimate" and name == "nproc":
            flag = "--world-size"
        if isinstance(value, bool) and flag:
            parts.append(flag)  # a switch: present when it differs from its default
        elif flag:
            parts += [flag, _flag_value(value)]
        else:
            parts += ["--set", f"{name}={_flag_value(value)}"]
    parts += [arg for k, v in cfg.variant.items() for arg in ("--set", f"{k}={_flag_value(v)}")]
    return " ".join(parts)
