"""A run that starts from another run's final model (`--set init_from=PATH`), and a run that saves its model
along its trajectory (`--set save_every=N` with `--checkpoint PATH`)."""

from __future__ import annotations

import pytest
import torch

from suite.evals.model_file import load_checkpoint, load_state, save_checkpoint, trajectory_path
from suite.models import build_model

SMALL = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "ffn_dim": 192, "max_seq_len": 64}
# the model files and the start from one are what is checked, not the meters: --no-meters spares each run its
# metered (FLOP-counted, memory-tracked) steps, about half of a tiny run's steps' time
ONE = ["ddp", "--nproc", "1", "--set", "eval_every=2", "--no-meters"]


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_load_state_reads_a_model_file_of_the_same_model_and_names_what_differs(tmp_path):
    model = build_model("llama-tiny", **SMALL)
    path = save_checkpoint(model, tmp_path / "m.pt", "llama-tiny", SMALL)
    assert _same(load_state(path, "llama-tiny", SMALL), model.state_dict())
    with pytest.raises(ValueError, match="no model file at .*; write one with --checkpoint PATH first"):
        load_state(tmp_path / "missing.pt", "llama-tiny", SMALL)
    with pytest.raises(ValueError, match="holds llama-tiny, this run builds llama-tiny .config differs in dim"):
        load_state(path, "llama-tiny", {**SMALL, "dim": 128})
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(ValueError, match="init_from .*junk.pt: not a readable checkpoint"):
        load_state(tmp_path / "junk.pt", "llama-tiny", SMALL)


def test_trajectory_path_puts_the_step_before_the_suffix(tmp_path):
    assert trajectory_path(tmp_path / "ft.pt", 40) == tmp_path / "ft-step000040.pt"


@pytest.mark.slow
def test_a_fine_tune_starts_from_the_file_and_a_trajectory_is_saved(runs, tmp_path):
    base = tmp_path / "base.pt"
    record = runs(*ONE, "--tokens", "4096", "--checkpoint", str(base), "--set", "save_every=2")
    assert record["status"] == "complete" and record["settings"]["save_every"] == 2
    saved = {s: load_checkpoint(trajectory_path(base, s))[0].state_dict() for s in (2, 4)}
    final = load_checkpoint(base)[0].state_dict()
    assert _same(saved[4], final) and not _same(saved[2], final)
    assert not trajectory_path(base, 1).exists() and not trajectory_path(base, 3).exists()
    # at learning rate 0 (AdamW's decoupled decay scales with it) a run from the file ends where it started
    tuned = tmp_path / "tuned.pt"
    record = runs(*ONE, "--tokens", "1024", "--checkpoint", str(tuned), "--set", f"init_from={base}", "--set", "lr=0")
    assert record["status"] == "complete" and record["settings"]["init_from"] == str(base)
    assert _same(load_checkpoint(tuned)[0].state_dict(), final)
    missing = runs(*ONE, "--tokens", "1024", "--set", f"init_from={tmp_path / 'none.pt'}", expect_ok=False)
    assert missing["status"] == "failed" and "no model file at" in missing["error"]
