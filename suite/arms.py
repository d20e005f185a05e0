"""Arms: what two runs must share to be seeds of one configuration (docs/architecture.md, Arms).

An arm is the whole configuration of a run minus its seed and the fields that change no number (the results
folder, checkpoint cadence, restarts, timeouts, fault injection): the method and its parameters, the optimizer
and its parameters, learning rates and schedule, world size, model, data, precision, batch, protocol and budget,
evaluation and metering. suite/config.py declares which fields are arm-defining (kind "arm"); the method's and
optimizer's parameters are the record's `variant`, with their declared defaults filled in, so a run that names a
default is the same arm as one that leaves it out.

Every record carries its arm (`arm`: key, config, label); records written before arms existed get theirs
computed from the same fields when they are loaded. Verdicts pool seeds inside one arm only, and the report's
tables and figures group by the same key.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from suite import config


def arm_config(record: dict) -> dict[str, Any]:
    """The arm-defining configuration of a record: its settings of kind "arm", and the method's own fields."""
    settings = record.get("settings") or {}
    out = {name: settings[name] for name in config.ARM if name in settings and name != "nproc"}
    out = _without_unset(out)
    out.update(
        method=record["method"],
        variant=record["variant"],
        model=record["model"]["name"],
        world_size=record["parallel"]["world_size"],
        data=(record.get("data") or {}).get("name"),
        protocol=record["protocol"]["kind"],
        budget=record["protocol"].get("budget"),
    )
    return json.loads(json.dumps(out, sort_keys=True))  # tuples as lists, as a record read back gives them


def arm_key(config_: dict[str, Any]) -> str:
    """A short stable name of an arm's configuration (12 hex digits of its SHA-256)."""
    return hashlib.sha256(json.dumps(config_, sort_keys=True).encode()).hexdigest()[:12]


def arm_of(record: dict) -> dict[str, Any]:
    """The record's `arm` section: {key, config, label}; computed where an older record lacks it, and re-keyed
    where it names a where-set field unset (records of 929e279..14913c5 carry `emulate: false`), so that one
    configuration has one key whichever commit wrote it."""
    stored = record.get("arm")
    if isinstance(stored, dict) and "key" in stored:
        cfg = _without_unset(stored["config"])
        return stored if cfg == stored["config"] else _arm(cfg)
    return _arm(arm_config(record))


def stored_key_holds(record: dict) -> bool:
    """Whether the key a record carries is the key of the configuration it carries beside it."""
    return record["arm"]["key"] == arm_key(record["arm"]["config"])


def _arm(cfg: dict[str, Any]) -> dict[str, Any]:
    return {"key": arm_key(cfg), "config": cfg, "label": label(cfg)}


def _without_unset(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if not (k in config.ARM_WHERE_SET and (v is None or v is False))}


def label(cfg: dict[str, Any]) -> str:
    """A readable name of one arm on its own: method, optimizer and the method's and optimizer's parameters.

    Pages shorten it to what varies among their arms (suite/report/labels.py)."""
    variant = dict(cfg.get("variant") or {})
    optimizer = variant.pop("optimizer", cfg.get("optimizer"))
    for shown_elsewhere in ("ac", "precision"):
        variant.pop(shown_elsewhere, None)
    words = [cfg["method"], str(optimizer or "")]
    words += [f"{k}={_short(v)}" for k, v in sorted(variant.items())]
    words += ["+ac"] if cfg.get("ac") else []
    words += [cfg["precision"]] if cfg.get("precision") not in (None, "fp32") else []
    words += [f"lr={_short(cfg['lr'])}"] if "lr" in cfg else []
    words += [f"n{cfg['world_size']}", cfg["model"]]
    return " ".join(w for w in words if w)


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The fields in which two arm configurations differ, as `name (a / b)`; variant fields by their names."""
    flat_a, flat_b = _flat(a), _flat(b)
    return [
        f"{k} ({_short(flat_a.get(k))} / {_short(flat_b.get(k))})"
        for k in sorted(set(flat_a) | set(flat_b))
        if flat_a.get(k) != flat_b.get(k)
    ]


def _flat(cfg: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in cfg.items() if k != "variant"}
    out.update({f"variant.{k}": v for k, v in (cfg.get("variant") or {}).items()})
    return out


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
