"""One writer per results folder (issue 27, item 4): a second plan stops with a one-line error naming the
first one's pid, and the folder is free again once that process ends, however it ends."""

from __future__ import annotations

import subprocess
import sys

import pytest

from suite.errors import UsageError
from suite.plan import reproduce
from suite.run.lock import one_writer
from tests.conftest import ROOT
from tests.test_plan_resume import _plan, launched  # noqa: F401  (a fixture)

HOLD = "import sys, time; from suite.run.lock import one_writer\nwith one_writer(sys.argv[1], 'test'):\n"
HOLD += "    print('held', flush=True); time.sleep(120)"


def test_a_second_plan_in_the_same_folder_stops_naming_the_first(launched, tmp_path):  # noqa: F811
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=f"being written by process {holder.pid}") as caught:
            reproduce.run_plan(_plan(), tmp_path)
        assert len(str(caught.value).splitlines()) == 1 and launched.launched == []
    finally:
        holder.kill()  # SIGKILL: the kernel releases the lock with the process
        holder.wait()
    reproduce.run_plan(_plan(), tmp_path)
    assert launched.launched == ["ddp", "fsdp"]


def test_the_lock_is_one_per_folder_not_one_per_process(tmp_path):
    with one_writer(tmp_path / "a", "first"), one_writer(tmp_path / "b", "second"):
        pass
    with one_writer(tmp_path / "a", "again"):
        pass
