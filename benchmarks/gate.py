"""The throughput gate: ratios (method / baseline tokens/s) from one benchmark run against the reference.

    python -m benchmarks.gate results/bench/latest.json --reference results/bench/reference.json
    python -m benchmarks.gate results/bench/latest.json --write-reference results/bench/reference.json

Exit status 1 when a pair's ratio fell by more than its tolerance, and also when a pair the run covered
was not measured, has no reference, or has a reference measured for other settings than the registry's:
in each of those cases the gate could not vouch for the change. pytest-benchmark's own
`--benchmark-compare-fail` compares times across saved runs, which differ by machine and by load; the
ratio of two launches from one run does not, which is why this small script exists.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.pairs import PAIRS, Pair

REFRESH = (
    "nox -s bench -- --rounds 3 && python -m benchmarks.gate results/bench/latest.json "
    "--write-reference results/bench/reference.json"
)

OK, FASTER, REGRESSED = "ok", "faster", "REGRESSED"
NOT_MEASURED, NO_REFERENCE, STALE = "NOT MEASURED", "NO REFERENCE", "STALE REFERENCE"
FAILING = {REGRESSED, NOT_MEASURED, NO_REFERENCE, STALE}
NOTES = {
    FASTER: "not a failure; refresh the reference once the speed-up is understood (README, Throughput gate)",
    REGRESSED: "the method slowed down relative to its baseline",
    NOT_MEASURED: "the pair's benchmark failed or did not run (see pytest's output above)",
    NO_REFERENCE: "a new pair: add its reference ratio (README, Throughput gate)",
    STALE: "the pair's settings changed since its reference was measured: refresh the reference",
}


@dataclass(frozen=True)
class Row:
    pair: str
    reference: float | None
    measured: float | None
    tolerance: float
    verdict: str

    @property
    def change(self) -> float | None:
        if self.reference is None or self.measured is None:
            return None
        return self.measured / self.reference - 1


def load_json(path: str | Path, what: str, fix: str) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {str(path)!r}; {fix}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}); {fix}") from None


def covered_pairs(bench: dict, pairs: Sequence[Pair]) -> list[Pair]:
    """The registered pairs this run set out to measure (the benchmarks' conftest names them)."""
    if "bench_pairs" not in bench or "benchmarks" not in bench:
        raise ValueError("not a throughput benchmark JSON (no bench_pairs); make it with `nox -s bench`")
    known = {p.name: p for p in pairs}
    unknown = [name for name in bench["bench_pairs"] if name not in known]
    if unknown:
        raise ValueError(
            f"the run covered pair {unknown[0]!r}, which benchmarks/pairs.py no longer has; rerun `nox -s bench`"
        )
    return [known[name] for name in bench["bench_pairs"]]


def measured_ratios(bench: dict, pairs: Sequence[Pair]) -> dict[str, float | None]:
    """Each covered pair's ratio (method tokens/s over baseline tokens/s); None where it was not measured."""
    ratios = {
        b["extra_info"]["pair"]: b["extra_info"]["ratio"]
        for b in bench["benchmarks"]
        if "pair" in b.get("extra_info", {})
    }
    return {pair.name: ratios.get(pair.name) for pair in covered_pairs(bench, pairs)}


def judge(pair: Pair, measured: float | None, reference: dict | None) -> Row:
    row = Row(pair.name, reference["ratio"] if reference else None, measured, pair.tolerance, OK)
    if measured is None:
        verdict = NOT_MEASURED
    elif reference is None:
        verdict = NO_REFERENCE
    elif (reference["method"], reference["baseline"]) != (pair.method.key, pair.baseline.key):
        verdict = STALE
    elif row.change < -pair.tolerance:
        verdict = REGRESSED
    elif row.change > pair.tolerance:
        verdict = FASTER
    else:
        verdict = OK
    return replace(row, verdict=verdict)


def compare(bench: dict, reference: dict, pairs: Sequence[Pair] = PAIRS) -> list[Row]:
    known = {p.name: p for p in pairs}
    refs = reference.get("pairs", {})
    return [judge(known[name], ratio, refs.get(name)) for name, ratio in measured_ratios(bench, pairs).items()]


def format_table(rows: Sequence[Row]) -> str:
    def num(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    width = max([len("pair"), *(len(r.pair) for r in rows)])
    lines = [f"{'pair':<{width}}  {'reference':>9}  {'measured':>8}  {'change':>7}  {'tolerance':>9}  verdict"]
    for r in rows:
        lines.append(
            f"{r.pair:<{width}}  {num(r.reference, '.3f'):>9}  {num(r.measured, '.3f'):>8}  "
            f"{num(r.change, '+.1%'):>7}  {r.tolerance:>9.0%}  {r.verdict}"
        )
    for verdict in dict.fromkeys(r.verdict for r in rows):
        if verdict in NOTES:
            lines.append(f"{verdict}: {NOTES[verdict]}")
    return "\n".join(lines)


def failed(rows: Sequence[Row]) -> bool:
    return any(r.verdict in FAILING for r in rows)


def reference_from(bench: dict, pairs: Sequence[Pair] = PAIRS, command: str = REFRESH) -> dict:
    """The reference file's content, from a full run in which every registered pair was measured."""
    ratios = measured_ratios(bench, pairs)
    missing = [p.name for p in pairs if ratios.get(p.name) is None]
    if missing:
        raise ValueError(
            f"pair {missing[0]!r} was not measured in this run; refresh the reference from a full "
            "run (`nox -s bench`, without --short)"
        )
    rounds = {
        b["extra_info"]["pair"]: b["extra_info"].get("rounds", [])
        for b in bench["benchmarks"]
        if "pair" in b["extra_info"]
    }
    machine = bench.get("machine_info", {})
    return {
        "command": command,
        "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "measured": bench.get("datetime"),
        "commit": bench.get("commit_info", {}).get("id"),
        "machine": {
            "cpu": machine.get("cpu", {}).get("brand_raw"),
            "cores": machine.get("cpu", {}).get("count"),
            "python": machine.get("python_version"),
        },
        "pairs": {
            p.name: {
                "ratio": ratios[p.name],
                "method": p.method.key,
                "baseline": p.baseline.key,
                "round_ratios": [r["ratio"] for r in rounds[p.name]],
            }
            for p in pairs
        },
    }


def main(argv: list[str] | None = None, pairs: Sequence[Pair] = PAIRS) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gate", description=__doc__.splitlines()[0])
    p.add_argument("bench_json", help="pytest-benchmark JSON of one `nox -s bench` run")
    p.add_argument("--reference", default="results/bench/reference.json")
    p.add_argument("--write-reference", metavar="PATH", help="write the run's ratios as the new reference")
    p.add_argument("--command", default=REFRESH, help="the command that measured the run, kept in the reference")
    args = p.parse_args(argv)
    try:
        bench = load_json(args.bench_json, "benchmark JSON", "run `nox -s bench` first")
        if args.write_reference:
            Path(args.write_reference).write_text(
                json.dumps(reference_from(bench, pairs, args.command), indent=1) + "\n"
            )
            print(f"wrote {args.write_reference}")
            return 0
        rows = compare(bench, load_json(args.reference, "reference", f"make it with `{REFRESH}`"), pairs)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_table(rows))
    return 1 if failed(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
