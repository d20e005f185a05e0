"""What each page shows: the template contexts of the index, a reproduction and a run.

Contexts hold raw values (strings from records included); the templates escape them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from suite.judge import trends
from suite.judge.claims import Claim
from suite.judge.verdicts import (
    EVIDENCE,
    PROJECTED_FIELDS,
    Verdict,
    claim_frame,
    evidence_label,
    origin,
    trend_words,
)
from suite.records import to_dataframe
from suite.report import figures, frames, glance, summary, tables
from suite.report import labels as armlib
from suite.report.estimates import estimates_beside, unmeasured_table
from suite.report.figures import Chart
from suite.report.tables import Cell, Table, css_token, fmt_bytes, fmt_number


@dataclass
class Reproduction:
    """A reproduction's runs and the verdicts on its claims (or why they could not be evaluated), with its
    arms (labels and colours) and its claims-at-a-glance figures, drawn once for its page and the index."""

    name: str
    records: list[dict]
    verdicts: list[tuple[Claim, Verdict]]
    claims_error: str | None
    href: str  # relative to the site root
    arms: dict[str, armlib.Arm] = field(default_factory=dict)
    frame: pd.DataFrame = field(default_factory=pd.DataFrame)
    glance: list[Chart] = field(default_factory=list)
    unsteady: str | None = None  # the warning that the load moved repeats' tokens/s, shown before the claims

    def __post_init__(self) -> None:
        self.arms = armlib.arms(self.records) if self.records else {}
        self.frame = claim_frame(self.records) if self.records else pd.DataFrame()
        self.glance = glance.summary(self.verdicts, self.frame)
        self.unsteady = unsteady_warning(frames.unsteady(*_measured_runs(self))) if self.records else None

    def label(self, record: dict) -> str:
        return self.arms[armlib.key(record)].label

    @property
    def colours(self) -> dict[str, str]:
        return {a.label: a.colour for a in self.arms.values()}

    @property
    def dashes(self) -> dict[str, str]:
        return {a.label: a.dash for a in self.arms.values()}

    @property
    def panels(self) -> dict[str, tuple[int, str]]:
        return {a.label: a.panel for a in self.arms.values()}

    @property
    def counts(self) -> list[tuple[str, int]]:
        return glance.counts(self.verdicts)

    @property
    def origin(self) -> str:
        """Where this page's records come from: one clean commit, or what keeps them from it; with records of
        several results folders (one plan run each), the same per folder."""
        folders: dict[str, list[dict]] = {}
        for r in self.records:
            folders.setdefault(Path(r.get("_folder", "")).name, []).append(r)
        said = {name: _origin(rs) for name, rs in sorted(folders.items())}
        if len(said) == 1:
            return next(iter(said.values()))
        if all(text.startswith("one clean commit") for text in said.values()):
            return "one clean commit per plan run: " + ", ".join(f"{n} {t.split()[-1]}" for n, t in said.items())
        return "; ".join(f"{n}: {t}" for n, t in said.items())


def _origin(records: list[dict]) -> str:
    return origin([r["env"].get("git_sha") for r in records], [r["env"].get("git_dirty") for r in records])


def claim_rows(repro: Reproduction, claim_href: str) -> Table:
    """Claims at a glance as text, linking to the cards at `claim_href`: each claim in plain words, the paper's
    value and ours with their units, which direction is better, the verdict and its reason in one line."""
    table = Table(["claim", "in plain words", "paper", "ours", "better", "verdict", "why"], css="claims")
    for claim, verdict in repro.verdicts:
        table.rows.append(
            [
                Cell(claim.id, claim.id, f"{claim_href}#claim-{css_token(claim.id)}"),
                tables.text(glance.plain_words(claim.statement)),
                tables.text(_paper(claim)),
                Cell(
                    _ours(verdict, claim.unit),
                    "" if verdict.measured is None else verdict.measured,
                    badge=verdict.provenance,
                ),
                tables.text(f"{claim.better} {'↓' if claim.better == 'lower' else '↑'}"),
                Cell(verdict.word_at + trend_words(verdict.trend), verdict.verdict, badge=verdict.verdict),
                tables.text(glance.brief(verdict.reason)),
            ]
        )
    return table


def _ours(verdict: Verdict, unit: str) -> str:
    """Our value, with the baseline's mean where a quality test compared two arms; where nothing decided, the
    first value shown beside (another device's runtime ratio), said to be not judged."""
    if verdict.measured is None and verdict.shown:
        return f"— ({fmt_number(verdict.shown[0].value)} {unit} beside, not judged)"
    if verdict.baseline is None:
        return _measured(verdict, unit)
    return f"{_measured(verdict, unit)} against {fmt_number(verdict.baseline)}"


def hardware(records: list[dict]) -> str:
    """What the measured runs ran on, by device and its name ("cpu (AMD EPYC)", "cuda (NVIDIA H200)"): a folder's
    records come from one kind of machine, so its time ratios never divide one machine's time by another's."""
    found = {
        f"{r['env']['device']} ({r['env'].get('device_name') or '?'})" for r in records if r["provenance"] == "measured"
    }
    return ", ".join(sorted(found)) or "no measured runs"


def index_context(repros: list[Reproduction], skipped: list[tuple[str, str]], n_records: int) -> dict:
    judged = [r.name for r in repros if r.verdicts] or [r.name for r in repros]
    on = hardware([rec for r in repros for rec in r.records])
    return {
        # a folder's index names what it judges and on what hardware
        "title": f"Reproduction report: {', '.join(judged) or 'no runs'}, measured on {on}",
        "root": "",
        "n_records": n_records,
        "skipped": skipped,
        "reproductions": [
            {
                "name": r.name,
                "href": r.href,
                "runs": len(r.records),
                "claims_error": r.claims_error,
                "methods": sorted({rec["method"] for rec in r.records}),
                "evidence": [e for e in EVIDENCE if e in {_label(rec) for rec in r.records}],
                "counts": r.counts,
                "origin": origin_badge(r.origin),
                "glance": r.glance,
                "unsteady": r.unsteady,
                "claims": claim_rows(r, r.href) if r.verdicts else None,
                "summary": summary.summarize(r.verdicts, r.href),
                # a folder that judges claims shows them; one that judges none (the baselines) its comparison
                "comparison": None if any(x.verdicts for x in repros) else comparison(r),
            }
            for r in repros
        ],
    }


def reproduction_context(repro: Reproduction, run_hrefs: dict[int, str], records: list[dict]) -> dict:
    """Claims first (at a glance, the table, the cards), then what was run (the arms and the runs), then
    the measurements behind them (one section per kind of evidence, the estimates beside measurements), then
    environments. `records` are all the site's runs (an estimate's measurement may belong to another
    reproduction); `run_hrefs` link each of them."""
    by_id = {rec["run_id"]: run_hrefs[id(rec)] for rec in repro.records}
    labels = {rec["run_id"]: repro.label(rec) for rec in repro.records}
    order = {key: i for i, key in enumerate(repro.arms)}
    ordered = sorted(repro.records, key=lambda r: (order[armlib.key(r)], r["env"]["seed"]))
    calibrations = calibration_tables(repro.verdicts)
    tables_of = {card: c["anchor"] for c in calibrations for card in c["cards"]}
    sections = []
    for label in EVIDENCE:
        subset = [rec for rec in ordered if _label(rec) == label]
        if subset:
            sections.append(_section(repro, label, subset, [run_hrefs[id(rec)] for rec in subset]))
    return {
        "title": f"Reproduction: {repro.name}",
        "root": "../",
        "runs": len(repro.records),
        "claims_error": repro.claims_error,
        "counts": repro.counts,
        "origin": origin_badge(repro.origin),
        "summary": summary.summarize(repro.verdicts),
        "numbers": arm_numbers(repro),
        "unsteady": repro.unsteady,
        "glance": repro.glance,
        "claims": claim_rows(repro, ""),
        "cards": [_card(c, v, by_id, repro, labels, tables_of) for c, v in repro.verdicts],
        "calibrations": calibrations,
        "arms": arm_table(repro),
        "sections": sections,
        "estimates": estimates_beside(repro.records, records, run_hrefs),
        "unmeasured": unmeasured_table(repro.records, records, run_hrefs, repro.label),
        "environment": tables.env_table(repro.records),
    }


def arm_numbers(repro: Reproduction) -> list[tuple[str, Table]]:
    """Per kind of evidence, each arm's absolute numbers over its complete runs (tables.NUMBERS), never pooled
    across kinds (_numbers_of). Kinds whose records have none of these numbers (microbenchmarks keep theirs
    per shape, on their run pages) have no table."""
    order = {key: i for i, key in enumerate(repro.arms)}
    done = sorted((r for r in repro.records if r["status"] == "complete"), key=lambda r: order[armlib.key(r)])
    out = []
    for label in EVIDENCE:
        subset = [r for r in done if _label(r) == label]
        if not subset:
            continue
        table = tables.numbers_table(subset, [repro.label(r) for r in subset], repro.colours, _numbers_of(label))
        if table.rows:
            out.append((label, table))
    return out


UNTIMED = ("tokens_per_s", "cpu_step_s_median", "mfu", "final_val_loss")  # what fake tensors cannot measure


def _numbers_of(label: str) -> tuple[str, ...]:
    """The NUMBERS a kind of evidence has: an estimate no time and no loss, a projection its time only."""
    fields = tuple(f for _, f, _ in tables.NUMBERS)
    if label == "estimated":
        return tuple(f for f in fields if f not in UNTIMED)
    return tuple(f for f in fields if f in PROJECTED_FIELDS) if label == "simulated" else fields


def arm_table(repro: Reproduction) -> Table:
    """The legend of every figure on the page: each arm's label and colour, its full configuration, its runs."""
    table = Table(["arm", "configuration", "runs", "evidence"], css="arms")
    for key, arm in repro.arms.items():
        runs = [r for r in repro.records if armlib.key(r) == key]
        evidence = ", ".join(e for e in EVIDENCE if e in {_label(r) for r in runs})
        table.rows.append(
            [
                Cell(arm.label, arm.label, colour=arm.colour, dash=arm.dash),
                tables.text(arm.config),
                tables.number(len(runs)),
                tables.text(evidence),
            ]
        )
    return table


def comparison(repro: Reproduction) -> dict | None:
    """What a folder index shows of a reproduction with no claims (the baselines): the numbers per arm that its
    `reproduce` prints, and the measured runs' memory, bytes and speed drawn; None where it has claims."""
    if repro.verdicts or not repro.records:
        return None
    measured = [r for r in repro.records if r["provenance"] == "measured" and r["status"] == "complete"]
    charts = []
    if measured:
        names = [repro.label(r) for r in measured]
        label = _label(measured[0])
        ratios, reference = frames.throughput_ratios(measured, names)
        unsteady = frames.unsteady(measured, names)
        charts = [
            figures.memory_bars(frames.memory(measured, names), label),
            figures.comm_bytes(frames.comm(measured, names), label),
            figures.throughput(ratios, reference, label, repro.colours, unsteady) if reference else None,
        ]
    return {"numbers": arm_numbers(repro), "charts": [c for c in charts if c is not None]}


def _section(repro: Reproduction, label: str, records: list[dict], hrefs: list[str]) -> dict:
    names = [repro.label(r) for r in records]
    colours = repro.colours
    ratios, reference = frames.throughput_ratios(records, names)
    unsteady = frames.unsteady(records, names)
    # a simulated record projects time only: its memory and bytes are its estimate's, drawn in that section
    projection = label == "simulated"
    merge = label == "estimated"  # no seed noise: estimates alike to 1% are one setting's numbers
    curves = frames.curves(records, names)
    charts = [
        None if projection else figures.loss_curves(curves, label, colours, repro.dashes, repro.panels),
        None if projection else figures.lr_sweep(frames.lr_sweep(records, names)),
        None if projection else figures.memory_bars(frames.memory(records, names), label, merge),
        None if projection else figures.comm_bytes(frames.comm(records, names), label, merge),
        figures.throughput(ratios, reference, label, colours, unsteady) if reference else None,
    ]
    return {
        "label": label,
        "runs": tables.runs_table(records, to_dataframe(records), hrefs, names, repro),
        "charts": [c for c in charts if c is not None],
        "reference": reference,
        "throughput": tables.throughput_table(ratios, label) if not ratios.empty else None,
        "unsteady": unsteady_warning(unsteady),
    }


def _measured_runs(repro: Reproduction) -> tuple[list[dict], list[str]]:
    """The measured runs and their arms' labels: a projection's tokens/s is computed, not timed."""
    runs = [r for r in repro.records if r["provenance"] == "measured"]
    return runs, [repro.label(r) for r in runs]


def unsteady_warning(unsteady: pd.Series) -> str | None:
    """A sentence naming the arms whose repeats differ in tokens/s beyond the gate's tolerance, or None."""
    if unsteady.empty:
        return None
    arms = ", ".join(f"{arm} ({spread:.0%})" for arm, spread in unsteady.items())
    return (
        f"Repeats of one arm differ in tokens/s by more than {frames.REPEAT_TOLERANCE:.0%}, the throughput gate's "
        f"tolerance for a wall-time measure: {arms}. The machine's load changed between them, so wall-time "
        "ratios of these arms measure the machine; compare CPU s/step instead."
    )


def calibration_key(claim: Claim) -> tuple:
    """What identifies a paper table's calibration: the model and every absolute value calibrated jointly (the
    cards of one table list the same values, each with its own baseline first)."""
    cal = claim.calibrate
    return (claim.metric.get("model"), tuple(sorted([cal.value, *(j.value for j in cal.jointly)])))


# the fields a calibration reads, as its figure's axis names them
CALIBRATED_QUANTITY = {
    "peak_bytes_max": "peak per device",
    "state_bytes_max": "model state per device",
    "comm_bytes_per_rank_step": "payload per rank per step",
    "comm_wire_bytes_per_rank_step": "wire bytes per rank per step",
}


def calibration_tables(verdicts: list[tuple[Claim, Verdict]]) -> list[dict]:
    """One calibration figure per paper table, not a copy per card: the cards calibrated on the same values
    share one sweep (a panel per baseline), and each card links to it."""
    groups: dict[tuple, list[tuple[Claim, Verdict]]] = {}
    for claim, verdict in verdicts:
        if claim.calibrate is not None and verdict.calibration:
            groups.setdefault(calibration_key(claim), []).append((claim, verdict))
    out = []
    for n, members in enumerate(groups.values(), 1):
        sweeps: dict[str, figures.Sweep] = {}
        for claim, verdict in members:
            baseline = claim.metric.get("baseline", "")
            quantity = CALIBRATED_QUANTITY.get(claim.metric["field"], claim.metric["field"])
            cal = claim.calibrate
            sweeps.setdefault(baseline, figures.Sweep(baseline, cal.value, cal.within, verdict.calibration, quantity))
        cards = [claim.id for claim, _ in members]
        chart = figures.calibration_sweep(list(sweeps.values()), cards)
        finding = f"{figures.sweep_finding(list(sweeps.values()))} (cards {', '.join(cards)})"
        out.append({"anchor": f"calibration-{n}", "chart": chart, "cards": cards, "finding": finding})
    return out


def _card(
    claim: Claim, verdict: Verdict, run_hrefs: dict[str, str], repro: Reproduction, labels: dict, tables_of: dict
) -> dict:
    spec = ", ".join(
        f"{k}={json.dumps(v) if isinstance(v, dict) else v}" for k, v in claim.metric.items() if k != "name"
    )
    figure = glance.claim_runs(claim, verdict, repro.frame, labels, repro.colours)
    return {
        "id": claim.id,
        "statement": claim.statement,
        "verdict": verdict.verdict,
        "at": verdict.at if verdict.small_scale else "",
        "regime": verdict.regime,
        "trend": trends.describe(verdict.trend, verdict.trend["unit"]) if verdict.trend else "",
        "trend_figure": figures.trend(verdict.trend, verdict.trend["unit"]) if verdict.trend else None,
        "outside": verdict.outside,
        "what_would_test": claim.what_would_test,
        "reason": verdict.reason,
        "brief": glance.brief(verdict.reason),
        "details": _card_details(figure is not None, glance.brief(verdict.reason) != verdict.reason, verdict.setting),
        "provenance": verdict.provenance,
        "paper": _paper(claim),
        "source": str(claim.source),
        "status": claim.source_status,
        "status_css": "status-unverified" if "unverified" in claim.source_status else "status-other",
        "derived": claim.derived,
        "measured": _measured(verdict, claim.unit),
        "baseline": None if verdict.baseline is None else f"{fmt_number(verdict.baseline)} {claim.unit}".strip(),
        "band": verdict.band,
        "figure": figure,
        "calibration": tables_of.get(claim.id),
        "setting": verdict.setting,
        "shown": [(s.label, f"{fmt_number(s.value)} {claim.unit}".strip(), s.evidence) for s in verdict.shown],
        "ratio": "—" if verdict.ratio_to_paper is None else f"{verdict.ratio_to_paper:.3g}x the paper's value",
        "metric": f"{claim.metric['name']}({spec})",
        "protocol": f"equal {claim.protocol}" if claim.protocol else "any",
        "hardware": verdict.hardware or "—",
        "scale": verdict.scale or "—",
        "command": claim.command,
        "runs": [(run_hrefs[r], r) for r in dict.fromkeys(verdict.run_ids) if r in run_hrefs],
        "parts": [(f"#claim-{css_token(part)}", part, word) for part, word in verdict.parts],
        "commits": origin_badge(verdict.commits) if verdict.commits else None,
    }


def _card_details(figure: bool, longer_reason: bool, setting: str | None) -> str:
    """What a card's folded part holds, said on its summary line."""
    held = [
        *(["the figure of its runs"] if figure else []),
        *(["the whole reason"] if longer_reason else []),
        *(["the setting"] if setting else []),
        "metric, protocol, hardware, scale, command and runs",
    ]
    return "; ".join(held)


def _paper(claim: Claim) -> str:
    """The paper's value with its unit; a value the suite derived itself says so (Claim.derived): the card
    checks our formula, not the paper."""
    if claim.paper_value is None:
        return "no paper value"
    if claim.derived:
        return f"{_paper_value(claim)} (our formula, not the paper's)"
    return _paper_value(claim)


def _paper_value(claim: Claim) -> str:
    value = claim.paper_value
    if isinstance(value, tuple):
        value = f"{fmt_number(value[0])} to {fmt_number(value[1])}"
    elif isinstance(value, float):
        value = fmt_number(value)
    return f"{value} {claim.unit}".strip()


def _measured(verdict: Verdict, unit: str) -> str:
    if verdict.measured is None and verdict.floor is not None:
        return f"> {fmt_number(verdict.floor)} {unit} ({verdict.n_seeds} seeds, a lower bound)"
    if verdict.measured is None:
        return "—"
    noise = 1e-9 * max(1.0, abs(verdict.measured))  # a spread of float rounding between equal seeds is 0
    spread = "" if verdict.spread is None else f" ± {fmt_number(0 if verdict.spread < noise else verdict.spread)}"
    seeds = f"{verdict.n_seeds} seed{'s' if verdict.n_seeds != 1 else ''}"
    return f"{fmt_number(verdict.measured)}{spread} {unit} ({seeds})"


def origin_badge(text: str) -> tuple[str, str]:
    """An origin (suite.judge.verdicts.origin) and its badge style: records of one clean commit, or a warning."""
    return text, "records-clean" if text.startswith("one clean commit") else "records-mixed"


def _label(record: dict) -> str:
    return evidence_label(record["provenance"], record["env"]["device"])


def run_context(record: dict, reproduction_href: str | None, record_href: str | None = None) -> dict:
    """One run: what it ran under (machine load, command), its loss curve drawn, its numbers, then every field
    of the record as plain rows (nested sections flattened, never a raw dict), memory per rank and the ledger.
    The whole record, loss points included, is its file at `record_href` (a link relative to the page); a record
    with no file (held in memory) is written into the page instead."""
    overview = {k: record.get(k) for k in RUN_FIELDS} | {"file": record.get("_path")}
    evals = {
        k: f"{fmt_number(v.get('value'))} ± {fmt_number(v.get('stderr'))}" if isinstance(v, dict) else v
        for k, v in record["evals"].items()
    }
    model = {"name": record["model"]["name"], "params": record["model"]["params"], **record["model"].get("config", {})}
    fields = [
        ("Run", overview),
        ("Variant", record["variant"]),
        ("Model", model),
        ("Data", record["data"]),
        ("Parallelism", record["parallel"]),
        ("Protocol", record["protocol"]),
        ("Totals", record["totals"]),
        ("Throughput", record["throughput"]),
        ("Timing", record.get("timing") or {}),
        ("Evaluations", evals),
        ("Environment", record["env"]),
    ]
    charts = [
        figures.run_losses(record["curve"], _label(record)),
        figures.memory_per_rank(record["memory"]["per_rank"], _label(record)),
    ]
    return {
        "title": f"Run: {record['run_id']}",
        "root": "../",
        "record": record,
        "label": _label(record),
        "load": machine_load(record),
        "reproduction": record["reproduction"],
        "reproduction_href": reproduction_href,
        "fields": [(title, tables.mapping_table(tables.flatten(values))) for title, values in fields if values],
        "charts": [c for c in charts if c is not None],
        "sections": _run_sections(record),
        "points": len(record["curve"]),
        "record_href": record_href,
        "raw": "" if record_href else json.dumps({k: v for k, v in record.items() if not k.startswith("_")}, indent=1),
    }


RUN_FIELDS = ("run_id", "status", "error", "reproduction", "method", "baseline", "provenance", "created", "command")
MEMORY_COLUMNS = ["rank", "peak_bytes", "params", "grads", "optimizer", "activations", "other", "rss_peak_bytes"]


def machine_load(record: dict) -> str:
    """The machine's 1-minute load average at set-up and at the record: every time on the page was measured
    under it (a shared machine's waiting inflates wall time, not CPU time)."""
    load = (record.get("timing") or {}).get("load_average")
    if not load:
        return "not recorded (a record written before the load was kept)"
    return f"{load[0]:.2f} at set-up, {load[1]:.2f} at the record (1-minute load average)"


def _run_sections(record: dict) -> list[tuple[str, str, Table]]:
    """(heading, how it was measured, table): the method's description is a note under its heading. The loss
    points have no table: the figure draws them and the record holds them."""
    memory, comm = record["memory"], record["comm"]
    return [
        (
            "Memory per rank",
            memory["method"],
            tables.records_table(
                _merged_ranks(memory["per_rank"], MEMORY_COLUMNS[1:]),
                ["ranks", *MEMORY_COLUMNS[1:]],
                {c: fmt_bytes for c in MEMORY_COLUMNS[1:]},
            ),
        ),
        (f"Communication ledger ({comm.get('steps')} steps)", comm["method"], _ledger(record)),
    ]


def _merged_ranks(rows: list[dict], columns: list[str]) -> list[dict]:
    """Rows of ranks (each with "rank"), ranks whose `columns` are all equal in one row named by its ranks ("0-7"):
    the same numbers, an eighth of the page on eight ranks."""
    ranks: dict[tuple, list[int]] = {}
    for row in rows:
        ranks.setdefault(tuple(row.get(c) for c in columns), []).append(row["rank"])
    return [{"ranks": rank_ranges(mine), **dict(zip(columns, values))} for values, mine in ranks.items()]


def _ledger(record: dict) -> Table:
    """The ledger a row per operation and the ranks that made it alike."""
    steps = record["comm"].get("steps") or 0
    columns = ["op", "group", "tier", "group_size", "count", "bytes", "wire_bytes"]
    ops = [{"rank": r["rank"], **op} for r in record["comm"]["per_rank"] for op in r["ops"]]
    rows = [{**row, "bytes/step": row["bytes"] / steps if steps else None} for row in _merged_ranks(ops, columns)]
    formats = {"bytes": fmt_bytes, "wire_bytes": fmt_bytes, "bytes/step": fmt_bytes}
    return tables.records_table(rows, ["ranks", *columns, "bytes/step"], formats)


def rank_ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 3, 6] as "0-3, 6"."""
    spans: list[list[int]] = []
    for rank in sorted(ranks):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
