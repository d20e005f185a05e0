"""Reproductions plug into the suite: each folder declares what it adds, and the suite finds the folders.

A reproduction is one package `reproductions/<name>/` whose `__init__.py` sets

    REPRODUCTION = Reproduction(methods=(BlockSDP, ...), plan=plan, claims=Path(__file__).with_name("claims.yaml"),
                                pairs=(...,))

Its name is its folder's (`fl_fsdp/` is fl-fsdp) and its description the first line of the package's docstring
(what `reproduce --list` and `nox -l` show), each written once: an in-tree declaration that repeats them is refused.
A reproduction outside the tree may name itself (a test's module is rarely named as its reproduction is). Every
claim card's command must name the reproduction whose claims.yaml holds it (suite/judge/claims.py).

and the suite discovers it by scanning the `reproductions` package, plus the folders (or dotted modules)
listed in the environment variable SUITE_REPRODUCTIONS, for out-of-tree work and tests (workers inherit
the environment, so a launched run sees the same reproductions). Nothing in the suite lists them: adding
a reproduction touches its own folder and its tests (torchtitan's TrainSpec, AlgoPerf's submission folder).

Matched baselines (DDP, FSDP2, AdamW, ...) are declared the same way, by the `baselines` reproduction.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from suite.errors import UsageError

# the in-tree package scanned for reproductions (the layout of docs/architecture.md)
PACKAGE = "reproductions"
ENV = "SUITE_REPRODUCTIONS"
DECLARATION = "REPRODUCTION"


@dataclass(frozen=True)
class Reproduction:
    """What one reproduction adds; every field is optional (the name and description come from the package).

    methods: Strategy subclasses (each with a unique `name`); optimizers: OptimizerSpec (suite.run.optim);
    meters: Meter subclasses (suite.meters.base) run on every run where they apply; plan: preset -> Plan;
    claims: its claims.yaml; pairs: bench pairs (suite.plan.pairs.Pair) for the throughput gate; report:
    (results folder, report folder) -> a page of its own, written beside the generic report by `reproduce`
    (for what the generic pages do not draw, such as fits over microbenchmark rows).
    """

    name: str = ""
    description: str = ""
    methods: tuple[type, ...] = ()
    optimizers: tuple[Any, ...] = ()
    meters: tuple[type, ...] = ()
    plan: Callable[[str], Any] | None = None
    claims: Path | None = None
    pairs: tuple[Any, ...] = ()
    report: Callable[[Path, Path], Path] | None = None
    # the presets its plan takes; a plan may add its own (longer CPU work, e.g. sdp's `quality`)
    presets: tuple[str, ...] = ("smoke", "gpu", "paper")
    module: str = field(default="", compare=False)


class ExtensionError(UsageError, ValueError):
    """A reproduction that cannot be loaded, or two that declare the same name: one line and exit 2 from a command."""


def _in_tree() -> list[str]:
    try:
        package = importlib.import_module(PACKAGE)
    except ModuleNotFoundError:
        return []
    return [f"{PACKAGE}.{m.name}" for m in pkgutil.iter_modules(package.__path__) if m.ispkg]


def _out_of_tree() -> list[str]:
    """Modules named in SUITE_REPRODUCTIONS: a folder is imported as the package it is, from its parent."""
    modules = []
    for entry in filter(None, (e.strip() for e in os.environ.get(ENV, "").split(os.pathsep))):
        folder = Path(entry)
        if folder.is_dir():
            if not (folder / "__init__.py").is_file():
                raise ExtensionError(f"{ENV}: {entry!r} is a folder without __init__.py; a reproduction is a package")
            parent = str(folder.resolve().parent)
            if parent not in sys.path:
                sys.path.insert(0, parent)
            modules.append(folder.resolve().name)
        else:
            modules.append(entry)
    return modules


def _load(module_name: str) -> Reproduction | None:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            raise ExtensionError(
                f"{ENV}: no module or folder {module_name!r}; give a folder path or a module"
            ) from None
        raise
    declared = getattr(module, DECLARATION, None)
    if declared is None:
        return None
    if not isinstance(declared, Reproduction):
        raise ExtensionError(f"{module_name}.{DECLARATION} must be a suite.extensions.Reproduction")
    return Reproduction(**{**declared.__dict__, **_named(module, module_name, declared), "module": module_name})


def _named(module: Any, module_name: str, declared: Reproduction) -> dict[str, str]:
    """The name (the folder's) and the description (the docstring's first line), each written once."""
    where = f"{module_name}.{DECLARATION}"
    if module_name.startswith(f"{PACKAGE}.") and (declared.name or declared.description):
        raise ExtensionError(
            f"{where} declares its name or description; leave both out: the folder names it and the first line of "
            "its package docstring describes it"
        )
    doc = (module.__doc__ or "").strip()
    description = declared.description or (doc.splitlines()[0] if doc else "")
    if not description:
        raise ExtensionError(f"{module_name} has no docstring; its first line describes the reproduction")
    return {"name": declared.name or module_name.rpartition(".")[2].replace("_", "-"), "description": description}


@cache
def _discover(env: str) -> dict[str, Reproduction]:
    found: dict[str, Reproduction] = {}
    for module_name in (*_in_tree(), *_out_of_tree()):
        rep = _load(module_name)
        if rep is None:
            continue
        if rep.name in found:
            raise ExtensionError(f"two reproductions are named {rep.name!r}: {found[rep.name].module} and {rep.module}")
        found[rep.name] = rep
    return found


def reproductions() -> dict[str, Reproduction]:
    """Every reproduction found, by name (cached per value of SUITE_REPRODUCTIONS)."""
    return _discover(os.environ.get(ENV, ""))


def get_reproduction(name: str) -> Reproduction:
    found = reproductions()
    if name not in found:
        raise ValueError(
            f"unknown reproduction {name!r}; choose one of: {', '.join(sorted(found))} "
            f"(`python -m suite reproduce --list` describes them)"
        )
    return found[name]


def declared(kind: str) -> dict[str, tuple[Any, Reproduction]]:
    """Every method, optimizer or meter (`kind`) declared by any reproduction, by its name, with its declarer."""
    out: dict[str, tuple[Any, Reproduction]] = {}
    for rep in reproductions().values():
        for item in getattr(rep, kind):
            name = item.name
            if name in out and out[name][0] is not item:
                raise ExtensionError(f"{kind[:-1]} {name!r} is declared by both {out[name][1].name} and {rep.name}")
            out[name] = (item, rep)
    return out
