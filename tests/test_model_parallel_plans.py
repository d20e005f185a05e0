"""The model-parallel arms of the baselines and SDP plans (issue 29): planned at their world sizes, with the tokens
and global batch of the arm they are compared with, the SDP cards against PP and TP paired by global batch, and the
1B estimates of B-SDP against TP. No run is launched here (tests/test_model_parallel_runs.py runs the methods)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from reproductions.sdp.metrics import global_batch_setting, ratio_global_batch
from suite.judge.claims import claims_for
from suite.judge.sides import Sides
from suite.plan.plans import load_plan

# data-parallel replicas of each method on its world size (TP, PP and CP ranks are one replica)
REPLICAS = {"ddp": 2, "zero1": 2, "tp": 1, "pp": 1, "cp": 1, "ep": 2, "fsdp-tp": 2, "pp-fsdp": 2}


def _global_sequences(cfg) -> int:
    replicas = cfg.nproc if cfg.method in ("fsdp", "hsdp") else REPLICAS[cfg.method]
    return replicas * cfg.micro_batch * cfg.grad_accum


def test_the_baselines_smoke_plan_runs_every_model_parallel_arm_as_ddp_does():
    runs = load_plan("baselines", "smoke").runs
    by = {(c.method, c.model): c for c in runs if not c.ac and c.precision == "fp32"}
    assert {
        ("zero1", "llama-tiny"): 2,
        ("tp", "llama-tiny"): 2,
        ("pp", "llama-tiny"): 2,
        ("cp", "llama-tiny"): 2,
        ("fsdp-tp", "llama-tiny"): 4,
        ("pp-fsdp", "llama-tiny"): 4,
        ("ddp", "llama-tiny-moe"): 2,
        ("ep", "llama-tiny-moe"): 2,
    }.items() <= {k: c.nproc for k, c in by.items()}.items()
    ddp = by[("ddp", "llama-tiny")]
    for (method, _), cfg in by.items():
        assert cfg.tokens == ddp.tokens and cfg.seq_len == ddp.seq_len, method
        assert _global_sequences(cfg) == _global_sequences(ddp) == 16, method
        assert cfg.eval_every == ddp.eval_every and cfg.lr == ddp.lr, method
    assert by[("pp", "llama-tiny")].variant == {"schedule": "1f1b"}  # 2 stages: one per rank


def test_the_sdp_smoke_plan_runs_pp_and_tp_beside_b_sdp_at_2_ranks():
    runs = [c for c in load_plan("sdp", "smoke").runs if c.nproc == 2]
    by = {c.method: c for c in runs}
    assert set(by) == {"b-sdp", "pp", "tp"} and by["b-sdp"].variant == {"C": 0.5}
    sdp = by["b-sdp"]
    assert sdp.micro_batch * 2 == by["pp"].micro_batch == by["tp"].micro_batch == 16  # one global batch
    for cfg in by.values():
        assert (cfg.tokens, cfg.lr, cfg.lr_decay, cfg.seq_len) == (sdp.tokens, sdp.lr, sdp.lr_decay, sdp.seq_len)


def test_the_sdp_smoke_plan_estimates_b_sdp_beside_tp_at_1b_on_2_ranks():
    by = {e.cfg.method: e.cfg for e in load_plan("sdp", "smoke").estimates if e.cfg.nproc == 2}
    assert set(by) == {"b-sdp", "tp"} and by["b-sdp"].variant == {"C": 0.5}
    assert by["tp"].variant == {"sequence_parallel": False}
    sdp, tp = by["b-sdp"], by["tp"]
    assert sdp.micro_batch * 2 == tp.micro_batch  # one global batch
    for cfg in by.values():
        assert (cfg.model, cfg.seq_len, cfg.precision, cfg.ac) == ("llama-1b", sdp.seq_len, sdp.precision, False)


def test_the_1b_cards_against_tp_are_decided_by_a_checked_estimate():
    cards = [c for c in claims_for("sdp") if c.id.startswith("sdp-vs-tp-1b-")]
    assert {c.metric["field"] for c in cards} == {"peak_bytes_max", "state_bytes_max", "comm_bytes_per_rank_step"}
    for card in cards:
        assert card.metric["model"] == "llama-1b" and "estimated" in card.evidence and card.estimator_check


def test_the_cards_against_model_parallelism_read_each_field_against_pp_and_tp():
    cards = {c.id: c for c in claims_for("sdp") if c.id.startswith("sdp-vs-") and "-1b-" not in c.id}
    assert len(cards) == 8
    for card in cards.values():
        assert card.paper_value is None and card.metric["name"] == "ratio-global-batch"
        assert card.metric["arm"]["world_size"] == card.metric["baseline_arm"]["world_size"] == 2
    fields = {(c.metric["baseline"], c.metric["field"]) for c in cards.values()}
    assert fields == {
        (b, f)
        for b in ("pp", "tp")
        for f in ("peak_bytes_max", "state_bytes_max", "comm_bytes_per_rank_step", "cpu_step_s_median")
    }


def _row(method: str, micro_batch: int, peak: float, variant: dict) -> dict:
    arm = {"world_size": 2, "data": "text"}
    return {
        "run_id": method, "method": method, "model": "llama-tiny", "seed": 0, "tokens": 40960, "steps": 20,
        "setting": f"model=llama-tiny seq_len=128 micro_batch={micro_batch} grad_accum=1 precision=fp32",
        "variant": json.dumps(variant), "arm_config": json.dumps(arm), "arm": method, "arm_label": method,
        "peak_bytes_max": peak,
    }  # fmt: skip


def test_the_metric_pairs_runs_by_global_batch_not_micro_batch():
    assert global_batch_setting("model=m seq_len=128 micro_batch=8 precision=fp32", 40960, 20) == (
        "model=m seq_len=128 precision=fp32 global_batch_tokens=2048"
    )
    df = pd.DataFrame([_row("b-sdp", 8, 60.0, {"C": 0.5}), _row("pp", 16, 100.0, {"schedule": "1f1b"})])
    args = dict(method="b-sdp", baseline="pp", variant={"C": 0.5}, baseline_variant={"schedule": "1f1b"})
    sides = Sides.of({**args, "arm": {"world_size": 2}, "baseline_arm": {"world_size": 2}})
    samples = ratio_global_batch(df, "peak_bytes_max", sides)
    assert list(samples.values) == pytest.approx([0.6])
    other = df.assign(tokens=[40960, 81920])  # a different global batch never pairs
    assert not len(ratio_global_batch(other, "peak_bytes_max", Sides.of({**args, "arm": {"world_size": 2}})).values)
