"""Typed parameters of methods and optimizers: one declaration that parses `--set`, checks and documents.

A method (suite.run.strategy.Strategy) or an optimizer (suite.run.optim.OptimizerSpec) declares

    params = {"C": Param(float, 0.5, "fraction of blocks each worker holds", low=0, high=1, low_open=True),
              "aggregation": Param(str, "groups", "how holders sum gradients", choices=("groups", "dense"))}

and `--set C=0.25` hands the declared Param the raw text: it is read as the declared type only (an `int` never
accepts 2.5 or true), checked against its choices or range, and a mistake is one line naming the parameter and
what it accepts. Plans may give typed values (`variant={"C": 0.25}`); they are checked the same way. A default of
None means the method derives the value (from the world size, the model) and says how in the help.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from suite.config import Range

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True)
class Param:
    kind: type  # int, float, bool or str
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the range excludes `low` itself
    high_open: bool = False

    def __post_init__(self) -> None:
        if self.kind not in (int, float, bool, str):
            raise TypeError(f"Param kind must be int, float, bool or str, not {self.kind!r}")

    def accepts(self) -> str:
        """What the parameter takes, in words (the error message and `--help` use it)."""
        if self.choices is not None:
            return "one of " + ", ".join(str(c) for c in self.choices)
        kind = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}[self.kind]
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"{kind} in {left}{self.low:g}, {self.high:g}{right}"
        if self.low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {self.high:g}"
        return kind

    def parse(self, name: str, raw: Any) -> Any:
        """`raw` (text from the command line, or a plan's typed value) as the declared type, checked."""
        try:
            value = self._read(raw)
        except (TypeError, ValueError):
            raise ValueError(self._error(name, raw)) from None
        if self.choices is not None and value not in self.choices:
            raise ValueError(self._error(name, raw))
        if self.kind in (int, float) and not self._in_range(value):
            raise ValueError(self._error(name, raw))
        return value

    def describe(self, name: str) -> str:
        """One line for `--help`: name, what it accepts, its default and what it means."""
        default = "derived" if self.default is None else _text(self.default)
        return f"{name}: {self.accepts()} (default {default}){': ' + self.help if self.help else ''}"

    def _error(self, name: str, raw: Any) -> str:
        return f"{name} must be {self.accepts()}, got {raw!r}; pass e.g. --set {name}={self._example()}"

    def _example(self) -> str:
        if self.default is not None:
            return _text(self.default)
        if self.choices:
            return _text(self.choices[0])
        if self.low is not None:
            return _text(self.kind(self.low) + (1 if self.low_open and self.kind is int else 0))
        return {int: "1", float: "1.0", bool: "true", str: "x"}[self.kind]

    def _read(self, raw: Any) -> Any:
        if self.kind is bool:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.strip().lower() in _TRUE + _FALSE:
                return raw.strip().lower() in _TRUE
            raise ValueError(raw)
        if self.kind is int:
            if isinstance(raw, bool):
                raise ValueError(raw)
            if isinstance(raw, int):
                return raw
            if isinstance(raw, float) and raw.is_integer():  # JSON of a plan may carry 4.0
                return int(raw)
            if isinstance(raw, str):
                return int(raw.strip())  # "2.5" and "true" are refused, never truncated
            raise ValueError(raw)
        if self.kind is float:
            if isinstance(raw, bool):
                raise ValueError(raw)
            value = float(raw.strip()) if isinstance(raw, str) else float(raw)
            if not math.isfinite(value):
                raise ValueError(raw)
            return value
        if not isinstance(raw, str) or not raw:
            raise ValueError(raw)
        return raw

    def _in_range(self, value: float) -> bool:
        return Range(self.low, self.high, self.low_open, self.high_open).contains(value)


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)


def parse_params(owner: str, declared: dict[str, Param], given: dict[str, Any]) -> dict[str, Any]:
    """`given` (a run's --set values for `owner`) parsed by their declarations; unknown names are an error."""
    if unknown := sorted(set(given) - set(declared)):
        valid = ", ".join(sorted(declared)) or "none"
        raise ValueError(
            f"{owner} has no parameter {unknown[0]!r} (its parameters: {valid}); "
            f"config fields are listed by `python -m suite run --help`"
        )
    try:
        return {k: declared[k].parse(k, v) for k, v in given.items()}
    except ValueError as err:
        raise ValueError(f"{owner}: {err}") from None


def resolved(declared: dict[str, Param], given: dict[str, Any]) -> dict[str, Any]:
    """Every declared parameter's value: the given ones, and the declared defaults (None: derived)."""
    return {name: given.get(name, p.default) for name, p in declared.items()}


def help_lines(owner: str, declared: dict[str, Param]) -> list[str]:
    """`--help`'s listing of an owner's parameters, one per line."""
    if not declared:
        return [f"{owner} takes no parameters"]
    return [f"{owner} parameters (--set KEY=VALUE):", *(f"  {p.describe(n)}" for n, p in sorted(declared.items()))]
