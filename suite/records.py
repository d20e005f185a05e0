"""The run record: its JSON Schema, atomic writing, and loading into pandas.

A record is written with a temporary file and a rename, so a reader never sees half a record; a
record that fails the schema is never written (the error names the field). Each write seals the record with a
digest of its content, and a reader refuses a record whose digest or internal consistency does not hold (an edited
copy with another run id and its losses set to 0.001 was once read as a run): its settings against the fields
that name the run, its curve against its totals, its arm against its configuration. A record without a digest
(written before records carried one) is read on its consistency alone.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema_rs

from suite.arms import arm_of, stored_key_holds
from suite.atomic import NotAFile, atomic_write, is_temporary, read_regular

__all__ = ["atomic_write"]  # re-exported: the record's writer, which other writers used before suite.atomic

SCHEMA_VERSION = 1
MAX_RECORD_BYTES = 256 * 2**20  # far beyond any record (a long curve is a few MB); a reader stops there
# a run that ended: complete, or diverged (its loss became non-finite; run again, it diverges again)
FINISHED = ("complete", "diverged")


class RecordError(ValueError):
    """A record that is corrupt, truncated, of an unknown schema, or that breaks the schema."""


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(resources.files("suite").joinpath("record.schema.json").read_text())


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    """The schema's validator, built once (jsonschema.validate re-checks the schema itself on every call, 50-90 ms
    per record)."""
    return jsonschema.Draft202012Validator(schema())


@lru_cache(maxsize=1)
def _fast_validator() -> jsonschema_rs.Validator:
    """The same schema in jsonschema-rs, which says whether a record is valid about a hundred times faster than
    jsonschema (which took 7 ms a record, most of a 1,000-record report's reading). It only says yes or no:
    a record it refuses goes through jsonschema, which names the field and has the last word
    (tests/test_fuzz_records.py checks that it passes nothing jsonschema refuses)."""
    return jsonschema_rs.validator_for(schema(), validate_formats=False)


def _fast_pass(record: dict) -> bool:
    """jsonschema-rs's yes; a record it cannot read (a str subclass such as torch's version, deep nesting) is a no."""
    try:
        return _fast_validator().is_valid(record)
    except (ValueError, TypeError, RecursionError):
        return False


def validate(record: dict) -> None:
    """Raise RecordError naming the first field that breaks the schema."""
    if record.get("schema") != SCHEMA_VERSION:
        raise RecordError(
            f"unknown record schema {_short(record.get('schema'))}; this suite reads schema {SCHEMA_VERSION}"
        )
    if _fast_pass(record):
        return
    try:
        err = jsonschema.exceptions.best_match(_validator().iter_errors(record))
    except RecursionError:
        raise RecordError("a record nested too deeply to validate") from None
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise RecordError(_one_line(f"record field {where}: {err.message}"))


def digest_of(record: dict) -> str:
    """sha256 of the record's content: every key but the digest and a reader's own (`_path`), canonical JSON."""
    body = {k: v for k, v in record.items() if k != "digest" and not k.startswith("_")}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def inconsistencies(record: dict) -> list[str]:
    """What in a valid record disagrees with the rest of it ([] where it agrees with itself)."""
    settings, out = record.get("settings") or {}, []
    named = {
        "method": record.get("method"),
        "reproduction": record.get("reproduction"),
        "model": (record.get("model") or {}).get("name"),
        "nproc": (record.get("parallel") or {}).get("world_size"),
        "seed": (record.get("env") or {}).get("seed"),
    }
    if isinstance(record.get("optimizer"), dict):
        named["optimizer"] = record["optimizer"].get("name")
    out += [
        f"{k} is {v!r} but its settings say {settings[k]!r}"
        for k, v in named.items()
        if k in settings and settings[k] != v
    ]
    curve, totals = record.get("curve") or [], record.get("totals") or {}
    if [p["step"] for p in curve] != sorted(p["step"] for p in curve):
        out.append("its curve's steps go backwards")
    if record.get("status") in FINISHED and curve and "steps" in totals:
        last = curve[-1]
        if (last["step"], last["tokens"]) != (totals["steps"], totals.get("tokens", last["tokens"])):
            out.append(
                f"its curve ends at step {last['step']} ({last['tokens']:,} tokens), its totals say step "
                f"{totals['steps']} ({totals.get('tokens', 0):,} tokens)"
            )
    if "arm" in record and (not stored_key_holds(record) or arm_of(record) != arm_of({**record, "arm": None})):
        out.append("its arm is not the arm of its configuration")
    return out


def check_sealed(record: dict) -> None:
    """RecordError where the record's digest (if it has one) or its consistency does not hold."""
    if "digest" in record and record["digest"] != digest_of(record):
        raise RecordError("its content is not what the run wrote (the digest differs): edited or damaged")
    wrong = inconsistencies(record)
    if wrong:
        raise RecordError(_one_line("it disagrees with itself: " + "; ".join(wrong)))


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _one_line(text: str, limit: int = 300) -> str:
    """A message quoting a record's own keys and values stays one readable line, however they are made."""
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:20]} overflows a float")
    return value


def _int64(text: str) -> int:
    # pandas and every JSON reader outside Python stop at 64 bits; the report sums and divides these
    if len(text.lstrip("-")) > 19 or not -(2**63) <= (value := int(text)) < 2**63:
        raise ValueError(f"integer {_short(text, 24)} is beyond 64 bits")
    return value


def _constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON (records are written without NaN or Infinity)")


def write_record(record: dict, path: str | Path) -> Path:
    """Validate, then write atomically: a reader never sees half a record. The record's arm is (re)computed here,
    from its final configuration."""
    record["arm"] = arm_of({**record, "arm": None})
    validate(record)
    record["digest"] = digest_of(record)
    return atomic_write(path, lambda f: json.dump(record, f, indent=1, sort_keys=False, allow_nan=False))


def read_record(path: str | Path) -> dict:
    """Read and validate one record; RecordError says what is wrong with it (OSError where it cannot be read)."""
    try:
        text = read_regular(path, MAX_RECORD_BYTES).decode("utf-8")
        record = json.loads(text, parse_float=_finite, parse_int=_int64, parse_constant=_constant)
    except NotAFile as err:
        raise RecordError(f"not a record: {err}") from None
    except IsADirectoryError:
        raise RecordError(f"{str(path)!r} is a folder; give the path of a record file (.json)") from None
    except UnicodeDecodeError as err:
        raise RecordError(
            f"{path}: not a record (not UTF-8 text, byte {err.start}); rewrite it with the suite"
        ) from None
    except json.JSONDecodeError as err:
        raise RecordError(f"{path}: not valid JSON (corrupt or truncated): {err.msg} at line {err.lineno}") from None
    except ValueError as err:  # from the hooks, or Python's cap on the digits of an integer
        raise RecordError(_one_line(f"{path}: not a record: {err}")) from None
    except RecursionError:
        raise RecordError(f"{path}: not a record: JSON nested too deeply") from None
    if not isinstance(record, dict):
        raise RecordError(f"{path}: a record is a JSON object, found {type(record).__name__}")
    try:
        validate(record)
        check_sealed(record)
    except RecordError as err:
        raise RecordError(f"{path}: {err}") from None
    return record


def shown_path(path: str | Path) -> str:
    """A path on one line: quoted where a character (a line break) would break the line it is printed on."""
    return str(path) if str(path).isprintable() else repr(str(path))


def load_records(folder: str | Path) -> tuple[list[dict], list[tuple[str, str]]]:
    """All valid records under `folder` (recursively), and (path, reason) for each skipped file."""
    records, skipped = [], []
    folder = Path(folder)
    for path in sorted(folder.rglob("*.json")):
        if any(is_temporary(part) for part in path.relative_to(folder).parts):  # a writer's temporary (or hidden)
            continue
        if path.is_symlink():  # an edited copy elsewhere would count as this folder's evidence
            skipped.append((str(path), f"{path}: a link, not a regular file: not followed; copy the record itself"))
            continue
        try:
            rec = read_record(path)
        except (RecordError, OSError) as err:
            skipped.append((str(path), str(err)))
            continue
        rec["_path"] = str(path)
        records.append(rec)
    return records, skipped


def summary_row(rec: dict) -> dict[str, Any]:
    """One flat row per record: the fields comparisons are cut on (SUMMARY_FIELDS)."""
    mem = rec["memory"]["per_rank"]
    comm_steps = rec["comm"].get("steps") or 0
    comm_bytes = sum(op["bytes"] for r in rec["comm"]["per_rank"] for op in r["ops"])
    wire_bytes = sum(op.get("wire_bytes") or 0 for r in rec["comm"]["per_rank"] for op in r["ops"])
    n_ranks = max(len(rec["comm"]["per_rank"]), 1)
    last = rec["curve"][-1] if rec["curve"] else {}
    arm = arm_of(rec)
    return {
        "run_id": rec["run_id"],
        "status": rec["status"],
        "reproduction": rec["reproduction"],
        "method": rec["method"],
        "baseline": rec["baseline"],
        "variant": json.dumps(rec["variant"], sort_keys=True),
        "arm": arm["key"],
        "arm_label": arm["label"],
        "arm_config": json.dumps(arm["config"], sort_keys=True),
        "model": rec["model"]["name"],
        "params": rec["model"]["params"],
        "world_size": rec["parallel"]["world_size"],
        "seed": rec["env"]["seed"],
        "device": rec["env"]["device"],
        "provenance": rec["provenance"],
        "protocol": rec["protocol"]["kind"],
        "steps": rec["totals"]["steps"],
        "tokens": rec["totals"]["tokens"],
        "flops": rec["totals"]["flops"],
        "wall_s": rec["totals"]["wall_s"],
        "tokens_per_s": rec["throughput"]["tokens_per_s"],
        # the optimizer phase alone (an optimizer-step speed-up is never quoted as a training speed-up)
        "optimizer_s_median": (rec["throughput"].get("phases_s_median") or {}).get("optimizer"),
        # CPU seconds per step: on a shared machine, waiting for a core adds wall time but no CPU time
        "cpu_step_s_median": rec["throughput"].get("cpu_step_s_median"),
        "peak_bytes_max": max((m["peak_bytes"] for m in mem), default=None),
        "state_bytes_max": max(
            (m.get("state_bytes", m["params"] + m["grads"] + m["optimizer"]) for m in mem), default=None
        ),
        "comm_bytes_per_rank_step": comm_bytes / n_ranks / comm_steps if comm_steps else None,
        "comm_wire_bytes_per_rank_step": wire_bytes / n_ranks / comm_steps if comm_steps else None,
        "final_train_loss": last.get("train_loss"),
        "final_val_loss": final_val_loss(rec),
        "path": rec.get("_path"),
    }


def final_val_loss(rec: dict) -> float | None:
    """The record's last validation loss, None where its curve has none."""
    return next((p["val_loss"] for p in reversed(rec["curve"]) if p.get("val_loss") is not None), None)


# the columns of summary_row, which claims' metric fields name (claims.yaml is checked against them at load)
SUMMARY_FIELDS = (
    "run_id", "status", "reproduction", "method", "baseline", "variant", "arm", "arm_label", "arm_config", "model",
    "params", "world_size", "seed", "device", "provenance", "protocol", "steps", "tokens", "flops", "wall_s",
    "tokens_per_s", "optimizer_s_median", "cpu_step_s_median", "peak_bytes_max", "state_bytes_max",
    "comm_bytes_per_rank_step", "comm_wire_bytes_per_rank_step", "final_train_loss", "final_val_loss", "path",
)  # fmt: skip


def to_dataframe(records: list[dict]):
    """A pandas DataFrame with one summary row per record."""
    import pandas as pd

    return pd.DataFrame([summary_row(r) for r in records])
