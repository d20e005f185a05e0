"""Hostile record files: whatever the bytes, reading gives a record or a one-line RecordError, and
load_records skips the file with that reason; no other exception escapes."""

from __future__ import annotations

import json
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suite.records import RecordError, _fast_validator, _validator, load_records, read_record
from tests.report_fixtures import make_record

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@lru_cache(maxsize=1)
def _real() -> str:
    return json.dumps(make_record("fsdp", 1), indent=1)


@lru_cache(maxsize=1)
def _folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="fuzz-records-"))


def _outcome(data: bytes) -> dict | None:
    """The record read back from these bytes, or None after a one-line RecordError; anything else fails."""
    path = _folder() / "run.json"
    path.write_bytes(data)
    try:
        record = read_record(path)
    except RecordError as err:
        message = str(err)
        assert message and "\n" not in message and len(message) < 500 + len(str(path)), message
        assert load_records(_folder()) == ([], [(str(path), message)])
        return None
    records, skipped = load_records(_folder())
    assert not skipped and [r["run_id"] for r in records] == [record["run_id"]]
    return record


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(data):
    assert _outcome(data) is None


@FUZZ
@given(st.data())
def test_truncated_real_records(data):
    text = _real()
    cut = data.draw(st.integers(0, len(text) - 2))
    assert _outcome(text[:cut].encode()) is None


@FUZZ
@given(JSON)
def test_valid_json_of_any_shape(value):
    assert _outcome(json.dumps(value).encode()) is None


def _paths(value, prefix=()):
    """Every (path, leaf) of a nested record."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*prefix, i))
    yield prefix, value


HOSTILE_VALUES = (
    JSON
    | st.sampled_from([10**30, -(10**30), 2**63, 1e308, -1e308, 5e-324, "", "\x00", "\n" * 3, [], {}, True])
    | st.text(min_size=1000, max_size=2000)
)


@FUZZ
@given(st.data(), HOSTILE_VALUES)
def test_a_real_record_with_one_field_replaced(data, value):
    record = json.loads(_real())
    paths = [p for p, _ in _paths(record) if p]
    path = data.draw(st.sampled_from(paths))
    target = record
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    read = _outcome(json.dumps(record).encode())
    assert read is None or read == record


@FUZZ
@given(st.data(), HOSTILE_VALUES)
def test_the_fast_check_passes_only_what_jsonschema_passes(data, value):
    """validate() trusts jsonschema-rs's yes (suite/records.py): it must never pass a record jsonschema refuses."""
    record = json.loads(_real())
    path = data.draw(st.sampled_from([p for p, _ in _paths(record) if p]))
    target = record
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    if _fast_validator().is_valid(record):
        assert _validator().is_valid(record), path


@pytest.mark.parametrize(
    "text, reason",
    [
        ('{"schema": NaN}', "NaN is not JSON"),
        ('{"schema": 1, "totals": {"steps": Infinity}}', "Infinity is not JSON"),
        ('{"schema": 1e999}', "overflows a float"),
        ('{"schema": 1, "x": ' + "9" * 5000 + "}", "beyond 64 bits"),
        ('{"schema": 1, "x": 9223372036854775808}', "beyond 64 bits"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a": ' * 3000 + "1" + "}" * 3000, "nested too deeply"),
        ("\ufeff{}", "not valid JSON"),
        ('"a record"', "a record is a JSON object, found str"),
        ('{"schema": "' + "x" * 10_000 + '"}', "unknown record schema 'xxx"),
    ],
)
def test_hostile_json_is_one_line_naming_the_problem(text, reason):
    path = _folder() / "run.json"
    path.write_text(text)
    with pytest.raises(RecordError, match=reason) as err:
        read_record(path)
    assert "\n" not in str(err.value) and len(str(err.value)) < 500


def test_invalid_bytes_are_a_record_error():
    path = _folder() / "run.json"
    path.write_bytes(b'{"schema": 1, "run_id": "\xff\xfe"}')
    with pytest.raises(RecordError, match="not UTF-8"):
        read_record(path)


def test_a_key_with_newlines_stays_on_one_line():
    record = make_record("ddp", 0)
    record["curve"][0] = {"step\nstep": 1}
    path = _folder() / "run.json"
    path.write_text(json.dumps(record))
    with pytest.raises(RecordError, match="curve") as err:
        read_record(path)
    assert "\n" not in str(err.value)


def test_records_round_trip_through_the_fuzzed_reader():
    """The hooks reject only what the writer never writes: a real record reads back equal."""
    assert _outcome(_real().encode()) == json.loads(_real())
