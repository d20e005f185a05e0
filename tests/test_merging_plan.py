"""The merging reproduction's plan, its merge step (reproductions/merging/step.py) on small models, and its claim
metric over the step's records."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from reproductions.merging.plan import (
    FT_LR,
    OOD,
    SEEDS,
    STEP_TOKENS,
    SWA_PRESET,
    SWA_SEEDS,
    base_path,
    finetune_path,
    swa_path,
)
from reproductions.merging.plan import TASKS as PLANNED
from reproductions.merging.step import MERGES, merge_item
from suite.evals.model_file import save_checkpoint, trajectory_path
from suite.judge.claims import claims_for
from suite.judge.verdicts import claim_frame, judge_all
from suite.models import build_model
from suite.plan.micro import micro_record
from suite.plan.plans import load_plan
from suite.records import read_record, write_record
from suite.report.glance import metric_sides
from suite.run.checks import check_config
from suite.run.optim import lr_schedule

SMALL = {"dim": 32, "n_layers": 1, "n_heads": 2, "n_kv_heads": 2, "ffn_dim": 64, "max_seq_len": 64}
EVAL = {"n_batches": 1, "batch": 2, "seq_len": 32}
TASKS = ["text", "net", "concurrency"]


@pytest.mark.parametrize("preset", ["smoke", "quality", "gpu"])
def test_the_plan_checks_every_run_before_any_model_file_exists(preset):
    plan = load_plan("merging", preset)
    for cfg in plan.runs:
        if preset != "gpu":
            check_config(cfg)
    finetunes = [c for c in plan.runs if c.init_from == base_path(preset)]
    assert len(finetunes) == len(PLANNED) * len(SEEDS)
    # every fine-tune has one complete schedule and budget; only the first task's saves where SWA's tail starts
    assert {(c.tokens, c.lr, c.warmup_steps, c.lr_decay) for c in finetunes} == {
        (finetunes[0].tokens, FT_LR, finetunes[0].warmup_steps, "cosine")
    }
    assert {c.data for c in finetunes if c.save_every} == {f"stdlib-{PLANNED[0]}"}
    tails = [c for c in plan.runs if c.init_from not in (None, base_path(preset))]
    assert [c.checkpoint for c in tails] == [swa_path(preset, s) for s in SEEDS]
    assert OOD not in {c.data.removeprefix("stdlib-") for c in plan.runs}
    assert [item.name for item in plan.micro] == list(MERGES)


@pytest.mark.parametrize("preset", ["smoke", "quality"])
def test_swas_tail_continues_the_decaying_run_at_its_rate_for_the_tokens_it_replaces(preset):
    """SWA and the final iterate it is judged against spend the same tokens, and the tail goes on at the rate the
    decaying schedule (the trainer's own lr_schedule) had where the tail branches off."""
    runs = load_plan("merging", preset).runs
    for seed in SEEDS:
        decaying = runs.index(next(c for c in runs if c.checkpoint == finetune_path(preset, PLANNED[0], seed)))
        tail = runs.index(next(c for c in runs if c.checkpoint == swa_path(preset, seed)))
        ft, swa = runs[decaying], runs[tail]
        start = ft.save_every
        assert decaying < tail and swa.init_from == str(trajectory_path(ft.checkpoint, start))
        assert start * STEP_TOKENS + swa.tokens == ft.tokens and swa.lr_decay == "constant"
        steps = ft.tokens // STEP_TOKENS
        schedule = lr_schedule(torch.optim.SGD([torch.zeros(1)], lr=ft.lr), ft, lambda f=start / steps: f)
        assert swa.lr == pytest.approx(ft.lr * schedule.lr_lambdas[0](start))
        assert swa.seed != ft.seed and swa.data == ft.data


@pytest.mark.parametrize(
    ("preset", "pretrain", "finetune", "swa"),
    [("smoke", 200, 80, (4, 8, 12, 16, 20)), ("quality", 1000, 600, (30, 60, 90, 120, 150))],
)
def test_each_preset_has_its_budget_and_swa_averages_its_whole_tail(preset, pretrain, finetune, swa):
    """The quality preset's fine-tunes are 7.5x as long as the smoke preset's."""
    plan = load_plan("merging", preset)
    steps = {c.tokens // STEP_TOKENS for c in plan.runs if not c.init_from}
    assert steps == {pretrain}
    tuned = [c for c in plan.runs if c.init_from == base_path(preset)]
    assert {c.tokens // STEP_TOKENS for c in tuned} == {finetune}
    assert {c.warmup_steps for c in tuned} == {finetune // 10}
    (item,) = [i for i in plan.micro if i.name == "swa"]
    for row, seed in zip(item.shapes, SEEDS, strict=True):
        assert row["trajectory"] == [str(trajectory_path(swa_path(preset, seed), s)) for s in swa]


def _save(state: dict, path) -> str:
    model = build_model("llama-tiny", **SMALL)
    model.load_state_dict(state)
    return str(save_checkpoint(model, path, "llama-tiny", SMALL))


def _nudged(state: dict, scale: float, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=g) for k, v in state.items()}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """A base, three "fine-tunes" near it, a trajectory of the first, and a base from another initialisation."""
    folder = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    base = build_model("llama-tiny", **SMALL).state_dict()
    torch.manual_seed(1)
    other = build_model("llama-tiny", **SMALL).state_dict()
    tuned = [_nudged(base, 0.01, i) for i in range(3)]
    final = folder / "ft0.pt"
    trajectory = [_save(_nudged(tuned[0], 0.005, 10 + s), trajectory_path(final, s)) for s in (1, 2)]
    trajectory.append(_save(tuned[0], trajectory_path(final, 3)))
    return {
        "base": _save(base, folder / "base.pt"),
        "models": [_save(s, folder / f"ft{i}.pt") for i, s in enumerate(tuned)],
        "trajectory": trajectory,
        "control": _save(other, folder / "other.pt"),
    }


def _row(files: dict, merge: str, seed: int = 0) -> dict:
    return {
        "merge": merge,
        "seed": seed,
        "tasks": TASKS,
        "ood": "gui",
        "eval": EVAL,
        **files,
    }


@pytest.fixture(scope="module")
def scored(files) -> dict:
    return {merge: merge_item(torch.device("cpu"), **_row(files, merge))() for merge in MERGES}


def test_every_merge_scores_every_task_the_average_the_worst_and_the_held_out_domain(scored):
    for merge, out in scored.items():
        losses = [out[f"{t}_loss"] for t in TASKS]
        assert out["avg_loss"] == pytest.approx(sum(losses) / 3), merge
        # init-ingredients is the mean of two models' scores, field by field: the mean of their worst tasks
        assert merge == "init-ingredients" or out["worst_loss"] == max(losses), merge
        assert out["ood_loss"] > 0 and out["select_s"] >= 0
    assert scored["final-iterate"]["own_loss"] == scored["final-iterate"]["text_loss"]
    assert "own_loss" in scored["swa"] and scored["swa"]["merged_models"] == 1
    assert scored["ensemble"]["merged_models"] == 3
    # the final iterate of the trajectory is the first fine-tune, scored alike
    best, tuned0 = scored["best-single"], scored["final-iterate"]
    assert best["selected"] in (0, 1, 2) and (best["selected"] != 0 or best["avg_loss"] == tuned0["avg_loss"])


def test_the_negative_control_scores_the_mean_of_its_two_models(files, scored):
    alone = [
        merge_item(torch.device("cpu"), **{**_row(files, "base"), "base": p})()
        for p in (files["base"], files["control"])
    ]
    both = scored["init-ingredients"]
    assert both["avg_loss"] == pytest.approx((alone[0]["avg_loss"] + alone[1]["avg_loss"]) / 2)
    assert both["ood_loss"] == pytest.approx((alone[0]["ood_loss"] + alone[1]["ood_loss"]) / 2)


@pytest.mark.slow  # 33 rows measured three times each: two minutes on 2 busy cores
def test_merge_step_records_are_valid_and_the_claims_read_them(files, tmp_path):
    items = load_plan("merging", "smoke").micro
    records = []
    for item in items:
        small = dataclasses.replace(item, shapes=[_row(files, item.name, s) for s in (0, 1, 2)])
        rec = micro_record(small, "merging", f"python -m suite micro merging {item.name}", str(tmp_path))
        path = str(write_record(rec, tmp_path / f"{rec['run_id']}.json"))
        records.append({**read_record(path), "_path": path})  # as load_records gives them to the verdicts
    assert all(r["provenance"] == "measured" and len(r["micro"]["rows"]) == 3 for r in records)
    # the merge step's claims; merging-diloco-ties reads training runs, which this test makes none of
    claims = [c for c in claims_for("merging") if c.metric["name"] == "micro-merge"]
    assert len(claims) == 6
    verdicts = dict((c.id, v) for c, v in judge_all(claims, records))
    assert set(verdicts) == {c.id for c in claims}
    # three seeds of the same models and no fine-tune runs to show a plateau: nothing is decided (and with no run
    # naming a model's size, a card with the paper's regime cannot show its records inside it)
    for claim in claims:
        verdict = verdicts[claim.id]
        word = "inconclusive at small scale" if claim.regime else "inconclusive"
        assert verdict.verdict == word and verdict.n_seeds == 3, verdict.reason
        assert "runs too short" in verdict.reason or "every seed gives the same value" in verdict.reason
    # the glance panels draw each side's seeds from the merge step's rows, which no summary field holds
    frame = claim_frame(records)
    for claim in claims:
        sides = metric_sides(claim, verdicts[claim.id], frame)
        assert [label for label, _ in sides] == [claim.metric["method"], claim.metric["baseline"]]
        assert [len(values) for _, values in sides] == [3, 3]


def test_the_swa_seeds_preset_is_the_quality_presets_swa_at_more_seeds():
    """The same base, text fine-tune and tail as the quality preset, seed for seed, and only the two items the
    merging-swa card reads, each row merging the text fine-tune alone."""
    swa, quality = load_plan("merging", SWA_PRESET), load_plan("merging", "quality")
    for cfg in swa.runs:
        check_config(cfg)

    def same(cfg) -> dict:
        fields = dataclasses.asdict(cfg)
        return {k: v.replace(SWA_PRESET, "quality") if isinstance(v, str) else v for k, v in fields.items()}

    by_checkpoint = {c.checkpoint: same(c) for c in quality.runs}
    new = [same(c) for c in swa.runs if same(c)["checkpoint"] not in by_checkpoint]
    assert all(same(c) == by_checkpoint[same(c)["checkpoint"]] for c in swa.runs if same(c) not in new)
    assert len(swa.runs) - len(new) == 1 + 2 * len(SEEDS)  # the base, and the text fine-tune and tail of seeds 0-2
    assert [c.seed for c in swa.runs if c.checkpoint and "/ft-" in c.checkpoint] == list(SWA_SEEDS)
    assert [item.name for item in swa.micro] == ["swa", "final-iterate"]
    for item in swa.micro:
        assert [row["seed"] for row in item.shapes] == list(SWA_SEEDS)
        assert all(row["models"] == [finetune_path(SWA_PRESET, PLANNED[0], row["seed"])] for row in item.shapes)
