"""`python -m suite verdicts` over the committed results gives each card the word its committed report gives
(issue 41 item 10).

A report (reports/NAME) is built from its reproduction's plan runs, results/NAME-PRESET (suite.plan.command.plan_runs;
the rebuild in tests/test_committed_reports.py). results/gpu is no plan run: it holds a GPU check's records
(benchmarks/gpu_check.py, docs/gpu-check.md: runs shortened to 20 steps and items cut at each step's share of a 480 s
budget), a check of the machinery on a GPU node. No plan run's report reads it (reports/gpu shows it apart, as a
check), so `verdicts` over a folder above it leaves it out and says so; named itself, it is judged like any folder,
and reports/gpu gives its cards the words `verdicts results/gpu` gives.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks import gpu_check
from suite.cli import main
from suite.judge.command import gpu_checks
from suite.judge.verdicts import verdict_rows
from suite.plan.command import plan_runs
from suite.records import load_records
from tests.test_committed_reports import machine_folders

ROOT = Path(__file__).resolve().parent.parent
REPORTS = sorted(p.name for p in (ROOT / "reports").iterdir() if p.is_dir())


def _cli_rows(capsys: pytest.CaptureFixture, *folders: str | Path) -> tuple[dict[str, dict], str]:
    assert main(["verdicts", *map(str, folders), "--json"]) == 0
    out = capsys.readouterr()
    return {r["claim"]: r for r in json.loads(out.out)}, out.err


def _word(row: dict) -> tuple:
    return row["verdict"], row["measured"], sorted(row["run_ids"] or [])


def test_verdicts_over_the_committed_results_give_each_card_its_reports_verdict(capsys, monkeypatch):
    """Before: results/gpu's records (one H200) made flash-io-dram-bytes and flash-io-runtime "inconclusive" here
    while reports/flash-io, built from results/flash-io-smoke, says "not testable here"."""
    monkeypatch.chdir(ROOT)
    cli, _ = _cli_rows(capsys, "results")
    checks = {c.name for c in gpu_checks(ROOT / "results")}
    differ = {}
    for name in REPORTS:
        if name in checks:  # a GPU check's report: its records alone, as `verdicts results/NAME` judges them
            records = [r for folder in machine_folders(name) for r in load_records(folder)[0]]
            alone, _ = _cli_rows(capsys, Path("results") / name)
            for row in verdict_rows(records):
                if _word(row) != _word(alone[row["claim"]]):
                    differ[f"{name}: {row['claim']}"] = f"report {_word(row)[:2]}, {_word(alone[row['claim']])[:2]}"
            continue
        results = Path("results") / f"{name}-smoke"
        records = [r for folder in plan_runs(results, name) for r in load_records(folder)[0]]
        for row in verdict_rows(records):
            if row["reproduction"] == name and _word(row) != _word(cli[row["claim"]]):
                differ[row["claim"]] = f"report {_word(row)[:2]}, verdicts results {_word(cli[row['claim']])[:2]}"
    assert not differ, differ


def test_the_committed_gpu_folder_is_a_gpu_check():
    assert gpu_checks(ROOT / "results") == [ROOT / "results" / "gpu"]
    assert gpu_checks(ROOT / "results" / "gpu") == []  # named itself, it is read


def test_a_gpu_checks_records_are_left_out_of_a_folder_above_them_and_judged_when_named(tmp_path, capsys):
    results = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "flash-io-smoke", results / "flash-io-smoke")
    check = results / "gpu"
    shutil.copytree(ROOT / "results" / "gpu" / "flash-io", check / "flash-io")
    # the check's own summary, as benchmarks/gpu_check.py writes it
    (check / "summary.json").write_text(json.dumps(gpu_check.summary([], check, dry_run=False)))
    assert gpu_checks(results) == [check]

    above, said = _cli_rows(capsys, results)
    alone, _ = _cli_rows(capsys, results / "flash-io-smoke")
    for card in ("flash-io-dram-bytes", "flash-io-runtime", "flash-io-memory-linear", "flash-io-hbm-bytes"):
        assert _word(above[card]) == _word(alone[card]) and above[card]["shown"] == alone[card]["shown"], card
    assert above["flash-io-dram-bytes"]["verdict"] == "not testable here"
    assert f"{check}: left out" in said and "GPU check" in said

    named, said = _cli_rows(capsys, check)
    assert named["flash-io-dram-bytes"]["verdict"] == "inconclusive"  # the H200's records, judged: dram-gpt2 never ran
    assert "left out" not in said


def test_a_folder_without_a_gpu_checks_summary_is_read_whole(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "summary.json").write_text('{"what": "something else"}')
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "summary.json").write_text("not json")
    assert gpu_checks(tmp_path) == []


def test_verdicts_names_every_file_it_did_not_read_and_quotes_a_name_with_a_line_break(tmp_path, capsys):
    """Before: a truncated record, a NaN literal or a file of another schema was skipped without a word and
    `--json` printed `[]`; a folder name with a line break was printed raw."""
    folder = tmp_path / "odd\nname"
    folder.mkdir()
    (folder / "truncated.json").write_text('{"schema": 1')
    (folder / "nan.json").write_text('{"schema": 1, "loss": NaN}')
    rows, err = _cli_rows(capsys, folder)
    assert rows == {}
    lines = err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith(repr(str(folder))[:-1]) for line in lines), lines
    assert sum("not read" in line for line in lines) == 2 and lines[-1].endswith("no run records")
