"""The merge step of the plan: one microbenchmark item per merge or reference (suite/plan/micro.py), one row per seed.

A row's set-up (outside the measurement) reads the fine-tunes the plan trained (model files that `--checkpoint`
wrote), picks the merge's hyper-parameters on the selection half of each task's validation split (greedy soup's
ingredients, task arithmetic's and TIES's lambda, the best single fine-tune) and scores the result on the test
half of each task's split and on the held-out domain's whole validation split. The measured callable is the merge
itself at the picked hyper-parameters, so the item's time, FLOPs and peak memory are the merge's own; it returns
the scores (validation loss, nats per byte):

- `<task>_loss` for each task, `avg_loss` (their mean), `worst_loss` (their largest), `ood_loss` (the held-out
  domain), `own_loss` (the task whose fine-tune the row's model came from: SWA and its final iterate);
- `select_s` (wall seconds of the selection, evaluations included), `selected` (lambda; the number of greedy
  soup ingredients; the index of the best single fine-tune), `merged_models`.

References: `base` (the pretrained model), `best-single` (the fine-tune best on the selection half), `ensemble`
(the mean of the fine-tunes' predicted probabilities: K forward passes), `final-iterate` (the first task's
decaying fine-tune, whose last quarter SWA's constant-rate tail replaces: plan.py), and the negative control
`init-soup` (the uniform soup of two models pretrained from different initialisations) beside `init-ingredients`
(the mean of those two models' scores).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from functools import cache

import torch
import torch.nn.functional as F
from torch import nn

from reproductions.merging import merge as m
from suite.data import load_data
from suite.data.text import TokenData
from suite.evals.model_file import load_checkpoint, plain_model

StateDict = dict[str, torch.Tensor]
Batches = list[tuple[torch.Tensor, torch.Tensor]]
# lambda grids searched on the selection half: task arithmetic's paper searches [0, 1] on validation, TIES's public
# code sweeps 0.8 to 2.5 (merge.py); coarser steps here keep the smoke preset's selection to seconds
TA_GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
TIES_GRID = (0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2, 2.4)
TIES_K = 20.0  # the public code's default top-k%


@dataclasses.dataclass
class Scorer:
    """Validation loss of a state dict on each task's selection and test halves and on the held-out domain."""

    model_name: str
    config: dict
    tasks: tuple[str, ...]
    ood: str
    eval: dict  # n_batches, batch, seq_len
    device: torch.device

    def loss(self, models: list[StateDict], batches: Batches) -> float:
        """Mean cross-entropy over `batches` of the model (one state) or of the output ensemble (several)."""
        nets = [self._net(s) for s in models]
        total = 0.0
        with torch.no_grad():
            for x, y in batches:
                logits = [net(x.to(self.device)).float() for net in nets]
                log_probs = logits[0].log_softmax(-1) if len(nets) == 1 else m.ensemble_log_probs(logits)
                total += F.nll_loss(log_probs.flatten(0, 1), y.to(self.device).flatten()).item()
        return total / len(batches)

    def selection(self, models: list[StateDict]) -> float:
        """The mean over tasks of the loss on the selection halves (lower is better)."""
        return sum(self.loss(models, _batches(t, "select", **self.eval)) for t in self.tasks) / len(self.tasks)

    def scores(self, models: list[StateDict], own: str | None = None) -> dict[str, float]:
        per_task = {t: self.loss(models, _batches(t, "test", **self.eval)) for t in self.tasks}
        out = {f"{t}_loss": v for t, v in per_task.items()}
        out.update(avg_loss=sum(per_task.values()) / len(per_task), worst_loss=max(per_task.values()))
        out["ood_loss"] = self.loss(models, _batches(self.ood, "all", **self.eval))
        if own is not None:
            out["own_loss"] = per_task[own]
        return out

    def _net(self, state: StateDict) -> nn.Module:
        return plain_model(self.model_name, self.config, state, self.device).eval()


@cache
def _area(area: str) -> TokenData:
    return load_data(f"stdlib-{area}")


@cache
def _batches(area: str, part: str, n_batches: int, batch: int, seq_len: int) -> Batches:
    """Fixed windows of an area's validation split: its first half (`select`), its second (`test`) or all."""
    data = _area(area)
    half = data.val.numel() // 2
    val = {"select": data.val[:half], "test": data.val[half:], "all": data.val}[part]
    return dataclasses.replace(data, val=val).val_batches(n_batches, batch, seq_len)


def _load(path: str) -> tuple[StateDict, str, dict]:
    model, meta = load_checkpoint(path)
    return model.state_dict(), meta["model"], meta["config"]


def merge_item(
    device: torch.device,
    merge: str,
    seed: int,
    base: str,
    models: list[str],
    tasks: list[str],
    ood: str,
    eval: dict,
    trajectory: list[str] | None = None,
    control: str | None = None,
) -> Callable[[], dict]:
    """The micro item's set-up for one merge and seed; returns the measured callable (module docstring)."""
    base_state, name, config = _load(base)
    scorer = Scorer(name, config, tuple(tasks), ood, eval, device)
    states = [_load(p)[0] for p in models]
    start = time.perf_counter()
    merged, picked, run = _MERGES[merge](scorer, base_state, states, trajectory, control)
    select_s = time.perf_counter() - start
    if merge == "init-ingredients":
        scores = _ingredients_scores(scorer, merged)
    else:  # SWA and the final iterate are the first task's fine-tune (plan.py)
        scores = scorer.scores(merged, tasks[0] if merge in OWN_TASK else None)
    extra = {**scores, "select_s": select_s, "selected": picked, "merged_models": len(merged)}
    return lambda: (run(), extra)[1]


def _ingredients_scores(scorer: Scorer, ingredients: list[StateDict]) -> dict[str, float]:
    """The mean of the ingredients' scores, field by field."""
    each = [scorer.scores([s]) for s in ingredients]
    return {k: sum(e[k] for e in each) / len(each) for k in each[0]}


def _best(scorer: Scorer, states: list[StateDict]) -> int:
    losses = [scorer.selection([s]) for s in states]
    return min(range(len(states)), key=losses.__getitem__)


def _lam(scorer: Scorer, grid: tuple[float, ...], merge: Callable[[float], StateDict]) -> float:
    return min(grid, key=lambda lam: scorer.selection([merge(lam)]))


# each: (scorer, base, fine-tunes, trajectory, control) -> (the states to score, the picked value, the merge)
def _uniform(scorer, base, states, trajectory, control):
    return [m.uniform_soup(states)], 0, lambda: m.uniform_soup(states)


def _greedy(scorer, base, states, trajectory, control):
    soup = m.greedy_soup(states, lambda s: -scorer.selection([s]))
    chosen = [states[i] for i in soup.ingredients]
    return [soup.state], len(chosen), lambda: m.uniform_soup(chosen)


def _task_arithmetic(scorer, base, states, trajectory, control):
    lam = _lam(scorer, TA_GRID, lambda x: m.task_arithmetic(base, states, x))
    return [m.task_arithmetic(base, states, lam)], lam, lambda: m.task_arithmetic(base, states, lam)


def _ties(scorer, base, states, trajectory, control):
    lam = _lam(scorer, TIES_GRID, lambda x: m.ties_merging(base, states, TIES_K, x))
    merged = m.ties_merging(base, states, TIES_K, lam)
    return [merged], lam, lambda: m.ties_merging(base, states, TIES_K, lam)


def _swa(scorer, base, states, trajectory, control):
    path = [_load(p)[0] for p in trajectory]
    return [m.swa(path)], len(path), lambda: m.swa(path)


def _final_iterate(scorer, base, states, trajectory, control):
    return [states[0]], 0, lambda: states[0]


def _best_single(scorer, base, states, trajectory, control):
    best = _best(scorer, states)
    return [states[best]], best, lambda: states[best]


def _ensemble(scorer, base, states, trajectory, control):
    return states, 0, lambda: states


def _base(scorer, base, states, trajectory, control):
    return [base], 0, lambda: base


def _init_soup(scorer, base, states, trajectory, control):
    pair = [base, _load(control)[0]]
    return [m.uniform_soup(pair)], 0, lambda: m.uniform_soup(pair)


def _init_ingredients(scorer, base, states, trajectory, control):
    pair = [base, _load(control)[0]]
    return pair, 0, lambda: pair


_MERGES = {
    "uniform-soup": _uniform,
    "greedy-soup": _greedy,
    "task-arithmetic": _task_arithmetic,
    "ties": _ties,
    "swa": _swa,
    "final-iterate": _final_iterate,
    "best-single": _best_single,
    "ensemble": _ensemble,
    "base": _base,
    "init-soup": _init_soup,
    "init-ingredients": _init_ingredients,
}
MERGES = tuple(_MERGES)
OWN_TASK = ("swa", "final-iterate")  # scored on their own task too (`own_loss`)
