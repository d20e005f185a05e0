"""Weight averaging and model merging, each a function over state dicts (name -> tensor).

- uniform_soup and greedy_soup: Wortsman et al. 2022 (arXiv 2203.05482); greedy_soup follows the public
  code's loop (mlfoundations/model-soups main.py): ingredients sorted by their held-out score, the best first,
  each next one kept only if the soup's held-out score rises strictly.
- task_arithmetic: Ilharco et al. 2023 (arXiv 2212.04089): base + lambda * sum of task vectors (model - base).
- ties_merging: Yadav et al. 2023 (arXiv 2306.01708), as the public code does it (prateeky2806/ties-merging,
  src/utils/merge_utils.py): each task vector trimmed to its top-k% magnitudes over the whole model (not per
  tensor), a sign elected per entry by the sign of the summed trimmed values (a zero sum takes the sign of the
  sum of all elected signs), the mean of the entries that carry the elected sign (zeros not counted), scaled by
  lambda and added to the base. One difference: that code keeps the entries at or above the (n+1)-th largest
  magnitude, one more than n = k% of the entries, and fails at k = 100; here the n-th largest is the threshold.
- swa: the equal average of checkpoints along one trajectory (Izmailov et al. 2018, arXiv 1803.05407) by
  torch.optim.swa_utils.AveragedModel, fed one checkpoint at a time. A model with batch norm needs
  swa_utils.update_bn on the result, as in torch's recipe.
- ensemble_log_probs: the output ensemble (mean of the K models' predicted probabilities), in log space.
- load_dcp: a torch.distributed.checkpoint folder (sharded over any number of ranks) read whole in one process.

The soups, task arithmetic and TIES are written here: torch has no model merging, and mergekit (PyPI, LGPL), the
maintained library that does TIES and task arithmetic, needs transformers >= 5, peft and accelerate (none is in
this environment) and merges Hugging Face model folders through its own task graph, not state dicts; it also
trims per tensor where the TIES code trims over the whole model.

Floating-point entries are merged in float64 and cast back to their dtype: the sum of K float32 copies of one
value is exact there, so a soup of identical models is that model bit for bit. Other entries (integer
counters, such as batch norm's num_batches_tracked) cannot be averaged; they are copied from the first model (the
base, where there is one), as AveragedModel leaves the buffers it does not average.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.optim.swa_utils import AveragedModel

# the suite's DCP reader that unpickles only checkpoint metadata, and its planner that refuses non-tensor items:
# a checkpoint folder from elsewhere runs no code (suite/run/checkpoint.py)
from suite.run.checkpoint import _SafeReader, _TensorsOnlyPlanner

StateDict = dict[str, torch.Tensor]


class MergeError(ValueError):
    """Bad input to a merge, as one line naming the fix (the command line maps ValueError to exit status 2)."""


class GreedySoup(NamedTuple):
    state: StateDict
    ingredients: list[int]  # indices into the models given, in the order they were added
    score: float  # the soup's held-out score


# ---- checks -----------------------------------------------------------------------------------------------
def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise MergeError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _models(models: Iterable[StateDict], what: str) -> list[StateDict]:
    listed = list(models)
    if not listed:
        raise MergeError(f"{what} needs at least one model, got none")
    _check_state(listed[0], "model 0")
    for i, model in enumerate(listed[1:], start=1):
        _check_like(listed[0], model, f"model {i}", "model 0")
    return listed


def _check_state(model: object, name: str) -> None:
    if not isinstance(model, dict) or not all(isinstance(t, torch.Tensor) for t in model.values()):
        raise MergeError(f"{name} must be a state dict of tensors (model.state_dict()), got {type(model).__name__}")


def _check_like(reference: StateDict, other: StateDict, name: str, reference_name: str) -> None:
    """`other` has `reference`'s keys, and each entry its shape and dtype: else one line naming the first difference."""
    _check_state(other, name)
    missing, extra = sorted(reference.keys() - other.keys()), sorted(other.keys() - reference.keys())
    if missing or extra:
        raise MergeError(f"{name} and {reference_name} differ in keys: missing {missing[:3]}, extra {extra[:3]}")
    for key, ref in reference.items():
        t = other[key]
        if t.shape != ref.shape or t.dtype != ref.dtype:
            raise MergeError(
                f"{key!r} is {tuple(t.shape)} {t.dtype} in {name} but {tuple(ref.shape)} {ref.dtype} in "
                f"{reference_name}: merge models of one architecture"
            )


def _floating(model: StateDict) -> list[str]:
    return [k for k, t in model.items() if t.is_floating_point()]


def _cast_back(like: StateDict, merged: dict[str, torch.Tensor]) -> StateDict:
    """`like` with each merged entry in its own dtype; the entries not merged are copied from `like`."""
    return {k: merged[k].to(t.dtype) if k in merged else t.clone() for k, t in like.items()}


# ---- soups ------------------------------------------------------------------------------------------------
def uniform_soup(models: Iterable[StateDict]) -> StateDict:
    """The entrywise mean of `models`."""
    listed = _models(models, "a uniform soup")
    total = {k: sum(m[k].double() for m in listed) for k in _floating(listed[0])}
    return _cast_back(listed[0], {k: s / len(listed) for k, s in total.items()})


def greedy_soup(models: Sequence[StateDict], score: Callable[[StateDict], float]) -> GreedySoup:
    """Wortsman et al.'s greedy soup; `score(state)` is the held-out score, higher is better (pass minus a loss).

    A NaN score (a diverged model or soup) counts as the worst, so it is never added.
    """
    listed = _models(models, "a greedy soup")

    def held_out(state: StateDict) -> float:
        value = float(score(state))
        return -math.inf if math.isnan(value) else value

    scores = [held_out(m) for m in listed]
    order = sorted(range(len(listed)), key=lambda i: scores[i], reverse=True)
    chosen, best, soup = [order[0]], scores[order[0]], listed[order[0]]
    for i in order[1:]:
        candidate = uniform_soup([listed[j] for j in [*chosen, i]])
        value = held_out(candidate)
        if value > best:
            chosen, best, soup = [*chosen, i], value, candidate
    return GreedySoup(soup, chosen, best)


# ---- task vectors -----------------------------------------------------------------------------------------
def _task_vectors(base: StateDict, models: Iterable[StateDict], what: str) -> tuple[list[str], list[StateDict]]:
    """The floating keys and each model's task vector (model - base, float64) over them."""
    listed = _models(models, what)
    _check_state(base, "the base")
    _check_like(base, listed[0], "model 0", "the base")
    keys = _floating(base)
    return keys, [{k: m[k].double() - base[k].double() for k in keys} for m in listed]


def task_arithmetic(base: StateDict, models: Iterable[StateDict], lam: float) -> StateDict:
    """base + lam * sum over models of (model - base)."""
    lam = _number("lambda", lam)
    keys, vectors = _task_vectors(base, models, "task arithmetic")
    return _cast_back(base, {k: base[k].double() + lam * sum(v[k] for v in vectors) for k in keys})


def _trim(vector: StateDict, k: float) -> StateDict:
    """`vector` with the entries below its top-k% magnitudes over all its entries set to zero (ties at the
    threshold kept)."""
    magnitudes = torch.cat([t.abs().flatten() for t in vector.values()])
    if magnitudes.numel() == 0:
        return vector
    keep = math.ceil(magnitudes.numel() * k / 100)  # at least one entry: k > 0
    threshold = magnitudes.kthvalue(magnitudes.numel() - keep + 1).values  # the keep-th largest
    return {key: torch.where(t.abs() >= threshold, t, 0.0) for key, t in vector.items()}


def _disjoint_mean(stacked: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """Per entry, the mean over tasks of the values that carry `sign` (zeros and the other sign left out)."""
    agree = torch.where(sign > 0, stacked > 0, stacked < 0)
    return (stacked * agree).sum(0) / agree.sum(0).clamp(min=1)


def ties_merging(base: StateDict, models: Iterable[StateDict], k: float = 20.0, lam: float = 1.0) -> StateDict:
    """TIES-Merging: trim each task vector to its top-k% magnitudes, elect signs, disjoint mean, base + lam * it.

    k = 20 and lam = 1 are the defaults of the public code's README (which sweeps lam from 0.8 to 2.5 on
    validation).
    """
    k, lam = _number("k", k), _number("lambda", lam)
    if not 0 < k <= 100:
        raise MergeError(f"k must be a percentage in (0, 100], got {k:g}")
    keys, vectors = _task_vectors(base, models, "TIES-Merging")
    trimmed = [_trim(v, k) for v in vectors]
    stacked = {key: torch.stack([t[key] for t in trimmed]) for key in keys}
    signs = {key: s.sum(0).sign() for key, s in stacked.items()}
    majority = torch.sign(sum((s.sum() for s in signs.values()), torch.tensor(0.0, dtype=torch.float64)))
    merged = {}
    for key in keys:
        sign = torch.where(signs[key] == 0, majority, signs[key])
        merged[key] = base[key].double() + lam * _disjoint_mean(stacked[key], sign)
    return _cast_back(base, merged)


# ---- SWA --------------------------------------------------------------------------------------------------
class _Holder(torch.nn.Module):
    """A state dict's floating entries as the parameters of a module, for AveragedModel (float64)."""

    def __init__(self, model: StateDict, keys: list[str]) -> None:
        super().__init__()
        self.keys = keys
        self.values = torch.nn.ParameterList([t.double() for t in (model[k] for k in keys)])

    def load(self, model: StateDict) -> None:
        with torch.no_grad():
            for p, k in zip(self.values, self.keys):
                p.copy_(model[k])


def swa(checkpoints: Iterable[StateDict]) -> StateDict:
    """The equal average of `checkpoints` (one trajectory's, in any order), read one at a time."""
    stream = iter(checkpoints)
    first = next(stream, None)
    if first is None:
        raise MergeError("SWA needs at least one checkpoint, got none")
    _check_state(first, "checkpoint 0")
    keys = _floating(first)
    holder = _Holder(first, keys)
    averaged = AveragedModel(holder)  # no avg_fn: the running equal average
    averaged.update_parameters(holder)
    for i, checkpoint in enumerate(stream, start=1):
        _check_like(first, checkpoint, f"checkpoint {i}", "checkpoint 0")
        holder.load(checkpoint)
        averaged.update_parameters(holder)
    return _cast_back(first, {k: p.detach() for k, p in zip(keys, averaged.module.values)})


# ---- output ensemble --------------------------------------------------------------------------------------
def ensemble_log_probs(logits: Sequence[torch.Tensor]) -> torch.Tensor:
    """log of the mean over models of softmax(logits) on the last dimension: the output ensemble's log
    probabilities, ready for nll_loss; computed by logsumexp so that tiny probabilities do not underflow."""
    if not logits:
        raise MergeError("an output ensemble needs at least one model's logits, got none")
    shapes = {tuple(t.shape) for t in logits}
    if len(shapes) > 1:
        raise MergeError(f"the models' logits must have one shape, got {sorted(shapes)}")
    stacked = torch.stack([t.to(torch.promote_types(t.dtype, torch.float32)).log_softmax(-1) for t in logits])
    return stacked.logsumexp(0) - math.log(len(logits))


# ---- DCP checkpoints --------------------------------------------------------------------------------------
def load_dcp(path: str | Path, prefix: str = "") -> StateDict:
    """The tensors of the torch.distributed.checkpoint folder `path` whose keys start with `prefix`, whole
    (gathered from every rank's shards), with the prefix removed; read in this process, no process group."""
    reader = _SafeReader(path)
    metadata = reader.read_metadata()
    entries = {k: m for k, m in metadata.state_dict_metadata.items() if k.startswith(prefix)}
    if not any(isinstance(m, TensorStorageMetadata) for m in entries.values()):
        raise MergeError(f"{path} holds no tensor under {prefix!r}: give a checkpoint folder and the model's prefix")
    state = {
        k: torch.empty(m.size, dtype=m.properties.dtype)
        for k, m in entries.items()
        if isinstance(m, TensorStorageMetadata)
    }
    with warnings.catch_warnings():  # DCP warns that it loads in one process, which is what no_dist asks
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        dcp.load(state, storage_reader=_SafeReader(path), planner=_TensorsOnlyPlanner(), no_dist=True)
    return {k[len(prefix) :]: t for k, t in state.items()}
