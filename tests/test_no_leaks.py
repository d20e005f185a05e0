"""No worker process and no port outlives a plan (issue 16): `python -m suite reproduce` on a tiny plan
(tests/tiny_plan.py) that ends with a failed run, then resumes and finishes, and one interrupted with SIGINT
mid-run, as Ctrl-C would. While each runs, every process descended from it and every port its processes listen
on (the rendezvous store's, gloo's) are noted; afterwards none of those processes may be alive, nothing may
be left in its session (torchrun starts workers in sessions of their own, hence the descendants), and no
noted port may still be listened on."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from suite.records import load_records
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


class Watched:
    """`python -m suite reproduce test-plan ...` (or `argv`) in a session of its own, its descendants and ports
    noted."""

    def __init__(self, folder: Path, preset: str, env: dict | None = None, argv: list[str] | None = None) -> None:
        self.results, self.log = folder / "results", folder / f"{preset}-{time.monotonic_ns()}.log"
        plan = ["reproduce", "test-plan", "--preset", preset, "--results", str(self.results)]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                argv or [sys.executable, "-m", "suite", *plan, "--report", str(folder / "report")],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT), "SUITE_REPRODUCTIONS": "tests.tiny_plan", **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.seen: dict[int, float] = {}  # pid -> its start time (a reused pid is another process)
        self.ports: set[int] = set()

    def _note(self) -> None:
        try:
            me = psutil.Process(self.proc.pid)
            family = [me, *me.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in family:
            try:
                if p.pid != self.proc.pid:
                    self.seen.setdefault(p.pid, p.create_time())
                self.ports |= {c.laddr.port for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue

    def wait(self, timeout: float = 600, until: str | None = None) -> int | None:
        """Note descendants until the plan exits (its status) or `until` shows in its output (None)."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, f"the plan did not end in {timeout}s:\n{self.output()[-3000:]}"
            self._note()
            if until is not None and until in self.output():
                return None
            time.sleep(0.25)
        return self.proc.returncode

    def output(self) -> str:
        return self.log.read_text()

    def leaks(self) -> list[str]:
        """Processes noted (or in the plan's session) still alive, and noted ports still listened on."""
        time.sleep(0.5)  # the kernel reaps and closes asynchronously
        left = []
        for p in psutil.process_iter(["pid", "cmdline", "create_time"]):
            ours = self.seen.get(p.info["pid"]) == p.info["create_time"]
            try:
                ours = ours or os.getsid(p.info["pid"]) == self.proc.pid
                if ours and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"process {p.info['pid']}: {' '.join(p.info['cmdline'] or [])}")
            except (psutil.NoSuchProcess, ProcessLookupError):
                continue
        # a port another program took since (the kernel hands ephemeral ports out again) is not ours
        ours = {self.proc.pid, *self.seen, None}
        listening = {
            c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN and c.pid in ours
        }
        return left + [f"port {port} still listened on" for port in sorted(self.ports & listening)]


def _statuses(results: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for rec in load_records(results)[0]:
        out.setdefault(rec["method"], []).append(rec["status"])
    return out


def test_a_plan_that_fails_then_resumes_leaves_no_process_or_port(tmp_path):
    failing = Watched(tmp_path, "smoke", env={"FLAKY_FAIL": "1"})
    assert failing.wait() == 1, failing.output()[-3000:]  # the plan goes on past the failed run, then says so
    # both runs share one launch of 2 workers (suite/plan/multirun.py), and the micro item runs in the plan itself
    assert len(failing.seen) >= 2 and failing.ports, "the watch saw no workers"
    assert failing.leaks() == []
    assert _statuses(failing.results) == {"ddp": ["complete"], "test-flaky": ["failed"], "matmul": ["complete"]}

    resumed = Watched(tmp_path, "smoke")
    assert resumed.wait() == 0, resumed.output()[-3000:]
    out = resumed.output()
    assert "skip [1/3] python -m suite run ddp" in out and "skip [3/3] python -m suite micro test-plan matmul" in out
    assert "[2/3] python -m suite run test-flaky" in out and "superseded by" in out
    assert resumed.leaks() == []
    assert _statuses(resumed.results) == {"ddp": ["complete"], "test-flaky": ["complete"], "matmul": ["complete"]}


def test_an_interrupted_plan_leaves_no_process_or_port_and_records_the_interruption(tmp_path):
    plan = Watched(tmp_path, "slow")
    assert plan.wait(until="step 3 |") is None, plan.output()[-3000:]
    os.killpg(plan.proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground process group
    assert plan.wait(timeout=120) == 128 + signal.SIGINT, plan.output()[-3000:]
    assert "run the same command again to resume" in plan.output()
    assert plan.leaks() == []
    (rec,) = load_records(plan.results)[0]
    assert rec["status"] == "incomplete" and "interrupted by SIGINT" in rec["error"], rec["error"]


LEAKER = """
import socket, subprocess, sys, time
child = "import socket, time; s = socket.socket(); s.bind(('', 0)); s.listen(); time.sleep(60)"
subprocess.Popen([sys.executable, "-c", child], start_new_session=True)
time.sleep(3)
"""


def test_the_watch_finds_a_process_and_port_left_behind(tmp_path):
    leaker = Watched(tmp_path, "leaker", argv=[sys.executable, "-c", LEAKER])
    assert leaker.wait(timeout=60) == 0
    leaks = leaker.leaks()
    for pid in leaker.seen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert len(leaks) == 2 and leaks[0].startswith("process ") and leaks[1].endswith("still listened on"), leaks


def test_workers_end_within_seconds_when_the_plan_is_killed(tmp_path):
    plan = Watched(tmp_path, "slow")  # 200 steps of 0.2 s: the workers would train on for 40 s and more
    assert plan.wait(until="step 3 |") is None, plan.output()[-3000:]
    plan._note()
    workers = dict(plan.seen)
    os.kill(plan.proc.pid, signal.SIGKILL)  # the launcher alone, no chance to clean up: SIGKILL is not caught
    plan.proc.wait()
    deadline = time.monotonic() + 10  # the parent-death signal is at once; the watchdog polls each 0.5 s
    while time.monotonic() < deadline and (left := plan.leaks()):
        time.sleep(0.5)
    for pid in workers:  # whatever the outcome, leave nothing behind for the other tests
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert left == [], left
