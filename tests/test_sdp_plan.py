"""SDP's plan gives its cards what they need: every arm a card reads exists in the preset that judges it,
vision arms average over at least two holders, the FLOP budget is measured, and the quality preset runs long
enough with one schedule for every arm (issue 12)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from reproductions.sdp.masks import assign
from reproductions.sdp.method import count_blocks
from suite.config import RunConfig
from suite.judge.claims import claims_for
from suite.judge.sides import Side
from suite.judge.sweeps import sweep_winners
from suite.meters.flops import FlopMeter
from suite.models import build_model

sdp_plan = importlib.import_module("reproductions.sdp.plan")  # the package exports its plan function as `plan`
TUNED = Path(__file__).parents[1] / "results" / "sdp-tune"


def _frame(runs: list[RunConfig]) -> pd.DataFrame:
    """The rows a card selects on, one per planned run (what the records of these runs will hold)."""
    rows = []
    for cfg in runs:
        protocol = "flops" if cfg.flops else "tokens"
        variant = {**cfg.variant, "ac": cfg.ac, "precision": cfg.precision}
        if cfg.method == "b-sdp":
            variant = {"aggregation": "groups", **variant}
        rows.append({"method": cfg.method, "model": cfg.model, "variant": json.dumps(variant), "protocol": protocol})
    return pd.DataFrame(rows)


def _missing_arms(claims, df: pd.DataFrame) -> list[str]:
    missing = []
    for c in claims:
        m = c.metric
        for method, variant, protocol in (
            (m["method"], m.get("variant"), c.protocol),
            (m.get("baseline"), m.get("baseline_variant"), c.baseline_protocol or c.protocol),
        ):
            if method is None:
                continue
            rows = Side(method, variant=variant, model=m.get("model")).rows(df)
            if protocol:
                rows = rows[rows["protocol"] == protocol]
            if rows.empty:
                missing.append(f"{c.id}: {method} {variant or ''} {protocol or ''}")
    return missing


def test_every_card_without_hardware_needs_finds_its_arms_in_the_preset_its_command_names():
    cards = [c for c in claims_for("sdp") if not c.requires and "estimated" not in c.evidence]
    by_preset: dict[str, list] = {}
    for c in cards:
        by_preset.setdefault(c.command.split("--preset ")[1].split()[0], []).append(c)
    assert {"smoke", "quality", "masking"} <= set(by_preset)
    for preset, named in by_preset.items():
        assert not _missing_arms(named, _frame(sdp_plan.plan(preset).runs)), preset


def test_every_estimated_card_finds_its_arms_among_the_estimates():
    cards = [c for c in claims_for("sdp") if "estimated" in c.evidence]
    estimates = [e.cfg for preset in ("smoke", "calibrate") for e in sdp_plan.plan(preset).estimates]
    assert cards and not _missing_arms(cards, _frame(estimates))


def test_the_gpu_preset_runs_every_arm_its_cards_need(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(sdp_plan, "step_flops", lambda model, sequences, seq_len, blocks=None: 1e12 * sequences)
    monkeypatch.setenv("CIFAR_ROOT", "/data/cifar")
    cards = [c for c in claims_for("sdp") if set(c.requires) <= {"cuda"} and "estimated" not in c.evidence]
    # the masking and eight presets' cards are CPU stand-ins of 8-GPU cards (8 gloo or emulated workers)
    cards = [c for c in cards if not any(f"--preset {p}" in c.command for p in ("masking", "eight"))]
    runs = sdp_plan.plan("gpu").runs
    assert {c.id for c in cards} >= {"sdp-resnet18-cifar", "sdp-swin-cifar", "sdp-memory-range"}
    assert not _missing_arms(cards, _frame(runs))
    cifar = [r for r in runs if r.data == "cifar10"]
    assert cifar and all(r.data_root == "/data/cifar" for r in cifar)
    assert {r.seed for r in cifar} == {0, 1, 2}


def test_the_paper_preset_runs_three_seeds_flop_matched(monkeypatch):
    monkeypatch.setattr(sdp_plan, "step_flops", lambda model, sequences, seq_len, blocks=None: 1e12 * sequences)
    runs = sdp_plan.plan("paper").runs
    card = next(c for c in claims_for("sdp") if c.id == "sdp-1b-val-loss")
    assert not _missing_arms([card], _frame(runs))
    assert {r.seed for r in runs if r.model == "llama-1b" and r.method == "b-sdp"} == {0, 1, 2}


def test_vision_arms_average_every_component_over_two_holders_or_more():
    from reproductions.sdp.neurons import DEFAULT_GROUPS

    for cfg in sdp_plan.plan("smoke").runs:
        if cfg.model != "resnet18" or cfg.method == "ddp":
            continue
        components = count_blocks(cfg.model) if cfg.method == "b-sdp" else DEFAULT_GROUPS
        mask = assign(components, cfg.nproc, cfg.variant["C"])
        assert min(mask.holder_counts()) >= 2, (cfg.method, mask.holder_counts())
        assert mask.spectral_gap() > 0


def test_the_quality_preset_uses_one_schedule_and_evaluates_in_its_last_fifth():
    runs = sdp_plan.plan("quality").runs
    assert {(r.lr, r.seq_len, r.micro_batch, r.nproc) for r in runs} == {(runs[0].lr, 128, 4, 4)}
    steps = sorted({r.tokens // (4 * 4 * 128) for r in runs if r.method == "ddp"})
    assert tuple(steps) == sdp_plan.QUALITY_STEPS and all(r.eval_every <= steps[0] / 5 for r in runs)


def test_the_flop_budget_is_linear_in_the_batch():
    torch.manual_seed(0)
    net = build_model("llama-tiny")
    tokens = torch.randint(0, net.cfg.vocab_size, (3, 65))
    with FlopMeter() as meter:
        out = net(tokens[:, :-1])
        torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), tokens[:, 1:].reshape(-1)).backward()
    assert sdp_plan.step_flops("llama-tiny", 3, 64) == meter.model_flops


def test_calibration_sweeps_both_baselines_and_places_the_method_where_they_fit():
    swept = {(e.cfg.method, e.cfg.micro_batch, e.cfg.precision) for e in sdp_plan.plan("calibrate").estimates}
    for settings in sdp_plan.SWEEP:
        for method in ("ddp", "fsdp"):
            if not sdp_plan._is_default(settings):
                assert (method, settings["micro_batch"], settings["precision"]) in swept
    for settings, baseline in sdp_plan.CALIBRATED:
        for method, _, _ in sdp_plan.CALIBRATED_ARMS[baseline]:
            assert (method, settings["micro_batch"], settings["precision"]) in swept


def test_an_unknown_preset_names_the_known_ones():
    from suite.plan.plans import load_plan

    with pytest.raises(ValueError, match="has no preset 'huge'"):
        load_plan("sdp", "huge")


def test_the_tuned_preset_waits_for_the_tune_with_the_fix_in_one_line(monkeypatch):
    monkeypatch.setattr(sdp_plan, "LR_TUNED", dict.fromkeys(sdp_plan.LR_TUNED))
    with pytest.raises(ValueError, match="--preset tune") as err:
        sdp_plan.plan("tuned")
    assert "\n" not in str(err.value)


def test_the_tuned_preset_runs_the_tunes_arms_at_their_rates_on_the_other_seeds(monkeypatch):
    rates = {"ddp": 1.5e-3, "b-sdp C=0.5": 3e-3, "b-sdp C=0.75": 6e-3}
    monkeypatch.setattr(sdp_plan, "LR_TUNED", rates)
    tune, tuned = sdp_plan.plan("tune").runs, sdp_plan.plan("tuned").runs
    assert sorted((sdp_plan.tune_key(c), c.seed, c.lr) for c in tuned) == sorted(
        (k, s, rate) for k, rate in rates.items() for s in sdp_plan.TUNED_SEEDS
    )
    assert 0 not in sdp_plan.TUNED_SEEDS
    assert {_arm_but_rate(c) for c in tuned} == {_arm_but_rate(c) for c in tune}


def test_the_long_tune_sweeps_the_600_step_cards_arms_and_each_plan_fits_90_minutes(monkeypatch):
    """Issue 41 item 9: the arms of sdp-quality-flop-matched (DDP and B-SDP at C = 0.5 FLOP-matched, 600 DDP steps)
    tuned at that horizon over the tune's grid, then on the tuned seeds; neither plan over 90 minutes on 2 cores."""
    quality = {_arm_but_rate(c) for c in sdp_plan.plan("quality").runs if c.seed == 0}
    tune = sdp_plan.plan("tune-long")
    assert {sdp_plan.tune_key(c) for c in tune.runs} == {"ddp", "b-sdp C=0.5"}
    assert {_arm_but_rate(c) for c in tune.runs} <= quality
    assert max(c.warmup_steps for c in tune.runs) == 60  # the longer budget's schedule
    assert sorted({c.lr for c in tune.runs}, key=lambda r: r or sdp_plan.SMOKE["lr"]) == sorted(
        {None if r == sdp_plan.SMOKE.get("lr") else r for r in sdp_plan.LR_GRID},
        key=lambda r: r or sdp_plan.SMOKE["lr"],
    )
    low = sdp_plan.plan("tune-long-low")  # the grid extended below, the same arms
    assert {_arm_but_rate(c) for c in low.runs} == {_arm_but_rate(c) for c in tune.runs}
    assert sorted(c.lr for c in low.runs) == sorted(sdp_plan.LONG_LOW_GRID * 2)
    assert max(sdp_plan.LONG_LOW_GRID) < min(sdp_plan.LR_GRID)
    tuned = sdp_plan.plan("tuned-long")
    assert sorted((sdp_plan.tune_key(c), c.seed, c.lr) for c in tuned.runs) == sorted(
        (k, s, r) for k, r in sdp_plan.LONG_TUNED.items() for s in sdp_plan.TUNED_SEEDS
    )
    for plan in (tune, low, tuned):
        assert sdp_plan.quality_wall_s(plan.runs) < 90 * 60
    monkeypatch.setattr(sdp_plan, "LONG_TUNED", dict.fromkeys(sdp_plan.LONG_TUNED))
    with pytest.raises(ValueError, match="--preset tune-long.*LONG_TUNED"):
        sdp_plan.plan("tuned-long")


def _arm_but_rate(cfg: RunConfig) -> tuple:
    return cfg.method, cfg.tokens, cfg.flops, cfg.warmup_steps, cfg.lr_decay, cfg.data, str(cfg.variant)


def test_the_tuned_rates_are_the_committed_tunes_winners_inside_their_grid():
    winners = sweep_winners(TUNED, sdp_plan.LR_SWEEP)
    by_key = {_key_of(w.label): w.lr for w in winners.values()}
    assert by_key == sdp_plan.LR_TUNED
    assert {w.grid for w in winners.values()} == {sdp_plan.LR_GRID}


def test_the_long_tuned_rates_are_the_winners_of_the_long_tune_and_its_extension_inside_their_grid():
    folders = [TUNED.with_name("sdp-tune-long"), TUNED.with_name("sdp-tune-long-low")]
    winners = sweep_winners(folders, sdp_plan.LR_SWEEP)
    assert {_key_of(w.label): w.lr for w in winners.values()} == sdp_plan.LONG_TUNED
    assert {w.grid for w in winners.values()} == {(*sdp_plan.LONG_LOW_GRID, *sdp_plan.LR_GRID)}


def _key_of(label: str) -> str:
    """LR_TUNED's key of a swept arm's label ("b-sdp C=0.5 aggregation=groups n4 llama-tiny")."""
    words = label.split()
    return " ".join([words[0], *(w for w in words[1:] if w.startswith("C="))])


def test_the_tuned_cards_read_each_side_at_its_tuned_rate_and_the_others_at_the_shared_rate():
    """The quality cards of the tuned protocol name each side's LR_TUNED rate (LONG_TUNED at the longer budget),
    those of the untuned one the shared 3e-3, so no card of one protocol matches the other's runs."""
    for claim in claims_for("sdp"):
        m = claim.metric
        if m.get("baseline") != "ddp" or (m.get("arm") or {}).get("data") != "stdlib":
            continue
        method = f"{m['method']} C={m['variant']['C']:g}"
        sides = {method: m["arm"]["lr"], "ddp": m["baseline_arm"]["lr"]}
        protocol = claim.id[claim.id.rfind("-tuned") :]
        tuned = {"-tuned": sdp_plan.LR_TUNED, "-tuned-long": sdp_plan.LONG_TUNED}.get(protocol)
        assert sides == {k: tuned[k] if tuned else 3e-3 for k in sides}, claim.id


def test_backward_masking_gets_forward_maskings_flops_in_the_masking_preset():
    """sdp-backward-masking-sparse-cpu-flops: bb-sdp's budget is b-sdp's FLOPs at equal tokens, half a step short. The
    per-step count of the truncated model (the shared parts and the held blocks) equals what the committed b-sdp
    runs counted a step with every worker's FLOP meter."""
    from suite.plan.plans import load_plan

    by_budget = {(r.method, "flops" if r.flops else "tokens"): r for r in load_plan("sdp", "masking").runs}
    equal, matched = by_budget["b-sdp", "tokens"], by_budget["bb-sdp", "flops"]
    per_step = sdp_plan.step_flops("llama-tiny-8l", 16, 128, blocks=3)
    assert matched.flops == (sdp_plan.MASKING_STEPS - 0.5) * per_step and equal.tokens == 300 * 16 * 128
    root = Path(__file__).resolve().parents[1] / "results" / "sdp-masking"
    counted = [json.loads(p.read_text()) for p in sorted(root.glob("b-sdp-*.json"))]
    assert counted and all(r["totals"]["flops"] == r["totals"]["steps"] * per_step for r in counted)


def test_the_eight_preset_runs_the_1b_comparison_on_eight_emulated_workers_within_90_minutes():
    """sdp-1b-val-loss-eight: DDP at equal steps and B-SDP at C = 0.69 FLOP-matched, 8 workers of llama-tiny-16l
    (llama-1b's 16 blocks) as threads of one process, three seeds; the plan states its estimate, under 90 minutes."""
    plan = sdp_plan.plan("eight")
    arms = {(r.method, "flops" if r.flops else "tokens", r.variant.get("C")) for r in plan.runs}
    assert arms == {("ddp", "tokens", None), ("b-sdp", "flops", 0.69)}
    assert all(r.emulate and r.nproc == 8 and r.model == "llama-tiny-16l" for r in plan.runs)
    assert sorted(r.seed for r in plan.runs) == [0, 0, 1, 1, 2, 2]
    assert sdp_plan.eight_wall_s(plan.runs) < 90 * 60
    assert any("estimated wall time" in n for n in plan.notes)


def test_the_trend_preset_runs_the_eight_comparison_on_shallower_models_for_its_cards_trend():
    """Issue 44: the eight preset's arms, workers and steps at 4 and 8 blocks of llama-tiny's width (its 16 are the
    eight preset), each FLOP-matched on its own model; the eight card reads them along the blocks, under 90 minutes."""
    eight, trend = sdp_plan.plan("eight").runs, sdp_plan.plan("trend").runs

    def same(cfg: RunConfig) -> tuple:
        return cfg.method, str(cfg.variant), cfg.nproc, cfg.micro_batch, cfg.seq_len, cfg.lr, cfg.seed, cfg.emulate

    assert {c.model for c in trend} == set(sdp_plan.TREND_MODELS) == {"llama-tiny", "llama-tiny-8l"}
    assert {same(c) for c in trend} == {same(c) for c in eight}
    for model in sdp_plan.TREND_MODELS:
        ddp = next(c for c in trend if c.model == model and c.method == "ddp")
        bsdp = next(c for c in trend if c.model == model and c.method == "b-sdp")
        steps = ddp.tokens / (16 * 128)  # DDP's FLOPs over its steps, half a step short (_budgets)
        assert bsdp.flops == pytest.approx(sdp_plan.step_flops(model, 16, 128) * (steps - 0.5))
    assert sdp_plan.eight_wall_s(trend) < 90 * 60
    (card,) = [c for c in claims_for("sdp") if c.trend]
    assert (card.id, card.trend.axis, card.trend.paper) == ("sdp-1b-val-loss-eight", "blocks", 16)
