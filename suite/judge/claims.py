"""A paper's claim as a reproduction states it in `claims.yaml`: what is claimed, where, and how it is judged.

The verdict itself is suite/judge/verdicts.py. claims.yaml is a list of claims (or a mapping with a `claims:` list):

    id: sdp-1b-memory
    statement: B-SDP at C=0.69 lowers peak memory per device by 28% against DDP
    paper_value: 0.72            # a number or [low, high]; text for quality claims; omit when the paper gives none
    unit: x DDP peak bytes
    source: {paper: arXiv 2507.09029, table: Table 3, version: v5}
    source_status: unverified     # "derived ...": the value is the suite's own model, not a paper number (below)
    kind: ratio                  # ratio | mechanism | quality
    better: lower                # which way is an improvement: a verdict says "exceeded" or "fell short"
    metric: {name: ratio, field: peak_bytes_max, method: b-sdp, baseline: ddp, model: llama-1b, variant: {C: 0.69}}
    band: {tolerance: 0.005, source: the paper rounds its percentages to whole points}   # ratio and mechanism
    evidence: [measured, estimated]          # which record kinds may decide; simulated never does
    estimator_check: tests/test_estimate.py::test_sdp_estimate_equals_measurement   # needed with `estimated`
    calibrate: {value: 70.9e9, within: 0.05, source: Table 3, DDP's absolute peak}    # see below
    beside: [{label: smoke measurement, model: llama-tiny, variant: {C: 0.75}}]       # shown, never judged
    # each side is an arm (docs/architecture.md, Arms): method (baseline), optimizer (baseline_optimizer), variant
    # (baseline_variant: method and optimizer parameters) and arm (baseline_arm: any other arm field, e.g.
    # {world_size: 2, lr: 0.001}); a side that matches two arms at one setting is an error naming both
    protocol: flops              # tokens | flops | time | target, or omitted for any
    baseline_protocol: tokens    # the baseline's runs under another protocol, where they are the same runs
    seeds_needed: 1
    requires: [cuda, world_size>=8, network]   # hardware a measurement needs; an allowed estimate does not
                                               # (gpu:H100: a device whose name contains H100)
    what_would_test: 8 GPUs on 2 nodes, python -m suite reproduce sdp --preset gpu
    command: python -m suite reproduce sdp --preset gpu
    requires_claims: [sdp-quality]   # a compound claim ("less memory with quality kept"): see below
    regime:                          # where the paper's number lives; every entry states its source (below)
      params: {min: 1.0e9, source: "LLaMA 1B (v5, Table 3)"}
      workers: {min: 8, source: secondary summary, unverified}
      device: {is: cuda, source: peak GPU memory}
      protocol: {paper: "...", here: "...", source: "..."}   # `here`: the card judges another protocol
    trend: {axis: world_size, paper: 128, source: "...", command: python -m suite reproduce fl-fsdp --preset trend}

Quality claims compare the method's seeds with the baseline's instead of a band:
    test: equivalence            # "equal": two one-sided tests; non-inferiority: "equal or better";
                                 # superiority: "better" (by more than the margin; 0: any amount)
    margin: {value: 0.05, source: ...}
    plateau: {change: 0.02, source: ...}    # runs count only once the baseline's validation loss has flattened

Every band, margin and plateau states its source: no unexplained constant decides a verdict. `calibrate`
pins settings the paper did not state: among the swept settings (micro-batch, sequence length, precision,
...), only those where the baseline's `field` lies within `within` of the paper's absolute `value` decide.

A `source_status` that begins with "derived" says the value is a formula the suite derived from the method
(a reproduction's own byte and state formulas), not a number the paper prints: inside its band such a card "matches
the model", never "reproduced". `requires_claims` names the other halves of a compound claim (claims of the
same file, themselves not compound): the card's verdict is the weakest of its own and theirs
(suite/judge/verdicts.py STRENGTH), and the card links them.

`regime` is the paper's regime: the scale and protocol its number comes from. Every claim with a paper value that is
not the suite's own derivation declares one, with what would test it there. Checked entries: `params` (the model's
parameters, at least), `workers` (the world size, at least), `groups` (federation groups K, at least), `device`
(cuda or cpu), `gpu` (a device name containing it); stated ones: `rank`, `data`, `hardware` ({note, source}) and
`protocol` (the paper's, and with `here` the other protocol this card judges instead: no run of it is then in the
paper's regime). A property the paper states for any size says so with `any_scale: {because, source}`. Only
records inside every checked entry may say reproduced, exceeded or fell short; the rest give a small-scale finding
(suite/judge/verdicts.py SMALL_SCALE).

`trend` (quality and to-target cards) names the axis the paper's mechanism depends on (TREND_AXES), where the paper
sits on it, and the plan that measures the card's comparison at points along it: the card's sides with their pin on
the axis lifted give a point at each value, and suite/judge/trends.py says which way the effect moves toward the
paper's setting. `paper: unknown` where the paper's text gives no place (its source says what was read): toward the
claim is then the method's advantage growing along the axis, and no projection is drawn.
"""

from __future__ import annotations

import difflib
import inspect
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from suite.atomic import NotAFile, read_regular
from suite.errors import ClaimsError
from suite.judge import targets  # noqa: F401  (registers the to-target metric)
from suite.judge.metrics import METRIC_FIELDS, METRICS, PAIRINGS, QUALITY
from suite.judge.sides import SPEC_KEYS, THEIRS, Sides

KINDS = ("ratio", "quality", "mechanism")
PROTOCOLS = ("tokens", "flops", "time", "target")
TESTS = ("equivalence", "non-inferiority", "superiority")
# counted: an instrumented algorithm's exact count (docs/architecture.md); simulated numbers are projections,
# never evidence for a verdict
DECIDING = ("measured", "counted", "estimated")
_REQUIREMENT = re.compile(r"^(cuda|network|world_size>=([1-9][0-9]*)|gpu:[A-Za-z0-9][A-Za-z0-9 -]*)$")
_CHECK = re.compile(r"^[\w./-]+\.py::\w+$")
_FIELDS = {
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
    "better",
    "band",
    "test",
    "margin",
    "plateau",
    "evidence",
    "estimator_check",
    "calibrate",
    "beside",
    "seeds_needed",
    "requires",
    "what_would_test",
    "command",
    "requires_claims",
    "regime",
    "trend",
}
# the axes a trend runs along (suite/judge/trends.py): the world size (workers or groups, one a worker at the
# paper's shape), or the model's blocks or width
TREND_AXES = ("world_size", "blocks", "width")
# a regime's entries: checked against the deciding records (the number's comparison and the record column it reads)
REGIME_CHECKED = {"params": "min", "workers": "min", "groups": "min", "device": "is", "gpu": "is"}
REGIME_STATED = ("rank", "data", "hardware")


@dataclass(frozen=True)
class Source:
    paper: str
    table: str | None = None  # table or figure
    version: str | None = None

    def __str__(self) -> str:
        return ", ".join(p for p in (self.paper, self.table, self.version) if p)


@dataclass(frozen=True)
class Sourced:
    """A number that decides a verdict (a band's tolerance, a margin, a plateau) and where it comes from."""

    value: float
    source: str

    def __str__(self) -> str:
        return f"{self.value:g} ({self.source})"


@dataclass(frozen=True)
class JointBaseline:
    """Another arm of the same paper table whose absolute value must fit at the same setting (`method`,
    `variant`: the arm; `value`: the paper's number for it)."""

    method: str
    variant: dict
    value: float
    source: str


@dataclass(frozen=True)
class Calibration:
    """The baseline's absolute value in the paper; settings that put our baseline within `within` decide. With
    `jointly`, a setting decides only where every arm listed there fits too: the cards of one paper table are
    then judged at one setting, not each at the setting that suits its own baseline."""

    value: float
    within: float
    source: str
    jointly: tuple[JointBaseline, ...] = ()


@dataclass(frozen=True)
class Beside:
    """Another setting of the same metric, shown next to the verdict (e.g. the small-scale measurement)."""

    label: str
    overrides: dict[str, Any]


def count_words(n: float) -> str:
    """A parameter count in a few characters: 3.1M, 1.2B."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.2g}{unit}" if n < 10 * size else f"{n / size:.0f}{unit}"
    return f"{int(n)}"


@dataclass(frozen=True)
class Bound:
    """One entry of a paper's regime: what it is (`name`), its value (a least `min`, an exact `is`, or a `note` that is
    stated, not checked) and where it comes from."""

    name: str
    value: float | str
    source: str
    check: str = "note"  # min, is or note

    def __str__(self) -> str:
        shown = count_words(self.value) if isinstance(self.value, float) else self.value
        what = {"min": f"at least {shown}", "is": str(shown)}.get(self.check, str(shown))
        return f"{self.name} {what} ({self.source})"


@dataclass(frozen=True)
class Regime:
    """Where the paper's number lives (claims.yaml `regime`): checked bounds, stated ones, the paper's protocol and,
    where the card judges another, that one (`here`)."""

    bounds: tuple[Bound, ...] = ()
    protocol: str = ""
    protocol_source: str = ""
    here: str = ""  # the protocol this card judges instead of the paper's: no run of it is in the paper's regime
    any_scale: str = ""  # why the paper's statement holds at any size (then no bound is checked)

    @property
    def checked(self) -> tuple[Bound, ...]:
        return tuple(b for b in self.bounds if b.check != "note")

    def __str__(self) -> str:
        parts = [f"any scale: {self.any_scale}"] if self.any_scale else [str(b) for b in self.bounds]
        if self.protocol:
            parts.append(f"protocol {self.protocol} ({self.protocol_source})")
        return "; ".join(parts)


@dataclass(frozen=True)
class TrendAxis:
    """Where a card's comparison is measured along its mechanism's axis (claims.yaml `trend`)."""

    axis: str
    paper: float | None  # None: the paper's text gives no place; toward its claim is then the effect's growth
    source: str
    command: str


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    paper_value: float | tuple[float, float] | str | None
    unit: str
    source: Source
    source_status: str
    metric: dict[str, Any]
    protocol: str | None
    kind: str
    better: str
    seeds_needed: int
    requires: tuple[str, ...]
    what_would_test: str
    command: str
    band: Sourced | None = None  # ratio and mechanism claims with a paper value
    test: str | None = None  # quality claims
    margin: Sourced | None = None  # quality claims
    plateau: Sourced | None = None  # quality claims on a loss
    evidence: tuple[str, ...] = ("measured",)
    estimator_check: str = ""
    calibrate: Calibration | None = None
    beside: tuple[Beside, ...] = ()
    # e.g. DDP's equal-steps runs spend exactly the FLOP budget they define: one set of runs serves both
    baseline_protocol: str | None = None
    requires_claims: tuple[str, ...] = ()  # the other halves of a compound claim (their ids)
    regime: Regime | None = None  # where the paper's number lives: None for derived cards and those with no value
    trend: TrendAxis | None = None  # quality cards: the axis their comparison is also measured along

    @property
    def derived(self) -> bool:
        """The value is the suite's own derivation (source_status "derived ..."), not a paper number."""
        return self.source_status.startswith("derived")

    @property
    def paper_range(self) -> tuple[float, float] | None:
        """The paper's value as a closed interval (a single number is [v, v]); None for text or no value."""
        if isinstance(self.paper_value, tuple):
            return self.paper_value
        if isinstance(self.paper_value, float):
            return (self.paper_value, self.paper_value)
        return None

    @property
    def band_range(self) -> tuple[float, float] | None:
        """The paper's range widened on both sides by the band's tolerance: what a value is judged against. None
        without a numeric paper value or a band."""
        paper = self.paper_range
        if paper is None or self.band is None:
            return None
        return paper[0] - self.band.value, paper[1] + self.band.value

    @property
    def has_paper_value(self) -> bool:
        return self.paper_value is not None


MAX_CLAIMS_BYTES = 4 * 2**20
MAX_NODES = 100_000  # values of the document with every alias expanded; a claims file has hundreds


class _Loader(yaml.SafeLoader):
    """safe_load's loader, refusing a document whose aliases expand beyond MAX_NODES values: aliases of
    aliases multiply what any walk over the document visits (a 'billion laughs' file took 3.5 GB)."""

    def compose_document(self):
        root = super().compose_document()
        sizes: dict[int, int] = {}

        def expanded(node) -> int:  # each node counted once per path to it, shared ones computed once
            if id(node) not in sizes:
                sizes[id(node)] = 0  # a recursive alias counts as one value (the constructor handles it)
                children = node.value if isinstance(node.value, list) else []
                flat = [c for pair in children for c in pair] if isinstance(node, yaml.MappingNode) else children
                sizes[id(node)] = 1 + sum(expanded(c) for c in flat if isinstance(c, yaml.Node))
            return sizes[id(node)]

        if root is not None and expanded(root) > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"its aliases expand to more than {MAX_NODES:,} values", root.start_mark
            )
        return root


def load_claims(path: str | Path) -> list[Claim]:
    """Read and validate a claims.yaml; ClaimsError names the file, the claim and the bad field."""
    path = Path(path)
    try:
        # safe: a tag that names Python code is refused; a FIFO, device or huge file is not read
        doc = yaml.load(read_regular(path, MAX_CLAIMS_BYTES).decode("utf-8"), Loader=_Loader)  # noqa: S506
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(err, "problem", None) or err).split())  # a reader error spans lines
        raise ClaimsError(f"{path}: not valid YAML{line}: {problem}") from None
    except (OSError, UnicodeDecodeError, NotAFile) as err:
        raise ClaimsError(f"{path}: cannot be read ({err})") from None
    except ValueError as err:  # a scalar YAML types but cannot build, e.g. the date 2001-13-14
        raise ClaimsError(f"{path}: not valid YAML: {err}; quote the value to keep it text") from None
    except RecursionError:
        raise ClaimsError(f"{path}: not valid YAML: nested too deeply for a claims file") from None
    entries = doc.get("claims") if isinstance(doc, dict) else doc
    if not isinstance(entries, list):
        raise ClaimsError(f"{path}: expected a list of claims (or a mapping with a 'claims' list)")
    claims = [parse_claim(entry, f"{path}: claims[{i}]") for i, entry in enumerate(entries)]
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ClaimsError(f"{path}: claim ids must be unique; repeated: {sorted({i for i in ids if ids.count(i) > 1})}")
    _check_compounds(path, claims)
    return claims


def _check_compounds(path: Path, claims: list[Claim]) -> None:
    """Each half a compound claim names is a claim of the file, and not compound itself: the verdicts combine
    once, so no chain or cycle of halves can form."""
    compound = {c.id for c in claims if c.requires_claims}
    known = {c.id for c in claims}
    for c in claims:
        for part in c.requires_claims:
            if part == c.id or part not in known:
                raise ClaimsError(f"{path}: {c.id}.requires_claims: {part!r} is not another claim of this file")
            if part in compound:
                raise ClaimsError(f"{path}: {c.id}.requires_claims: {part!r} is compound itself; name its halves")


def claims_for(reproduction: str) -> list[Claim]:
    """The claims the reproduction declares (its claims.yaml); [] for records of no reproduction found."""
    from suite.extensions import reproductions

    rep = reproductions().get(reproduction)
    return load_claims(rep.claims) if rep is not None and rep.claims is not None and rep.claims.is_file() else []


class _Entry:
    """One claim's mapping, read field by field with errors that name the field."""

    def __init__(self, entry: dict, where: str) -> None:
        self.entry, self.where = entry, where

    def error(self, name: str, message: str) -> ClaimsError:
        # a key with a line break stays on one line, and a long one short: the message names the fix in one line
        shown = name if str(name).isprintable() and len(str(name)) <= 60 else _short(name)
        return ClaimsError(f"{self.where}.{shown}: {message}")

    def get(self, name: str, kind: type | tuple, default: Any = ...) -> Any:
        value = self.entry.get(name)
        if value is None:
            if default is ...:
                raise self.error(name, "missing")
            return default
        if not isinstance(value, kind) or isinstance(value, bool):
            wanted = "a number" if isinstance(kind, tuple) else f"a {kind.__name__}"
            raise self.error(name, f"expected {wanted}, found {_short(value)}")
        return value

    def choice(self, name: str, options: tuple[str, ...], default: Any = ...) -> Any:
        value = self.get(name, str, default)
        if value is not None and value not in options:
            raise self.error(name, f"{_short(value)} is not one of {options}")
        return value

    def sourced(self, name: str, number: str) -> Sourced | None:
        spec = self.get(name, dict, None)
        if spec is None:
            return None
        if set(spec) != {number, "source"}:
            raise self.error(name, f"expected {{{number}: X, source: where X comes from}}, found {_short(spec)}")
        value, source = spec[number], spec["source"]
        if not _finite(value) or value < 0:
            raise self.error(f"{name}.{number}", f"must be a finite number >= 0, found {_short(value)}")
        if not isinstance(source, str) or not source.strip():
            raise self.error(f"{name}.source", "say where the number comes from (rounding, seeds' spread, noise)")
        return Sourced(float(value), source)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    """A number a float can hold (YAML gives integers of any size, and .inf and .nan)."""
    try:
        return _is_number(value) and math.isfinite(value)
    except OverflowError:
        return False


def _short(value: Any, limit: int = 60) -> str:
    """A value from the file quoted in a message: one line (repr escapes newlines), and short."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def parse_claim(entry: Any, where: str) -> Claim:
    """One claim from its mapping; ClaimsError names the field that is wrong and how to fix it."""
    if not isinstance(entry, dict):
        raise ClaimsError(f"{where}: a claim is a mapping of fields, found {type(entry).__name__}")
    ident = entry.get("id", "?")
    e = _Entry(entry, f"{where} ({ident if isinstance(ident, str) and ident.isprintable() else _short(ident)})")
    if unknown := sorted(set(entry) - _FIELDS, key=str):
        raise e.error(unknown[0], f"unknown field; claims take {', '.join(sorted(_FIELDS))}")
    kind = e.choice("kind", KINDS)
    paper_value = _paper_value(e, kind)
    protocol = e.choice("protocol", PROTOCOLS, None)
    baseline_protocol = e.choice("baseline_protocol", PROTOCOLS, None)
    metric = _metric(e, kind)
    if baseline_protocol and not (protocol and metric.get("baseline")):
        raise e.error("baseline_protocol", "needs a protocol and a metric with a baseline")
    requires = tuple(e.get("requires", list, []))
    if bad := [r for r in requires if not isinstance(r, str) or not _REQUIREMENT.match(r)]:
        raise e.error("requires", f"{_short(bad[0])} is not cuda, network, world_size>=N or gpu:NAME")
    what_would_test = e.get("what_would_test", str, "")
    if requires and not what_would_test.strip():
        raise e.error("what_would_test", "missing; a claim with requires must say what would test it")
    minimum = 3 if kind == "quality" else 1
    seeds_needed = e.get("seeds_needed", int, minimum)
    if seeds_needed < minimum:
        raise e.error("seeds_needed", f"{seeds_needed} is too few; a quality claim needs 3 seeds per arm, others 1")
    evidence = _evidence(e)
    requires_claims = tuple(e.get("requires_claims", list, []))
    if bad := [r for r in requires_claims if not isinstance(r, str) or not r]:
        raise e.error("requires_claims", f"{_short(bad[0])} is not a claim id")
    return Claim(
        id=e.get("id", str),
        statement=e.get("statement", str),
        paper_value=paper_value,
        unit=e.get("unit", str, ""),
        source=_source(e),
        source_status=e.get("source_status", str),
        metric=metric,
        protocol=protocol,
        kind=kind,
        better=e.choice("better", ("lower", "higher")),
        seeds_needed=seeds_needed,
        requires=requires,
        what_would_test=what_would_test,
        command=e.get("command", str),
        **_judging(e, kind, paper_value),
        evidence=evidence,
        estimator_check=_estimator_check(e, evidence),
        calibrate=_calibration(e),
        beside=_beside(e),
        baseline_protocol=baseline_protocol,
        requires_claims=requires_claims,
        regime=_regime(e, paper_value, what_would_test),
        trend=_trend(e, kind, metric),
    )


def _trend(e: _Entry, kind: str, metric: dict) -> TrendAxis | None:
    spec = e.get("trend", dict, None)
    if spec is None:
        return None
    if kind != "quality" and metric["name"] != "to-target":
        raise e.error("trend", "a trend is read from a quality comparison's seeds (kind: quality, or metric to-target)")
    if set(spec) != {"axis", "paper", "source", "command"}:
        raise e.error("trend", f"expected {{axis, paper, source, command}}, found {_short(sorted(spec, key=str))}")
    if spec["axis"] not in TREND_AXES:
        raise e.error("trend.axis", f"{_short(spec['axis'])} is not one of {list(TREND_AXES)}")
    unknown = spec["paper"] == "unknown"  # the paper's text gives no number (the source says what was read)
    if not unknown and (not _finite(spec["paper"]) or spec["paper"] <= 0):
        found = _short(spec["paper"])
        raise e.error("trend.paper", f"the paper's place on the axis, a number > 0 or unknown; found {found}")
    if not all(isinstance(spec[k], str) and spec[k].strip() for k in ("source", "command")):
        raise e.error("trend", "say where the paper's place comes from (source) and which plan measures the points")
    return TrendAxis(spec["axis"], None if unknown else float(spec["paper"]), spec["source"], spec["command"])


def _regime(e: _Entry, paper_value: Any, what_would_test: str) -> Regime | None:
    """The paper's regime: required of every claim that judges a paper's number (not derived), with what would test
    the claim inside it; each entry a mapping with its value and source."""
    spec = e.get("regime", dict, None)
    judges_paper = paper_value is not None and not str(e.entry.get("source_status", "")).startswith("derived")
    if spec is None:
        if judges_paper:
            raise e.error("regime", "missing; a claim with a paper value states the paper's regime (model size, "
                          "workers or groups, hardware, protocol, each with its source)")  # fmt: skip
        return None
    if not what_would_test.strip():
        raise e.error("what_would_test", "missing; a claim with a regime says what would test it there")
    known = {*REGIME_CHECKED, *REGIME_STATED, "protocol", "any_scale"}
    if unknown := sorted(set(spec) - known, key=str):
        raise e.error(f"regime.{unknown[0]}", f"not a regime entry; use one of {sorted(known)}")
    bounds = tuple(_bound(e, name, spec[name]) for name in spec if name not in ("protocol", "any_scale"))
    protocol = _regime_entry(e, "protocol", spec.get("protocol"), {"paper"}, {"here"}) if "protocol" in spec else {}
    any_scale = _regime_entry(e, "any_scale", spec["any_scale"], {"because"}) if "any_scale" in spec else {}
    regime = Regime(
        bounds,
        protocol.get("paper", ""),
        protocol.get("source", ""),
        protocol.get("here", ""),
        any_scale.get("because", "") + (f" ({any_scale['source']})" if any_scale else ""),
    )
    if regime.any_scale and regime.checked:
        raise e.error("regime.any_scale", "a claim for any size checks no bound; drop the bounds or any_scale")
    if not regime.any_scale and not regime.checked:
        raise e.error("regime", f"no checked entry; give one of {sorted(REGIME_CHECKED)} (or any_scale)")
    return regime


def _regime_entry(e: _Entry, name: str, spec: Any, needed: set[str], optional: frozenset | set = frozenset()) -> dict:
    """A regime entry's mapping: the fields `needed` and a source, all text."""
    allowed = needed | set(optional) | {"source"}
    if not isinstance(spec, dict) or not ({*needed, "source"} <= set(spec) <= allowed):
        raise e.error(f"regime.{name}", f"expected {{{', '.join(sorted(allowed))}}}, found {_short(spec)}")
    if bad := [k for k, v in spec.items() if not (isinstance(v, str) and v.strip())]:
        raise e.error(f"regime.{name}.{bad[0]}", "expected text")
    return spec


def _bound(e: _Entry, name: str, spec: Any) -> Bound:
    if name in REGIME_STATED:
        entry = _regime_entry(e, name, spec, {"note"})
        return Bound(name, entry["note"], entry["source"])
    check = REGIME_CHECKED[name]
    if not isinstance(spec, dict) or set(spec) != {check, "source"}:
        raise e.error(f"regime.{name}", f"expected {{{check}: X, source: where X comes from}}, found {_short(spec)}")
    value, source = spec[check], spec["source"]
    if not isinstance(source, str) or not source.strip():
        raise e.error(f"regime.{name}.source", "say where the paper's value comes from")
    if check == "min":
        if not _finite(value) or value <= 0:
            raise e.error(f"regime.{name}.min", f"must be a finite number > 0, found {_short(value)}")
        return Bound(name, float(value), source, check)
    allowed = ("cuda", "cpu") if name == "device" else None
    if not isinstance(value, str) or not value.strip() or (allowed and value not in allowed):
        raise e.error(
            f"regime.{name}.is", f"expected {' or '.join(allowed) if allowed else 'a name'}, found {_short(value)}"
        )
    return Bound(name, value, source, check)


def _paper_value(e: _Entry, kind: str) -> float | tuple[float, float] | str | None:
    value = e.entry.get("paper_value")
    if value is None:
        return None
    if _finite(value):
        return float(value)
    if isinstance(value, list) and len(value) == 2 and all(_finite(v) for v in value) and value[0] <= value[1]:
        return (float(value[0]), float(value[1]))
    if isinstance(value, str) and value.strip() and kind == "quality":
        return value
    wanted = "a number, [low, high] or text" if kind == "quality" else "a number or [low, high]"
    raise e.error("paper_value", f"a {kind} claim needs {wanted} (or no paper_value), found {_short(value)}")


def _judging(e: _Entry, kind: str, paper_value: Any) -> dict[str, Any]:
    """The band (ratio, mechanism) or the test, margin and plateau (quality) that decide the verdict."""
    if kind == "quality":
        if e.entry.get("band") is not None:
            raise e.error("band", "a quality claim is judged by `test` and `margin`, not a band")
        margin = e.sourced("margin", "value")
        if margin is None:
            raise e.error("margin", "missing; give {value: X, source: ...} (0 for a strict test)")
        plateau = e.sourced("plateau", "change")
        if plateau is None and "loss" in e.entry["metric"].get("field", ""):  # _metric checked it is text
            raise e.error("plateau", "missing; a loss comparison needs {change: X, source: ...} (runs long enough)")
        test = e.choice("test", TESTS)
        if test == "equivalence" and margin.value == 0:
            raise e.error("margin.value", "an equivalence test needs a margin > 0 (nothing is equal to zero tolerance)")
        return {"test": test, "margin": margin, "plateau": plateau}
    for name in ("test", "margin", "plateau"):
        if e.entry.get(name) is not None:
            raise e.error(name, f"only quality claims take {name}; a {kind} claim has a band")
    band = e.sourced("band", "tolerance")
    if band is None and paper_value is not None:
        raise e.error("band", "missing; give {tolerance: X, source: where X comes from}")
    return {"band": band}


def _evidence(e: _Entry) -> tuple[str, ...]:
    evidence = e.get("evidence", list, ["measured"])
    if not evidence or any(k not in DECIDING for k in evidence) or not {"measured", "counted"} & set(evidence):
        raise e.error("evidence", f"a list from {DECIDING} that includes measured or counted, found {_short(evidence)}")
    return tuple(evidence)


def _estimator_check(e: _Entry, evidence: tuple[str, ...]) -> str:
    check = e.get("estimator_check", str, "")
    if "estimated" in evidence and not _CHECK.match(check):
        raise e.error(
            "estimator_check",
            "an estimate may decide only where a test checks the estimator equal to a measurement; "
            "name it as tests/FILE.py::TEST",
        )
    return check


def _calibration(e: _Entry) -> Calibration | None:
    spec = e.get("calibrate", dict, None)
    if spec is None:
        return None
    if not {"value", "within", "source"} <= set(spec) <= {"value", "within", "source", "jointly"}:
        raise e.error(
            "calibrate", f"expected {{value, within, source[, jointly]}}, found {_short(sorted(spec, key=str))}"
        )
    value, within = spec["value"], spec["within"]
    if not (_finite(value) and value > 0 and _is_number(within) and 0 < within < 1):
        raise e.error("calibrate", f"a finite value > 0 and 0 < within < 1, found {_short(value)} and {_short(within)}")
    if not e.entry.get("metric", {}).get("baseline"):
        raise e.error("calibrate", "needs a metric with a baseline (its absolute value is what is calibrated)")
    return Calibration(float(value), float(within), str(spec["source"]), _jointly(e, spec.get("jointly") or []))


def _jointly(e: _Entry, entries: Any) -> tuple[JointBaseline, ...]:
    if not isinstance(entries, list):
        raise e.error("calibrate.jointly", f"a list of {{method, variant, value, source}}, found {_short(entries)}")
    out = []
    for j in entries:
        if not isinstance(j, dict) or not {"method", "value", "source"} <= set(j) <= {
            "method",
            "variant",
            "value",
            "source",
        }:
            raise e.error("calibrate.jointly", f"each entry is {{method, variant, value, source}}, found {_short(j)}")
        if not (_finite(j["value"]) and j["value"] > 0) or not isinstance(j.get("variant") or {}, dict):
            raise e.error("calibrate.jointly", f"a value > 0 and a variant mapping, found {_short(j)}")
        out.append(JointBaseline(str(j["method"]), dict(j.get("variant") or {}), float(j["value"]), str(j["source"])))
    return tuple(out)


def _beside(e: _Entry) -> tuple[Beside, ...]:
    allowed = {
        "field",
        "model",
        "variant",
        "baseline_variant",
        "arm",
        "baseline_arm",
        "optimizer",
        "baseline_optimizer",
        "hardware",
    }
    out = []
    for i, spec in enumerate(e.get("beside", list, [])):
        if not isinstance(spec, dict) or not isinstance(spec.get("label"), str):
            raise e.error(f"beside[{i}]", "a mapping with a label and the metric arguments it changes")
        overrides = {k: v for k, v in spec.items() if k != "label"}
        if unknown := sorted(set(overrides) - allowed, key=str):
            raise e.error(f"beside[{i}].{unknown[0]}", f"not one of {sorted(allowed)}")
        _check_arguments(e, f"beside[{i}]", overrides)
        out.append(Beside(spec["label"], overrides))
    return tuple(out)


def _source(e: _Entry) -> Source:
    source = e.get("source", dict)
    if unknown := sorted(set(source) - {"paper", "table", "version"}, key=str):
        raise e.error(f"source.{unknown[0]}", "unknown field; a source has paper, table (or figure), version")
    if not isinstance(source.get("paper"), str) or not source["paper"].strip():
        raise e.error("source.paper", "missing")
    return Source(source["paper"], _text(source.get("table")), _text(source.get("version")))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _metric(e: _Entry, kind: str) -> dict[str, Any]:

    spec = e.get("metric", dict)
    name = spec.get("name")
    if not isinstance(name, str) or name not in METRICS:
        raise e.error("metric.name", f"{_short(name)} is not a registered metric; use one of {sorted(METRICS)}")
    if (kind == "quality") != (name in QUALITY):
        raise e.error("metric.name", f"a {kind} claim cannot use the {name!r} metric")
    args = {k: v for k, v in spec.items() if k != "name"}
    takes, required = _metric_arguments(name)
    if unknown := sorted(set(args) - set(takes), key=str):
        raise e.error(f"metric.{unknown[0]}", f"not an argument of metric {name!r}; it takes {sorted(takes)}")
    if missing := [p for p in required if p not in args]:
        raise e.error(f"metric.{missing[0]}", f"missing; metric {name!r} needs it")
    _check_arguments(e, "metric", args)
    if name in PAIRINGS:
        _check_pairing(e, name, Sides.of(args))
    fields = METRIC_FIELDS[name]
    if fields is not None and isinstance(args.get("field"), str) and not _known_field(args["field"], fields):
        raise e.error(
            "metric.field", f"{_short(args['field'])} is not a field of the records; use one of {fields} or evals.NAME"
        )
    return dict(spec)


def _metric_arguments(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what a card may give metric `name`, what it must): a metric of arms takes the sides' keys (suite/judge/
    sides.py), one of its own arguments its signature's."""
    if (pairing := PAIRINGS.get(name)) is not None:
        takes = SPEC_KEYS if pairing.two_sided else tuple(k for k in SPEC_KEYS if k not in THEIRS.values())
        return takes, ("field", "method", "baseline") if pairing.two_sided else ("field", "method")
    params = inspect.signature(METRICS[name]).parameters
    required = tuple(p for p, v in params.items() if p != "df" and v.default is inspect.Parameter.empty)
    return tuple(p for p in params if p != "df"), required


def _check_pairing(e: _Entry, name: str, sides: Sides) -> None:
    """A card whose sides fix a setting its metric pairs on to two values could never pair a run."""
    pairing = PAIRINGS[name]
    if (conflict := pairing.conflict(sides)) is None:
        return
    key, mine, theirs = conflict
    others = sorted(
        n for n, p in PAIRINGS.items() if p.two_sided and key not in p.keys and (n in QUALITY) == (name in QUALITY)
    )
    instead = f"use metric {' or '.join(repr(n) for n in others)}, which pairs otherwise, or " if others else ""
    raise e.error(
        "metric",
        f"its sides can never pair: the method's side has {key}={mine}, the baseline's {key}={theirs}, and metric "
        f"{name!r} pairs runs {pairing.how} ({', '.join(pairing.keys)}); {instead}give both sides one {key}",
    )


def _known_field(name: str, fields: tuple[str, ...]) -> bool:
    return name in fields or (name.startswith("evals.") and len(name) > len("evals."))


def _check_arguments(e: _Entry, where: str, args: dict[str, Any]) -> None:
    """A metric's arguments have the types the metric reads (a number where a name belongs fails here, not in
    pandas when the verdict is taken)."""
    for key, value in args.items():
        if key in ("variant", "baseline_variant") and not isinstance(value, dict):
            raise e.error(f"{where}.{key}", f"expected a mapping of variant fields, found {_short(value)}")
        if key in ("arm", "baseline_arm"):
            _check_arm(e, f"{where}.{key}", value)
        if key in ("field", "method", "baseline", "optimizer", "baseline_optimizer") and not (
            isinstance(value, str) and value
        ):
            raise e.error(f"{where}.{key}", f"expected a name, found {_short(value)}")
        if key == "model" and not (isinstance(value, str) or _names(value)):
            raise e.error(f"{where}.model", f"expected a model name or a list of them, found {_short(value)}")


def _check_arm(e: _Entry, where: str, value: Any) -> None:
    """An `arm` names fields of a record's arm configuration (suite/arms.py): RunConfig's arm fields, and the
    record's method, model, world size, data, protocol and budget."""
    from suite.config import ARM

    known = {*ARM, "world_size", "data", "protocol", "budget"} - {"nproc"}
    if not isinstance(value, dict):
        raise e.error(where, f"expected a mapping of arm fields, found {_short(value)}")
    if unknown := sorted(set(value) - known, key=str):
        near = difflib.get_close_matches(str(unknown[0]), sorted(known), n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        raise e.error(
            f"{where}.{unknown[0]}",
            f"not an arm field; {hint}arm fields are suite/config.py's settings of kind arm and world_size, data, "
            "protocol, budget",
        )


def _names(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)
