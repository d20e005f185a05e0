"""Bad input: one line naming the fix, exit status 2, and no record written."""

import pytest

from suite.cli import main


@pytest.fixture
def results(tmp_path):
    return tmp_path / "results"


CASES = [
    (["run", "ddpp", "--tokens", "100"], "unknown method 'ddpp'; choose one of: "),
    (["run", "ddp", "--model", "gpt9", "--tokens", "100"], "unknown model 'gpt9'"),
    (["run", "hsdp", "--nproc", "3", "--tokens", "100"], "use --nproc 4"),
    (["run", "hsdp", "--nproc", "4", "--set", "shard=3", "--tokens", "100"], "--set shard=S"),
    (["run", "ddp"], "give exactly one budget"),
    (["run", "ddp", "--tokens", "-5"], "budget must be positive"),
    (["run", "ddp", "--tokens", "5", "--time", "3"], "exactly one budget"),
    (["run", "ddp", "--tokens", "100", "--nproc", "0"], "--nproc must be at least 1"),
    (["run", "ddp", "--tokens", "100", "--seed", "18446744073709551616"], "--seed must be in [0, 2**63)"),
    (["run", "ddp", "--tokens", "100", "--precision", "fp4"], "use --precision fp32, bf16, fp16, fp8"),
    (["run", "ddp", "--tokens", "100", "--optimizer", "lion"], "unknown optimizer 'lion'"),
    (["run", "ddp", "--tokens", "100", "--set", "shard=2"], "method ddp has no parameter 'shard'"),
    (["run", "ddp", "--tokens", "100", "--set", "micro_batch=abc"], "--set micro_batch"),
    (["run", "ddp", "--tokens", "100", "--set", "nonsense"], "--set takes KEY=VALUE"),
    (["run", "ddp", "--tokens", "100", "--data", "imagenet"], "unknown data set 'imagenet'"),
    (["run", "ddp", "--tokens", "100", "--set", "data=stdlb"], "fineweb-edu, stdlib, stdlib-concurrency"),
    (["run", "ddp", "--tokens", "100", "--data", "stdlib", "--data-root", "."], "drop --data-root"),
    (["run", "ddp", "--tokens", "100", "--data", "fineweb", "--data-root", "/no/such/dir"], "no data at --data-root"),
]


@pytest.mark.parametrize("argv, message", CASES, ids=[c[1][:30] for c in CASES])
def test_bad_input_is_one_clear_line(argv, message, results, capsys):
    assert main([*argv, "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err
    assert len(err.splitlines()) == 1
    assert not results.exists() or not any(results.iterdir())


def test_unwritable_results_folder(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["run", "ddp", "--tokens", "100", "--results", str(blocker / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot write run records" in err and "--results DIR" in err and len(err.splitlines()) == 1


def test_report_of_missing_folder(tmp_path, capsys):
    assert main(["report", str(tmp_path / "none")]) == 2
    assert "no results folder" in capsys.readouterr().err


def test_evaluate_is_wired_and_names_a_missing_checkpoint(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "none.pt"), "--evals", "heldout_next"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "none.pt" in err and len(err.splitlines()) == 1
