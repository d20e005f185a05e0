"""SDP's plan: DDP against B-SDP and N-SDP, equal steps and FLOP-matched, on LLaMA and ResNet-18; the
dense aggregation, backward masking and the two SDP+FSDP readings; paper-scale estimates and projections.

Equal steps: every arm gets the same tokens (same global batch, same number of steps). FLOP-matched:
every arm gets the FLOPs DDP spends in those steps, so an SDP arm, which computes only what it holds,
trains about 1/C longer. The FLOP budget is measured here (FlopMeter on one DDP step of the model), not
typed in; DDP's equal-steps runs thus spend it exactly and serve as the FLOP-matched baseline too
(claims.yaml: baseline_protocol).

Smoke (this machine, K = 4 gloo workers): llama-tiny (4 blocks) on the embedded text; the quality arms
(DDP, B-SDP C=0.5 FLOP-matched, C=0.75 equal steps) with SDP_SEEDS seeds (default 3), DDP and the
FLOP-matched arm scored also on the local lm-eval task heldout_next; the memory and byte arms with one seed;
ResNet-18 on the embedded digits with 4 workers (DDP, B-SDP, N-SDP; two holders per component). Paper-scale
memory and bytes come from `estimate` (fake tensors; llama-1b and llama-500m on 8 ranks, 1B B-SDP vs TP on 2), and the
inter-node wall-clock from projecting those ledgers onto 2 nodes of 4 A100s (suite/sim): both labelled,
never mixed with measurements. Quality (CPU, 2,536 s measured on 2 quiet cores, results/sdp-quality; estimated 62
minutes, see quality_wall_s): the smoke quality arms on the stdlib corpus at two budgets a factor 2 apart
(QUALITY_STEPS DDP steps), SDP_SEEDS seeds each, one schedule for every arm (QUALITY_SCHEDULE: warm-up over 10% of
DDP's steps, then cosine over each arm's own budget) at the smoke learning rate, not tuned per arm. Tune (CPU, 1,559
s measured on 2 cores, results/sdp-tune; estimated 35 minutes, see quality_wall_s): the learning-rate sweep of the
tuned protocol (issue 26 item 3, AlgoPerf's rule), each quality arm on seed 0 at the shorter budget, on the quality
preset's corpus and schedule rule, at every rate of LR_GRID (15 runs), filed as LR_SWEEP;
suite.judge.sweeps.sweep_winners picks each arm's rate (LR_TUNED) and refuses a winner at the grid's edge. Tuned (CPU,
1,730 s measured on 2 quiet cores, results/sdp-tuned): the tune's arms at their LR_TUNED rates on TUNED_SEEDS, at the
tune's budget. Tune-long and tuned-long (CPU; estimated 49 and 59 minutes, see quality_wall_s): the same two steps at
the longer budget for the arms of the 600-step card (DDP, B-SDP at C = 0.5 FLOP-matched), rates in LONG_TUNED;
tune-long-low extends that tune's grid one step down (LONG_LOW_GRID), where its first pass found DDP at the edge.
Masking (CPU, 8 gloo workers): b-sdp against bb-sdp at C = 3/8 on llama-tiny-8l, three seeds, the
quality corpus and schedule rule. Eight (CPU, emulated workers; see EIGHT): B-SDP at C = 0.69 FLOP-matched against DDP
at the paper's 8 workers on llama-tiny-16l, llama-1b's depth, three seeds (estimated in eight_wall_s). Trend: the
same at 4 and 8 blocks (TREND_MODELS), for that card's trend along the depth.
Calibrate (CPU, about 12 minutes, written beside the smoke records): the 1B baselines over micro-batch and
precision, and the method where they match the paper's absolute numbers. GPU: llama-134m on every visible GPU (at
least 2), three seeds, and the CIFAR arms where CIFAR_ROOT holds the data. Paper: the paper's LLaMA runs on FineWeb
with 8 workers, three seeds, to run where they fit.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import torch

from reproductions.sdp.masks import held_count
from suite.config import RunConfig
from suite.meters.flops import FlopMeter
from suite.models import build_model, model_config
from suite.plan import one_gpu
from suite.plan.plans import Estimate, Plan, Schedule, StepCost, estimated_wall_s, lr_sweep, tuned_runs

# Every language arm follows one learning-rate schedule: warmup, then cosine over its own budget (an arm that is
# FLOP-matched, and so trains longer, decays over its longer run), so final losses compare at the schedule's end.
SMOKE = dict(
    model="llama-tiny",
    device="cpu",
    seq_len=128,
    micro_batch=4,
    eval_every=10,
    eval_batches=4,
    log_every=10,
    lr_decay="cosine",
)
SMOKE_STEPS, SMOKE_WORKERS = 20, 4
EVALS = dict(evals="heldout_next", eval_limit=150)  # 1,296 documents take 100 s per run here; 150 about 13
# Quality preset (issue 26): the smoke quality arms on the stdlib corpus (9.7M training tokens, so the longest arm,
# B-SDP FLOP-matched at 600 DDP steps, reads about 1,170 steps x 2,048 tokens = 0.25 epochs), at two budgets a
# factor 2 apart (a card per budget: whether the gap keeps its sign as runs grow), one schedule rule for every arm.
# The learning rate stays the smoke one (3e-3, not tuned per arm: issue 26 item 3). No lm-eval task: heldout_next
# is drawn from the `text` corpus these runs do not train on.
QUALITY = {**SMOKE, "data": "stdlib", "eval_every": 20}
QUALITY_STEPS = (300, 600)
QUALITY_SCHEDULE = Schedule(warmup=0.1)
# Tune preset (issue 26 item 3): the quality arms on seed 0 at the shorter budget, each at every rate of LR_GRID (one
# grid for every arm, so each gets as many trials: AlgoPerf's rule), filed as LR_SWEEP so that no verdict counts them;
# suite.judge.sweeps picks each arm's winner and refuses one at the grid's edge, where the grid must grow first.
# Factor-2 steps around the smoke rate 3e-3, which the untuned quality preset keeps for every arm.
LR_SWEEP = "sdp-lr-sweep"
LR_GRID = (7.5e-4, 1.5e-3, 3e-3, 6e-3, 1.2e-2)
# Tuned preset: each quality arm (tune_key) at its winner of the tune (results/sdp-tune, commit e19a3f0: every arm's
# lowest final validation loss at 1.5e-3, inside the grid; a test checks them against the committed sweep) on seeds
# other than the tune's, at the tune's budget. Six seeds, not three: on seeds 1-3 (results/sdp-tuned at 6481861)
# sdp-quality-flop-matched-tuned left its 95% interval [+0.0086, +0.0489] around the margin 0.015 and its power
# planning asked about 5 seeds per arm at that spread; one more covers the spread's own uncertainty
LR_TUNED: dict[str, float | None] = {"ddp": 1.5e-3, "b-sdp C=0.5": 1.5e-3, "b-sdp C=0.75": 1.5e-3}
TUNED_SEEDS = (1, 2, 3, 4, 5, 6)
# Tune-long and tuned-long presets (issue 41 item 9): the tuned protocol at the longer budget, for the card that decides
# sdp-memory-range's quality half (sdp-quality-flop-matched, 600 DDP steps), whose shared rate 3e-3 cost B-SDP 0.16
# nats against its tuned rate but DDP 0.04 at 300 steps: its two arms, DDP and B-SDP at C = 0.5 FLOP-matched, tuned on
# seed 0 over LR_GRID at 600 steps (a rate is tuned at the horizon it is judged at), then judged on TUNED_SEEDS; two
# plans, each under the 90 minutes a plan may take. LONG_TUNED holds the tune's winners (a test checks them)
LONG_TUNED: dict[str, float | None] = {"ddp": 7.5e-4, "b-sdp C=0.5": 1.5e-3}
# The first pass (results/sdp-tune-long) found DDP best at LR_GRID's lowest rate, an edge, so tune-long-low extends
# the grid one factor-2 step down for both arms (the same trials for each), into results/sdp-tune-long-low; the
# winners are picked over both folders
LONG_LOW_GRID = (LR_GRID[0] / 2,)
# Backward against forward masking at C = 3/8 (issue 26 item 6) on a CPU: llama-tiny-8l, so that each of 8 gloo
# workers holds 3 whole blocks and every block has 3 holders, on the quality preset's corpus under its schedule
# rule, equal tokens; small-scale evidence for sdp-backward-masking-sparse-cpu (the paper's llama-1b needs GPUs).
# bb-sdp runs a full forward and so spends about twice b-sdp's FLOPs a step: a third arm gives it b-sdp's FLOPs
# (sdp-backward-masking-sparse-cpu-flops)
MASKING = {**QUALITY, "model": "llama-tiny-8l", "micro_batch": 2}  # 8 x 2 x 128: the quality preset's 2,048 tokens
MASKING_STEPS, MASKING_WORKERS, MASKING_C = 300, 8, 0.375
# Eight preset (issue 43; CPU, emulated workers, docs/emulation.md): sdp-1b-val-loss's comparison at the paper's worker
# count and its model's depth, on this machine: 8 workers (a secondary source's count for the LLaMA runs) as threads of
# one process, llama-tiny-16l (llama-1b's 16 blocks at llama-tiny's width), B-SDP at the 1B run's C = 0.69 (11 of 16
# blocks a worker) FLOP-matched against DDP at equal steps; the quality preset's corpus, schedule rule, learning rate
# and 2,048 tokens a step (8 workers x 2 x 128), at its shorter budget
EIGHT = {**QUALITY, "model": "llama-tiny-16l", "micro_batch": 2, "emulate": True}
EIGHT_WORKERS, EIGHT_STEPS, EIGHT_C = 8, 300, 0.69
# Trend preset (issue 44): the eight preset's comparison at 4 and 8 blocks (llama-tiny and llama-tiny-8l, the same
# width), so that its card reads which way the gap moves as the model deepens toward llama-1b's 16; C = 0.69 holds
# 3 of 4, 6 of 8 and 11 of 16 blocks
TREND_MODELS = ("llama-tiny", "llama-tiny-8l")
# One GPU (issue 43 item 5): the gpu preset on a single device runs the eight preset's workers emulated there
# (suite/plan/one_gpu.py), in bf16, at the largest model of this ladder whose 8 replicas fit its memory and whose runs
# fit 10 minutes by the steps it measures first
ONE_GPU_LADDER = ("llama-tiny-16l", "llama-134m", "llama-500m")
_ONE_GPU_NOTE = (
    "one GPU: the eight preset's arms (card sdp-1b-val-loss-eight) on 8 emulated workers of this device in bf16, at "
    "the largest model that fits its memory and 10 minutes by the steps measured here"
)
# Wall seconds per step and per evaluation of its arms, measured with `run --emulate` on 2 cores (load 1.6; 20 steps,
# median step): DDP 1.834 and 0.98, B-SDP at C = 0.69 1.357 and 1.06
EIGHT_COSTS = {None: StepCost(1.834, 0.98), EIGHT_C: StepCost(1.357, 1.06)}
# Wall seconds per step and per evaluation on 2 cores, from results/sdp-smoke (medians over seeds; StepCost); the
# FLOP-matched B-SDP arm at C=0.5 there ran 39 steps for DDP's 20
QUALITY_COSTS = {0.5: StepCost(0.220, 0.71), 0.75: StepCost(0.350, 0.77), None: StepCost(0.423, 0.93)}
MATCHED_STEPS = 39 / 20
# B-SDP against model parallelism (issue 29): at 2 ranks, where PP has 2 stages and TP degree 2 with no data-parallel
# axis beside them, B-SDP at C = 1/2 holds 2 of llama-tiny's 4 blocks per worker, as a PP stage does (one holder per
# block: its holder groups average nothing but the shared embedding, head and norm). Smoke: the smoke arms' global
# batch (16 sequences), tokens and schedule; gpu: 2 GPUs, llama-134m, 8 sequences per SDP worker. Cards sdp-vs-pp-*
# and sdp-vs-tp-*.
MP_WORKERS = 2
MP_PP, MP_TP = {"schedule": "1f1b"}, {"sequence_parallel": False}
# The same against TP at the paper's 1B scale, estimated in the smoke preset (ESTIMATE's settings on MP_WORKERS ranks,
# one global batch of MP_WORKERS x 8 sequences): cards sdp-vs-tp-1b-*. Each is under the 15 CPU seconds a smoke
# estimate may take (measured on 2 shared cores: B-SDP 8.5 s for both ranks, TP 14.1-14.5 s, the estimate call
# alone). PP has none: the fake process group cannot run its shape inference (Pipeline.not_estimable).
# ResNet-18 has 5 blocks that keep their input's shape (the maskable ones). With K=4 workers, C=0.6 holds 3 of
# them (2 or 3 holders per block) and N-SDP's C=0.5 holds 4 of 8 channel groups (2 holders each): every
# component is averaged over at least two holders (a plain partition would average nothing). It trains at
# about 15 images/s on this machine, so its arms are short: memory and bytes, not accuracy.
VISION = dict(model="resnet18", device="cpu", micro_batch=8, eval_every=100, log_every=5, lr=1e-3)
VISION_STEPS, VISION_WORKERS = 10, 4
VISION_ARMS = (("ddp", {}), ("b-sdp", {"C": 0.6}), ("n-sdp", {"C": 0.5}))
GPU = dict(model="llama-134m", device="cuda", seq_len=1024, micro_batch=8, eval_every=50, lr=1e-3, lr_decay="cosine")
GPU_STEPS = 200
# backward against forward masking at extreme sparsity (C = 3/8: 6 of llama-1b's 16 blocks held), on 8+ GPUs
SPARSE = dict(GPU, model="llama-1b", variant={"C": 0.375}, tokens=2e8)
SPARSE_GPUS = 8
# CIFAR arms on GPUs where the data is present (CIFAR_ROOT, torchvision's layout): per-GPU batch 64 as in the paper
GPU_VISION = dict(device="cuda", micro_batch=64, eval_every=500, lr=1e-3, data="cifar10")
GPU_VISION_EPOCHS = 30
GPU_VISION_ARMS = (
    ("resnet18", "ddp", {}),
    ("resnet18", "b-sdp", {"C": 0.6}),
    ("resnet18", "n-sdp", {"C": 0.5}),
    ("swin-t", "ddp", {}),
    ("swin-t", "b-sdp", {"C": 0.5}),
)
CIFAR_TRAIN = 50_000
PAPER = dict(device="cuda", seq_len=1024, micro_batch=8, eval_every=500, lr=1e-3, data="fineweb", lr_decay="cosine")
PAPER_RUNS = (("llama-500m", 0.5, 20_000), ("llama-1b", 0.69, 20_000))
PAPER_WORKERS = 8
# Paper scale, estimated: the paper's batch and precision are not known; these are stated in every record.
ESTIMATE = dict(device="cpu", seq_len=1024, micro_batch=8, precision="bf16", nproc=PAPER_WORKERS)
ESTIMATE_TOPOLOGY, ESTIMATE_GPUS_PER_NODE = "4xA100-nvlink-4x200gbIB", 4
NO_PREFETCH = {"backward_prefetch": False}  # SDP+FSDP cannot prefetch; its FSDP baseline does not either
ESTIMATES = (  # (model, method, variant, ac, projected onto the topology)
    ("llama-1b", "ddp", {}, False, True),
    ("llama-1b", "fsdp", NO_PREFETCH, True, False),
    ("llama-1b", "b-sdp", {"C": 0.69}, False, False),
    ("llama-1b", "b-sdp-fsdp-holders", {"C": 0.69}, True, True),
    ("llama-1b", "b-sdp-fsdp-holders", {"C": 0.69}, False, True),  # the wall-clock projection without AC
    ("llama-1b", "b-sdp-fsdp-worker", {"C": 0.69, "G": 2}, True, True),
    ("llama-500m", "ddp", {}, False, False),
    ("llama-500m", "b-sdp", {"C": 0.5}, False, False),
)
# Calibration (claims.yaml `calibrate`, preset `calibrate`, about 12 minutes on 2 cores): the paper gives 1B's
# DDP (70.9 GB) and FSDP+AC (11.0 GB) peaks but not the micro-batch or precision behind them. The baselines
# are estimated over SWEEP (tokens per micro-batch move the peak most; sequence length enters only through
# them); the cards keep the settings that put them within 5% of the paper's numbers, and the method arms are
# estimated at CALIBRATED, the settings this sweep found (if a later change moves the baselines away from
# the paper's numbers there, the cards say so instead of judging).
SWEEP = tuple(
    {"micro_batch": mb, "seq_len": 1024, "precision": precision}
    for precision in ("bf16", "fp32")
    for mb in (4, 5, 6, 8, 10, 12, 16)
)
SWEPT = (("ddp", {}, False), ("fsdp", NO_PREFETCH, True))
# llama-500m has no paper baseline to calibrate on: its card is judged over the same settings (a range)
SWEPT_500M = (("ddp", {}, False), ("b-sdp", {"C": 0.5}, False))
# Found by SWEEP (68.0 and 70.7 GB against DDP's 70.9; 10.5 GB against FSDP+AC's 11.0): no one setting puts both
# baselines within 5%, DDP needs 10-12 x 1,024 tokens per micro-batch and FSDP+AC 5 x 1,024.
CALIBRATED = (
    ({"micro_batch": 12, "seq_len": 1024, "precision": "bf16"}, "ddp"),
    ({"micro_batch": 10, "seq_len": 1024, "precision": "fp32"}, "ddp"),
    ({"micro_batch": 5, "seq_len": 1024, "precision": "fp32"}, "fsdp"),
)
CALIBRATED_ARMS = {
    "ddp": (
        ("b-sdp", {"C": 0.69}, False),
        ("b-sdp-fsdp-holders", {"C": 0.69}, True),
        ("b-sdp-fsdp-worker", {"C": 0.69, "G": 2}, True),
    ),
    "fsdp": (("b-sdp-fsdp-holders", {"C": 0.69}, True),),
}


@cache
def step_flops(model: str, sequences: int, seq_len: int, blocks: int | None = None) -> int:
    """Model FLOPs of one DDP training step (forward + backward of the global batch), measured on one sequence
    and multiplied: every op's FLOPs are linear in the batch (a test checks it), and a 1B model's whole batch
    would take minutes on a CPU. With `blocks`, a forward-masked SDP step: each worker runs the shared parts and
    that many blocks (a dropped block is the identity path, which costs nothing)."""
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    net = build_model(model).to(device)
    if blocks is not None:
        net.layers = net.layers[:blocks]
    tokens = torch.randint(0, net.cfg.vocab_size, (1, seq_len + 1), device=device)
    with FlopMeter() as meter:
        out = net(tokens[:, :-1])
        torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), tokens[:, 1:].reshape(-1)).backward()
    return meter.model_flops * sequences


def _budgets(common: dict, workers: int, steps: int, blocks: int | None = None) -> tuple[dict, dict]:
    """Equal steps as a token budget, and FLOP-matched as DDP's FLOPs in as many steps (with `blocks`, a
    forward-masked SDP arm's FLOPs, each worker running that many blocks: step_flops)."""
    sequences = workers * common["micro_batch"]
    # half a step short of `steps` steps, so rounding never adds or drops one
    flops = (steps - 0.5) * step_flops(common["model"], sequences, common["seq_len"], blocks=blocks)
    return {"tokens": steps * sequences * common["seq_len"]}, {"flops": flops}


def _quality_arms(
    common: dict, workers: int, steps: int, seeds: tuple[int, ...], evals: dict | None = None
) -> list[RunConfig]:
    """The arms the quality claims compare, once per seed; `evals` scores DDP and the FLOP-matched arm."""
    equal, matched = _budgets(common, workers, steps)
    # downstream scores for the FLOP-matched comparison only (DDP's equal-steps runs are its baseline)
    scored = evals or {}
    arms = [("ddp", {}, equal, scored), ("b-sdp", {"C": 0.5}, matched, scored), ("b-sdp", {"C": 0.75}, equal, {})]
    return [
        RunConfig(method=m, nproc=workers, seed=s, variant=v, **common, **evals, **budget)
        for s in seeds
        for m, v, budget, evals in arms
    ]


def _mechanism_arms(common: dict, workers: int, steps: int) -> list[RunConfig]:
    """One seed each: memory and bytes of the other variants, and SDP+FSDP against FSDP, all with AC.

    Reading (a) of SDP+FSDP (b-sdp-fsdp-worker) runs in the tests and the paper-scale estimates, not here: the
    smoke preset must finish within 20 minutes on 2 cores."""
    equal, matched = _budgets(common, workers, steps)
    arms = [
        ("b-sdp", {"C": 0.5}, equal, False),
        ("b-sdp", {"C": 0.75, "aggregation": "dense"}, equal, False),
        ("bb-sdp", {"C": 0.5}, equal, False),
        ("n-sdp", {"C": 0.5}, matched, False),
        ("fsdp", {}, equal, True),
        ("fsdp", NO_PREFETCH, equal, True),
        ("b-sdp-fsdp-holders", {"C": 0.5}, equal, True),
    ]
    return [RunConfig(method=m, nproc=workers, variant=v, ac=ac, **common, **budget) for m, v, budget, ac in arms]


def _model_parallel_arms(common: dict, steps: int, sequences: int) -> list[RunConfig]:
    """B-SDP at C = 1/2 against pipeline (2 stages, 1F1B) and tensor parallelism (degree 2) on MP_WORKERS ranks,
    one seed each, a global batch of `sequences` and the same tokens and schedule: memory, state, bytes and CPU
    time per step (issue 29). TP and PP have one data replica, so each of their ranks reads the whole batch."""
    tokens = {"tokens": steps * sequences * common["seq_len"]}
    arms = [("b-sdp", {"C": 0.5}, MP_WORKERS), ("pp", MP_PP, 1), ("tp", MP_TP, 1)]
    return [
        RunConfig(method=m, nproc=MP_WORKERS, variant=v, **{**common, "micro_batch": sequences // replicas}, **tokens)
        for m, v, replicas in arms
    ]


def _vision_arms() -> list[RunConfig]:
    samples = VISION_STEPS * VISION_WORKERS * VISION["micro_batch"]
    return [RunConfig(method=m, nproc=VISION_WORKERS, variant=v, tokens=samples, **VISION) for m, v in VISION_ARMS]


def _estimate(model: str, method: str, variant: dict, ac: bool, topologies: tuple = (), **settings) -> Estimate:
    cfg = RunConfig(method=method, model=model, variant=dict(variant), ac=ac, **(ESTIMATE | settings))
    return Estimate(cfg, gpus_per_node=ESTIMATE_GPUS_PER_NODE, topologies=topologies)


def _estimates() -> list[Estimate]:
    return [_estimate(*arm[:4], (ESTIMATE_TOPOLOGY,) if arm[4] else ()) for arm in ESTIMATES] + _mp_estimates()


def _mp_estimates() -> list[Estimate]:
    """B-SDP at C = 1/2 and TP of degree 2 on llama-1b at MP_WORKERS ranks, one global batch (TP is one replica)."""
    sequences = MP_WORKERS * ESTIMATE["micro_batch"]
    arms = [("b-sdp", {"C": 0.5}, MP_WORKERS), ("tp", MP_TP, 1)]
    return [
        _estimate("llama-1b", m, v, False, nproc=MP_WORKERS, micro_batch=sequences // replicas)
        for m, v, replicas in arms
    ]


def _calibration() -> list[Estimate]:
    """The baselines over SWEEP, and the method arms at the settings where a baseline matched the paper."""
    swept = [_estimate("llama-1b", m, v, ac, **s) for s in SWEEP for m, v, ac in SWEPT if not _is_default(s)]
    swept += [_estimate("llama-500m", m, v, ac, **s) for s in SWEEP for m, v, ac in SWEPT_500M if not _is_default(s)]
    calibrated = [
        _estimate("llama-1b", m, v, ac, **s) for s, baseline in CALIBRATED for m, v, ac in CALIBRATED_ARMS[baseline]
    ]
    return swept + calibrated


def _is_default(settings: dict) -> bool:
    return all(ESTIMATE[k] == v for k, v in settings.items())


def _seeds(default: int) -> tuple[int, ...]:
    return tuple(range(int(os.environ.get("SDP_SEEDS", default))))


def _smoke() -> list[RunConfig]:
    return [
        *_quality_arms(SMOKE, SMOKE_WORKERS, SMOKE_STEPS, _seeds(3), EVALS),
        *_mechanism_arms(SMOKE, SMOKE_WORKERS, SMOKE_STEPS),
        *_model_parallel_arms(SMOKE, SMOKE_STEPS, SMOKE_WORKERS * SMOKE["micro_batch"]),
        *_vision_arms(),
    ]


def _quality() -> list[RunConfig]:
    """The smoke quality arms on the stdlib corpus at each budget of QUALITY_STEPS, under QUALITY_SCHEDULE."""
    return [
        cfg
        for steps in QUALITY_STEPS
        for cfg in _quality_arms({**QUALITY, **QUALITY_SCHEDULE.settings(steps)}, SMOKE_WORKERS, steps, _seeds(3))
    ]


def _tune() -> list[RunConfig]:
    """Seed 0 of the quality arms at the shorter budget of QUALITY_STEPS, at every rate of LR_GRID."""
    steps = min(QUALITY_STEPS)
    arms = _quality_arms({**QUALITY, **QUALITY_SCHEDULE.settings(steps)}, SMOKE_WORKERS, steps, (0,))
    return lr_sweep(arms, LR_GRID, LR_SWEEP)


def tune_key(cfg: RunConfig) -> str:
    """A quality arm's name in LR_TUNED: the method, and its C where it has one."""
    return f"{cfg.method} C={cfg.variant['C']:g}" if "C" in cfg.variant else cfg.method


def _tuned() -> list[RunConfig]:
    """The tune's arms at its budget, each at its LR_TUNED rate, on TUNED_SEEDS."""
    steps = min(QUALITY_STEPS)
    arms = _quality_arms({**QUALITY, **QUALITY_SCHEDULE.settings(steps)}, SMOKE_WORKERS, steps, (0,))
    return tuned_runs(arms, LR_TUNED, tune_key, TUNED_SEEDS, "python -m suite reproduce sdp --preset tune")


def _long_arms() -> list[RunConfig]:
    """Seed 0 of the arms LONG_TUNED names at the longer budget of QUALITY_STEPS."""
    steps = max(QUALITY_STEPS)
    arms = _quality_arms({**QUALITY, **QUALITY_SCHEDULE.settings(steps)}, SMOKE_WORKERS, steps, (0,))
    return [cfg for cfg in arms if tune_key(cfg) in LONG_TUNED]


def _tune_long() -> list[RunConfig]:
    """The long arms at every rate of LR_GRID."""
    return lr_sweep(_long_arms(), LR_GRID, LR_SWEEP)


def _tune_long_low() -> list[RunConfig]:
    """The long arms at the rates of LONG_LOW_GRID, below LR_GRID."""
    return lr_sweep(_long_arms(), LONG_LOW_GRID, LR_SWEEP)


def _tuned_long() -> list[RunConfig]:
    """The long arms, each at its LONG_TUNED rate, on TUNED_SEEDS."""
    return tuned_runs(
        _long_arms(),
        LONG_TUNED,
        tune_key,
        TUNED_SEEDS,
        "python -m suite reproduce sdp --preset tune-long",
        "LONG_TUNED",
    )


def _masking() -> list[RunConfig]:
    """b-sdp and bb-sdp at C = 3/8 on MASKING_WORKERS gloo workers, SDP_SEEDS seeds each, equal tokens; and bb-sdp
    at b-sdp's FLOPs (each worker's forward runs its held blocks only under b-sdp, every block under bb-sdp)."""
    common = {**MASKING, **QUALITY_SCHEDULE.settings(MASKING_STEPS)}
    held = held_count(model_config(MASKING["model"])["n_layers"], MASKING_C)
    equal, b_sdp_flops = _budgets(common, MASKING_WORKERS, MASKING_STEPS, blocks=held)
    arms = (("b-sdp", equal), ("bb-sdp", equal), ("bb-sdp", b_sdp_flops))
    return [
        RunConfig(method=m, nproc=MASKING_WORKERS, seed=s, variant={"C": MASKING_C}, **common, **budget)
        for s in _seeds(3)
        for m, budget in arms
    ]


def _eight(model: str = EIGHT["model"]) -> list[RunConfig]:
    """DDP at equal steps and B-SDP at C = EIGHT_C FLOP-matched, EIGHT_WORKERS emulated workers, SDP_SEEDS seeds."""
    common = {**EIGHT, **QUALITY_SCHEDULE.settings(EIGHT_STEPS), "model": model}
    equal, matched = _budgets(common, EIGHT_WORKERS, EIGHT_STEPS)
    arms = (("ddp", {}, equal), ("b-sdp", {"C": EIGHT_C}, matched))
    return [
        RunConfig(method=m, nproc=EIGHT_WORKERS, seed=s, variant=v, **common, **budget)
        for s in _seeds(3)
        for m, v, budget in arms
    ]


def _trend() -> list[RunConfig]:
    """The eight preset's comparison on the shallower models of TREND_MODELS (its 16 blocks are the eight preset)."""
    return [cfg for model in TREND_MODELS for cfg in _eight(model)]


def eight_wall_s(runs: list[RunConfig]) -> float:
    """Estimated wall seconds of the eight (or trend) preset on 2 quiet cores (EIGHT_COSTS, measured on
    llama-tiny-16l, scaled to another model by its step FLOPs; not measured): a FLOP-matched B-SDP run takes DDP's
    FLOPs in steps of its forward-masked model (step_flops of its held blocks)."""
    items = []
    for cfg in runs:
        c = cfg.variant.get("C")
        sequences = cfg.nproc * cfg.micro_batch
        blocks = None if c is None else held_count(model_config(cfg.model)["n_layers"], c)
        steps = (
            cfg.tokens / (sequences * cfg.seq_len)
            if cfg.tokens
            else cfg.flops / step_flops(cfg.model, sequences, cfg.seq_len, blocks=blocks)
        )
        share = step_flops(cfg.model, sequences, cfg.seq_len) / step_flops(EIGHT["model"], sequences, cfg.seq_len)
        cost = EIGHT_COSTS[c]
        items.append((StepCost(cost.step_s * share, cost.eval_s * share), steps, int(steps // cfg.eval_every)))
    return estimated_wall_s(items)


def quality_wall_s(runs: list[RunConfig]) -> float:
    """Estimated wall seconds of the quality (or tune) preset's runs on 2 quiet cores (QUALITY_COSTS; not
    measured)."""
    items = []
    for cfg in runs:
        steps = cfg.tokens / (SMOKE_WORKERS * cfg.micro_batch * cfg.seq_len) if cfg.tokens else None
        if steps is None:  # FLOP-matched: as many steps as the smoke records' ratio gives, at DDP's step count
            steps = MATCHED_STEPS * (cfg.flops / step_flops(cfg.model, SMOKE_WORKERS * cfg.micro_batch, cfg.seq_len))
        items.append((QUALITY_COSTS[cfg.variant.get("C")], steps, int(steps // cfg.eval_every)))
    return estimated_wall_s(items)


def _gpu() -> list[RunConfig]:
    gpus = torch.cuda.device_count()
    if gpus < 2:
        raise ValueError(
            f"the sdp gpu preset needs at least 2 GPUs (one per SDP worker), found {gpus}; use --preset smoke"
        )
    return [
        *_quality_arms(GPU, gpus, GPU_STEPS, _seeds(3)),
        *_mechanism_arms(GPU, gpus, GPU_STEPS),
        *_model_parallel_arms(GPU, GPU_STEPS, MP_WORKERS * GPU["micro_batch"]),
        *_gpu_vision_arms(gpus, os.environ.get("CIFAR_ROOT")),
        *_sparse_arms(gpus),
    ]


def _sparse_arms(gpus: int) -> list[RunConfig]:
    """bb-sdp and b-sdp at C = 3/8, three seeds each, where there are SPARSE_GPUS GPUs or more."""
    if gpus < SPARSE_GPUS:
        return []
    return [RunConfig(method=m, nproc=gpus, seed=s, **SPARSE) for s in _seeds(3) for m in ("b-sdp", "bb-sdp")]


def _gpu_vision_arms(gpus: int, root: str | None) -> list[RunConfig]:
    """ResNet-18, N-SDP and Swin-T on CIFAR-10, three seeds each, where the data is present (CIFAR_ROOT)."""
    if not root:
        return []
    samples = GPU_VISION_EPOCHS * CIFAR_TRAIN
    return [
        RunConfig(method=m, model=model, nproc=gpus, variant=v, seed=s, tokens=samples, data_root=root, **GPU_VISION)
        for s in _seeds(3)
        for model, m, v in GPU_VISION_ARMS
    ]


def _paper() -> list[RunConfig]:
    """The paper's LLaMA runs on FineWeb, 8 workers, three seeds: DDP at equal steps, B-SDP FLOP-matched."""
    runs = []
    for model, c, steps in PAPER_RUNS:
        common = {**PAPER, "model": model}
        equal, matched = _budgets(common, PAPER_WORKERS, steps)
        for seed in _seeds(3):
            runs.append(RunConfig(method="ddp", nproc=PAPER_WORKERS, seed=seed, **common, **equal))
            sdp = RunConfig(method="b-sdp", nproc=PAPER_WORKERS, seed=seed, variant={"C": c}, **common, **matched)
            runs.append(sdp)
    return runs


PRESETS = {
    "smoke": _smoke,
    "gpu": _gpu,
    "paper": _paper,
    "quality": _quality,
    "tune": _tune,
    "tuned": _tuned,
    "tune-long": _tune_long,
    "tune-long-low": _tune_long_low,
    "tuned-long": _tuned_long,
    "masking": _masking,
    "eight": _eight,
    "trend": _trend,
    "calibrate": list,
}


def plan(preset: str) -> Plan:
    notes = []
    if preset == "gpu" and torch.cuda.device_count() == 1:
        runs, sizes = one_gpu.fit(_eight, ONE_GPU_LADDER)
        notes += [_ONE_GPU_NOTE, *sizes]
    else:
        runs = PRESETS[preset]()
    estimates = {"smoke": _estimates, "calibrate": _calibration}.get(preset, list)()
    if preset == "gpu" and not os.environ.get("CIFAR_ROOT"):
        notes.append("no CIFAR_ROOT: the ResNet-18 and Swin-T CIFAR arms are skipped, their cards stay untested")
    if preset in ("smoke", "quality", "masking", "eight", "trend") and len(_seeds(3)) < 3:
        notes.append(f"{len(_seeds(3))} seed(s) per quality arm: the quality cards need 3 (SDP_SEEDS=3)")
    if preset in ("quality", "tune", "tuned", "tune-long", "tune-long-low", "tuned-long"):
        notes.append(f"estimated wall time {quality_wall_s(runs) / 60:.0f} minutes on 2 quiet cores (not measured)")
    if preset in ("eight", "trend"):
        notes.append(f"estimated wall time {eight_wall_s(runs) / 60:.0f} minutes on 2 quiet cores (not measured)")
    if preset in ("tune", "tune-long", "tune-long-low"):
        notes.append(
            f"a learning-rate sweep filed as {LR_SWEEP}: suite.judge.sweeps.sweep_winners picks each arm's rate"
        )
    tuned = {
        "tuned": ", each arm at its learning rate tuned on seed 0 (LR_TUNED)",
        "tuned-long": ", each arm at its learning rate tuned on seed 0 at the longer budget (LONG_TUNED)",
    }.get(preset, "")
    return Plan(
        preset,
        runs,
        protocol=f"equal steps (tokens) and FLOP-matched (flops), same global batch{tuned}",
        claims=Path(__file__).with_name("claims.yaml"),
        notes=notes,
        estimates=estimates,
    )
