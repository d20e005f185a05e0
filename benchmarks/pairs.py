"""The throughput pairs the CI gate checks: the harness's own, then every reproduction's (suite.extensions).

Machines differ and drift, so the gate never compares absolute speed: it compares the ratio
method tokens/s / baseline tokens/s, taken from launches made minutes apart on the same machine.

A reproduction declares its pairs in its folder, for example

    pairs=(Pair("b-sdp/ddp", Config("b-sdp", sets=(("C", 0.5),)), Config("ddp")),)

with `tolerance=` where its ratio is noisier than 10%, and `short=True` only if CI's five-minute gate
must watch it. The same change refreshes results/bench/reference.json (README, "Throughput gate");
until then the gate says "no reference" and fails.
"""

from __future__ import annotations

from benchmarks.bare_loop import BARE_LOOP
from suite.extensions import reproductions
from suite.plan.pairs import Config, Pair

DDP = Config("ddp")

# The harness's own pairs. Order matters: a pair whose baseline (or method) is the configuration just
# measured reuses that launch, so pairs that share a configuration stay next to each other (the baselines
# reproduction's pairs start with DDP).
# suite/bare-loop: the suite's DDP step against the same model, DDP, AdamW and clipping in a bare loop
# (benchmarks/bare_loop.py); its ratio is the suite's own overhead, about 1 (issue 11).
HARNESS: list[Pair] = [
    Pair("suite/bare-loop", DDP, Config(BARE_LOOP), tolerance=0.15, short=True),
    Pair("meters/no-meters", DDP, Config("ddp", meters=False), short=True),
]


def all_pairs() -> list[Pair]:
    """The harness's pairs, then each reproduction's in the order they are found (baselines first)."""
    found = sorted(reproductions().values(), key=lambda rep: (rep.name != "baselines", rep.name))
    return [*HARNESS, *(pair for rep in found for pair in rep.pairs)]


PAIRS: list[Pair] = all_pairs()


def selected(short: bool, pairs: list[Pair] = PAIRS) -> list[Pair]:
    return [p for p in pairs if p.short or not short]
