"""The verdict on a claim (suite/judge/claims.py) from run records: the value, its band or test, and its evidence.

Verdict words keep their direction (docs/architecture.md): reproduced (inside the band, or the test passes), exceeded
(better than claimed, beyond the band), fell short (worse), inconclusive (noise too large, too few seeds, runs
too short, no run), not testable here (the hardware is missing: says what would test it), and "measured, no
paper value" for claims without a paper number ("counted, ..." or "estimated, ..." where a count or an estimate
decided). A card whose value the suite derived itself (Claim.derived)
"matches the model" where another card would be reproduced: it checks our formula, not the paper. A compound
claim (`requires_claims`) takes the weakest of its own verdict and its halves' (STRENGTH).

Evidence kinds never mix. What this machine can do is read from measured records only. An estimated record
decides only a claim that allows it (`evidence`), and a simulated one never decides: it is shown beside the
verdict as a projection. Ratio and mechanism claims judge an interval against the band: one value, the 95%
t-interval of the mean over seeds, or the range over settings (calibration sweeps). Quality claims compare the
method's seeds with the baseline's by Welch t-tests: two one-sided tests for equivalence, one for
non-inferiority.

Metrics (suite/judge/metrics.py) turn the rows of `claim_frame` into samples, one per seed and setting, each side of a
comparison one arm.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from suite.judge.claims import Claim, ClaimsError
from suite.judge.metrics import READS_DIVERGED, Samples, _per_seed, apply_metric, side
from suite.judge.regime import outside_regime, regime_rows, scale_words
from suite.judge.sides import SETTING_KEYS, Sides
from suite.judge.trends import trend_of
from suite.records import FINISHED

ALPHA = 0.05
# What a paper-claim word becomes where the deciding records lie outside the paper's regime (Claim.regime): a
# small-scale finding, never the paper's verdict, which stays "not testable here"
SMALL_SCALE = {
    "reproduced": "holds at small scale",
    "exceeded": "holds at small scale",
    "fell short": "does not hold at small scale",
    "inconclusive": "inconclusive at small scale",
}
VERDICTS = (
    "reproduced",
    "matches the model",
    "exceeded",
    "fell short",
    "inconclusive",
    "not testable here",
    "measured, no paper value",
    "counted, no paper value",
    "estimated, no paper value",
    *dict.fromkeys(SMALL_SCALE.values()),
)
# From the weakest support for a claim to the strongest. A half that fell short refutes a compound claim; a
# half nothing here can test leaves it untestable, even where more runs would settle the other; a half without
# a paper number, or checked against our own formula, cannot make the whole "reproduced"; a half judged outside the
# paper's regime makes the whole a small-scale finding at best.
STRENGTH = (
    "fell short",
    "does not hold at small scale",
    "not testable here",
    "inconclusive",
    "inconclusive at small scale",
    "measured, no paper value",
    "counted, no paper value",
    "estimated, no paper value",
    "holds at small scale",
    "matches the model",
    "reproduced",
    "exceeded",
)
# The order in which evidence is preferred: measured, then counted (an instrumented algorithm's exact count: no
# hardware measurement, the same on any device), then estimates; each only where the claim allows it.
EVIDENCE = ("measured (gpu)", "measured (cpu)", "counted", "estimated", "simulated")
# Evidence that no seed enters: the seeds of one setting give one number, counted once
DETERMINISTIC = ("counted", "estimated")
# What suite/sim projects: time. Its records copy the estimate's memory and bytes, which are no projection.
PROJECTED_FIELDS = ("wall_s", "tokens_per_s")


def kind_of(label: str) -> str:
    """measured, counted or estimated: the kind of an EVIDENCE label, without the device."""
    return label.split(" (")[0]


def evidence_label(provenance: str, device: str) -> str:
    """The provenance badge of a number: where it came from, and for measurements, on what device."""
    if provenance != "measured":
        return provenance
    return "measured (gpu)" if device == "cuda" else "measured (cpu)"


@dataclass(frozen=True)
class Shown:
    """A value shown beside a verdict without deciding it: a projection, or the claim at another setting."""

    label: str
    value: float
    evidence: str
    run_ids: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    verdict: str
    measured: float | None = None
    spread: float | None = None  # sample standard deviation over seeds
    interval: tuple[float, float] | None = None  # what was judged against the band
    n_seeds: int = 0
    ratio_to_paper: float | None = None
    reason: str = ""
    provenance: str | None = None  # an EVIDENCE label
    p_value: float | None = None
    baseline: float | None = None  # quality claims: the baseline's mean
    band: str = ""  # the band or test, with its source
    hardware: str = ""
    scale: str = ""
    setting: str = ""  # the settings judged (calibrated ones, where a sweep was run)
    run_ids: tuple[str, ...] = ()
    shown: tuple[Shown, ...] = field(default_factory=tuple)
    # calibrated claims: (setting, the baseline's value there, whether it is within the paper's band)
    calibration: tuple[tuple[str, float, bool], ...] = ()
    parts: tuple[tuple[str, str], ...] = ()  # a compound claim's halves: (claim id, that claim's own verdict)
    own: str = ""  # a compound claim's own half's verdict (its measured value is that half's); '' for a simple claim
    commits: str = ""  # where the deciding records come from (see commits)
    floor: float | None = None  # a value no seed reached (see _beyond_floors): the mean lies above it
    regime: str = ""  # the paper's regime, with the source of each entry (Claim.regime)
    outside: str = ""  # why the deciding records lie outside it ('' inside, or with no regime)
    at: str = ""  # the deciding records' scale in a few words, shown beside the word wherever it is shown
    paper_verdict: str = ""  # the verdict on the paper's claim: the word itself inside the regime
    trend: dict[str, Any] | None = None  # the card's comparison along its axis (suite/judge/trends.py trend_of)

    @property
    def small_scale(self) -> bool:
        return bool(self.outside)

    @property
    def word_at(self) -> str:
        """The word with the scale it was found at, where that is outside the paper's regime."""
        return f"{self.verdict} ({self.at})" if self.outside and self.at else self.verdict

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "small_scale": self.small_scale, "word_at": self.word_at}


@dataclass(frozen=True)
class Environment:
    """What the measured records show this machine can do: devices, largest world, inter-node traffic."""

    devices: frozenset[str] = frozenset()
    max_world_size: int = 0
    inter_node: bool = False
    device_names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, df: pd.DataFrame) -> Environment:
        """From measured records only: an estimate or a simulation names hardware nobody ran on."""
        measured = df[df["provenance"] == "measured"] if not df.empty else df
        if measured.empty:
            return cls()
        return cls(
            frozenset(measured["device"]),
            int(measured["world_size"].max()),
            bool(measured["inter_node"].any()),
            frozenset(measured["device_name"].astype(str)),
        )

    def meets(self, requirement: str) -> bool:
        if requirement == "cuda":
            return "cuda" in self.devices
        if requirement == "network":
            return self.inter_node
        if requirement.startswith("gpu:"):
            return any(requirement[4:] in name for name in self.device_names)
        return self.max_world_size >= int(requirement.split(">=")[1])

    def describe(self) -> str:
        if not self.devices:
            return "no measured runs"
        devices = "/".join(sorted(self.devices))
        nodes = "inter-node traffic" if self.inter_node else "one node"
        return f"measured runs on {devices}, world size up to {self.max_world_size}, {nodes}"


def _requirement_mask(requirement: str, df: pd.DataFrame) -> pd.Series:
    if requirement == "cuda":
        return df["device"] == "cuda"
    if requirement == "network":
        return df["inter_node"].astype(bool)
    if requirement.startswith("gpu:"):
        return (df["device"] == "cuda") & df["device_name"].astype(str).str.contains(requirement[4:], regex=False)
    return df["world_size"] >= int(requirement.split(">=")[1])


def claim_frame(records: list[dict]) -> pd.DataFrame:
    """Summary rows plus what claims select on: evidence, setting, inter-node traffic, plateau, `evals.<name>`."""
    from suite.records import to_dataframe

    df = to_dataframe(records)
    if df.empty:
        return df
    df["evidence"] = [evidence_label(p, d) for p, d in zip(df["provenance"], df["device"])]
    df["device_name"] = [r["env"]["device_name"] for r in records]
    df["git_sha"] = [r["env"].get("git_sha") for r in records]
    df["git_dirty"] = [r["env"].get("git_dirty") for r in records]
    df["inter_node"] = [_crosses_nodes(r) for r in records]
    df["emulated"] = [bool(r["parallel"].get("emulated")) for r in records]
    df["setting"] = [setting_of(r) for r in records]
    df["val_change_last_fifth"] = [val_change_last_fifth(r["curve"]) for r in records]
    df["val_curve"] = [val_curve(r["curve"]) for r in records]
    evals = pd.DataFrame(
        [{f"evals.{k}": _eval_value(v) for k, v in r["evals"].items()} for r in records], index=df.index
    )
    return pd.concat([df, evals], axis=1)


def setting_of(record: dict) -> str:
    """The settings two compared arms must share, as one label (e.g. `seq_len=1024 micro_batch=8 ...`)."""
    settings = record.get("settings") or {}
    parallel = record["parallel"]
    values = {
        "model": record["model"]["name"],
        "seq_len": settings.get("seq_len"),
        "micro_batch": settings.get("micro_batch", parallel.get("micro_batch")),
        "grad_accum": settings.get("grad_accum", parallel.get("grad_accum")),
        "precision": settings.get("precision", record["variant"].get("precision")),
    }
    return " ".join(f"{k}={values[k]}" for k in SETTING_KEYS if values[k] is not None)


def val_change_last_fifth(curve: list[dict]) -> float | None:
    """Relative change of the validation loss over the last fifth of the run's steps (None: no such pair).

    From the last evaluation at or before 80% of the steps to the final one: a run whose loss still falls
    steeply there has not run long enough to compare final losses."""
    points = [(p["step"], p["val_loss"]) for p in curve if p.get("val_loss") is not None]
    if len(points) < 2:
        return None
    cut = 0.8 * points[-1][0]
    before = [v for s, v in points[:-1] if s <= cut]
    if not before:
        return None
    return abs(points[-1][1] - before[-1]) / abs(before[-1])


def val_curve(curve: list[dict]) -> tuple[tuple[float, float, float], ...]:
    """(step, tokens, validation loss) at each evaluation with a finite loss: what a time-to-target metric reads."""
    return tuple((p["step"], p["tokens"], p["val_loss"]) for p in curve if p.get("val_loss") is not None)


def _crosses_nodes(record: dict) -> bool:
    return any(op.get("tier") == "inter-node" for r in record["comm"]["per_rank"] for op in r["ops"])


def _eval_value(v: Any) -> float | None:
    v = v.get("value") if isinstance(v, dict) else v
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def evaluate(claim: Claim, df: pd.DataFrame) -> Verdict:
    """The verdict on `claim` from the summary rows `df` (see claim_frame) of its reproduction, with the trend of its
    comparison along its axis where the card names one (suite/judge/trends.py: measured runs only)."""
    verdict = _evaluate(claim, df)
    if claim.trend is None:
        return verdict
    rows = _measured_candidates(claim, df[df["status"] == "complete"] if len(df) else df)
    return replace(verdict, trend=trend_of(claim, rows[rows["provenance"] == "measured"] if len(rows) else rows))


def _evaluate(claim: Claim, df: pd.DataFrame) -> Verdict:
    rows = _selected(claim, df)
    shown = (*_beside(claim, rows), *_projection(claim, rows))
    env = Environment.of(df)
    unmet = [r for r in claim.requires if not env.meets(r)]
    samples, label, said = _decisive(claim, rows, allow_measured=not unmet)
    if samples is not None and samples.floors is not None:
        return in_regime(claim, _beyond_floors(claim, samples, label, said, shown), samples)
    if samples is None:
        if unmet:
            return Verdict(
                "not testable here",
                reason=f"needs {', '.join(unmet)}; the records have {env.describe()}. "
                f"What would test it: {claim.what_would_test}",
                band=_band_text(claim),
                shown=shown,
                regime=str(claim.regime or ""),
                paper_verdict="not testable here",
            )
        where = f" under the {claim.protocol} protocol" if claim.protocol else ""
        kinds = " or ".join(claim.evidence)
        reason = f"no complete {kinds} runs of {_arms(claim)}{where}"
        if said:  # runs there are, but none gave a value (e.g. no seed reached a target): the metric says why
            reason = f"the {kinds} runs of {_arms(claim)}{where} give no value{said}"
        reason += _filtered(claim, rows)
        return Verdict(
            "inconclusive",
            reason=reason,
            band=_band_text(claim),
            shown=shown,
            regime=str(claim.regime or ""),
            paper_verdict="inconclusive",
        )
    sweep = _sweep(claim, rows, label)
    if label in DETERMINISTIC and claim.kind != "quality":
        samples = _one_per_setting(samples)
    samples, setting, note = _calibrated(claim, samples, sweep)
    verdict = _judge(claim, samples)
    if note.startswith(UNCALIBRATED) and verdict["verdict"] in DECIDED:
        # a setting the paper's baseline does not fit never decides the card: the value is shown, not judged
        verdict = {
            **verdict,
            "verdict": "inconclusive",
            "reason": f"{verdict['verdict']} if judged here: {verdict['reason']}",
        }
    if verdict["verdict"] == "measured, no paper value":  # the word names the evidence that decided
        verdict["verdict"] = f"{kind_of(label)}, no paper value"
    n = _n_seeds(samples) if samples.baseline is None or claim.kind != "quality" else _n_quality(samples)
    measured = float(np.mean(samples.values)) if len(samples.values) else None
    one_setting = len(set(samples.settings)) == 1  # a spread over settings is no noise: the interval shows them
    paper = claim.paper_range
    reason = verdict["reason"] + said + note
    if label == "estimated":
        reason += f" (estimated, not a measurement; estimator checked by {claim.estimator_check})"
    judged = Verdict(
        verdict["verdict"],
        measured=measured,
        spread=float(np.std(samples.values, ddof=1)) if len(samples.values) > 1 and one_setting else None,
        interval=verdict.get("interval"),
        n_seeds=n,
        ratio_to_paper=measured / paper[0] if measured and paper and paper[0] == paper[1] and paper[0] else None,
        reason=reason,
        provenance=label,
        p_value=verdict.get("p"),
        baseline=float(np.mean(samples.baseline)) if claim.kind == "quality" and len(samples.baseline) else None,
        band=_band_text(claim),
        hardware=_hardware(samples.rows),
        scale=_scale(samples.rows),
        setting=setting,
        run_ids=tuple(samples.rows["run_id"]),
        shown=shown,
        calibration=sweep,
        commits=origin(samples.rows["git_sha"], samples.rows["git_dirty"]),
    )
    return in_regime(claim, judged, samples)


def in_regime(claim: Claim, verdict: Verdict, samples: Samples) -> Verdict:
    """The verdict with the paper's regime beside it. Where the deciding records lie outside it, a paper-claim word
    becomes a small-scale finding (SMALL_SCALE) with the records' scale beside it, and the paper's claim stays not
    testable here, with what would test it. An estimate at the paper's size whose only miss is the hardware (an
    estimate of GPU memory made on fake tensors, its estimator checked against CPU runs) is no small-scale finding:
    it decides nothing, and the card is inconclusive with what it would say."""
    rows = regime_rows(samples)
    at = scale_words(rows, verdict.provenance)
    regime = str(claim.regime or "")
    bound, why = outside_regime(claim, rows)
    if not why:
        return replace(verdict, regime=regime, at=at, paper_verdict=verdict.verdict)
    if verdict.provenance == "estimated" and bound is not None and bound.name in HARDWARE_BOUNDS:
        word = "inconclusive" if verdict.verdict in DECIDED else verdict.verdict
        said = f"{verdict.verdict} if judged here: " if word != verdict.verdict else ""
        reason = f"{said}{verdict.reason}; an estimate does not stand for the paper's hardware: {why}"
        return replace(verdict, verdict=word, reason=reason, regime=regime, at=at, paper_verdict=word)
    word = SMALL_SCALE.get(verdict.verdict, verdict.verdict)
    reason = (
        f"{verdict.reason}; outside the paper's regime: {why}, so this is a small-scale finding ({at}); the paper's "
        f"claim is not testable here. What would test it: {claim.what_would_test}"
    )
    return replace(
        verdict, verdict=word, reason=reason, regime=regime, outside=why, at=at, paper_verdict="not testable here"
    )


HARDWARE_BOUNDS = ("device", "gpu")  # regime entries that name hardware, not scale


def _beyond_floors(claim: Claim, samples: Samples, label: str, said: str, shown: tuple[Shown, ...]) -> Verdict:
    """The verdict where every seed of the method ended short of a value it would give (suite/judge/targets.py): each
    seed's value lies above its floor, so their mean lies above the least floor. Above the band's upper edge that
    decides the claim (fell short where lower is better, exceeded where higher is); with no paper value the floor is
    what was measured; otherwise it cannot tell."""
    floor, n = float(samples.floors.min()), len(samples.floors)
    what = f"above {floor:.4g} {claim.unit} (a lower bound: every seed lies above its own, the least of them)"
    edge = claim.band_range[1] if claim.band_range else None
    if n < claim.seeds_needed:
        word, how = "inconclusive", f"{what}; {n} seed{'' if n == 1 else 's'}, the claim needs {claim.seeds_needed}"
    elif not claim.has_paper_value:
        word, how = f"{kind_of(label)}, no paper value", f"the paper gives no value to compare with; {what}"
    elif edge is not None and floor > edge:
        word = "fell short" if claim.better == "lower" else "exceeded"
        how = f"{what}, beyond the band's upper edge {edge:.4g}; {claim.better} is better"
    else:
        word, how = "inconclusive", f"{what}, not beyond the band's upper edge" + (f" {edge:.4g}" if edge else "")
    return Verdict(
        word,
        n_seeds=n,
        floor=floor,
        reason=f"{how}{said}",
        provenance=label,
        band=_band_text(claim),
        hardware=_hardware(samples.rows),
        scale=_scale(samples.rows),
        run_ids=tuple(samples.rows["run_id"]),
        shown=shown,
        commits=origin(samples.rows["git_sha"], samples.rows["git_dirty"]),
    )


def origin(shas: Any, dirty: Any) -> str:
    """Where records come from (their env.git_sha and env.git_dirty): "one clean commit SHA", or what keeps
    them from it: "mixed commits (N)", "dirty tree", or a commit or tree state not recorded. '' for none."""
    shas, dirty = list(shas), list(dirty)
    if not shas:
        return ""
    distinct = set(shas)
    problems = [f"mixed commits ({len(distinct)})"] if len(distinct) > 1 else []
    if None in distinct:
        problems.append("commit not recorded")
    if True in dirty:
        problems.append("dirty tree")
    elif None in dirty:
        problems.append("tree state not recorded")
    return ", ".join(problems) if problems else f"one clean commit {shas[0][:7]}"


def _n_seeds(samples: Samples) -> int:
    """The seeds behind the judged values: the fewest any setting has (settings are never seeds)."""
    return min(Counter(samples.settings).values(), default=len(samples.values))


def _one_per_setting(samples: Samples) -> Samples:
    """Evidence no seed enters (DETERMINISTIC): the seeds of a setting are one value, counted once."""
    settings = tuple(dict.fromkeys(samples.settings))
    at = [np.array(samples.settings) == s for s in settings]
    values = np.array([samples.values[m].mean() for m in at])
    baseline = None if samples.baseline is None else np.array([samples.baseline[m].mean() for m in at])
    return Samples(values, samples.rows, settings, baseline, samples.baseline_rows)


def _n_quality(samples: Samples) -> int:
    return min(len(samples.values), len(samples.baseline))


def _arms(claim: Claim) -> str:
    """The claim's sides as a reader tells them apart: each method with the optimizer the claim names for it and
    every field that sets the sides apart (dion's arms are all ddp, so "ddp and ddp" said nothing)."""
    return Sides.of(claim.metric).labels()


def _selected(claim: Claim, df: pd.DataFrame) -> pd.DataFrame:
    """Complete runs of the claim's protocol (the baseline's own protocol where it has one); diverged ones too for
    a metric that reads them (READS_DIVERGED)."""
    if df.empty:
        return df
    rows = df[df["status"].isin(FINISHED if claim.metric["name"] in READS_DIVERGED else ("complete",))]
    if claim.protocol:
        wanted = rows["protocol"] == claim.protocol
        if claim.baseline_protocol:
            base = rows.index.isin(_baseline_side(claim, rows).index)
            wanted = (wanted & ~base) | (base & (rows["protocol"] == claim.baseline_protocol))
        rows = rows[wanted]
    return rows


def _baseline_side(claim: Claim, rows: pd.DataFrame) -> pd.DataFrame:
    """The runs the claim's baseline side names (its method, optimizer, variant and arm fields)."""
    return side(rows, claim.metric, baseline=True)


def _filtered(claim: Claim, rows: pd.DataFrame) -> str:
    """What left the claim's own runs out, where its hardware requirements did: '; N measured runs of the method
    left out by the requirement R (records on DEVICES)', or ''."""
    if rows.empty or "evidence" not in rows.columns or not claim.requires:
        return ""
    mine = side(rows[rows["provenance"] == "measured"], claim.metric)
    for requirement in claim.requires:
        out = mine[~_requirement_mask(requirement, mine)]
        if len(out):
            devices = ", ".join(sorted({str(n) for n in out["device_name"]}))
            method = claim.metric["method"]
            return f"; {len(out)} measured run(s) of {method} left out by the requirement {requirement} (on {devices})"
    return ""


def _measured_candidates(claim: Claim, rows: pd.DataFrame) -> pd.DataFrame:
    """Measured runs on hardware that meets the claim's requirements (the only measured runs that may decide it,
    or be shown beside it). Emulated workers (suite/run/emulate.py) compute a real run's losses, but their memory,
    time and traffic are one process's: they speak to quality claims only."""
    if claim.kind != "quality" and "emulated" in rows.columns:
        rows = rows[~rows["emulated"]]
    for requirement in claim.requires:
        rows = rows[_requirement_mask(requirement, rows)]
    return rows


def _samples_of(claim: Claim, rows: pd.DataFrame, label: str, overrides: dict | None = None) -> Samples:
    args = {k: v for k, v in claim.metric.items() if k != "name"} | (overrides or {})
    return apply_metric(claim.metric["name"], rows[rows["evidence"] == label], args)


def seed_samples(claim: Claim, rows: pd.DataFrame) -> Samples:
    """The claim's metric over the runs a verdict used (`rows`, one kind of evidence): a report draws the seeds of a
    metric whose values are rows of its records (a merge step's, a microbenchmark's) with it."""
    return _samples_of(claim, rows, rows["evidence"].iloc[0])


def _decisive(claim: Claim, rows: pd.DataFrame, allow_measured: bool) -> tuple[Samples | None, str | None, str]:
    """Samples from the first kind of evidence the claim accepts that has any: measured (on hardware that
    meets the requirements), then counted, then estimated, each where the claim allows it. Simulated numbers
    never decide. Third: the metric's note on the samples (suite/judge/targets.py: how many seeds reached the
    target), or where none gave a value, the first kind's note on why. Where no kind gives a value but one's every
    seed ended short of it (Samples.floors: no seed reached the target), that kind's samples, without values."""
    if "evidence" not in rows.columns:  # no records at all
        return None, None, ""
    labels = []
    if allow_measured and "measured" in claim.evidence:
        labels += [(label, _measured_candidates(claim, rows)) for label in EVIDENCE[:2]]
    if "counted" in claim.evidence:
        labels.append(("counted", rows))
    if "estimated" in claim.evidence:
        labels.append(("estimated", rows))
    why, short = "", None
    for label, candidates in labels:
        samples = _samples_of(claim, candidates, label)
        if len(samples.values) and (samples.baseline is None or len(samples.baseline)):
            return samples, label, samples.note
        why = why or samples.note
        if short is None and samples.floors is not None:
            short = samples, label, samples.note
    return short or (None, None, why)


def _beside(claim: Claim, rows: pd.DataFrame) -> list[Shown]:
    """Values shown beside the verdict: measured ones only from hardware that meets the claim's requirements,
    unless the entry names its `hardware` (it is about other hardware, and says so in its label)."""
    out = []
    if "evidence" not in rows.columns:
        return []
    meeting = _measured_candidates(claim, rows)
    for extra in claim.beside:
        for label in EVIDENCE:
            source = meeting if label.startswith("measured") and "hardware" not in extra.overrides else rows
            if len((s := _samples_of(claim, source, label, extra.overrides)).values):
                out.append(Shown(extra.label, float(np.mean(s.values)), label, tuple(s.rows["run_id"])))
                break
    return out


def _projection(claim: Claim, rows: pd.DataFrame) -> list[Shown]:
    if "evidence" not in rows.columns or claim.metric["field"] not in PROJECTED_FIELDS:
        return []
    s = _samples_of(claim, rows, "simulated")
    if not len(s.values):
        return []
    return [Shown("projection (simulated)", float(np.mean(s.values)), "simulated", tuple(s.rows["run_id"]))]


def _sweep(claim: Claim, rows: pd.DataFrame, label: str) -> tuple[tuple[str, float, bool], ...]:
    """The baseline's value at every setting it was run at (with or without the method beside it)."""
    if claim.calibrate is None:
        return ()
    m, cal = claim.metric, claim.calibrate
    rows = rows[rows["evidence"] == label]
    values = _setting_means(_baseline_side(claim, rows), m["field"])
    others = [
        (j, _setting_means(side(rows, {"method": j.method, "variant": j.variant, "model": m.get("model")}), m["field"]))
        for j in cal.jointly
    ]

    def fits(setting: str, value: float) -> bool:
        return abs(value / cal.value - 1) <= cal.within and all(
            setting in v and abs(v[setting] / j.value - 1) <= cal.within for j, v in others
        )

    return tuple((s, float(b), fits(s, b)) for s, b in values.items())


def _setting_means(rows: pd.DataFrame, field: str) -> pd.Series:
    return _per_seed(rows, field).groupby(level="setting").mean()


def _alone(claim: Claim, samples: Samples, sweep: tuple[tuple[str, float, bool], ...]) -> str:
    """What a jointly calibrated card reads at the settings its own baseline fits alone (shown, never judged)."""
    cal = claim.calibrate
    own = sorted(s for s, b, _ in sweep if cal.jointly and abs(b / cal.value - 1) <= cal.within)
    at = [(s, samples.values[np.array(samples.settings) == s]) for s in own]
    shown = [f"{v.mean():.4g} at {s}" for s, v in at if len(v)]
    return (
        f"; at the settings its own baseline fits alone it reads {', '.join(shown)} (shown, not judged)"
        if shown
        else ""
    )


def _short_variant(variant: dict) -> str:
    return f"{json.dumps(variant, sort_keys=True)} " if variant else ""


UNCALIBRATED = "; calibration: "  # the note of a card none of whose settings fits its calibration
DECIDED = ("reproduced", "exceeded", "fell short", "matches the model")


def _calibrated(claim: Claim, samples: Samples, sweep: tuple[tuple[str, float, bool], ...]) -> tuple[Samples, str, str]:
    """Keep the settings whose baseline matches the paper's absolute number (claims with `calibrate`)."""
    settings = sorted(set(samples.settings))
    if claim.calibrate is None:
        return samples, ", ".join(settings), ""
    cal, baseline = claim.calibrate, claim.metric["baseline"]
    fitting = {s for s, _, fits in sweep if fits}
    where = f"within {cal.within:.0%} of the paper's {cal.value:.4g} ({cal.source})"
    for j in cal.jointly:
        where += f" and {j.method} {_short_variant(j.variant)}within {cal.within:.0%} of {j.value:.4g} ({j.source})"
    keep = np.array([s in fitting for s in samples.settings])
    if not keep.any():
        if fitting:
            reason = f"the settings that put {baseline} {where} ({'; '.join(sorted(fitting))}) have no method run"
        else:
            closest = min(sweep, key=lambda p: abs(p[1] / cal.value - 1))
            reason = f"none of {len(sweep)} swept settings puts {baseline} {where}"
            reason += f"; closest {closest[1]:.4g} at {closest[0]}" + _alone(claim, samples, sweep)
        return samples, ", ".join(settings), f"{UNCALIBRATED}{reason}, so no setting run may decide"
    kept = Samples(
        samples.values[keep],
        samples.rows[samples.rows["setting"].isin(fitting)],
        tuple(s for s, k in zip(samples.settings, keep) if k),
        samples.baseline[keep],
    )
    note = f"; calibrated: {len(fitting)} of {len(sweep)} swept settings put {baseline} {where}"
    return kept, ", ".join(sorted(set(kept.settings))), note


def _judge(claim: Claim, samples: Samples) -> dict[str, Any]:
    if claim.kind == "quality":
        n = _n_quality(samples)
        if n < claim.seeds_needed:
            return {"verdict": "inconclusive", "reason": f"{n} seed(s) per arm; the claim needs {claim.seeds_needed}"}
        short = _too_short(claim, samples)
        if short:
            return {"verdict": "inconclusive", "reason": short}
        result = _judge_quality(claim, samples)
    else:
        if (n := _n_seeds(samples)) < claim.seeds_needed:
            return {
                "verdict": "inconclusive",
                "reason": f"{n} seed{'' if n == 1 else 's'} of {_arms(claim)}; the claim needs {claim.seeds_needed}",
            }
        result = _judge_band(claim, samples)
        if claim.derived and claim.has_paper_value:
            result = _against_the_model(claim, result)
    if not claim.has_paper_value:
        result = {**result, "verdict": "measured, no paper value"}
        result["reason"] = f"the paper gives no value to compare with; {result['reason']}"
    return result


def _against_the_model(claim: Claim, result: dict[str, Any]) -> dict[str, Any]:
    """A band around the suite's own derivation: inside it the value matches our model, which says nothing of
    the paper's numbers."""
    word = "matches the model" if result["verdict"] == "reproduced" else result["verdict"]
    reason = f"{result['reason']}; the value is the suite's own derivation ({claim.source_status})"
    return {**result, "verdict": word, "reason": reason}


def _interval(samples: Samples) -> tuple[float, float]:
    """What a band judges: one value; the 95% t-interval of the mean over seeds; the range over settings."""
    values = samples.values
    if len(set(samples.settings)) > 1:
        return float(values.min()), float(values.max())
    if len(values) < 2 or np.ptp(values) == 0:
        return float(values.mean()), float(values.mean())
    from scipy import stats  # here, not at the top: every worker imports this module (see _welch)

    half = stats.t.ppf(1 - ALPHA / 2, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return float(values.mean() - half), float(values.mean() + half)


def _judge_band(claim: Claim, samples: Samples) -> dict[str, Any]:
    low, high = _interval(samples)
    what = f"{low:.4g}" if low == high else f"[{low:.4g}, {high:.4g}] ({_interval_kind(samples)})"
    if claim.band_range is None:
        return {"verdict": "measured, no paper value", "reason": what, "interval": (low, high)}
    lo, hi = claim.band_range
    lower_better = claim.better == "lower"
    if lo <= low and high <= hi:
        word, where = "reproduced", "inside"
    elif high < lo or low > hi:
        better = (high < lo) == lower_better
        word = "exceeded" if better else "fell short"
        where = f"beyond, on the {'better' if better else 'worse'} side of,"
    else:
        word, where = "inconclusive", "across the edge of"
    band = f"[{lo:.4g}, {hi:.4g}]"
    reason = f"{what} {where} the band {band}; {claim.better} is better"
    return {"verdict": word, "reason": reason, "interval": (low, high)}


def _interval_kind(samples: Samples) -> str:
    if len(set(samples.settings)) > 1:
        return f"range over {len(set(samples.settings))} settings"
    return f"95% interval of the mean of {len(samples.values)} seeds"


def _too_short(claim: Claim, samples: Samples) -> str:
    """Why the quality runs are too short to judge, or '' when the baseline's loss has flattened or its schedule
    has run its course (`completed_schedule`)."""
    if claim.plateau is None or completed_schedule(samples.baseline_rows):
        return ""
    changes = samples.baseline_rows["val_change_last_fifth"].astype(float)
    if changes.isna().any():
        return "runs too short: the baseline has no evaluation in the last fifth of its steps to show a plateau"
    worst = float(changes.max())
    if worst > claim.plateau.value:
        return (
            f"runs too short: the baseline's validation loss still changed by {worst:.2%} over the last fifth of its "
            f"steps; the claim needs less than {claim.plateau.value:.1%} ({claim.plateau.source})"
        )
    return ""


def completed_schedule(rows: pd.DataFrame) -> bool:
    """Whether every run decayed its learning rate to the schedule's floor over its whole budget (lr_decay cosine).

    Such a run ends where its schedule ends, and its final loss is what a budget buys: the quantity compared
    when each run's cosine is set to its own length (Hoffmann et al. 2022, arXiv 2203.15556, on matching the
    cycle to the run; Hägele et al. 2024, arXiv 2405.18392, comparing complete schedules). A decayed loss is
    still falling when the budget ends, so the plateau rule, made for constant-rate runs whose end is arbitrary,
    does not apply; whether a gap holds as runs grow is read at two budgets instead (the claims' -half twins)."""
    if rows is None or rows.empty or "arm_config" not in rows:
        return False
    return all(json.loads(config).get("lr_decay") == "cosine" for config in rows["arm_config"])


def _welch(a: np.ndarray, b: np.ndarray, alternative: str) -> float:
    # scipy.stats costs seconds to import, and every training worker imports this module (a reproduction's
    # claim metrics register here when the worker discovers the reproductions), so it is imported on use
    from scipy import stats

    return float(stats.ttest_ind(a, b, equal_var=False, alternative=alternative).pvalue)


def _judge_quality(claim: Claim, samples: Samples) -> dict[str, Any]:
    """Values oriented so that lower is better; d = method - baseline, margin m.

    Non-inferiority: d < m shown at ALPHA is reproduced, d > m shown is fell short. Superiority: d < -m shown is
    reproduced, d > -m shown is fell short (not better by the margin). Equivalence (two one-sided tests):
    -m < d < m shown is reproduced, d < -m shown is exceeded, d > m shown is fell short."""
    sign = 1.0 if claim.better == "lower" else -1.0
    mine, theirs, m = sign * samples.values, sign * samples.baseline, claim.margin.value
    gap = float(np.mean(samples.values) - np.mean(samples.baseline))
    words = (
        f"{claim.metric['field']} {np.mean(samples.values):.4g} against {np.mean(samples.baseline):.4g} "
        f"(difference {gap:+.4g}, {claim.better} is better; {claim.test} margin {claim.margin})"
    )
    if np.ptp(mine) == 0 and np.ptp(theirs) == 0:
        return {"verdict": "inconclusive", "reason": f"{words}; every seed gives the same value, no test applies"}
    one_seed = min(len(samples.values), len(samples.baseline)) < 2  # no spread, no interval
    interval = None if one_seed else difference_interval(samples.values, samples.baseline)
    better = _welch(mine + m, theirs, "less")  # d < -m
    worse = _welch(mine - m, theirs, "greater")  # d > m
    if claim.test == "non-inferiority":
        ok = _welch(mine - m, theirs, "less")
        tests = {"reproduced": ok, "fell short": worse}
    elif claim.test == "superiority":
        ok = better
        tests = {"reproduced": better, "fell short": _welch(mine + m, theirs, "greater")}
    else:
        ok = max(_welch(mine + m, theirs, "greater"), _welch(mine - m, theirs, "less"))
        tests = {"reproduced": ok, "exceeded": better, "fell short": worse}
    for word, p in tests.items():
        if p < ALPHA:
            return {"verdict": word, "reason": f"{words}; Welch p = {p:.3g} < {ALPHA}", "p": p, "interval": interval}
    noise = _noise(mine, theirs, _boundaries(claim.test, m))
    reason = f"{words}; {noise} (Welch p = {ok:.3g} >= {ALPHA})"
    return {"verdict": "inconclusive", "reason": reason, "p": ok, "interval": interval}


DIFFERENCE_LEVEL = (
    1 - 2 * ALPHA
)  # each one-sided Welch test at ALPHA decides exactly where this interval clears a margin


def difference_interval(mine: np.ndarray, theirs: np.ndarray) -> tuple[float, float]:
    """The DIFFERENCE_LEVEL (90%) Welch interval of mean(mine) - mean(theirs): a quality verdict is "reproduced",
    "fell short" or "exceeded" exactly where this interval lies beyond the margins its test names, so the interval
    shown beside a verdict never contradicts it (a 95% interval may straddle a margin a 5% one-sided test cleared)."""
    from scipy import stats  # on use: see _welch

    d = float(np.mean(mine) - np.mean(theirs))
    va, vb = np.var(mine, ddof=1) / len(mine), np.var(theirs, ddof=1) / len(theirs)
    df = (va + vb) ** 2 / (va**2 / (len(mine) - 1) + vb**2 / (len(theirs) - 1))
    half = float(stats.t.ppf(1 - ALPHA, df) * np.sqrt(va + vb))
    return d - half, d + half


POWER = 0.8  # the power the seed count in an inconclusive verdict is planned for


def _boundaries(test: str, margin: float) -> tuple[float, ...]:
    """The values of d (method - baseline, lower is better) each test's decisions are about."""
    return {"non-inferiority": (margin,), "superiority": (-margin,)}.get(test, (-margin, margin))


def _noise(mine: np.ndarray, theirs: np.ndarray, boundaries: tuple[float, ...]) -> str:
    """'noise: n seeds per arm, the 90% Welch interval of d (difference_interval), the seeds per arm that would
    decide it', in commas: a report's one-line reason keeps what is not in parentheses (glance.brief), and the
    interval is the result.

    The seeds are planned, not measured: the normal approximation n = 2 s^2 (z_(1-ALPHA) + z_POWER)^2 / delta^2
    for a one-sided test, with s the arms' pooled standard deviation and delta the distance from the measured
    difference to the nearest boundary the test decides on: at that spread and difference, n seeds per arm
    show the side the difference lies on with probability POWER."""
    from scipy import stats  # on use: see _welch

    d = float(np.mean(mine) - np.mean(theirs))
    low, high = difference_interval(mine, theirs)
    n = min(len(mine), len(theirs))
    text = f"noise: {n} seeds per arm, {DIFFERENCE_LEVEL:.0%} interval of the difference [{low:+.4g}, {high:+.4g}]"
    delta = min(abs(d - b) for b in boundaries)
    pooled = float(np.sqrt((np.var(mine, ddof=1) + np.var(theirs, ddof=1)) / 2))
    if delta == 0:
        return f"{text}, the difference sits on the margin: no seed count decides it"
    z = stats.norm.ppf(1 - ALPHA) + stats.norm.ppf(POWER)
    needed = int(np.ceil(2 * (pooled * z / delta) ** 2))
    return f"{text}, about {needed} seeds per arm would decide it at {POWER:.0%} power, planned at this spread"


def _band_text(claim: Claim) -> str:
    if claim.kind == "quality":
        return f"{claim.test} test, margin {claim.margin}, {claim.seeds_needed}+ seeds per arm, Welch at {ALPHA}"
    if claim.band_range is None:
        return "no paper value"
    lo, hi = claim.paper_range
    value = f"{lo:g}" if lo == hi else f"[{lo:g}, {hi:g}]"
    return f"{value} ± {claim.band}"


def _hardware(rows: pd.DataFrame) -> str:
    return ", ".join(sorted({d if n == d else f"{d} ({n})" for d, n in zip(rows["device"], rows["device_name"])}))


def _scale(rows: pd.DataFrame) -> str:
    models = ", ".join(sorted({f"{m} ({p:,} params)" for m, p in zip(rows["model"], rows["params"])}))
    worlds = "/".join(str(w) for w in sorted(set(rows["world_size"])))
    return f"{models}; world size {worlds}; up to {int(rows['tokens'].max()):,} tokens per run"


def judge_all(claims: list[Claim], records: list[dict]) -> list[tuple[Claim, Verdict]]:
    """Every claim's verdict from the records of its reproduction (the report and `suite verdicts` share it)."""
    df = claim_frame(records)
    own = {claim.id: evaluate(claim, df) for claim in claims}
    return [(claim, _compound(claim, own)) for claim in claims]


def _compound(claim: Claim, own: dict[str, Verdict]) -> Verdict:
    """A compound claim's verdict: the weakest (STRENGTH) of its own and its halves' own verdicts, each named, from
    the commits of every half. A half outside the paper's regime puts the whole outside it."""
    if not claim.requires_claims:
        return own[claim.id]
    if missing := [p for p in claim.requires_claims if p not in own]:
        raise ClaimsError(f"{claim.id} requires the claims {missing}, which are not among the claims judged")
    mine = own[claim.id]
    halves_of = [(p, own[p]) for p in claim.requires_claims]
    parts = tuple((p, v.verdict) for p, v in halves_of)
    word = min([mine.verdict, *(v for _, v in parts)], key=STRENGTH.index)
    outside = "; ".join(f"{p}: {v.outside}" for p, v in [(claim.id, mine), *halves_of] if v.outside)
    if outside:
        word = SMALL_SCALE.get(word, word)
    # each half's word with its scale outside parentheses: a one-line reason (glance.brief) drops asides
    halves = "; ".join(f"{p}: {_word_at_scale(v)}" for p, v in halves_of)
    reason = (
        f"a compound claim, the weakest half decides: this card's half {_word_at_scale(mine)} ({mine.reason}); {halves}"
    )
    commits = [(p, v.commits) for p, v in [(claim.id, mine), *halves_of] if v.commits]
    return replace(
        mine,
        verdict=word,
        reason=reason,
        parts=parts,
        own=mine.verdict,
        outside=outside,
        at="; ".join(dict.fromkeys(v.at for v in [mine, *(v for _, v in halves_of)] if v.at)),
        paper_verdict="not testable here" if outside else word,
        commits=_joint_origin(commits),
    )


def _word_at_scale(verdict: Verdict) -> str:
    """'does not hold at small scale, at llama-tiny 3.1M, 4 workers, cpu'; the word alone in the paper's regime."""
    return f"{verdict.verdict}, at {verdict.at}" if verdict.small_scale and verdict.at else verdict.verdict


def _joint_origin(commits: list[tuple[str, str]]) -> str:
    """Where a compound claim's records come from: one text where its halves agree, else each half's."""
    said = dict.fromkeys(text for _, text in commits)
    if len(said) <= 1:
        return next(iter(said), "")
    return "; ".join(f"{part}: {text}" for part, text in commits)


def verdict_rows(records: list[dict]) -> list[dict[str, Any]]:
    """One row per claim of every reproduction the records belong to: verdict, value, band, evidence, runs."""
    from suite.judge.claims import claims_for

    by_reproduction: dict[str, list[dict]] = {}
    for record in records:
        by_reproduction.setdefault(record.get("reproduction") or "", []).append(record)
    rows = []
    for name in sorted(by_reproduction):
        for claim, verdict in judge_all(claims_for(name), by_reproduction[name]):
            rows.append(
                {
                    "reproduction": name,
                    "claim": claim.id,
                    "statement": claim.statement,
                    "paper_value": claim.paper_value,
                    "unit": claim.unit,
                    "better": claim.better,
                    **verdict.as_dict(),
                }
            )
    return rows


def trend_words(trend: dict[str, Any] | None) -> str:
    """'; TREND along AXIS' beside a word, where the card has a trend finding (suite/judge/trends.py)."""
    if not trend or not trend.get("word"):
        return ""
    return f"; {trend['word']} along {trend['axis'].replace('_', ' ')}"


def verdict_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a plain-text table for a terminal: claim, verdict, value, band, evidence, runs."""
    head = ("claim", "verdict", "value", "band or test", "evidence", "runs", "records")
    body = [
        (
            r["claim"],
            r["word_at"] + trend_words(r.get("trend")),
            "" if r["measured"] is None else f"{r['measured']:.4g}",
            r["band"],
            r["provenance"] or "",
            str(len(r["run_ids"])),
            r["commits"],
        )
        for r in rows
    ]
    caps = (60, 90, 60, 60, 60, 60, 60)  # the verdict keeps the scale it was found at beside it
    widths = [min(max(len(line[i]) for line in (head, *body)), cap) for i, cap in enumerate(caps)]
    return "\n".join(
        "  ".join(cell[:cap].ljust(w) for cell, w, cap in zip(line, widths, caps)).rstrip() for line in (head, *body)
    )
