"""The gate's false-alarm rate and power, measured: the bench run again and again, unchanged and slowed on purpose.

    python -m benchmarks.false_alarms run --label unchanged --runs 10 [--slowdown SPEC] [--lock FILE] [-- PYTEST_ARGS]
    python -m benchmarks.false_alarms analyze [--write-reference results/bench/reference.json --reason TEXT]

`run` repeats the CI bench (`pytest benchmarks/test_throughput.py -m bench`, one round per pair unless the
pytest arguments say otherwise), each run under `flock FILE` when given, with BENCH_SLOWDOWN=SPEC for the
injected slowdowns (benchmarks/slowdown.py), and appends each run, compacted, to results/bench/false_alarms.json
with the load average around it and the command that made it.

`add` records a bench JSON made elsewhere, such as a full run of every pair (label `full`: not judged, merged
into the reference with the unchanged runs for the pairs they do not cover).

`analyze` judges every run with the gate (benchmarks/gate.py). An unchanged run is judged against a reference
made from the other unchanged runs (leave one out: the median of their rounds), so no run is judged against
itself; a slowed run against the reference made from all unchanged runs. Per measure (counter, wall_ratio,
cpu_ratio, cpu_units, wall_units): the false-alarm rate is the share of unchanged runs in which any of its
checks failed; the detection rate is the share of slowed runs in which a check of a slowed arm (or of a pair
whose method alone was slowed) failed. The measures with no false alarm and full detection are the ones
benchmarks/gate.py may block on (BLOCKING).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import gate
from benchmarks.pairs import PAIRS
from benchmarks.slowdown import parse

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "bench" / "false_alarms.json"
KINDS = ("counter", "wall_ratio", "cpu_ratio", "cpu_units", "wall_units", "loop_units")
UNCHANGED, FULL = "unchanged", "full"  # labels: false-alarm runs of the short pairs; full runs for the reference
LAUNCH_FIELDS = (
    "config",
    "reused",
    "tokens_per_s",
    "cpu_tokens_per_s",
    "step_s",
    "cpu_step_s",
    "cpu_step_s_per_rank",
    "cpu_units",
    "wall_units",
    "calibration",
    "calibration_spread",
    "rss",
    "losses",
    "launch_s",
    "slowdown",
)


def _digest(counters: dict) -> str:
    return hashlib.sha256(json.dumps(counters, sort_keys=True).encode()).hexdigest()[:12]


def compact(bench: dict, table: dict[str, dict]) -> dict:
    """The parts of one bench JSON the gate reads; each distinct set of counters goes once into `table`."""

    def launch(side: dict) -> dict:
        out = {k: side.get(k) for k in LAUNCH_FIELDS if k in side}
        digest = _digest(side.get("counters", {}))
        table.setdefault(digest, side.get("counters", {}))
        return {**out, "counters": digest}

    pairs = {}
    for b in bench["benchmarks"]:
        info = b.get("extra_info", {})
        if "pair" in info:
            rounds = [
                {
                    "ratio": r["ratio"],
                    "cpu_ratio": r.get("cpu_ratio"),
                    "baseline": launch(r["baseline"]),
                    "method": launch(r["method"]),
                }
                for r in info["rounds"]
            ]
            pairs[info["pair"]] = {k: info.get(k) for k in ("ratio", "cpu_ratio", "spread", "cpu_spread")} | {
                "rounds": rounds
            }
    return {
        "datetime": bench.get("datetime"),
        "machine_info": {k: bench.get("machine_info", {}).get(k) for k in ("cpu", gate.ISA)},
        "bench_pairs": bench["bench_pairs"],
        "pairs": pairs,
    }


def expand(run: dict, table: dict[str, dict]) -> dict:
    """A compacted run as the benchmark JSON the gate reads."""

    def launch(side: dict) -> dict:
        return {**side, "counters": table[side["counters"]]}

    benchmarks = []
    for name, summary in run["pairs"].items():
        rounds = [{**r, "baseline": launch(r["baseline"]), "method": launch(r["method"])} for r in summary["rounds"]]
        benchmarks.append({"extra_info": {**summary, "pair": name, "rounds": rounds}})
    return {**run, "benchmarks": benchmarks}


def merged(runs: list[dict]) -> dict:
    """One benchmark JSON holding every round of every run: its ratios are the medians over all their rounds."""
    import statistics

    pairs: dict[str, list] = {}
    for run in runs:
        for b in run["benchmarks"]:
            pairs.setdefault(b["extra_info"]["pair"], []).extend(b["extra_info"]["rounds"])
    benchmarks = []
    for name, rounds in pairs.items():
        cpu = [r["cpu_ratio"] for r in rounds if r.get("cpu_ratio") is not None]
        ratio = statistics.median(r["ratio"] for r in rounds)
        info = {"pair": name, "ratio": ratio, "cpu_ratio": statistics.median(cpu) if cpu else None, "rounds": rounds}
        benchmarks.append({"extra_info": info})
    first = runs[0]
    covered = {name for run in runs for name in run["bench_pairs"]}
    return {
        "bench_pairs": [p.name for p in PAIRS if p.name in covered],
        "machine_info": first["machine_info"],
        "datetime": first.get("datetime"),
        "benchmarks": benchmarks,
    }


def load(path: Path = OUT) -> dict:
    if path.is_file():
        return json.loads(path.read_text())
    return {"what": __doc__.split("\n\n")[0], "counters": {}, "runs": []}


def run(args: argparse.Namespace) -> int:
    data = load(args.out)
    env = dict(os.environ)
    if args.slowdown:
        parse(args.slowdown)
        env["BENCH_SLOWDOWN"] = args.slowdown
    else:
        env.pop("BENCH_SLOWDOWN", None)
    command = "python -m benchmarks.false_alarms " + shlex.join(sys.argv[1:])
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-fa-") as tmp:
            out = Path(tmp) / "bench.json"
            argv = [sys.executable, "-m", "pytest", "benchmarks/test_throughput.py", "-m", "bench", "-q"]
            argv += ["-p", "no:cacheprovider", f"--benchmark-json={out}", f"--basetemp={tmp}/t", *args.pytest_args]
            if args.lock:
                argv = ["flock", args.lock, *argv]
            load_before, start = os.getloadavg(), time.time()
            waited = time.perf_counter()
            proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
            seconds = time.perf_counter() - waited
            if proc.returncode != 0 or not out.is_file():
                print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                print(f"run {i + 1}: the bench failed (status {proc.returncode}); not recorded", file=sys.stderr)
                continue
            bench = json.loads(out.read_text())
        entry = {
            "label": args.label,
            "slowdown": args.slowdown,
            "started": datetime.fromtimestamp(start, timezone.utc).isoformat(timespec="seconds"),
            "seconds": seconds,
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "background": args.background,
            "command": command,
            **compact(bench, data["counters"]),
        }
        data["runs"].append(entry)
        args.out.write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")
        print(f"run {i + 1}/{args.runs} ({args.label}): {seconds:.0f} s, load {load_before[0]:.1f}", flush=True)
    return 0


def add(args: argparse.Namespace) -> int:
    data = load(args.out)
    bench = json.loads(args.bench_json.read_text())
    entry = {"label": args.label, "slowdown": None, "started": bench.get("datetime"), "command": args.command}
    data["runs"].append({**entry, "background": args.background, **compact(bench, data["counters"])})
    args.out.write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")
    print(f"recorded {args.bench_json} as a {args.label} run")
    return 0


def repeatability(runs: list[dict]) -> dict[str, dict]:
    """Per arm, over every launch of every run (slowed ones too: a slowdown changes no counter): how many
    launches, how many distinct sets of counters, and the counters that differed between them."""
    out: dict[str, dict] = {}
    for bench in runs:
        for arm, launches in gate.launches(
            {b["extra_info"]["pair"]: b["extra_info"] for b in bench["benchmarks"]}
        ).items():
            entry = out.setdefault(arm, {"launches": 0, "sets": []})
            for launch in launches:
                entry["launches"] += 1
                if launch["counters"] not in entry["sets"]:
                    entry["sets"].append(launch["counters"])
    result = {}
    for arm, entry in out.items():
        names = set().union(*entry["sets"]) if entry["sets"] else set()
        moved = sorted(n for n in names if len({json.dumps(c.get(n)) for c in entry["sets"]}) > 1)
        result[arm] = {"launches": entry["launches"], "distinct": len(entry["sets"]), "moved": moved}
    return result


SWEEP = (0.06, 0.08, 0.10, 0.12)


def slowed_by(check: gate.Check) -> float | None:
    """How much slower the check's measure says the subject got (negative: faster)."""
    if check.change is None or check.kind == "counter":
        return None
    return -check.change if check.kind.endswith("ratio") else check.change


def failing(check: gate.Check) -> bool:
    """Whether the check would fail the gate if its measure were blocking."""
    return check.verdict in (gate.SLOWER, gate.CHANGED) or check.verdict in gate.MISSING


def slowed_subjects(spec: str) -> set[str]:
    """The arms a slowdown SPEC slows, and the pairs whose method alone is slowed."""
    method, _ = parse(spec)

    def hit(config) -> bool:
        return config.method != "bare-loop" and (method is None or config.method == method)

    arms = {c.key for p in PAIRS for c in (p.method, p.baseline) if hit(c)}
    loop = {gate.LOOP} if method is None else set()
    return arms | loop | {p.name for p in PAIRS if hit(p.method) and not hit(p.baseline)}


def analyze(args: argparse.Namespace) -> int:
    data = load(args.out)
    runs = [(r, expand(r, data["counters"])) for r in data["runs"]]
    unchanged = [(r, b) for r, b in runs if r["label"] == UNCHANGED]
    full = [b for r, b in runs if r["label"] == FULL]
    if len(unchanged) < 2:
        print("error: analyze needs at least 2 unchanged runs (`run --label unchanged`)", file=sys.stderr)
        return 2
    covered = set(unchanged[0][1]["bench_pairs"])
    pairs = [p for p in PAIRS if p.name in covered]
    all_unchanged = gate.reference_from(merged([b for _, b in unchanged]), pairs, reason="all unchanged runs")
    result: dict[str, dict] = {}
    fixed = json.loads(args.reference.read_text()) if args.reference else None
    for i, (r, bench) in enumerate(runs):
        if r["label"] != UNCHANGED and not r["slowdown"]:
            continue  # full runs and other repeats: for the reference and the counters' repeatability only
        if fixed is not None:  # judged as CI judges them: against the committed reference
            reference, subjects = fixed, slowed_subjects(r["slowdown"]) if r["slowdown"] else None
        elif r["slowdown"]:
            reference, subjects = all_unchanged, slowed_subjects(r["slowdown"])
        else:
            others = [b for j, (_, b) in enumerate(unchanged) if unchanged[j][0] is not r]
            reference = gate.reference_from(merged(others), pairs, reason="leave one out")
            subjects = None
        checks = gate.compare(bench, reference, pairs)
        group = result.setdefault(r["label"], {"slowdown": r["slowdown"], "runs": 0, "failed": dict.fromkeys(KINDS, 0)})
        group["runs"] += 1
        group["not_judged"] = group.get("not_judged", 0) + any(c.verdict.startswith(gate.UNSTEADY) for c in checks)
        group.setdefault("loads", []).append([r["load_before"][0], r["load_after"][0]])
        for kind in KINDS:
            hits = [c for c in checks if c.kind == kind and failing(c) and (subjects is None or c.subject in subjects)]
            group["failed"][kind] += bool(hits)
            if hits and args.verbose:
                print(
                    f"{r['label']} run {i}: {kind}: " + ", ".join(f"{c.subject} {c.measure} {c.change}" for c in hits)
                )
        group.setdefault("max_change", {})
        for kind in KINDS[1:]:
            changes = [abs(c.change) for c in checks if c.kind == kind and c.change is not None and subjects is None]
            if changes:
                group["max_change"][kind] = max(group["max_change"].get(kind, 0), max(changes))
            slowing = [slowed_by(c) for c in checks if c.kind == kind and (subjects is None or c.subject in subjects)]
            slowing = [x for x in slowing if x is not None]
            group.setdefault("worst", {}).setdefault(kind, []).append(max(slowing) if slowing else None)
    print(f"{'runs':<24}{'n':>3}  " + "  ".join(f"{k:>10}" for k in KINDS))
    for label, g in result.items():
        rate = "  ".join(f"{g['failed'][k]:>4}/{g['runs']:<5}" for k in KINDS)
        print(f"{label:<24}{g['runs']:>3}  {rate}")
    print("unchanged: runs with a false alarm; slowed: runs in which the slowdown was caught")
    for label, g in result.items():
        loads = [x for pair in g["loads"] for x in pair]
        print(
            f"{label}: load average {min(loads):.1f}-{max(loads):.1f}; loop_units not judged (unsteady) in "
            f"{g['not_judged']} of {g['runs']}"
        )
    for label, g in result.items():
        if g.get("max_change"):
            print(
                f"{label}: largest change of any check, per measure: "
                + ", ".join(f"{k} {v:.1%}" for k, v in g["max_change"].items())
            )
    print("share of runs a tolerance would flag (unchanged: false alarms; slowed: caught), per measure:")
    for label, g in result.items():
        for kind, worst in g.get("worst", {}).items():
            known = [w for w in worst if w is not None]
            if known:
                rates = ", ".join(f"{t:.0%}: {sum(w > t for w in known)}/{len(known)}" for t in SWEEP)
                print(f"  {label:<10} {kind:<11} {rates}")
    repeats = repeatability([b for _, b in runs])
    moved = {arm: r["moved"] for arm, r in repeats.items() if r["moved"]}
    launched = sum(r["launches"] for r in repeats.values())
    print(f"counters: {launched} launches of {len(repeats)} arms in {len(runs)} runs; moved: {moved or 'none'}")
    data["analysis"] = {
        "command": "python -m benchmarks.false_alarms analyze"
        + (f" --reference {args.reference}" if args.reference else "")
        + (f" --out {args.out}" if args.out != OUT else ""),
        "groups": result,
        "counters_repeatability": repeats,
    }
    args.out.write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")
    if args.write_reference:
        ref = gate.reference_from(
            merged([*(b for _, b in unchanged), *full]), PAIRS, command=args.command, reason=args.reason
        )
        Path(args.write_reference).write_text(json.dumps(ref, indent=1) + "\n")
        print(f"wrote {args.write_reference}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.false_alarms", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="repeat the bench and record each run")
    r.add_argument("--label", required=True, help="the group of runs, e.g. unchanged, loop-15, fsdp-15")
    r.add_argument("--runs", type=int, default=10)
    r.add_argument("--slowdown", help="BENCH_SLOWDOWN for these runs (benchmarks/slowdown.py)")
    r.add_argument("--lock", help="hold this lock file (flock) during each run")
    r.add_argument("--background", default="", help="what else loaded the machine, in words, kept with each run")
    r.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (-k, --rounds, ...)")
    f = sub.add_parser("add", help="record a bench JSON made elsewhere (e.g. a full `nox -s bench`) as a run")
    f.add_argument("bench_json", type=Path)
    f.add_argument("--label", default=FULL, help=f"{FULL}: a full run of the same code, merged into the reference")
    f.add_argument("--command", required=True, help="the command that made the bench JSON")
    f.add_argument("--background", default="")
    a = sub.add_parser("analyze", help="judge every run with the gate; false-alarm and detection rates")
    a.add_argument("--write-reference", metavar="PATH", help="also write the reference made from all unchanged runs")
    a.add_argument("--reason", default="the median of the unchanged runs of results/bench/false_alarms.json")
    a.add_argument("--command", default="python -m benchmarks.false_alarms run --label unchanged --runs 10")
    a.add_argument("-v", "--verbose", action="store_true", help="print each failing check")
    a.add_argument(
        "--reference", type=Path, help="judge every run against this reference (as CI does) instead of leave one out"
    )
    for sp in (r, f, a):
        sp.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    return {"run": run, "add": add, "analyze": analyze}[args.verb](args)


if __name__ == "__main__":
    sys.exit(main())
