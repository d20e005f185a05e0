"""Downstream evaluation of a trained language model with lm-eval, offline unless a Hub task is named.

A name is a local task (LOCAL_TASKS, built from held-out embedded text), the path of a task YAML
(its relative data paths resolve against its own folder), or any other lm-eval task name, whose data
is on the Hugging Face Hub (the SDP paper's: arc_easy, boolq, hellaswag, openbookqa, sciq). Hub tasks
are checked before anything loads: with HF_HUB_OFFLINE or HF_DATASETS_OFFLINE set, or no answer from
the Hub within HUB_TIMEOUT_S, they fail at once with one line instead of waiting on download retries.
"""

from __future__ import annotations

import random
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from importlib.metadata import version
from os import environ

import numpy as np
import torch
from torch import nn

from suite.evals.tasks import LOCAL_TASKS, build_local_tasks, task_config

PAPER_TASKS = ("arc_easy", "boolq", "hellaswag", "openbookqa", "sciq")
HUB_TIMEOUT_S = 5.0
OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
TRUE_VALUES = {"1", "ON", "YES", "TRUE"}  # as huggingface_hub reads its flags


def _is_file(name: str) -> bool:
    return name.endswith((".yaml", ".yml"))


def _hub_names(names: list[str]) -> list[str]:
    return [n for n in names if n not in LOCAL_TASKS and not _is_file(n)]


def check_evals(names: list[str]) -> None:
    """Raise at once for what would fail later: no names, a bad task file, Hub tasks with no Hub.

    Call it before training, so that a run does not end on a typo or a missing network.
    """
    if not names or not all(n.strip() for n in names):
        raise ValueError(f"give eval names, e.g. {LOCAL_TASKS[0]} or {','.join(PAPER_TASKS)}; got {names!r}")
    for name in filter(_is_file, names):
        task_config(name)
    hub = _hub_names(names)
    if hub:
        _check_hub(hub)


def _check_hub(names: list[str]) -> None:
    need = f"{', '.join(names)}: lm-eval task(s) with data on the Hugging Face Hub"
    fallback = f"or evaluate the local tasks ({', '.join(LOCAL_TASKS)})"
    offline = [v for v in OFFLINE_VARS if environ.get(v, "").upper() in TRUE_VALUES]
    if offline:
        raise ConnectionError(f"{need}, but {offline[0]} is set: unset it on a machine with network, {fallback}")
    endpoint = environ.get("HF_ENDPOINT", "https://huggingface.co")
    if not _answers(endpoint, HUB_TIMEOUT_S):
        raise ConnectionError(
            f"{need}, but {endpoint} did not answer within {HUB_TIMEOUT_S:g} s: run them on "
            f"a machine with network, {fallback}"
        )


def _answers(url: str, timeout: float) -> bool:
    """Whether url answers a HEAD request (with any status) within timeout seconds.

    The request runs in a daemon thread that is abandoned at the deadline: a DNS look-up ignores
    socket timeouts and can block far longer.
    """
    answered = threading.Event()

    def probe() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
        except urllib.error.HTTPError:
            pass  # a status code is an answer
        except (OSError, ValueError):
            return
        answered.set()

    threading.Thread(target=probe, daemon=True).start()
    return answered.wait(timeout)


def run_evals(
    model: nn.Module,
    names: list[str],
    device: torch.device,
    *,
    limit: int | None = None,
    batch_size: int = 16,
    seed: int = 0,
) -> dict[str, dict]:
    """lm-eval scores of a byte-level LM: {task: {metric, value, stderr, n, source, other metrics}}.

    `metric` is acc where the task has it (else its first metric); other metrics (acc_norm) follow
    with their `<metric>_stderr`. stderr is lm-eval's, None where lm-eval gives none. The model's
    training flag and the global random states are restored afterwards.
    """
    check_evals(names)
    param = next(model.parameters(), None)
    if param is not None and param.device.type != torch.device(device).type:
        raise ValueError(f"the model is on {param.device} but device is {device}; move it with model.to(device)")
    import lm_eval
    from lm_eval.tasks import TaskManager

    from suite.evals.lm import ByteLM

    local = [n for n in names if n in LOCAL_TASKS]
    folder = build_local_tasks(seed) if local else None
    configs = [task_config(folder / f"{n}.yaml") for n in local] + [task_config(n) for n in names if _is_file(n)]
    hub = _hub_names(names)
    manager = TaskManager() if hub else TaskManager(include_defaults=False)
    with _eval_mode(model), _preserved_rng(torch.device(device)):
        out = lm_eval.simple_evaluate(
            ByteLM(model, device, batch_size),
            tasks=configs + hub,
            task_manager=manager,
            limit=limit,
            log_samples=False,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
        )
    local_names = {c["task"] for c in configs}
    return with_macro_average(
        {
            task: _scores(out, task, f"lm-eval {version('lm_eval')}, {'local' if task in local_names else 'hub'} task")
            for task in out["results"]
        }
    )


def with_macro_average(scores: dict[str, dict]) -> dict[str, dict]:
    """The scores plus `macro_average` (the unweighted mean of each task's primary metric) where there are two
    tasks or more: the number downstream claims are stated in (e.g. SDP's ARC-E, BoolQ, HellaSwag, OBQA, SciQ)."""
    if len(scores) < 2:
        return scores
    tasks = sorted(scores)
    mean = sum(scores[t]["value"] for t in tasks) / len(tasks)
    return {**scores, "macro_average": {"metric": "mean of the tasks' primary metrics", "value": mean, "tasks": tasks}}


def _scores(out: dict, task: str, source: str) -> dict:
    """lm-eval's `metric,filter` entries of one task as flat fields; filters other than none stay in the name."""
    entry = out["results"][task]
    values = {}
    for key, value in entry.items():
        if "," not in key or "_stderr," in key:
            continue
        metric, filter_name = key.split(",", 1)
        stderr = entry.get(f"{metric}_stderr,{filter_name}")
        name = metric if filter_name == "none" else key
        values[name] = (float(value), float(stderr) if isinstance(stderr, (int, float)) else None)
    primary = "acc" if "acc" in values else next(iter(values))
    scores = {"metric": primary, "value": values[primary][0], "stderr": values[primary][1]}
    for name, (value, stderr) in values.items():
        if name != primary:
            scores |= {name: value, f"{name}_stderr": stderr}
    return scores | {"n": _n_samples(out, task), "source": source}


def _n_samples(out: dict, task: str) -> int:
    """Documents scored: a task's own count, or the sum over a group's tasks."""
    if task in out.get("n-samples", {}):
        return int(out["n-samples"][task]["effective"])
    return sum(_n_samples(out, sub) for sub in out.get("group_subtasks", {}).get(task, []))


@contextmanager
def _eval_mode(model: nn.Module):
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


@contextmanager
def _preserved_rng(device: torch.device):
    """simple_evaluate seeds Python's, NumPy's and torch's global generators; a training run must not notice."""
    py, npy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)
