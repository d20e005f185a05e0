"""A paper's claim, the value our runs measure for it, and the verdict.

A reproduction's `claims.yaml` lists its claims. Each names a registered metric that turns the summary
rows of the run records (`suite.records.to_dataframe`) into one sample per seed; the verdict compares
those samples with the paper's value (ratio and mechanism claims: within a stated tolerance) or with
the baseline's seeds (quality claims: one-sided Welch t-tests at ALPHA). Measured runs are preferred to
estimated or simulated ones, the kinds are never pooled, and the kind used is carried into the verdict.

Metrics (METRICS; add one with @metric): `ratio` (method / baseline of a summary field, paired by
seed), `value` (a field of one arm, for mechanism claims) and `quality` (a field of both arms, unpaired).
A `field` is a column of `claim_frame`: a summary field or `evals.<name>`.

claims.yaml is a list of claims (or a mapping with a `claims:` list), each a mapping like:

    id: sdp-1b-memory
    statement: B-SDP at C=0.69 lowers peak memory per device by 28% against DDP
    paper_value: 0.72            # a number, [low, high], or text (quality claims only)
    unit: x DDP peak bytes
    source: {paper: arXiv 2507.09029, table: Table 3, version: v5}
    source_status: unverified
    metric: {name: ratio, field: peak_bytes_max, method: b-sdp, baseline: ddp, variant: {C: 0.69}}
    protocol: flops              # tokens | flops | time | target, or omitted for any
    baseline_protocol: tokens    # the baseline's runs under another protocol, where they are the same runs
    kind: ratio                  # ratio | quality | mechanism
    tolerance: 0.05              # ratio/mechanism: absolute band around paper_value; quality: margin
    seeds_needed: 1
    requires: [cuda, world_size>=8, network]
    what_would_test: 8 GPUs on 2 nodes, python -m suite reproduce sdp --preset gpu
    command: python -m suite reproduce sdp --preset gpu
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats

ALPHA = 0.05
VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not testable here")
KINDS = ("ratio", "quality", "mechanism")
PROTOCOLS = ("tokens", "flops", "time", "target")
# The order in which evidence is preferred; a verdict uses the first kind that has runs of the claim.
EVIDENCE = ("measured (gpu)", "measured (cpu)", "estimated", "simulated")
_REQUIREMENT = re.compile(r"^(cuda|network|world_size>=([1-9][0-9]*))$")


class ClaimsError(ValueError):
    """A claims.yaml that cannot be read or breaks the format; the message names the file, claim and field."""


def evidence_label(provenance: str, device: str) -> str:
    """The provenance badge of a number: where it came from, and for measurements, on what device."""
    if provenance != "measured":
        return provenance
    return "measured (gpu)" if device == "cuda" else "measured (cpu)"


@dataclass(frozen=True)
class Source:
    paper: str
    table: str | None = None  # table or figure
    version: str | None = None

    def __str__(self) -> str:
        return ", ".join(p for p in (self.paper, self.table, self.version) if p)


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    paper_value: float | tuple[float, float] | str
    unit: str
    source: Source
    source_status: str
    metric: dict[str, Any]
    protocol: str | None
    kind: str
    tolerance: float
    seeds_needed: int
    requires: tuple[str, ...]
    what_would_test: str
    command: str
    # e.g. DDP's equal-steps runs spend exactly the FLOP budget they define: one set of runs serves both
    baseline_protocol: str | None = None

    @property
    def paper_range(self) -> tuple[float, float] | None:
        """The paper's value as a closed interval (a single number is [v, v]); None for text."""
        if isinstance(self.paper_value, tuple):
            return self.paper_value
        if isinstance(self.paper_value, (int, float)):
            return (float(self.paper_value), float(self.paper_value))
        return None


@dataclass(frozen=True)
class Verdict:
    verdict: str
    measured: float | None = None
    spread: float | None = None  # sample standard deviation over seeds
    n_seeds: int = 0
    ratio_to_paper: float | None = None
    reason: str = ""
    provenance: str | None = None  # an EVIDENCE label
    p_value: float | None = None
    baseline: float | None = None  # quality claims: the baseline's mean
    hardware: str = ""
    scale: str = ""
    run_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


@dataclass(frozen=True)
class Samples:
    """One value per seed for the claim's arm, and for quality metrics the baseline's."""

    values: np.ndarray
    rows: pd.DataFrame
    baseline: np.ndarray | None = None
    better: str | None = None


METRICS: dict[str, Callable[..., Samples]] = {}


def metric(name: str) -> Callable:
    def register(fn: Callable[..., Samples]) -> Callable[..., Samples]:
        METRICS[name] = fn
        return fn

    return register


def _arm(df: pd.DataFrame, method: str, variant: dict | None, model: str | None) -> pd.DataFrame:
    rows = df[df["method"] == method]
    if model is not None:
        rows = rows[rows["model"] == model]
    if variant:
        rows = rows[rows["variant"].map(lambda v: _variant_matches(v, variant)).astype(bool)]
    return rows


def _variant_matches(variant_json: str, wanted: dict) -> bool:
    variant = json.loads(variant_json)
    return all(variant.get(k) == v for k, v in wanted.items())


def _per_seed(rows: pd.DataFrame, field_name: str) -> pd.Series:
    """One value per seed; repeated runs of one seed are averaged so no seed counts twice."""
    if field_name not in rows.columns:
        if field_name.startswith("evals."):
            return pd.Series(dtype=float)
        raise ClaimsError(f"metric field {field_name!r} is not a summary field; use one of {sorted(rows.columns)}")
    if rows.empty:
        return pd.Series(dtype=float)
    values = pd.to_numeric(rows[field_name], errors="coerce")
    return values.groupby(rows["seed"]).mean().dropna()


def _finite(values: pd.Series) -> np.ndarray:
    array = values.to_numpy(dtype=float)
    return array[np.isfinite(array)]


@metric("ratio")
def ratio(
    df: pd.DataFrame,
    field: str,
    method: str,
    baseline: str,
    variant: dict | None = None,
    baseline_variant: dict | None = None,
    model: str | None = None,
) -> Samples:
    """method / baseline of `field`, paired by seed (a seed fixes initialisation and data order)."""
    mine = _arm(df, method, variant, model)
    theirs = _arm(df, baseline, baseline_variant, model)
    a, b = _per_seed(mine, field), _per_seed(theirs, field)
    seeds = a.index.intersection(b.index)
    used = pd.concat([mine[mine["seed"].isin(seeds)], theirs[theirs["seed"].isin(seeds)]])
    return Samples(_finite(a[seeds] / b[seeds]), used)


@metric("value")
def value(df: pd.DataFrame, field: str, method: str, variant: dict | None = None, model: str | None = None) -> Samples:
    """`field` of one arm, per seed."""
    rows = _arm(df, method, variant, model)
    return Samples(_finite(_per_seed(rows, field)), rows)


@metric("quality")
def quality(
    df: pd.DataFrame,
    field: str,
    method: str,
    baseline: str,
    better: str,
    variant: dict | None = None,
    baseline_variant: dict | None = None,
    model: str | None = None,
) -> Samples:
    """`field` of the method's seeds and of the baseline's seeds, unpaired (compared by Welch's test)."""
    mine = _arm(df, method, variant, model)
    theirs = _arm(df, baseline, baseline_variant, model)
    return Samples(
        _finite(_per_seed(mine, field)),
        pd.concat([mine, theirs]),
        baseline=_finite(_per_seed(theirs, field)),
        better=better,
    )


@dataclass(frozen=True)
class Environment:
    """What the records offer: devices, largest world, and whether any traffic crossed nodes."""

    devices: frozenset[str] = field(default_factory=frozenset)
    max_world_size: int = 0
    inter_node: bool = False

    @classmethod
    def of(cls, df: pd.DataFrame) -> Environment:
        if df.empty:
            return cls()
        # a simulated record names the GPU it was projected onto; only measurements show a device exists
        measured = df[df["provenance"] == "measured"]
        return cls(frozenset(measured["device"]), int(df["world_size"].max()), bool(df["inter_node"].any()))

    def meets(self, requirement: str) -> bool:
        if requirement == "cuda":
            return "cuda" in self.devices
        if requirement == "network":
            return self.inter_node
        return self.max_world_size >= int(requirement.split(">=")[1])

    def describe(self) -> str:
        if not self.devices:
            return "no runs"
        devices = "/".join(sorted(self.devices))
        nodes = "inter-node traffic" if self.inter_node else "one node"
        return f"{devices}, world size up to {self.max_world_size}, {nodes}"


def _requirement_mask(requirement: str, df: pd.DataFrame) -> pd.Series:
    if requirement == "cuda":
        return df["device"] == "cuda"
    if requirement == "network":
        return df["inter_node"].astype(bool)
    return df["world_size"] >= int(requirement.split(">=")[1])


def claim_frame(records: list[dict]) -> pd.DataFrame:
    """Summary rows plus what claims select on: the evidence label, inter-node traffic and `evals.<name>`."""
    from suite.records import to_dataframe

    df = to_dataframe(records)
    if df.empty:
        return df
    df["evidence"] = [evidence_label(p, d) for p, d in zip(df["provenance"], df["device"])]
    df["device_name"] = [r["env"]["device_name"] for r in records]
    df["inter_node"] = [_crosses_nodes(r) for r in records]
    evals = pd.DataFrame(
        [{f"evals.{k}": _eval_value(v) for k, v in r["evals"].items()} for r in records], index=df.index
    )
    return pd.concat([df, evals], axis=1)


def _crosses_nodes(record: dict) -> bool:
    return any(op.get("tier") == "inter-node" for r in record["comm"]["per_rank"] for op in r["ops"])


def _eval_value(v: Any) -> float | None:
    v = v.get("value") if isinstance(v, dict) else v
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def evaluate(claim: Claim, df: pd.DataFrame, env: Environment | None = None) -> Verdict:
    """The verdict on `claim` from the summary rows `df` (see claim_frame) of its reproduction."""
    env = env or Environment.of(df)
    unmet = [r for r in claim.requires if not env.meets(r)]
    if unmet:
        return Verdict(
            "not testable here",
            reason=f"needs {', '.join(unmet)}; the records have {env.describe()}. "
            f"What would test it: {claim.what_would_test}",
        )
    samples, label = _samples(claim, df)
    if samples is None:
        where = f" under the {claim.protocol} protocol" if claim.protocol else ""
        return Verdict("inconclusive", reason=f"no complete runs of {_arms(claim)}{where}")
    n = len(samples.values) if samples.baseline is None else min(len(samples.values), len(samples.baseline))
    measured = float(np.mean(samples.values)) if len(samples.values) else None
    spread = float(np.std(samples.values, ddof=1)) if len(samples.values) > 1 else None
    paper = claim.paper_range
    ratio_to_paper = (
        measured / paper[0] if measured is not None and paper and paper[0] == paper[1] and paper[0] else None
    )
    base = {
        "measured": measured,
        "spread": spread,
        "n_seeds": n,
        "ratio_to_paper": ratio_to_paper,
        "provenance": label,
        "hardware": _hardware(samples.rows),
        "scale": _scale(samples.rows),
        "run_ids": tuple(samples.rows["run_id"]),
    }
    if n < claim.seeds_needed:
        verdict, reason, p = (
            "inconclusive",
            f"{n} seed(s) of {_arms(claim)}; the claim needs {claim.seeds_needed}",
            None,
        )
    elif claim.kind == "quality":
        verdict, reason, p = _judge_quality(claim, samples)
        base["baseline"] = float(np.mean(samples.baseline))
    else:
        verdict, reason, p = _judge_band(claim, measured)
    if label in ("estimated", "simulated"):
        reason += f" (from {label} numbers, not a measurement)"
    return Verdict(verdict, reason=reason, p_value=p, **base)


def _arms(claim: Claim) -> str:
    m = claim.metric
    return " and ".join(x for x in (m["method"], m.get("baseline")) if x)


def _samples(claim: Claim, df: pd.DataFrame) -> tuple[Samples | None, str | None]:
    """The claim's samples from the first kind of evidence (EVIDENCE order) that has any."""
    if df.empty:
        return None, None
    rows = df[df["status"] == "complete"]
    if claim.protocol:
        wanted = rows["protocol"] == claim.protocol
        if claim.baseline_protocol:
            base = rows["method"] == claim.metric.get("baseline")
            wanted = (wanted & ~base) | (base & (rows["protocol"] == claim.baseline_protocol))
        rows = rows[wanted]
    for requirement in claim.requires:
        rows = rows[_requirement_mask(requirement, rows)]
    args = {k: v for k, v in claim.metric.items() if k != "name"}
    for label in EVIDENCE:
        samples = METRICS[claim.metric["name"]](rows[rows["evidence"] == label], **args)
        if len(samples.values):
            return samples, label
    return None, None


def _judge_band(claim: Claim, measured: float) -> tuple[str, str, None]:
    low, high = claim.paper_range
    low, high = low - claim.tolerance, high + claim.tolerance
    inside = low <= measured <= high
    band = f"[{low:.4g}, {high:.4g}] (paper value ± tolerance {claim.tolerance:g})"
    return (
        ("reproduced" if inside else "not reproduced"),
        f"measured {measured:.4g} {'inside' if inside else 'outside'} {band}",
        None,
    )


def _judge_quality(claim: Claim, samples: Samples) -> tuple[str, str, float | None]:
    """Is the method no worse than the baseline by more than the margin? Two one-sided Welch tests.

    Values are oriented so that lower is better; H1 "not worse by the margin" passing at ALPHA gives
    reproduced, H1 "worse by more than the margin" passing gives not reproduced, neither: inconclusive.
    """
    sign = 1.0 if samples.better == "lower" else -1.0
    mine, theirs = sign * samples.values - claim.tolerance, sign * samples.baseline
    gap = float(np.mean(samples.values) - np.mean(samples.baseline))
    words = (
        f"mean {claim.metric['field']} {np.mean(samples.values):.4g} vs baseline {np.mean(samples.baseline):.4g} "
        f"(difference {gap:+.4g}, {samples.better} is better, margin {claim.tolerance:g})"
    )
    if np.ptp(mine) == 0 and np.ptp(theirs) == 0:
        if mine[0] == theirs[0]:
            return (
                "inconclusive",
                f"{words}; every seed gives the same value, so no test separates them",
                None,
            )
        return (
            ("reproduced" if mine[0] < theirs[0] else "not reproduced"),
            f"{words}; no spread over seeds",
            None,
        )
    p_ok = float(stats.ttest_ind(mine, theirs, equal_var=False, alternative="less").pvalue)
    if p_ok < ALPHA:
        return "reproduced", f"{words}; one-sided Welch t-test p = {p_ok:.3g} < {ALPHA}", p_ok
    p_bad = float(stats.ttest_ind(mine, theirs, equal_var=False, alternative="greater").pvalue)
    if p_bad < ALPHA:
        return (
            "not reproduced",
            f"{words}; worse than the baseline, one-sided Welch t-test p = {p_bad:.3g} < {ALPHA}",
            p_bad,
        )
    return (
        "inconclusive",
        f"{words}; noise too large (one-sided Welch t-test p = {p_ok:.3g} >= {ALPHA})",
        p_ok,
    )


def _hardware(rows: pd.DataFrame) -> str:
    return ", ".join(sorted({d if n == d else f"{d} ({n})" for d, n in zip(rows["device"], rows["device_name"])}))


def _scale(rows: pd.DataFrame) -> str:
    models = ", ".join(sorted({f"{m} ({p:,} params)" for m, p in zip(rows["model"], rows["params"])}))
    worlds = "/".join(str(w) for w in sorted(set(rows["world_size"])))
    return f"{models}; world size {worlds}; up to {int(rows['tokens'].max()):,} tokens per run"


def load_claims(path: str | Path) -> list[Claim]:
    """Read and validate a claims.yaml; ClaimsError names the file, the claim and the bad field."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        raise ClaimsError(f"{path}: not valid YAML{line}: {getattr(err, 'problem', err)}") from None
    entries = doc.get("claims") if isinstance(doc, dict) else doc
    if not isinstance(entries, list):
        raise ClaimsError(f"{path}: expected a list of claims (or a mapping with a 'claims' list)")
    claims = [_claim(entry, f"{path}: claims[{i}]") for i, entry in enumerate(entries)]
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ClaimsError(f"{path}: claim ids must be unique; repeated: {sorted({i for i in ids if ids.count(i) > 1})}")
    return claims


def claims_for(reproduction: str) -> list[Claim]:
    """The claims the reproduction declares (its claims.yaml); [] for records of no reproduction found."""
    from suite.extensions import reproductions

    rep = reproductions().get(reproduction)
    return load_claims(rep.claims) if rep is not None and rep.claims is not None and rep.claims.is_file() else []


def _claim(entry: Any, where: str) -> Claim:
    if not isinstance(entry, dict):
        raise ClaimsError(f"{where}: a claim is a mapping of fields, found {type(entry).__name__}")
    where = f"{where} ({entry.get('id', '?')})"

    def need(name: str, kind: type | tuple, default: Any = ...) -> Any:
        if name not in entry or entry[name] is None:
            if default is ...:
                raise ClaimsError(f"{where}.{name}: missing")
            return default
        if not isinstance(entry[name], kind) or isinstance(entry[name], bool):
            wanted = "a number" if isinstance(kind, tuple) else f"a {kind.__name__}"
            raise ClaimsError(f"{where}.{name}: expected {wanted}, found {entry[name]!r}")
        return entry[name]

    known = {
        "id",
        "statement",
        "paper_value",
        "unit",
        "source",
        "source_status",
        "metric",
        "protocol",
        "baseline_protocol",
        "kind",
        "tolerance",
        "seeds_needed",
        "requires",
        "what_would_test",
        "command",
    }
    if unknown := sorted(set(entry) - known):
        raise ClaimsError(f"{where}.{unknown[0]}: unknown field; claims take {sorted(known)}")
    kind = need("kind", str)
    if kind not in KINDS:
        raise ClaimsError(f"{where}.kind: {kind!r} is not one of {KINDS}")
    protocol = need("protocol", str, None)
    baseline_protocol = need("baseline_protocol", str, None)
    for key, value in (("protocol", protocol), ("baseline_protocol", baseline_protocol)):
        if value is not None and value not in PROTOCOLS:
            raise ClaimsError(f"{where}.{key}: {value!r} is not one of {PROTOCOLS}")
    if baseline_protocol and not (protocol and entry.get("metric", {}).get("baseline")):
        raise ClaimsError(f"{where}.baseline_protocol: needs a protocol and a metric with a baseline")
    requires = tuple(need("requires", list, []))
    if bad := [r for r in requires if not isinstance(r, str) or not _REQUIREMENT.match(r)]:
        raise ClaimsError(f"{where}.requires: {bad[0]!r} is not cuda, network or world_size>=N")
    what_would_test = need("what_would_test", str, "")
    if requires and not what_would_test.strip():
        raise ClaimsError(f"{where}.what_would_test: missing; a claim with requires must say what would test it")
    seeds_needed = need("seeds_needed", int, 3 if kind == "quality" else 1)
    if seeds_needed < (3 if kind == "quality" else 1):
        raise ClaimsError(
            f"{where}.seeds_needed: {seeds_needed} is too few; a quality claim needs at least 3 seeds per arm, others 1"
        )
    tolerance = need("tolerance", (int, float), 0.0 if kind == "quality" else ...)
    if not math.isfinite(tolerance) or tolerance < 0:
        raise ClaimsError(f"{where}.tolerance: must be a finite number >= 0, found {tolerance!r}")
    return Claim(
        id=need("id", str),
        statement=need("statement", str),
        paper_value=_paper_value(entry, kind, where),
        unit=need("unit", str, ""),
        source=_source(need("source", dict), where),
        source_status=need("source_status", str),
        metric=_metric(need("metric", dict), kind, where),
        protocol=protocol,
        kind=kind,
        tolerance=float(tolerance),
        seeds_needed=seeds_needed,
        requires=requires,
        what_would_test=what_would_test,
        command=need("command", str),
        baseline_protocol=baseline_protocol,
    )


def _paper_value(entry: dict, kind: str, where: str) -> float | tuple[float, float] | str:
    value = entry.get("paper_value")
    number = (int, float)
    if isinstance(value, number) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, number) and not isinstance(v, bool) for v in value)
        and value[0] <= value[1]
    ):
        return (float(value[0]), float(value[1]))
    if isinstance(value, str) and value.strip() and kind == "quality":
        return value
    wanted = "a number, [low, high] or text" if kind == "quality" else "a number or [low, high]"
    raise ClaimsError(f"{where}.paper_value: a {kind} claim needs {wanted}, found {value!r}")


def _source(source: dict, where: str) -> Source:
    if unknown := sorted(set(source) - {"paper", "table", "version"}):
        raise ClaimsError(f"{where}.source.{unknown[0]}: unknown field; a source has paper, table (or figure), version")
    if not isinstance(source.get("paper"), str) or not source["paper"].strip():
        raise ClaimsError(f"{where}.source.paper: missing")
    return Source(source["paper"], _text(source.get("table")), _text(source.get("version")))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _metric(spec: dict, kind: str, where: str) -> dict[str, Any]:
    name = spec.get("name")
    if name not in METRICS:
        raise ClaimsError(f"{where}.metric.name: {name!r} is not a registered metric; use one of {sorted(METRICS)}")
    if (kind == "quality") != (name == "quality"):
        raise ClaimsError(f"{where}.metric.name: a {kind} claim cannot use the {name!r} metric")
    args = {k: v for k, v in spec.items() if k != "name"}
    params = inspect.signature(METRICS[name]).parameters
    if unknown := sorted((set(args) - set(params)) | ({"df"} & set(args))):
        raise ClaimsError(
            f"{where}.metric.{unknown[0]}: not an argument of metric {name!r}; it takes {sorted(set(params) - {'df'})}"
        )
    if missing := [
        p for p, v in params.items() if p != "df" and v.default is inspect.Parameter.empty and p not in args
    ]:
        raise ClaimsError(f"{where}.metric.{missing[0]}: missing; metric {name!r} needs it")
    if name == "quality" and args["better"] not in ("lower", "higher"):
        raise ClaimsError(f"{where}.metric.better: {args['better']!r} is not 'lower' or 'higher'")
    for key in ("variant", "baseline_variant"):
        if key in args and not isinstance(args[key], dict):
            raise ClaimsError(f"{where}.metric.{key}: expected a mapping of variant fields, found {args[key]!r}")
    return dict(spec)
