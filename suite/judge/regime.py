"""Whether a verdict's records lie in the paper's regime (claims.yaml `regime`, suite/judge/claims.py Regime), and their
scale in a few words. suite/judge/verdicts.py turns a paper word from records outside it into a small-scale finding."""

from __future__ import annotations

import json

import pandas as pd

from suite.judge.claims import Bound, Claim, count_words
from suite.judge.metrics import Samples


def regime_rows(samples: Samples) -> pd.DataFrame:
    """The records behind a verdict's values: both sides' runs (a merge step's items have no model of their own; the
    runs they were made of do)."""
    parts = [r for r in (samples.rows, samples.baseline_rows) if r is not None and not r.empty]
    return pd.concat(parts).drop_duplicates("run_id") if parts else samples.rows


def outside_regime(claim: Claim, rows: pd.DataFrame) -> tuple[Bound | None, str]:
    """Why the records `rows` lie outside the claim's regime ('' where they lie inside, or the claim has none), and
    the entry they miss: the protocol the card judges instead of the paper's (no entry), else the first checked entry
    some record misses."""
    regime = claim.regime
    if regime is None or regime.any_scale:
        return None, ""
    if regime.here:
        return None, f"it judges {regime.here}, not the paper's protocol, {regime.protocol} ({regime.protocol_source})"
    for bound in regime.checked:
        if missed := _misses(bound, rows):
            return bound, f"{missed}; the paper's regime: {bound}"
    return None, ""


def _misses(bound: Bound, rows: pd.DataFrame) -> str:
    """What in `rows` misses one checked entry of a regime ('' when every record meets it)."""
    if bound.name == "params":
        sized = rows[rows["params"] > 0]
        if sized.empty:
            return "no record names a model with parameters"
        small = sized.loc[sized["params"].idxmin()]
        return (
            f"{small['model']} has {count_words(small['params'])} parameters" if small["params"] < bound.value else ""
        )
    if bound.name == "workers":
        least = int(rows["world_size"].min())
        return f"{least} worker{'' if least == 1 else 's'}" if least < bound.value else ""
    if bound.name == "groups":
        groups = [json.loads(v).get("K") for v in rows["variant"]]
        counted = [k for k in groups if isinstance(k, int)]
        if not counted:
            return "no record has federation groups (variant K)"
        return f"{min(counted)} groups" if min(counted) < bound.value else ""
    if bound.name == "device":
        other = sorted(set(rows["device"]) - {bound.value})
        return f"records on {', '.join(other)}" if other else ""
    names = sorted({str(n) for n in rows["device_name"] if bound.value not in str(n)})
    return f"records on {', '.join(names)}" if names else ""


def scale_words(rows: pd.DataFrame, provenance: str | None) -> str:
    """The records' scale in a few words: models with their sizes, workers, and the device or the evidence kind."""
    if rows is None or rows.empty:
        return ""
    sized = rows[rows["params"] > 0].drop_duplicates("model").sort_values("params")
    models = ", ".join(f"{m} {count_words(p)}" for m, p in zip(sized["model"], sized["params"]))
    worlds = sorted({int(w) for w in rows["world_size"]})
    workers = f"{worlds[0]}" if len(worlds) == 1 else f"{worlds[0]}-{worlds[-1]}"
    workers += f" worker{'' if worlds == [1] else 's'}"
    if "emulated" in rows.columns and rows["emulated"].any():
        workers += " (emulated in one process)" if rows["emulated"].all() else " (some emulated in one process)"
    measured = provenance is None or provenance.startswith("measured")
    where = "/".join(sorted(set(rows["device"]))) if measured else provenance
    return ", ".join(p for p in (models, workers, where) if p)
