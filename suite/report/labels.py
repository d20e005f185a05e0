"""Arms: the configurations a page compares, with short labels and one colour each for the whole page.

A label is the method plus only what tells its runs apart on the page: the variant parameters that vary
among the method's runs, and the model, world size and protocol where those vary. Boolean switches read as
"+ac", strings as their value ("dense"), numbers as "C=0.5"; a parameter that follows from the model and
world size already named is left out. Where two configurations would still share a label, every varying
parameter is spelled key=value. The full configuration of each label is in the page's legend table.
An arm's loss curves are drawn in one panel of at most frames.PANEL_LINES arms (Arm.panel), where no other
arm has its colour.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import PurePath

from suite.arms import arm_of
from suite.report import frames

OFF = ("none", "off", "")  # string values that mean "not used": left out of a label
PRESENT = "\x00present"  # a dimension's "default" when only its presence varies
UNSET_TOO = "\x00unset"  # a switch's "default" when some runs leave it unset
LABEL_LIMIT = 40  # as figures.LABEL_LIMIT, not imported from there: figures imports frames, which imports arms
PROVENANCE_ORDER = {"measured": 0, "counted": 1, "estimated": 2, "simulated": 3}
# 15 arm colours, each at least 30 CIELAB units (ΔE76) from every verdict colour (glance.COLOURS, the badges)
# and 20 from the grey of "shown, not judged", and 25 from each other; none lighter than L* 80, so a line reads
# on white. Picked by those rules from tab10, Dark2, Set1, tab20, Paired, Accent and Trubetskoy's 20 distinct
# colours (tests/test_report_site.py checks them). More arms than this repeat them with another line style (_styles),
# never within one panel of a line figure (frames.PANEL_LINES arms at most).
PALETTE = [
    "#ff7f0e",
    "#17becf",
    "#911eb4",
    "#66a61e",
    "#e377c2",
    "#000080",
    "#a65628",
    "#f032e6",
    "#000000",
    "#7fc97f",
    "#843c39",
    "#e7298a",
    "#fdae6b",
    "#7b4173",
    "#ff9896",
]


@dataclass(frozen=True)
class Arm:
    label: str
    colour: str  # "#rrggbb"
    config: str  # the full configuration in words
    varying: dict[str, str]  # the varying parameters' values, for the runs table's columns
    dash: str = "solid"  # the line style (DASHES): a second channel where a kind has more arms than colours
    panel: tuple[int, str] = (0, "")  # the small multiple its loss curves are drawn in: its place and title (_panels)


def key(record: dict) -> str:
    """What makes two runs the same arm (suite/arms.py): the whole configuration but the seed and how the run
    was kept alive."""
    return arm_of(record)["key"]


SETTINGS = {"micro_batch": "mb", "seq_len": "seq", "grad_accum": "accum"}  # and how a label names them
VARIANTS = {"rank_fraction": "rank"}  # method parameters a label names shorter
# optimisation settings a label names where they vary on a page; the optimizer itself follows the method's
# name wherever a page has more than one ("ddp dion rank_fraction=0.25 lr=0.01")
OPTIMISATION = {"lr": "lr", "lr_decay": "decay", "warmup_steps": "warmup"}


def batch_settings(record: dict) -> dict[str, object]:
    settings, parallel = record.get("settings") or {}, record["parallel"]
    return {k: settings.get(k, parallel.get(k)) for k in SETTINGS}


def optimizer_of(record: dict) -> str | None:
    """The run's optimizer; None for a microbenchmark, which trains nothing."""
    if "micro" in record:
        return None
    return (record.get("settings") or {}).get("optimizer") or record["variant"].get("optimizer")


def _methods(records: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["method"] for r in records))


def _zip(firsts: dict[str, dict], labels: dict[str, str]) -> list[tuple[str, tuple[dict, str]]]:
    return [(k, (firsts[k], labels[k])) for k in firsts]


def _with_optimizer(label: str, record: dict) -> str:
    """The optimizer after the method, where one method runs with several on the page ("ddp dion lr=0.01")."""
    head, _, rest = label.partition(" ")
    return " ".join(w for w in (head, optimizer_of(record) or "", rest) if w)


def optimisation(record: dict) -> dict[str, object]:
    settings = record.get("settings") or {}
    return {k: settings[k] for k in OPTIMISATION if k in settings}


def _value(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _compact(value: object) -> str:
    """A number as a label shows it: three significant digits (a learning rate of 0.00023180194846605365 reads
    2.32e-04); other values as _value."""
    return f"{value:.3g}" if isinstance(value, float) else _value(value)


SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def budget(record: dict) -> str | None:
    """The run's budget in a few characters ("786k tokens", "1.2P flops"); None where the protocol has none (a
    microbenchmark, a run to a target)."""
    protocol = record["protocol"]
    amount = protocol.get("budget")
    if not amount:
        return None
    scale, prefix = next(((s, p) for s, p in SI if amount >= s), (1, ""))
    return f"{amount / scale:.3g}{prefix} {BUDGET_WORDS.get(protocol['kind'], protocol['kind'])}"


BUDGET_WORDS = {"tokens": "tok", "flops": "FLOP", "time": "s"}  # short: a label has LABEL_LIMIT characters


def plan(record: dict) -> str | None:
    """The plan run a record comes from, by its results folder less the reproduction's name ("quality" for
    results/merging-quality); None for a record read from no folder."""
    folder = PurePath(record.get("_folder") or "").name
    return folder.removeprefix(f"{record['reproduction']}-") or None


def _init(record: dict) -> str | None:
    """The checkpoint a run starts from, by its file's stem ("from base-s0"); None for a run from scratch."""
    path = (record.get("settings") or {}).get("init_from")
    return f"from {PurePath(path).stem}" if path else None


def _dims(record: dict) -> dict[str, object]:
    """Every setting a label may name. The corpus names a merge's fine-tuning task (its data is the task's) and the
    budget the plan an arm comes from (a preset's budget): arms alike but for these are not the same arm."""
    return {
        **{f"variant.{k}": v for k, v in record["variant"].items() if k != "optimizer"},
        **{f"setting.{k}": v for k, v in batch_settings(record).items()},
        **{f"setting.{k}": v for k, v in optimisation(record).items()},
        "setting.data": record["data"].get("name"),
        "setting.budget": budget(record),
        "setting.init": _init(record),
        "setting.plan": plan(record),
        "model": record["model"]["name"],
        "world size": record["parallel"]["world_size"],
        "protocol": record["protocol"]["kind"],
    }


def _shown_value(value: object) -> str:
    """A setting's value in the runs table's column of it: unset as a dash."""
    return "—" if value is None else _compact(value)


def _varies(records: list[dict], name: str) -> bool:
    return len({_value(_dims(r).get(name)) for r in records}) > 1


def _shown_as(value: object) -> str:
    """What a short label shows of a value: unset, false and "none" all show as nothing."""
    return "" if value is None or value is False or str(value).lower() in OFF else _value(value)


def _follows(records: list[dict], name: str, by: tuple[str, ...]) -> bool:
    """Whether `name` is one value for each value of `by`, as labels show them, among `records` (so naming
    `by` names it)."""
    seen: dict[str, str] = {}
    for r in records:
        dims = _dims(r)
        given, value = json.dumps([_shown_as(dims.get(b)) for b in by]), _value(dims.get(name))
        if seen.setdefault(given, value) != value:
            return False
    return True


def _common(records: list[dict], name: str) -> str:
    """The most frequent value of a dimension: a label leaves it out, as the default."""
    return Counter(_value(_dims(r).get(name)) for r in records).most_common(1)[0][0]


def _shown(records: list[dict], prune: bool = True) -> dict[str, dict[str, str]]:
    """Per method, the dimensions its labels name, each with the value a label leaves out."""
    page = ["model"] if _varies(records, "model") else []
    if any(_varies([r for r in records if r["model"]["name"] == m], "world size") for m in _models(records)):
        page.append("world size")
    shown = {}
    for method in dict.fromkeys(r["method"] for r in records):
        runs = [r for r in records if r["method"] == method]
        names = sorted({n for r in runs for n in _dims(r) if n.startswith(("variant.", "setting."))})
        names = [n for n in names if _varies(runs, n)]
        for name in sorted(names, key=lambda n: (not n.islower(), n), reverse=True) if prune else ():
            others = tuple(n for n in names if n != name) + tuple(page)
            if others and _follows(runs, name, others):
                names.remove(name)
        dims = {n: PRESENT if _one_value(runs, n) else _common(runs, n) for n in names}
        # a switch that some runs do not set: "false" then differs from unset and must be said
        dims |= {n: UNSET_TOO for n in names if _switch_sometimes_unset(runs, n)}
        dims |= {n: _common(records, n) for n in page}
        if _varies(runs, "protocol"):
            kinds = {r["protocol"]["kind"] for r in runs}
            dims["protocol"] = "tokens" if "tokens" in kinds else _common(runs, "protocol")
        shown[method] = dims
    return shown


def _switch_sometimes_unset(records: list[dict], name: str) -> bool:
    values = [_dims(r).get(name) for r in records]
    return None in values and any(v is False for v in values)


def _one_value(records: list[dict], name: str) -> bool:
    """Whether only the presence of `name` varies (one value where set): its name then says it all."""
    return len({_value(v) for r in records if (v := _dims(r).get(name)) is not None}) == 1


def _models(records: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["model"]["name"] for r in records))


PROTOCOL_WORDS = {"tokens": "token-matched", "flops": "flop-matched", "time": "time-matched"}


def _label(record: dict, names: dict[str, str], spelled: bool) -> str:
    """`names`: the dimensions to name and their default value, which a short label leaves out."""
    dims, head, parts = _dims(record), record["method"], []
    for name, default in names.items():
        value, short = dims.get(name), name.split(".", 1)[-1]
        short = {**SETTINGS, **OPTIMISATION, **VARIANTS}.get(short, short)
        usual = _value(value) == default and not spelled
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool) and name.startswith("variant.")
        if value is None or usual and not numeric and not isinstance(value, bool):
            continue
        if name == "model":  # a microbenchmark's model is a module path: its last name says which
            model = re.split(r"[:./]", str(value))[-1]
            parts.append("" if model == record["method"] else model)
        elif name == "world size":
            parts.append(f"n{value}")
        elif name == "protocol":  # a budget named in its unit ("12.5T FLOP") names its protocol too
            parts.append("" if budget(record) in parts else PROTOCOL_WORDS.get(str(value), f"to {value}"))
        elif spelled:
            parts.append(f"{short}={_compact(value)}")
        elif default == PRESENT and not isinstance(value, (bool, str)):
            parts.append(short)
        elif isinstance(value, bool):
            head += f"+{short}" if value else ""
            parts.append("" if value or default != UNSET_TOO else f"no {short}")
        elif isinstance(value, str):  # not the default: "none" against another says what is off ("no quantize")
            parts.append(f"no {short}" if value.lower() in OFF else value)
        else:
            parts.append(f"{short}={_compact(value)}")
    return " ".join([head, *[p for p in parts if p]])


def describe(record: dict) -> str:
    """The full configuration in words, for the legend table."""
    variant = " ".join(f"{k}={_value(v)}" for k, v in sorted(record["variant"].items()))
    batch = batch_settings(record)
    tokens = f" x {batch['seq_len']} tokens" if batch["seq_len"] else ""
    return (
        f"{record['method']}{' ' + variant if variant else ''}; {record['model']['name']} on "
        f"{record['parallel']['world_size']} ranks; micro-batch {batch['micro_batch']}{tokens}, "
        f"accumulation {batch['grad_accum']}; equal {record['protocol']['kind']}"
    )


DASHES = ("solid", "dashed", "dotted", "dashdot")  # the second channel, one per optimizer (matplotlib's names)


def _group_rank(record: dict, groups: dict[str, list], kinds: Counter) -> int:
    """Where an arm's optimizer comes among its kind's, where the kind needs a second channel (else 0: the
    arms keep the order of the page)."""
    provenance = record["provenance"]
    return 0 if kinds[provenance] <= len(PALETTE) else groups[provenance].index(optimizer_of(record))


def _styles(firsts: list[dict], panels: list[object] | None = None) -> list[tuple[str, str]]:
    """A colour and a line style per arm, counted afresh for each kind of evidence (each kind has its own
    figures); an arm keeps both in every figure of the page. Up to len(PALETTE) arms of a kind get a colour
    each, all solid. Beyond that the palette repeats, never another hue (which could come near a verdict's):
    arms are counted optimizer by optimizer and each optimizer gets its own line style, so two arms of one
    colour are 15 apart in that count, hence of different optimizers and styles wherever an optimizer has at
    most 15 arms; more than that in one optimizer moves on to the next style. Arms of one panel (`panels`: each
    arm's, None for an arm in none) never share a colour: an arm whose colour its panel has takes the next free one."""
    kinds = Counter(r["provenance"] for r in firsts)
    groups: dict[str, list[str | None]] = {}
    for r in firsts:
        groups.setdefault(r["provenance"], [])
        if optimizer_of(r) not in groups[r["provenance"]]:
            groups[r["provenance"]].append(optimizer_of(r))
    order = sorted(range(len(firsts)), key=lambda i: _group_rank(firsts[i], groups, kinds))
    seen: Counter = Counter()
    within: Counter = Counter()
    taken: dict[object, set[str]] = {}
    out: list[tuple[str, str]] = [("", "")] * len(firsts)
    for i in order:
        r, provenance = firsts[i], firsts[i]["provenance"]
        group = (provenance, optimizer_of(r))
        n = seen[provenance]
        dash = _group_rank(r, groups, kinds) + within[group] // len(PALETTE)
        panel = None if panels is None else panels[i]
        used = taken.setdefault(panel, set()) if panel is not None else set()
        colour = next(c for k in range(len(PALETTE)) if (c := PALETTE[(n + k) % len(PALETTE)]) not in used)
        used.add(colour)
        out[i] = (colour, DASHES[dash % len(DASHES)])
        seen[provenance] += 1
        within[group] += 1
    return out


def _panels(firsts: list[dict], curved: list[bool]) -> list[tuple[str, int, str] | None]:
    """Each arm's panel in its kind's loss figure, frames.panels over the kind's arms with a curve (`curved`), as
    (kind, place, title); None for an arm without a curve."""
    out: list[tuple[str, int, str] | None] = [None] * len(firsts)
    for provenance in dict.fromkeys(r["provenance"] for r in firsts):
        drawn = [i for i, r in enumerate(firsts) if r["provenance"] == provenance and curved[i]]
        for n, (title, members) in enumerate(frames.panels([frames.traits(firsts[i]) for i in drawn])):
            for m in members:
                out[drawn[m]] = (provenance, n, title)
    return out


def arms(records: list[dict]) -> dict[str, Arm]:
    """Every arm of the page by key(record): measured before estimated before simulated, baselines first
    within each, then in the order the records list them."""
    ordered = sorted(records, key=lambda r: (PROVENANCE_ORDER.get(r["provenance"], 9), not r["baseline"]))
    firsts = {key(r): r for r in reversed(ordered)}
    firsts = {k: firsts[k] for k in dict.fromkeys(key(r) for r in ordered)}
    for prune, spelled in ((True, False), (False, False), (False, True)):  # the shortest labels that tell apart
        shown = _shown(records, prune)
        labels = {k: _label(r, shown[r["method"]], spelled) for k, r in firsts.items()}
        several = {m for m in _methods(records) if len({optimizer_of(r) for r in records if r["method"] == m}) > 1}
        labels = {
            k: _with_optimizer(label, r) if r["method"] in several else label for k, (r, label) in _zip(firsts, labels)
        }
        if len(set(labels.values())) == len(labels):
            break
    else:  # something outside the dimensions differs: number them
        labels = {k: f"{label} #{i}" for i, (k, label) in enumerate(labels.items(), 1)}
    labels = {  # figures show LABEL_LIMIT characters: a longer label is cut and numbered, so it stays unique
        k: label if len(label) <= LABEL_LIMIT else f"{label[: LABEL_LIMIT - 5].rstrip()} #{i}"
        for i, (k, label) in enumerate(labels.items(), 1)
    }
    curved = {key(r) for r in records if r.get("curve")}
    panels = _panels(list(firsts.values()), [k in curved for k in firsts])
    styles = _styles(list(firsts.values()), panels)
    names = {n for r in records for n in _dims(r) if n.startswith(("variant.", "setting."))}
    columns = sorted(n for n in names if _varies(records, n))  # each name once: per record, it was quadratic
    return {
        k: Arm(
            labels[k],
            colour,
            describe(r),
            {c.split(".", 1)[1]: _shown_value(_dims(r).get(c)) for c in columns},
            dash,
            (panel[1], panel[2]) if panel else (0, ""),
        )
        for (k, r), (colour, dash), panel in zip(firsts.items(), styles, panels)
    }
