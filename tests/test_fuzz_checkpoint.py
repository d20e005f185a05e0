"""Hostile model checkpoints (`python -m suite evaluate FILE`): random, truncated or corrupted bytes, files of
the wrong shape, configs far larger than their weights, and pickles that would run code all give a one-line
error; loading uses torch.load(weights_only=True) and no code in a file ever runs."""

from __future__ import annotations

import io
import os
import pickle
import tempfile
import time
from functools import lru_cache
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.cli import main
from suite.evals.model_file import FORMAT, load_checkpoint, save_checkpoint
from suite.models import build_model

MODEL, CONFIG = (
    "llama-tiny",
    {"n_layers": 1, "dim": 32, "n_heads": 4, "n_kv_heads": 4, "ffn_dim": 64, "max_seq_len": 32},
)
FUZZ = settings(max_examples=80, deadline=None)


@lru_cache(maxsize=1)
def _folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="fuzz-checkpoint-"))


@lru_cache(maxsize=1)
def _real() -> bytes:
    path = save_checkpoint(build_model(MODEL, **CONFIG), _folder() / "real.pt", MODEL, CONFIG)
    return path.read_bytes()


def _outcome(data: bytes) -> torch.nn.Module | None:
    """The model loaded from these bytes, or None after a one-line ValueError; anything else fails."""
    path = _folder() / "model.pt"
    path.write_bytes(data)
    try:
        return load_checkpoint(path)[0]
    except ValueError as err:
        message = str(err)
        assert message.startswith(f"{path}: ") and "\n" not in message and len(message) < 400, message
        return None


def _saved(payload) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data):
    assert _outcome(data) is None


@FUZZ
@given(st.data())
def test_truncated_checkpoints(data):
    cut = data.draw(st.integers(0, len(_real()) - 1))
    assert _outcome(_real()[:cut]) is None


@FUZZ
@given(st.data())
def test_corrupted_checkpoints(data):
    """Bytes overwritten anywhere: the file loads (the damage hit tensor data) or is one clear error."""
    raw = bytearray(_real())
    start = data.draw(st.integers(0, len(raw) - 1))
    junk = data.draw(st.binary(min_size=1, max_size=16))
    raw[start : start + len(junk)] = junk[: len(raw) - start]
    _outcome(bytes(raw))


PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12,
)


@FUZZ
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "format": st.sampled_from([FORMAT, 0, "1", None]),
            "model": st.sampled_from([MODEL, "resnet18", "gpt9", ""]) | PLAIN,
            "config": st.dictionaries(
                st.sampled_from([*CONFIG, "vocab_size", "tie_embeddings", "num_classes", "zzz"]),
                st.integers(-3, 10**12) | st.booleans() | st.floats() | st.text(max_size=4),
                max_size=4,
            ).map(lambda c: {**CONFIG, **c})
            | PLAIN,
            "state_dict": st.just("real") | PLAIN,
            "data": PLAIN,
        },
    )
)
def test_payloads_of_any_shape(payload):
    if payload.get("state_dict") == "real":
        payload["state_dict"] = build_model(MODEL, **CONFIG).state_dict()
    model = _outcome(_saved(payload))
    assert model is None or (payload["model"] == MODEL and payload["config"] == CONFIG)


def test_a_real_checkpoint_loads():
    model = _outcome(_real())
    assert model is not None and sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.parametrize(
    "config, message",
    [
        ({**CONFIG, "n_layers": 10**7}, "has more parameters than the file's"),
        ({**CONFIG, "dim": 10**6, "n_heads": 1, "n_kv_heads": 1}, "weights do not fit"),
        ({**CONFIG, "vocab_size": 10**18}, "config does not build"),
        ({**CONFIG, "n_layers": 2}, "weights do not fit llama-tiny with this config .first difference: 'layers.1"),
    ],
)
def test_a_config_larger_than_its_weights_stops_before_allocating(config, message):
    """The model is first built on the meta device: a config that names a huge model costs no memory."""
    payload = {"format": FORMAT, "model": MODEL, "config": config, "data": None}
    payload["state_dict"] = build_model(MODEL, **CONFIG).state_dict()
    path = _folder() / "model.pt"
    path.write_bytes(_saved(payload))
    start = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        load_checkpoint(path)
    assert time.perf_counter() - start < 10


class _Runs:
    """Unpickling this calls a function that creates `marker`: the proof that code ran."""

    def __init__(self, call, marker: Path):
        self.call, self.marker = call, marker

    def __reduce__(self):
        if self.call == "system":
            return (os.system, (f"touch {self.marker}",))
        if self.call == "exec":
            return (exec, (f"open({str(self.marker)!r}, 'w').close()",))
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("call", ["system", "exec", "touch"])
@pytest.mark.parametrize("container", ["pickle", "torch.save"])
def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(call, container, tmp_path):
    marker = tmp_path / "ran"
    evil = _Runs(call, marker)
    payload = {"format": FORMAT, "model": MODEL, "config": CONFIG, "data": evil, "state_dict": {}}
    data = pickle.dumps(payload, protocol=2) if container == "pickle" else _saved(payload)
    path = tmp_path / "model.pt"
    path.write_bytes(data)
    with pytest.raises(ValueError, match="the weights-only loader refused it") as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value) and not marker.exists()
    # the control: the same bytes, loaded trusting them, do run the code
    pickle.loads(data) if container == "pickle" else torch.load(path, weights_only=False)
    assert marker.exists()


def test_loading_asks_torch_for_weights_only(monkeypatch):
    seen = []
    real_load = torch.load

    def spy(*args, **kwargs):
        seen.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    assert _outcome(_real()) is not None
    assert seen == [True]


def test_evaluate_names_a_hostile_checkpoint_in_one_line(tmp_path, capsys):
    marker = tmp_path / "ran"
    path = tmp_path / "model.pt"
    path.write_bytes(pickle.dumps(_Runs("system", marker), protocol=2))
    assert main(["evaluate", str(path), "--evals", "heldout_next", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(f"error: {path}: not a readable checkpoint: the weights-only loader refused")
        and len(err.splitlines()) == 1
    ), err
    assert not marker.exists()
