"""SDP's plan: DDP against B-SDP at C = 0.5 and 0.75, equal steps and FLOP-matched, plus the dense
aggregation and backward masking for the byte, time and memory comparison.

Equal steps: every arm gets the same tokens (same global batch, same number of steps). FLOP-matched:
every arm gets the FLOPs DDP spends in those steps, so a B-SDP arm, which computes only its blocks,
trains about 1/C longer. The FLOP budget is measured here (FlopMeter on one DDP step of the model), not
typed in. Smoke: llama-tiny (4 blocks) on the embedded text, K = 4 gloo workers, one seed (its quality
cards are inconclusive by design; `SDP_SEEDS=3` runs three). GPU: llama-134m on every visible GPU (at
least 2), three seeds. Paper: the paper's LLaMA runs on FineWeb with 8 workers, to run where they fit.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from suite.config import RunConfig, command_line
from suite.meters.flops import FlopMeter
from suite.models import build_model
from suite.plans import Plan

SMOKE = dict(model="llama-tiny", device="cpu", seq_len=128, micro_batch=4, eval_every=10, eval_batches=4,
             log_every=10)
SMOKE_STEPS, SMOKE_WORKERS = 20, 4
GPU = dict(model="llama-134m", device="cuda", seq_len=1024, micro_batch=8, eval_every=50, lr=1e-3)
GPU_STEPS = 200
PAPER = dict(device="cuda", seq_len=1024, micro_batch=8, eval_every=500, lr=1e-3, data="fineweb")
PAPER_RUNS = (("llama-500m", 0.5, 20_000), ("llama-1b", 0.69, 20_000))
PAPER_WORKERS = 8


def step_flops(model: str, sequences: int, seq_len: int) -> int:
    """Model FLOPs of one DDP training step (forward + backward of the global batch), measured."""
    torch.manual_seed(0)
    net = build_model(model)
    tokens = torch.randint(0, net.cfg.vocab_size, (sequences, seq_len + 1))
    with FlopMeter() as meter:
        out = net(tokens[:, :-1])
        torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), tokens[:, 1:].reshape(-1)).backward()
    return meter.model_flops


def _arms(common: dict, workers: int, steps: int, seeds: tuple[int, ...], extra: bool) -> list[RunConfig]:
    sequences = workers * common["micro_batch"]
    tokens = steps * sequences * common["seq_len"]
    # half a step short of `steps` DDP steps, so rounding never adds or drops one
    flops = (steps - 0.5) * step_flops(common["model"], sequences, common["seq_len"])
    runs = []
    for seed in seeds:
        for budget in ({"tokens": tokens}, {"flops": flops}):
            runs.append(RunConfig(method="ddp", nproc=workers, seed=seed, **common, **budget))
            for c in (0.5, 0.75):
                runs.append(RunConfig(method="b-sdp", nproc=workers, seed=seed, variant={"C": c}, **common, **budget))
    if extra:
        runs.append(RunConfig(method="b-sdp", nproc=workers, variant={"C": 0.75, "aggregation": "dense"},
                              tokens=tokens, **common))
        runs.append(RunConfig(method="bb-sdp", nproc=workers, variant={"C": 0.5}, tokens=tokens, **common))
    return runs


def _seeds(default: int) -> tuple[int, ...]:
    return tuple(range(int(os.environ.get("SDP_SEEDS", default))))


def _gpu() -> list[RunConfig]:
    gpus = torch.cuda.device_count()
    if gpus < 2:
        raise ValueError(f"the sdp gpu preset needs at least 2 GPUs (one per SDP worker), found {gpus}; "
                         "use --preset smoke")
    return _arms(GPU, gpus, GPU_STEPS, _seeds(3), extra=True)


def _paper() -> list[RunConfig]:
    runs = []
    for model, c, steps in PAPER_RUNS:
        tokens = steps * PAPER_WORKERS * PAPER["micro_batch"] * PAPER["seq_len"]
        for method, variant in (("ddp", {}), ("b-sdp", {"C": c})):
            runs.append(RunConfig(method=method, model=model, nproc=PAPER_WORKERS, variant=variant, tokens=tokens,
                                  **PAPER))
    return runs


def plan(preset: str) -> Plan:
    if preset == "smoke":
        runs = _arms(SMOKE, SMOKE_WORKERS, SMOKE_STEPS, _seeds(1), extra=True)
    elif preset == "gpu":
        runs = _gpu()
    else:
        runs = _paper()
    for cfg in runs:
        cfg.reproduction = "sdp"
        cfg.command = command_line(cfg)
    notes = []
    if preset == "smoke" and len(_seeds(1)) < 3:
        notes.append("one seed per arm: the quality cards are inconclusive by design (SDP_SEEDS=3 runs three)")
    return Plan("sdp", preset, runs, protocol="equal steps (tokens) and FLOP-matched (flops), same global batch",
                claims=Path(__file__).with_name("claims.yaml"), notes=notes)
