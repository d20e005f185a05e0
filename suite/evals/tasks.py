"""Local lm-eval tasks: the task files in tasks/, the held-out data they read, and task-YAML loading.

The data of the local tasks is generated at run time, not shipped: it is cut from the val topics of
the embedded text (suite.data.text.topic_split), which come from the running CPython's pydoc topics,
so it is held out from training on whatever CPython trains; a shipped file would go stale when the
topics change. Generation takes milliseconds; the result goes to a cache folder named by its content
(under $XDG_CACHE_HOME or ~/.cache), where it can be read, and a second run reuses it.

A task YAML is loaded here, not by lm-eval's TaskManager, because lm-eval resolves relative
`data_files` against the current directory; here they resolve against the YAML's own folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from pydoc_data.topics import topics

import yaml

from suite.data.text import topic_split

TASKS_DIR = Path(__file__).with_name("tasks")
LOCAL_TASKS = ("heldout_next",)
CONTEXT_CHARS = 56
SPAN_CHARS = 8
N_CHOICES = 4


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dist-claims-suite" / "evals"


def next_span_docs(seed: int) -> list[dict]:
    """One item per SPAN_CHARS-long span of each val topic with CONTEXT_CHARS of text before it.

    The choices are the true span and N_CHOICES - 1 spans of the same length from other val topics,
    at uniform random places, shuffled; all are ASCII, so every choice is SPAN_CHARS bytes long and
    an untrained model has no length to prefer. Spans of one topic do not overlap.
    """
    _, val = topic_split()
    rng = random.Random(seed)
    docs = []
    for key in val:
        text, others = topics[key], [topics[k] for k in val if k != key]
        for end in range(CONTEXT_CHARS, len(text) - SPAN_CHARS + 1, SPAN_CHARS):
            span = text[end : end + SPAN_CHARS]
            if not span.isascii():
                continue
            choices = [span]
            while len(choices) < N_CHOICES:
                other = rng.choice(others)
                start = rng.randrange(len(other) - SPAN_CHARS + 1)
                candidate = other[start : start + SPAN_CHARS]
                if candidate.isascii() and candidate not in choices:
                    choices.append(candidate)
            rng.shuffle(choices)
            docs.append(
                {
                    "topic": key,
                    "passage": text[end - CONTEXT_CHARS : end],
                    "choices": choices,
                    "label": choices.index(span),
                }
            )
    return docs


def build_local_tasks(seed: int) -> Path:
    """The folder of the local tasks' YAML files and data for this seed, written once, atomically."""
    files = {f"{name}.yaml": (TASKS_DIR / f"{name}.yaml").read_text() for name in LOCAL_TASKS}
    files["heldout_next.jsonl"] = "".join(json.dumps(d) + "\n" for d in next_span_docs(seed))
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    folder = cache_root() / f"local-tasks-{digest}"
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".local-tasks-", dir=folder.parent))
    for name, text in files.items():
        (tmp / name).write_text(text)
    try:
        tmp.rename(folder)
    except OSError:  # another process wrote the same folder first
        shutil.rmtree(tmp)
    return folder


def task_config(path: str | Path) -> dict:
    """An lm-eval task config from a YAML file, its relative data paths made absolute from its folder."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no task file {str(path)!r}; give the path of an lm-eval task YAML")
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(
            f"{path}: not a plain-YAML lm-eval task ({str(err).splitlines()[0]}); local task "
            "files may not use !function or include"
        ) from None
    if not isinstance(config, dict) or "task" not in config:
        raise ValueError(f"{path}: an lm-eval task YAML is a mapping with a 'task' name")
    kwargs = config.get("dataset_kwargs") or {}
    for key in ("data_files", "data_dir"):
        if key in kwargs:
            kwargs[key] = _absolute(kwargs[key], path.parent.resolve())
    return config


def _absolute(paths, folder: Path):
    """data_files may be a path, a list of paths or a {split: path(s)} mapping; URLs stay as they are."""
    if isinstance(paths, dict):
        return {split: _absolute(p, folder) for split, p in paths.items()}
    if isinstance(paths, list):
        return [_absolute(p, folder) for p in paths]
    return paths if "://" in str(paths) else str(folder / Path(paths).expanduser())
