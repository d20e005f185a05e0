"""A quality preset on one GPU (suite/plan/one_gpu.py): the largest model of a ladder whose emulated replicas fit the
device's memory and whose runs fit the time budget by the costs measured first; the sdp and fl-fsdp gpu presets use
it when too few GPUs are visible. Tested on the CPU (no GPU here): the sizing with a scripted probe, the probe itself
with a real emulated run."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch

from suite.config import RunConfig
from suite.plan import one_gpu
from suite.plan.plans import StepCost, load_plan

sdp_plan = importlib.import_module("reproductions.sdp.plan")
LADDER = ("llama-tiny", "llama-tiny-8l", "llama-tiny-16l")
STEP_S = {"llama-tiny": 0.1, "llama-tiny-8l": 0.2, "llama-tiny-16l": 0.4}


def _build(model: str) -> list[RunConfig]:
    return [
        RunConfig(method=m, model=model, nproc=4, seed=s, tokens=100 * 4 * 4 * 128, micro_batch=4, eval_every=50)
        for s in range(3)
        for m in ("ddp", "local-sgd")
    ]


def _probe(seen: list):
    def probe(cfg: RunConfig) -> tuple[StepCost, int]:
        seen.append((cfg.model, cfg.method, cfg.seed))
        return StepCost(STEP_S[cfg.model], 1.0), 100

    return probe


@pytest.mark.parametrize("budget_s, chosen", [(200.0, "llama-tiny-8l"), (1000.0, "llama-tiny-16l")])
def test_the_largest_model_that_fits_the_budget_is_chosen_and_every_size_tried_is_noted(budget_s, chosen):
    seen: list = []
    runs, notes = one_gpu.fit(_build, LADDER, device="cpu", budget_s=budget_s, probe=_probe(seen))
    assert {c.model for c in runs} == {chosen} and all(c.emulate and c.device == "cpu" for c in runs)
    # each arm probed once a size (its seeds share its cost)
    assert seen == [(m, method, 0) for m in LADDER for method in ("ddp", "local-sgd")]
    # 6 runs of 100 steps and 2 evaluations of 1 s, 2 s a run, a 30-second launch (suite.plan.plans.estimated_wall_s)
    minutes = {m: (30 + 6 * (100 * s + 2 + 2)) / 60 for m, s in STEP_S.items()}
    for note, model in zip(notes, LADDER, strict=True):
        fits = "fits" if minutes[model] * 60 <= budget_s else "does not fit"
        assert note.startswith(f"{model}: estimated {minutes[model]:.1f} minutes, {fits} {budget_s / 60:.0f}")
        assert f"(ddp {STEP_S[model]:.3g} s a step, local-sgd {STEP_S[model]:.3g} s a step)" in note


def test_a_size_whose_replicas_do_not_fit_the_memory_is_not_probed_and_ends_the_ladder():
    seen: list = []
    huge = ("llama-tiny", "llama-8b", "llama-tiny-8l")
    runs, notes = one_gpu.fit(_build, huge, device="cpu", budget_s=1e6, probe=_probe(seen))
    assert {c.model for c in runs} == {"llama-tiny"} and {m for m, *_ in seen} == {"llama-tiny"}
    assert notes[1].startswith("llama-8b: ddp does not fit: 4 emulated workers need at least")


def test_when_even_the_smallest_size_is_over_the_budget_the_error_is_one_line():
    with pytest.raises(ValueError, match="no model fits one cpu in 0 minutes: llama-tiny: estimated") as err:
        one_gpu.fit(_build, LADDER, device="cpu", budget_s=1.0, probe=_probe([]))
    assert "\n" not in str(err.value)


def test_on_a_gpu_the_runs_train_in_bf16():
    assert {c.precision for c in one_gpu.on_device(_build("llama-tiny"), "cuda")} == {"bf16"}
    assert {c.precision for c in one_gpu.on_device(_build("llama-tiny"), "cpu")} == {"fp32"}


@pytest.mark.slow
def test_the_probe_measures_a_real_emulated_run_and_counts_a_flop_budgets_steps():
    """Two probes of DDP on 2 emulated workers: at a token budget of 40 steps, and at the FLOPs of 40 steps as
    sdp's step_flops counts them; both give 40 steps and a positive step and evaluation."""
    base = RunConfig(method="ddp", model="llama-tiny", nproc=2, micro_batch=2, seq_len=32, emulate=True, eval_every=20)
    by_tokens = dataclasses.replace(base, tokens=40 * 2 * 2 * 32)
    by_flops = dataclasses.replace(base, tokens=None, flops=40 * sdp_plan.step_flops("llama-tiny", 4, 32))
    for cfg in (by_tokens, by_flops):
        cost, steps = one_gpu.measure(cfg)
        assert steps == 40 and cost.step_s > 0 and cost.eval_s > 0


def test_the_sdp_and_fl_gpu_presets_size_their_emulated_preset_on_one_gpu(monkeypatch):
    """With one GPU visible the gpu presets plan the eight (sdp) and shape (fl-fsdp) presets' arms through
    one_gpu.fit (here on the CPU with a scripted probe), and the plan's notes carry every size tried."""
    fit = one_gpu.fit
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(
        one_gpu, "fit", lambda build, ladder: fit(build, ladder, device="cpu", budget_s=1e9, probe=_constant)
    )
    for name, preset, workers in (("sdp", "eight", 8), ("fl-fsdp", "shape", 128)):
        planned = load_plan(name, "gpu")
        cpu = load_plan(name, preset)
        assert {(c.method, c.nproc, c.emulate) for c in planned.runs} == {(c.method, workers, True) for c in cpu.runs}
        assert len(planned.runs) == len(cpu.runs)
        assert any(n.startswith(f"{planned.runs[0].model}: estimated") for n in planned.notes)


def _constant(cfg: RunConfig) -> tuple[StepCost, int]:
    return StepCost(0.01, 0.01), 10
