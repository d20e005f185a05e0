"""The command line fuzzed: `suite.cli.main(argv)` for argv built from the parser's own subcommands and flags
with hostile values never raises a traceback. It returns 0, 1 or 2 (a UsageError printed as one line), or
exits through argparse's SystemExit(2) with a one-line message.

Nothing is launched: the entry points that start work (workers, a plan, an estimate, evaluations, any
subprocess) are replaced by a stub that checks what it was given and stops the command there. Reaching a
stub counts as passing the checks; a configuration that reaches one must be runnable (finite budgets).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import pickle
import re
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from suite import cli
from suite.config import FIELDS
from suite.evals.model_file import save_checkpoint
from suite.models import MODELS, build_model
from suite.run.strategy import methods
from tests.report_fixtures import make_record, write_records


class Reached(BaseException):
    """A stub was called: the command passed its checks. A BaseException, so no `except Exception` hides it."""


def _launch(cfg, *args, **kwargs):
    for name in ("tokens", "flops", "time_s", "target", "max_tokens"):
        value = getattr(cfg, name, None)
        assert value is None or math.isfinite(value), f"launched with {name}={value}"
    assert cfg.nproc >= 1, cfg.nproc
    raise Reached("launch")


def _stop(*args, **kwargs):
    raise Reached("stub")


@lru_cache(maxsize=1)
def _workdir() -> Path:
    """The current folder of every fuzzed command (relative paths land here): records, checkpoints, junk."""
    root = Path(tempfile.mkdtemp(prefix="fuzz-cli-"))
    write_records(root / "runs", [make_record("ddp", 0)])
    (root / "bad.json").write_text('{"schema": 1, "run_id": ')
    (root / "afile").write_text("a file where a folder belongs")
    config = {"n_layers": 1, "dim": 32, "n_heads": 4, "n_kv_heads": 4, "ffn_dim": 64, "max_seq_len": 32}
    save_checkpoint(build_model("llama-tiny", **config), root / "model.pt", "llama-tiny", config)
    (root / "evil.pt").write_bytes(pickle.dumps({"x": os.system}, protocol=2))
    return root


RECORD = f"runs/{make_record('ddp', 0)['run_id']}.json"
PATHS = st.sampled_from(
    ["runs", RECORD, "bad.json", "afile", "afile/sub", "model.pt", "evil.pt", "missing/x.json", ".", "out", ""]
)
NUMBERS = st.sampled_from(["0", "-1", "1", "2", "3", "4", "7", "1e3", "1.5", "-0", "0x10", "1_000", "9" * 30])
FLOATS = NUMBERS | st.sampled_from(["nan", "inf", "-inf", "1e400", "-1e400", "1e-400", "NaN", "Infinity", "abc"])
# Text as typed: no NUL (the kernel cannot pass one), no lone surrogates, no control characters or line
# breaks (argparse quotes an argument it rejects verbatim, so one with a line break would make a two-line
# message); and no way out of the working folder, since some commands create the folders they are given.
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=12).filter(
    lambda t: not t.startswith(("/", "~")) and ".." not in t
)
NAMES = {
    "method": st.sampled_from(sorted(methods()) + ["ddpp", "DDP", ""]),
    "model": st.sampled_from(sorted(MODELS) + ["gpt9", ""]),
    "name": st.sampled_from(["sdp", "dion", "flash-io", "fl-fsdp", "baselines", "nope", ""]),
    "preset": st.sampled_from(["smoke", "gpu", "paper", "calibrate", "nope", ""]),
    "precision": st.sampled_from(["fp32", "bf16", "fp8", ""]),
    "optimizer": st.sampled_from(["adamw", "muon", "dion", "lion", ""]),
    "data": st.sampled_from(["text", "digits", "fineweb", "cifar10", "imagenet", ""]),
    "evals": st.sampled_from(["heldout_next", "top1", "arc_easy", "heldout_next,,", "nope", ""]),
    "item": TEXT,
}
SET_KEYS = st.sampled_from(sorted(FIELDS) + ["shard", "C", "K", "F", "rank_fraction", "nope", "", "a-b"])


def _typed(action: argparse.Action) -> st.SearchStrategy[str]:
    """Values of the kind the flag takes (most of them still wrong in some way)."""
    if action.choices:
        return st.sampled_from(list(action.choices))
    if action.type is int:
        return NUMBERS
    if action.type is float:
        return FLOATS
    if action.dest == "sets":
        return st.builds(lambda k, sep, v: f"{k}{sep}{v}", SET_KEYS, st.sampled_from(["=", "=", ""]), FLOATS | TEXT)
    return NAMES.get(action.dest, PATHS)


def _value(action: argparse.Action) -> st.SearchStrategy[str]:
    """Mostly typed values, one in five any text: most argvs get past argparse to the suite's own checks."""
    return st.integers(0, 4).flatmap(lambda i: _typed(action) if i else TEXT)


@lru_cache(maxsize=1)
def _commands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _good() -> dict[str, list[str]]:
    """A command line per subcommand that passes every check: the seed that mutations start from."""
    (topology, *_) = next(a for a in _commands()["simulate"]._actions if a.dest == "topology").choices
    return {
        "run": ["run", "ddp", "--tokens", "1000"],
        "reproduce": ["reproduce", "sdp", "--preset", "smoke"],
        "micro": ["micro", "flash-io", "item"],
        "evaluate": ["evaluate", "model.pt", "--evals", "heldout_next", "--device", "cpu"],
        "verdicts": ["verdicts", "runs"],
        "report": ["report", "runs", "-o", "site"],
        "estimate": ["estimate", "ddp", "--world-size", "2"],
        "simulate": ["simulate", RECORD, "--topology", topology],
    }


# the training and plan commands get the most examples; report least (it draws figures: 0.3 s a call)
WEIGHTED = ["run"] * 4 + ["reproduce", "estimate"] * 2 + ["evaluate", "simulate", "micro", "verdicts"]


@st.composite
def argvs(draw) -> list[str]:
    """A good command line mutated (flags added with hostile values, a word replaced or dropped, junk put in),
    or one built from the subcommand's arguments alone."""
    name = draw(st.sampled_from([*WEIGHTED, *(c for c in _commands() if c not in WEIGHTED)]))
    actions = [a for a in _commands()[name]._actions if not isinstance(a, argparse._HelpAction)]
    flags = [a for a in actions if a.option_strings]
    argv = list(_good().get(name, [name])) if draw(st.integers(0, 3)) else [name]
    if argv == [name]:
        for action in actions:
            if not action.option_strings:  # positional: given, missing or doubled
                argv += draw(st.lists(_value(action), max_size=2))
    for action in draw(st.lists(st.sampled_from(flags), max_size=4)):
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            argv.append(flag)
        elif draw(st.integers(0, 19)):
            argv += [flag, draw(_value(action))] if draw(st.integers(0, 4)) else [f"{flag}={draw(_value(action))}"]
        else:  # a flag whose value is missing
            argv.append(flag)
    if len(argv) > 1 and not draw(st.integers(0, 4)):
        i = draw(st.integers(1, len(argv) - 1))
        argv[i : i + 1] = draw(st.sampled_from([[], [draw(TEXT | PATHS | FLOATS)]]))
    if not draw(st.integers(0, 9)):
        argv.insert(draw(st.integers(0, len(argv))), draw(st.sampled_from(["--bogus", "-x", "--", "-", "--tok"])))
    return argv


def _run(argv: list[str]) -> tuple[str, str, str]:
    """(outcome, stdout, stderr) of main(argv); outcome is `return N`, `exit N` or `reached`."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            outcome = f"return {cli.main(argv)}"
        except SystemExit as stop:
            outcome = f"exit {stop.code}"
        except Reached:
            outcome = "reached"
    return outcome, out.getvalue(), err.getvalue()


@pytest.fixture
def guarded(monkeypatch):
    """Every way a command starts work, stubbed; the working folder a scratch one; the Hub offline."""
    import suite.estimate.scale
    import suite.evals.harness
    import suite.evals.vision
    import suite.plan.items
    import suite.plan.reproduce
    import suite.run.launch
    import suite.run.train

    monkeypatch.setattr(suite.run.launch, "launch", _launch)
    monkeypatch.setattr(suite.run.train, "train", _stop)
    monkeypatch.setattr(suite.plan.reproduce, "run_plan", _stop)
    monkeypatch.setattr(suite.plan.items, "run_micro", _stop)
    monkeypatch.setattr(suite.estimate.scale, "estimate", _stop)
    monkeypatch.setattr(suite.evals.harness, "run_evals", _stop)
    monkeypatch.setattr(suite.evals.vision, "image_accuracy", _stop)
    monkeypatch.setattr(subprocess.Popen, "__init__", _stop)  # sbatch, torchrun, anything else
    for name in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.chdir(_workdir())


ERROR = re.compile(r"^error: \S")
ARGPARSE_ERROR = re.compile(r"^python -m suite( [\w-]+)?: error: \S")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argvs())
@example(  # a NaN --compute-s reached the record's writer (fuzz find; issue 27)
    argv=["simulate", RECORD, "--topology", "4xA100-nvlink-4x200gbIB", "--compute-s", "nan", "--write", "out"]
)
def test_any_command_line_ends_in_a_status_or_one_line_error(guarded, argv):
    outcome, _, err = _run(argv)
    event(f"{argv[0]}: {outcome}")
    assert "Traceback" not in err, (argv, err)
    lines = err.strip().splitlines()
    if outcome == "return 2":
        assert lines and ERROR.match(lines[-1]) and sum("error:" in line for line in lines) == 1, (argv, err)
    elif outcome == "exit 2":
        assert lines and ARGPARSE_ERROR.match(lines[-1]) and sum("error:" in line for line in lines) == 1, (argv, err)
    else:
        assert outcome in ("return 0", "return 1", "reached"), (argv, outcome, err)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "ddp", "--tokens", "nan"], "budget must be positive and finite"),
        (["run", "ddp", "--tokens", "inf"], "budget must be positive and finite"),
        (["run", "ddp", "--time", "1e400"], "budget must be positive and finite"),
        (["run", "ddp", "--target", "nan"], "--target nan is no loss"),
        (["run", "ddp", "--target=-inf"], "--target -inf is no loss"),
        (["run", "ddp", "--target", "2", "--max-tokens", "inf"], "give --max-tokens a value above 0"),
    ],
)
def test_budgets_that_never_end_are_refused(guarded, argv, message):
    outcome, _, err = _run(argv)
    assert outcome == "return 2" and message in err and len(err.strip().splitlines()) == 1, (outcome, err)


def test_the_stubs_are_reached_by_good_commands(guarded):
    """The fuzzing means something only if good commands get as far as the stubs."""
    for name in ("run", "reproduce", "evaluate", "estimate"):
        assert _run(_good()[name])[0] == "reached", _good()[name]
    for name in ("verdicts", "report", "simulate"):
        assert _run(_good()[name])[0] == "return 0", _good()[name]
    assert _run(["evaluate", "evil.pt", "--evals", "heldout_next", "--device", "cpu"])[0] == "return 2"
    assert _run(["simulate", "bad.json", *_good()["simulate"][2:]])[0] == "return 2"
