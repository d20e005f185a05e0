"""The ledger against an independent count: every strategy and optimizer of the suite, run on the counting backend
(suite/meters/comm_check.py, `--set comm_check=true`), records the same collectives per rank, op and group, calls
and bytes, as the dispatcher-level ledger; world sizes 2, 4 and one that does not divide evenly (3).

The ledger once missed what DTensor issues inside its own dispatch: gradient clipping's norm all-reduce under FSDP2,
HSDP and TP, and the redistributions of Muon and Dion on sharded matrices (issue 46). The first test shows it.
"""

from __future__ import annotations

import pytest

from suite.run.strategy import methods
from tests.conftest import MUON_MODEL, UNMODELLED, Runs

SMALL = ("--set", "seq_len=64", "--set", "comm_check=true")


def _steps(method: str, nproc: int, replicas: int, *sets: str, micro_batch: int = 2) -> tuple[str, ...]:
    """`method` at `nproc` on `replicas` data-parallel replicas of `micro_batch` x 64 tokens, for as many steps as
    the ledger needs: the warm-up's two (DDP rebuilds its buckets after step 0), then one whole period of the
    method's pattern (two steps with F=2, else one) from comm_step 2."""
    model = "llama-tiny-moe" if method == "ep" else MUON_MODEL[1] if "muon" in sets else "llama-tiny"
    steps = 2 + (2 if "F=2" in sets else 1)
    tokens = str(steps * replicas * micro_batch * 64)
    batch = ("--set", f"micro_batch={micro_batch}")
    return (method, "--nproc", str(nproc), "--model", model, "--tokens", tokens, *batch, *SMALL, *sets)


def _dp(method: str, nproc: int, *sets: str) -> tuple[str, ...]:
    return _steps(method, nproc, nproc, *sets)


F2 = ("--set", "F=2")  # an aggregation every 2 steps: one whole period inside the ledger's window
RUNS = {
    "ddp-2": _dp("ddp", 2),
    "ddp-3": _dp("ddp", 3),
    "fsdp-2": _dp("fsdp", 2),
    "fsdp-3": _dp("fsdp", 3),
    "fsdp-4": _dp("fsdp", 4),
    "hsdp-4": _dp("hsdp", 4),
    "zero1-3": _dp("zero1", 3),
    "tp-2": _steps("tp", 2, 1),
    "tp-4-sp": _steps("tp", 4, 1, "--set", "sequence_parallel=true"),
    "pp-2": _steps("pp", 2, 1, micro_batch=4),
    "pp-fsdp-4": _steps("pp-fsdp", 4, 2, micro_batch=4),
    "cp-2": _steps("cp", 2, 1),
    "ep-2": _dp("ep", 2),
    "fsdp-tp-4": _steps("fsdp-tp", 4, 2),
    "b-sdp-3": _dp("b-sdp", 3, "--set", "C=0.5"),
    "b-sdp-dense-2": _dp("b-sdp", 2, "--set", "C=0.75", "--set", "aggregation=dense"),
    "bb-sdp-2": _dp("bb-sdp", 2, "--set", "C=0.5"),
    "n-sdp-2": _dp("n-sdp", 2),
    "b-sdp-fsdp-holders-4": _dp("b-sdp-fsdp-holders", 4),
    "b-sdp-fsdp-worker-4": _dp("b-sdp-fsdp-worker", 4, "--set", "G=2"),
    "fl-fsdp-4": _dp("fl-fsdp", 4, *F2),
    # 2 groups of 2 replicas (the replicate tier; fl-fsdp-4 has the shard tier): a world of 8, which FL+HSDP needs
    # for all three tiers at once, would be a launch of 8 processes for this one run
    "fl-hsdp-4": _dp("fl-hsdp", 4, "--set", "G=2", "--set", "S=1", *F2),
    "diloco-2": _dp("diloco", 2, *F2),
    "diloco-merge-2": _dp("diloco-merge", 2, *F2),
    "streaming-diloco-3": _dp("streaming-diloco", 3, *F2),  # both fragments' E3M0 all-gathers in the window
    "isoloco-2": _dp("isoloco", 2, *F2),
    "local-sgd-4": _dp("local-sgd", 4, "--set", "G=2", *F2),
    "sdpa-math-2": _dp("sdpa-math", 2),
    "sdpa-flash-2": _dp("sdpa-flash", 2),
    **{f"ddp-{o}-2": _dp("ddp", 2, "--optimizer", o) for o in ("muon", "dion")},
    **{f"fsdp-{o}-{n}": _dp("fsdp", n, "--optimizer", o) for o in ("muon", "dion") for n in (2, 3)},
}


CLIPPED = ("fsdp-2", "hsdp-4", "tp-2")
UNCLIPPED = {name: (*RUNS[name], "--set", "grad_clip=0") for name in CLIPPED}


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> Runs:
    """One launch per world size (tests/conftest.py, Runs.share); each command names its model."""
    runs = Runs(tmp_path_factory.mktemp("checked"), tail=UNMODELLED)
    runs.share([*RUNS.values(), *UNCLIPPED.values()])
    return runs


def test_every_method_is_checked():
    assert {args[0] for args in RUNS.values()} == set(methods())


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_ledger_equals_the_backends_count(checked, name):
    record = checked(*RUNS[name])
    check = record["comm"]["check"]
    assert check["agrees"], "\n".join(check["differences"])
    assert record["comm"]["steps"] >= 1 and any(r["ops"] for r in check["per_rank"])


def _calls(record: dict) -> dict[tuple[str, str], int]:
    return {(op["op"], op["group"]): op["count"] for op in record["comm"]["per_rank"][0]["ops"]}


@pytest.mark.parametrize("name", CLIPPED)
def test_gradient_clipping_adds_one_norm_all_reduce_a_step_under_dtensor(checked, name):
    """clip_grad_norm_ on DTensor parameters all-reduces the partial norms: one more call a step than the same run
    without clipping, on one group, and nothing else changes; the ledger saw no difference while it counted above
    DTensor's dispatch."""
    clipped, unclipped = checked(*RUNS[name]), checked(*UNCLIPPED[name])
    steps = clipped["comm"]["steps"]
    on, off = _calls(clipped), _calls(unclipped)
    extra = {key: on.get(key, 0) - off.get(key, 0) for key in on.keys() | off.keys()}
    assert [(key[0], n) for key, n in extra.items() if n] == [("all_reduce", steps)]
