"""Hostile claims.yaml files: random YAML documents, random text and mutations of the reproductions' own
claims give claims or a one-line ClaimsError naming the file and what to fix; YAML that names Python code
is refused (loaded with yaml.safe_load), and nothing in it runs."""

from __future__ import annotations

import copy
import math
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from suite.extensions import reproductions
from suite.judge.claims import ClaimsError, load_claims

ROOT = Path(__file__).resolve().parent.parent
FUZZ = settings(max_examples=120, deadline=None)


@lru_cache(maxsize=1)
def _real() -> dict[str, str]:
    """Each reproduction's claims.yaml (importing the reproductions registers the metrics they add)."""
    return {name: rep.claims.read_text() for name, rep in reproductions().items() if rep.claims is not None}


@lru_cache(maxsize=1)
def _parsed() -> dict[str, object]:
    return {name: yaml.safe_load(text) for name, text in _real().items()}


def _dump(doc) -> str:
    return yaml.dump(doc, Dumper=yaml.CSafeDumper)  # libyaml's: the fuzzing is of the loader, not the dumper


@lru_cache(maxsize=1)
def _file() -> Path:
    return Path(tempfile.mkdtemp(prefix="fuzz-claims-")) / "claims.yaml"


def _load(text: str) -> list | None:
    """The claims in this text, or None after a one-line ClaimsError; any other exception fails the test."""
    path = _file()
    path.write_text(text, encoding="utf-8")
    try:
        return load_claims(path)
    except ClaimsError as err:
        message = str(err)
        assert message.startswith(f"{path}: ") and "\n" not in message, message
        assert len(message) < 400 + len(str(path)), message
        return None


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["ratio", "quality", "lower", "measured", "estimated", "cuda", "world_size>=8", "peak_bytes_max"])
)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10) | st.integers(), children, max_size=5)
    ),
    max_leaves=25,
)


@FUZZ
@given(VALUES)
@example([{"\n": None}])  # a key with a line break once made a two-line error (found in a clean-clone CI run)
def test_random_yaml_documents(doc):
    _load(_dump(doc))


@FUZZ
@given(st.text(max_size=200))
def test_random_text(text):
    _load(text)


def _leaves(value, prefix=()):
    """Every (path, value) inside a parsed document, containers included."""
    yield prefix, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _leaves(item, (*prefix, key))


@settings(FUZZ, max_examples=60)
@given(st.data(), VALUES)
def test_real_claims_with_one_value_replaced_or_removed(data, value):
    name = data.draw(st.sampled_from(sorted(_real())))
    doc = copy.deepcopy(_parsed()[name])
    path = data.draw(st.sampled_from([p for p, _ in _leaves(doc) if p]))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()):
        parent[path[-1]] = value
    elif isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])
    _load(_dump(doc))


@settings(FUZZ, max_examples=60)
@given(st.data())
def test_real_claims_cut_or_spliced_as_text(data):
    text = _real()[data.draw(st.sampled_from(sorted(_real())))]
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 40)))
    insert = data.draw(st.sampled_from(["", ":", "- ", "\n", "  ", "{", "]", "&a", "*a", "!!", "'", "#", "\t"]))
    _load(text[:start] + insert + text[end:])


def test_the_real_claims_load():
    for name, text in _real().items():
        assert _load(text), name


@pytest.mark.parametrize(
    "text",
    [
        "!!python/object/apply:os.system ['touch {marker}']",
        "- !!python/object/apply:subprocess.check_call [['touch', '{marker}']]",
        "claims: !!python/object/new:os.system ['touch {marker}']",
        "- id: !!python/name:os.system\n",
        "- !!python/object:pathlib.PosixPath {{}}",
    ],
)
def test_yaml_that_names_python_code_is_refused_and_never_runs(text, tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "claims.yaml"
    path.write_text(text.format(marker=marker))
    with pytest.raises(ClaimsError, match="not valid YAML at line 1: could not determine a constructor") as err:
        load_claims(path)
    assert "\n" not in str(err.value)
    assert not marker.exists()


VALID = (
    "- {id: a, statement: s, kind: ratio, better: lower, source: {paper: p}, source_status: s, command: c, "
    "paper_value: 0.5, band: {tolerance: 0.1, source: rounding}, what_would_test: w, "
    "regime: {any_scale: {because: b, source: s}}, "
    "metric: {name: ratio, field: peak_bytes_max, method: m, baseline: b}, %s}"
)


@pytest.mark.parametrize(
    "text, where",
    [
        ("- id: a\n  statement: 2001-13-14\n", "quote the value"),  # a date YAML cannot build
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
        ("\x1f", "not valid YAML: unacceptable character #x001f"),  # a reader error spans two lines
        ("- {1: a, b: c}", "claims[0] (?).1: unknown field"),  # keys of mixed types
        ('- {id: "a\\nb", kind: nope}', "claims[0] ('a\\nb').kind"),  # an id with a newline stays on one line
        (VALID % "metric: {name: [ratio]}", "metric.name: ['ratio'] is not a registered metric"),
        (VALID % "metric: {name: ratio, field: 5, method: m, baseline: b}", "metric.field: expected a name, found 5"),
        (VALID % "metric: {name: ratio, field: f, method: m, baseline: b, model: [1]}", "metric.model: expected"),
        (VALID % "paper_value: [-.inf, .inf]", "paper_value: a ratio claim needs a number or [low, high]"),
        (VALID % ("statement: " + "x" * 5000 + ", band: 5"), "band: expected a dict, found 5"),
        (VALID % ("band: {tolerance: " + "9" * 400 + ", source: s}"), "band.tolerance: must be a finite number"),
        (VALID % ("unit: [" + "x, " * 3000 + "]"), "unit: expected a str, found ['x', "),
        (VALID % "beside: [{label: l, model: 5}]", "beside[0].model: expected a model name"),
    ],
)
def test_hostile_claims_are_one_line_naming_the_field(text, where):
    assert _load(VALID % "unit: x") is not None  # the base claim is valid: each case breaks one thing
    path = _file()
    path.write_text(text)
    with pytest.raises(ClaimsError) as err:
        load_claims(path)
    message = str(err.value)
    assert where in message and "\n" not in message and len(message) < 500, message


def test_calibration_needs_a_finite_value():
    doc = yaml.safe_load(_real()["sdp"])
    next(c for c in doc["claims"] if "calibrate" in c)["calibrate"]["value"] = math.inf
    _file().write_text(_dump(doc))
    with pytest.raises(ClaimsError, match="calibrate: a finite value > 0"):
        load_claims(_file())
