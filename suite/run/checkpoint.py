"""Checkpoints of a run at a step cadence (torch.distributed.checkpoint), and resuming from them.

Layout, under `<checkpoint_dir>/<run_id>/`:
    run.json          the run's config (what `run --resume RECORD` and torchrun's restarts start from)
    step-000040/      DCP's files (every tensor), loop.json (everything else, JSON) and checksums.json (every
                      other file's size and SHA-256), written under a dot-name and renamed once complete
                      (suite.atomic), so no reader sees half of one; a resume verifies the checksums and
                      falls back to the previous checkpoint when the newest is damaged
    faults.jsonl      one line per injected fault (its rank, step and time), read to time the recovery

Every rank saves its own part under its own keys (`rank3/model/...`): what a rank holds differs by method
(an SDP worker holds some blocks, an FL group's replica drifts between averagings, FSDP2 holds a shard),
and DCP's resharding would need one global name per tensor, which those methods do not have. A resume
therefore needs the same world size and method, and it is bit for bit: parameters, optimizer states
(outer optimizers and their parameters too), the schedule, every RNG (torch, CUDA, Python, NumPy and any
torch.Generator an optimizer or the strategy holds), the loop's position, the clock, the meters' results
and the partial record.

Loading files from elsewhere runs no code: DCP unpickles its `.metadata` and `torch.load`s non-tensor
items with weights_only=False, so here the metadata goes through an unpickler that admits DCP's own
metadata classes only, and no non-tensor item is ever stored (loop.json is JSON).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

from suite.atomic import DiskFull, atomic_write, publish_folder, temporary_folder
from suite.config import RunConfig
from suite.run.recorder import REPOSITORY
from suite.run.strategy import local_tensor

KEEP = 2  # checkpoints kept per run: the newest can be the one a kill interrupted while it was written
CHECKSUMS = "checksums.json"  # every other file's size and SHA-256, verified before a checkpoint is loaded
STEP_DIR = re.compile(r"^step-(\d{6,})$")


class CheckpointError(ValueError):
    """A checkpoint that is missing, corrupt, hostile, or made by another configuration."""


def run_folder(cfg: RunConfig) -> Path:
    return Path(cfg.checkpoint_dir) / str(cfg.run_id)


def _complete(folder: Path) -> list[Path]:
    """A run's complete checkpoints, newest first (temporary ones start with a dot and are skipped)."""
    steps = [(int(m.group(1)), p) for p in folder.glob("step-*") if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(steps, reverse=True) if (p / "loop.json").is_file()]


def latest(folder: Path) -> Path | None:
    """The newest complete checkpoint in a run's folder, intact or not (see `newest_intact`)."""
    found = _complete(folder)
    return found[0] if found else None


def _digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_checksums(path: Path) -> None:
    """SHA-256 of every file of checkpoint `path` (its tensors, metadata and loop state) into CHECKSUMS."""
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name != CHECKSUMS)
    sums = {str(p.relative_to(path)): {"bytes": p.stat().st_size, "sha256": _digest(p)} for p in files}
    atomic_write(path / CHECKSUMS, lambda f: json.dump(sums, f, indent=1))


def verify(path: Path) -> None:
    """CheckpointError naming the first file of checkpoint `path` that is missing, cut or changed."""
    try:
        sums = json.loads((path / CHECKSUMS).read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path.name} has no {CHECKSUMS} (damaged, or made before checksums)") from None
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path.name}: unreadable {CHECKSUMS} ({err})") from None
    if not isinstance(sums, dict) or not {".metadata", "loop.json"} <= set(sums):
        raise CheckpointError(f"{path.name}: {CHECKSUMS} does not cover the checkpoint")
    for name, want in sorted(sums.items()):
        file = path / name
        if ".." in Path(name).parts or not isinstance(want, dict) or not file.is_file():
            raise CheckpointError(f"{path.name}: {name} is missing")
        if file.stat().st_size != want.get("bytes"):
            raise CheckpointError(f"{path.name}: {name} has {file.stat().st_size} bytes, {want.get('bytes')} written")
        if _digest(file) != want.get("sha256"):
            raise CheckpointError(f"{path.name}: {name} differs from what was written (checksum)")


def newest_intact(folder: Path) -> tuple[Path | None, list[str]]:
    """The newest checkpoint whose files match their checksums, and why each newer one was refused."""
    refused = []
    for path in _complete(folder):
        try:
            verify(path)
            return path, refused
        except CheckpointError as err:
            refused.append(str(err))
    return None, refused


def config_of(folder: Path) -> RunConfig:
    """The config a run's checkpoints were made with."""
    try:
        return RunConfig.from_json((folder / "run.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoints at {str(folder)!r} (run.json missing)") from None
    except (ValueError, TypeError, KeyError) as err:
        raise CheckpointError(f"{folder / 'run.json'}: not a run config ({err})") from None


def folder_of(record: dict) -> Path:
    """Where a run record's checkpoints are (the record names the folder relative to the repository)."""
    where = (record.get("faults") or {}).get("checkpoints")
    if where is None:
        return Path((record.get("settings") or {}).get("checkpoint_dir", "checkpoints")) / str(record["run_id"])
    path = Path(where)
    return path if path.is_absolute() or path.exists() else REPOSITORY / path


# a run id names a record and a checkpoint folder: one plain file name, never a path (no separator, no `..`)
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]{0,199}$")
# what a resume takes from elsewhere than run.json: the folders it found the record and checkpoints in
_WHERE = ("results", "checkpoint_dir", "resume", "command", "run_id")


def check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        raise CheckpointError(f"run id {run_id!r} is not a plain file name (letters, digits, . _ + = -)")
    return run_id


def differences(saved: RunConfig, other: dict, skip: tuple[str, ...] = ()) -> list[str]:
    """`field: saved vs other` for each config field `other` holds (a record's settings, a planned config)
    whose value differs from the one in run.json (compared as JSON gives them back)."""
    plain = json.loads(saved.to_json())
    other = json.loads(json.dumps(other, default=str))
    return [
        f"{k} {plain[k]!r} vs {other[k]!r}"
        for k in plain
        if k in other and k not in _WHERE + skip and plain[k] != other[k]
    ]


def resumable_config(record: dict, planned: RunConfig | None = None) -> RunConfig:
    """The config that continues `record` (read from a file at `record["_path"]`) from its newest checkpoint.

    run.json lies beside the checkpoints, where anyone may have written it, so it is trusted only as far as it
    agrees: its run id must be the record's and a plain name, every setting the record holds must be the
    same, and a plan's resume must be the planned configuration (`planned`; how a run is kept alive aside,
    which the plan sets). The record and checkpoints are written where they were found, whatever run.json
    says. The caller runs the checks a fresh run gets on what is returned.
    """
    from suite.config import OPERATIONAL

    folder = folder_of(record)
    run_id = check_run_id(record.get("run_id"))
    cfg = config_of(folder)
    if cfg.run_id != run_id or folder.name != run_id:
        raise CheckpointError(f"run.json at {folder} is of run {cfg.run_id!r}, the record of run {run_id!r}")
    diff = differences(cfg, {**(record.get("settings") or {}), "nproc": record["parallel"]["world_size"]})
    if planned is not None:
        diff += [f"{d} (planned)" for d in differences(cfg, dataclasses.asdict(planned), OPERATIONAL)]
    if diff:
        raise CheckpointError(f"run.json at {folder} differs from the run it claims to continue: {'; '.join(diff)}")
    if "_path" in record and Path(record["_path"]).name != f"{run_id}.json":
        raise CheckpointError(f"the record of run {run_id!r} is not named {run_id}.json, as the suite names it")
    if latest(folder) is None:
        raise CheckpointError(f"it stopped before its first checkpoint ({folder})")
    intact, refused = newest_intact(folder)
    if intact is None:
        raise CheckpointError(f"no intact checkpoint: {'; '.join(refused)}")
    if planned is not None:  # the plan's own config: its checks passed, and how it keeps a run alive is its own
        cfg = dataclasses.replace(planned, run_id=run_id, variant=dict(planned.variant))
    cfg.resume, cfg.checkpoint_dir = True, str(folder.parent)
    if "_path" in record:
        cfg.results = str(Path(record["_path"]).parent)
    return cfg


def write_config(cfg: RunConfig) -> None:
    folder = run_folder(cfg)
    atomic_write(folder / "run.json", lambda f: f.write(cfg.to_json()))


# ---- what a rank holds -------------------------------------------------------------------------------
@dataclasses.dataclass
class RunState:
    """What a checkpoint saves and restores of one rank. The loop builds it (suite/run/resume.py), so that this
    module knows the state it keeps and nothing of the training loop that holds it."""

    folder: Path  # the run's checkpoint folder (run_folder)
    model: torch.nn.Module
    optimizers: list[torch.optim.Optimizer]  # the run's own, then the strategy's (DiLoCo's outer one)
    strategy: object  # may hold a torch.Generator of its own (Dion's sketch), as the optimizers may
    schedule: Any  # the learning-rate schedule: state_dict() and load_state_dict()
    metering: Any  # the run's meters: results() is what a checkpoint keeps of them
    rank: int
    world: int
    group: dist.ProcessGroup  # the gloo group checkpoints are written and read on
    device: torch.device

    def owners(self) -> dict[str, object]:
        """What may hold a torch.Generator of its own, by the key its generators are saved under."""
        return {**{f"optim{i}": o for i, o in enumerate(self.optimizers)}, "strategy": self.strategy}

    def generators(self) -> dict[str, torch.Generator]:
        """Every torch.Generator attribute of an owner, as `owner.attribute`."""
        return {
            f"{name}.{attr}": value
            for name, owner in self.owners().items()
            for attr, value in sorted(vars(owner).items())
            if isinstance(value, torch.Generator)
        }


def _tensors(state: RunState, generators: list[str]) -> dict[str, torch.Tensor]:
    """This rank's tensors under its own keys; the values share storage with what the run holds."""
    prefix = f"rank{state.rank}"
    out: dict[str, torch.Tensor] = {}
    model_params = {id(p) for p in state.model.parameters()}
    for name, t in [*state.model.named_parameters(), *state.model.named_buffers()]:
        out[f"{prefix}/model/{name}"] = local_tensor(t.data)
    for i, opt in enumerate(state.optimizers):
        params = [p for group in opt.param_groups for p in group["params"]]
        for j, p in enumerate(params):
            if id(p) not in model_params:  # an outer optimizer's own parameter (DiLoCo's anchor)
                out[f"{prefix}/optim{i}/param{j}"] = local_tensor(p.data)
            for key, value in opt.state.get(p, {}).items():
                if isinstance(value, torch.Tensor):
                    out[f"{prefix}/optim{i}/state{j}/{key}"] = local_tensor(value)
    out[f"{prefix}/rng/torch"] = torch.get_rng_state()
    if state.device.type == "cuda":
        out[f"{prefix}/rng/cuda"] = torch.cuda.get_rng_state(state.device)
    gens = state.generators()
    for key in generators:
        out[f"{prefix}/rng/{key}"] = gens[key].get_state()
    return out


def _plain_state(opt: torch.optim.Optimizer) -> dict:
    params = [p for group in opt.param_groups for p in group["params"]]
    return {
        "param_groups": [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups],
        "state": {
            str(j): {k: v for k, v in opt.state.get(p, {}).items() if not isinstance(v, torch.Tensor)}
            for j, p in enumerate(params)
        },
    }


def _rank_state(state: RunState, loop: dict) -> dict:
    generators = list(state.generators())
    np_state = np.random.get_state()
    return {
        "loop": loop,
        "optimizers": [_plain_state(o) for o in state.optimizers],
        "schedule": state.schedule.state_dict(),
        "python_random": random.getstate(),
        "numpy_random": [np_state[0], np_state[1].tolist(), *np_state[2:]],
        "generators": generators,
        "meters": state.metering.results(),
    }


# ---- saving ------------------------------------------------------------------------------------------
def save(state: RunState, step: int, loop: dict) -> Path:
    """Every rank's state after `step` steps into `step-<step>/`; returns the folder once every rank is done."""
    folder = state.folder
    final = folder / f"step-{step:06d}"
    if state.rank == 0:  # a kill's leftover from an earlier attempt at this step
        shutil.rmtree(temporary_folder(final, "save"), ignore_errors=True)
    dist.barrier(group=state.group)
    tmp = temporary_folder(final, "save")
    plain = _rank_state(state, loop)
    try:
        text = json.dumps(plain, allow_nan=True)
    except TypeError as err:
        raise CheckpointError(f"a run's state must be plain data to be checkpointed: {err}") from None
    try:
        writer = FileSystemWriter(tmp)
        dcp.save(_tensors(state, plain["generators"]), storage_writer=writer, process_group=state.group)
        texts = [None] * state.world
        dist.all_gather_object(texts, text, group=state.group)
        if state.rank == 0:
            body = f'{{"step": {step}, "world_size": {state.world}, "ranks": [{", ".join(texts)}]}}'
            atomic_write(tmp / "loop.json", lambda f: f.write(body))
            write_checksums(tmp)
            publish_folder(tmp, final)
            _prune(folder)
    except (Exception, CheckpointException) as err:  # DCP's own is a BaseException; a full disk is the usual one
        shutil.rmtree(tmp, ignore_errors=True)  # every rank removes the partial checkpoint; older ones stay
        last = [line for line in str(err).splitlines() if line.strip()][-1:] or [type(err).__name__]
        full = "No space left" in str(err) or isinstance(err, DiskFull)
        cause = f"no space left on the disk of {str(folder)!r}" if full else last[0]
        raise CheckpointError(f"checkpoint {final.name} not written ({cause}); the older ones are kept") from None
    dist.barrier(group=state.group)  # no rank goes on (or dies) before the checkpoint is complete
    return final


def _prune(folder: Path) -> None:
    steps = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := STEP_DIR.match(p.name)))
    for _, old in steps[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)


# ---- loading -----------------------------------------------------------------------------------------
_SAFE_MODULES = ("torch.distributed.checkpoint.", "collections", "torch._utils")
_SAFE_NAMES = {
    ("torch.serialization", "_get_layout"),  # maps a name to torch.strided and the other layouts
    ("pathlib", "PosixPath"),  # the checkpoint's own path, kept in its storage metadata
    ("pathlib", "WindowsPath"),
}
_SAFE_BUILTINS = {"set", "frozenset", "tuple", "list", "dict", "slice", "int", "float", "bool", "str", "bytes"}


class _MetadataUnpickler(pickle.Unpickler):
    """Admits DCP's metadata classes, torch's dtypes and sizes, and plain containers; refuses anything else."""

    def find_class(self, module: str, name: str):
        if module == "builtins" and name in _SAFE_BUILTINS:
            return super().find_class(module, name)
        if module == "torch" and (name == "Size" or isinstance(getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        if (module, name) in _SAFE_NAMES:
            return super().find_class(module, name)
        if module.startswith(_SAFE_MODULES):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"checkpoint metadata names {module}.{name}, which a checkpoint never holds")


class _SafeReader(FileSystemReader):
    def read_metadata(self, *args, **kwargs):
        path = Path(self.path) / ".metadata"
        try:
            metadata = _MetadataUnpickler(io.BytesIO(path.read_bytes())).load()
        except FileNotFoundError:
            raise CheckpointError(f"{self.path}: no DCP metadata (not a checkpoint, or an interrupted one)") from None
        except Exception as err:  # any malformed pickle: truncated, hostile, or of another format
            raise CheckpointError(f"{path}: unreadable checkpoint metadata ({err})") from None
        metadata.storage_meta = metadata.storage_meta or dcp.metadata.StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class _TensorsOnlyPlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item, value) -> None:
        raise CheckpointError("the checkpoint holds a non-tensor item; this suite's checkpoints hold tensors only")


def read_loop(path: Path, world: int) -> dict:
    """loop.json of a checkpoint, checked against this run's world size."""
    try:
        data = json.loads((path / "loop.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no loop.json (an interrupted checkpoint)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path / 'loop.json'}: not valid JSON ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("ranks"), list) or not isinstance(data.get("step"), int):
        raise CheckpointError(f"{path / 'loop.json'}: not a checkpoint's loop state")
    if data.get("world_size") != world or len(data["ranks"]) != world:
        raise CheckpointError(
            f"{path} was written by {data.get('world_size')} workers, this run has {world}; "
            f"it resumes with {data.get('world_size')} workers only (torchrun --nproc-per-node)"
        )
    return data


def _materialise(opt: torch.optim.Optimizer) -> None:
    """Create an optimizer's lazily made state (its shapes) with one step on zero gradients at learning rate 0.

    What torch.distributed.checkpoint.state_dict does privately; the parameters it may touch are loaded after.
    """
    if opt.state:
        return
    params = [p for g in opt.param_groups for p in g["params"] if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
    lrs = [g.get("lr") for g in opt.param_groups]
    for g in opt.param_groups:
        if "lr" in g:
            g["lr"] = 0.0
    opt.step()
    for g, lr in zip(opt.param_groups, lrs):
        if lr is not None:
            g["lr"] = lr
    opt.zero_grad(set_to_none=True)


def _as_saved(current: Any, saved: Any) -> Any:
    return tuple(saved) if isinstance(current, tuple) and isinstance(saved, list) else saved


def load(state: RunState, path: Path) -> dict:
    """Restore this rank from checkpoint `path` (every rank calls it); returns the loop state saved with it."""
    data = read_loop(path, state.world)
    mine = data["ranks"][state.rank]
    if len(mine.get("optimizers", [])) != len(state.optimizers):
        raise CheckpointError(f"{path} was made by another method or optimizer; resume it with its own run.json")
    for opt in state.optimizers:
        _materialise(opt)
    _match_generators(state, mine["generators"])
    tensors = _tensors(state, mine["generators"])
    _SafeReader(path).read_metadata()  # refuses a hostile or broken .metadata with its own error, before DCP does
    try:
        dcp.load(tensors, storage_reader=_SafeReader(path), planner=_TensorsOnlyPlanner(), process_group=state.group)
    except CheckpointError:
        raise
    except (Exception, CheckpointException) as err:  # DCP's own (a BaseException): missing keys, wrong shapes
        last = [line for line in str(err).splitlines() if line.strip()][-1]
        raise CheckpointError(f"{path}: cannot load this run's state from it ({last})") from None
    _restore_plain(state, mine, tensors)
    return {**mine["loop"], "meters": mine["meters"]}


def _match_generators(state: RunState, saved: list[str]) -> None:
    """The generators that existed at the checkpoint exist now (their state is loaded next); the others are
    dropped, so that the code that makes them lazily makes them again as the uninterrupted run did."""
    owners = state.owners()
    for key in saved:
        name, _, attr = key.partition(".")
        if name not in owners:
            raise CheckpointError(f"the checkpoint holds generator {key!r}, which this run has no owner for")
        if not isinstance(getattr(owners[name], attr, None), torch.Generator):
            setattr(owners[name], attr, torch.Generator(device=state.device))
    for key in set(state.generators()) - set(saved):
        name, _, attr = key.partition(".")
        setattr(owners[name], attr, None)


def _restore_plain(state: RunState, mine: dict, tensors: dict[str, torch.Tensor]) -> None:
    prefix = f"rank{state.rank}"
    for opt, saved in zip(state.optimizers, mine["optimizers"]):
        for group, saved_group in zip(opt.param_groups, saved["param_groups"]):
            for k, v in saved_group.items():
                group[k] = _as_saved(group.get(k), v)
        params = [p for g in opt.param_groups for p in g["params"]]
        for j, p in enumerate(params):
            opt.state[p].update(saved["state"].get(str(j), {}))
    state.schedule.load_state_dict(mine["schedule"])
    version, internal, gauss = mine["python_random"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = mine["numpy_random"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors[f"{prefix}/rng/torch"])
    if state.device.type == "cuda":
        torch.cuda.set_rng_state(tensors[f"{prefix}/rng/cuda"], state.device)
    gens = state.generators()
    for key in mine["generators"]:
        gens[key].set_state(tensors[f"{prefix}/rng/{key}"])
