"""What `reproduce` prints and keeps after a plan, whichever launcher ran it: the table of its records (one block
per kind of evidence), how many of its claims got each verdict, and plan-summary.txt beside the records; and, for
a dry run, the claim cards the plan would be judged against.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from suite.atomic import atomic_write
from suite.judge.claims import ClaimsError, claims_for
from suite.judge.verdicts import VERDICTS, evidence_label, judge_all
from suite.plan.plans import Plan
from suite.records import summary_row
from suite.timing import PlanTimer, render

MiB = 2**20
SUMMARY = "plan-summary.txt"  # beside the records: the table and the time breakdown of the plan's last run


def write_summary(results: Path, runs: str, timer: PlanTimer) -> str:
    """The plan's summary (its table and verdicts, then where its time went) in `results`/plan-summary.txt;
    returns the breakdown as printed."""
    text = f"where the plan's time went (wall seconds; suite/timing.py)\n{render(timer.breakdown())}"
    atomic_write(Path(results) / SUMMARY, lambda f: f.write(f"{runs}\n\n{text}\n"))
    return text


# what each kind of evidence's block of the table shows, and what its numbers are (suite.judge.verdicts.EVIDENCE)
KINDS = {
    "measured (gpu)": "runs measured on GPUs",
    "measured (cpu)": "runs measured on CPUs",
    "counted": "exact counts of instrumented algorithms",
    "estimated": "one step per rank on fake tensors (memory and bytes; no time, no loss)",
    "simulated": "suite/sim's projections of the estimates onto a cluster (time projected, not measured)",
}


def _fmt(value: float | None, scale: float = 1.0, spec: str = ".1f") -> str:
    return "-" if value is None else format(value / scale, spec)


# the columns of each block: (header, what a summary row shows there); estimates have no time or loss to show
# and projections only time, so neither shows a number a reader could take for a measurement
_SHARED = (("workers", lambda row: str(row["world_size"])),)
_MEMORY = (
    ("peak MiB/rank", lambda row: _fmt(row["peak_bytes_max"], MiB)),
    ("state MiB/rank", lambda row: _fmt(row["state_bytes_max"], MiB)),
    ("comm MiB/step/rank", lambda row: _fmt(row["comm_bytes_per_rank_step"], MiB, ".2f")),
)
_MEASURED = (
    ("seed", lambda row: str(row["seed"])),
    *_SHARED,
    ("tokens/s", lambda row: _fmt(row["tokens_per_s"], spec=",.0f")),
    ("CPU s/step", lambda row: _fmt(row["cpu_step_s_median"], spec=".3g")),
    *_MEMORY,
    ("final val loss", lambda row: _fmt(row["final_val_loss"], spec=".4f")),
)
COLUMNS = {
    "estimated": (*_SHARED, *_MEMORY),
    "simulated": (*_SHARED, ("projected tokens/s", lambda row: _fmt(row["tokens_per_s"], spec=",.0f"))),
}


def table(records: list[dict]) -> str:
    """The plan's runs, one block per kind of evidence (measured, counted, estimated, simulated: never mixed),
    one row per record, named by its arm's label as the report names it (what varies among the plan's arms)."""
    from suite.report.labels import arms, key

    labels = {k: a.label for k, a in arms(records).items()} if records else {}
    blocks = []
    for kind, what in KINDS.items():
        mine = [r for r in records if evidence_label(r["provenance"], r["env"]["device"]) == kind]
        if mine:
            rows = [(labels[key(r)], summary_row(r)) for r in mine]
            blocks.append(_block(f"{kind}, {len(mine)} record{'s' * (len(mine) != 1)}: {what}", kind, rows))
    return "\n\n".join(blocks)


def _block(title: str, kind: str, rows: list[tuple[str, dict]]) -> str:
    columns = (("evidence", lambda _: kind), *COLUMNS.get(kind, _MEASURED), ("status", lambda row: row["status"]))
    cells = [[label, *(show(row) for _, show in columns)] for label, row in rows]
    head = ["arm", *(name for name, _ in columns)]
    widths = [max(len(line[i]) for line in (head, *cells)) for i in range(len(head))]

    def line(words: list[str]) -> str:  # label and evidence left, the numbers right, each column its widest
        return "  ".join(
            [*(w.ljust(n) for w, n in zip(words[:2], widths)), *(w.rjust(n) for w, n in zip(words[2:], widths[2:]))]
        )

    header = line(head)
    return "\n".join([title, header, "-" * len(header), *(line(c) for c in cells)])


def verdict_summary(records: list[dict]) -> str:
    """How many claims of the plan's reproductions got each verdict word (`suite verdicts` shows each claim)."""
    by_reproduction: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        by_reproduction[record.get("reproduction") or ""].append(record)
    lines = []
    for name, mine in sorted(by_reproduction.items()):
        try:
            words = Counter(v.verdict for _, v in judge_all(claims_for(name), mine))
        except ClaimsError as err:
            lines.append(f"verdicts of {name}: not evaluated: {err}")
            continue
        counts = ", ".join(f"{word} {words[word]}" for word in VERDICTS if words[word]) or "no claims"
        lines.append(f"verdicts of {name}: {counts} (python -m suite verdicts RESULTS shows each claim)")
    return "\n".join(lines)


def judged_by(plan: Plan) -> list[str]:
    """The reproductions whose claim cards the plan's records would be judged against (as verdict_summary judges
    them, by each record's reproduction)."""
    names = {cfg.reproduction for cfg in [*plan.runs, *(est.cfg for est in plan.estimates)]}
    names |= {plan.name} if plan.micro else set()  # a microbenchmark record names the plan's reproduction
    return sorted(names)


def claim_cards(plan: Plan) -> str:
    """The claim cards the plan's records would be judged against, one line each: what a dry run shows of the
    verdicts to come (`reproduce` loaded them before, so they load)."""
    lines = []
    for name in judged_by(plan):
        cards = claims_for(name)
        lines.append(f"claims of {name}: {len(cards)} card{'s' * (len(cards) != 1)}")
        lines += [f"  {card.id}: {card.statement}" for card in cards]
    return "\n".join(lines)
