"""Evaluating the model a run trains: validation loss between steps, saved models, and the final scores.

Apart from the Worker (suite/run/train.py) so that its loop only steps. Evaluation runs off the clock and off
the ledger (the loop's control group carries its one broadcast), and never changes the training state.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.optim.swa_utils import update_bn

from suite.config import RunConfig
from suite.evals import run_evals
from suite.evals.model_file import full_state, plain_model, save_checkpoint
from suite.evals.vision import image_accuracy
from suite.run.build import Parts, unwrapped
from suite.run.close import Timing
from suite.run.strategy import Context, Strategy


def _tracks_stats(module: nn.Module) -> bool:
    return isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats


class Evaluator:
    """One rank's evaluations of the run's model; every rank calls each method (the strategy's evaluation model
    may be assembled by collectives). `record`: the run's, whose model and data a saved model names and whose
    `evals` the final scores go to."""

    def __init__(
        self, parts: Parts, strategy: Strategy, ctx: Context, group: dist.ProcessGroup, record: dict, timing: Timing
    ) -> None:
        self.cfg: RunConfig = ctx.cfg
        self.strategy, self.ctx, self.group, self.record, self.timing = strategy, ctx, group, record, timing
        self.model, self.task, self.data = parts.model, parts.task, parts.data
        self.replica, self.global_rows = parts.replica, parts.global_rows
        self.device, self.rank, self.world = ctx.device, ctx.rank, ctx.world_size

    # One BatchNorm rule for every arm (issue 25 item 15): before every evaluation (validation loss, top-1, a saved
    # model) the evaluated network's BatchNorm statistics are recomputed over the same batches, whatever the arm.
    # Keeping the running statistics instead is not possible for every arm: an assembled SDP model has none of its
    # own network (each worker's were taken on its subnetwork's activations), and after a short run DDP's are
    # mostly those of the networks of its first steps (momentum 0.1: after 10 steps 35% of their weight is still
    # the initial 0 and 1). Recomputing gives each arm the statistics of the very network it is judged on, as after
    # SWA's weight averaging; judging DDP on stale running statistics and SDP on recomputed ones (as before) made
    # their accuracies incomparable (top-1 0.108 against 0.689 after 10 steps).
    def bn_note(self) -> str | None:
        """What the record says about BatchNorm at evaluation (`evals.bn_statistics`), None without BatchNorm."""
        if not any(_tracks_stats(m) for m in unwrapped(self.model).modules()):
            return None
        n, rows = self.cfg.eval_batches, self.cfg.micro_batch
        return (
            f"recomputed on the evaluated network before every evaluation, for every arm alike, over {n} training "
            f"batches of {rows} rows (this rank's rows of steps 0 to {n - 1}; torch.optim.swa_utils.update_bn); "
            "the trained model keeps its running statistics"
        )

    @contextmanager
    def evaluation_model(self) -> Iterator[nn.Module]:
        """The model to evaluate (the strategy's: SDP assembles the full model from its holders, DDP gives its
        module), its BatchNorm statistics recomputed by the one rule above over `eval_batches` of this rank's
        training batches. A network that is the trained one gets its running statistics back on leaving, so an
        evaluation never changes the training state (DDP broadcasts buffers; SDP compares holders' tensors)."""
        model = self.strategy.eval_model(self.model)
        norms = [m for m in model.modules() if _tracks_stats(m)]
        kept = [{k: t.clone() for k, t in m.named_buffers(recurse=False) if t is not None} for m in norms]
        if norms:
            rows = self.cfg.micro_batch
            with torch.no_grad():
                inputs = [
                    self.task.batch(s, self.global_rows, self.replica * rows, rows, self.device)[0]
                    for s in range(self.cfg.eval_batches)
                ]
                with self.strategy.autocast(self.ctx):
                    update_bn(inputs, model)
        try:
            yield model
        finally:
            with torch.no_grad():
                for m, buffers in zip(norms, kept, strict=True):
                    for k, t in buffers.items():
                        getattr(m, k).copy_(t)

    @torch.no_grad()
    def evaluate(self) -> float:
        """Rank 0's validation loss, on every rank (the others compute it too only where the forward needs them)."""
        with self.timing.phase("eval_s"):
            losses = []
            alone = not self.strategy.eval_on_every_rank
            with self.evaluation_model() as model:
                if self.rank == 0 or not alone:
                    model.eval()
                    for x, y in self.task.val_batches():
                        with self.strategy.autocast(self.ctx):
                            losses.append(self.task.loss(model, x.to(self.device), y.to(self.device)).item())
                    model.train()
            value = sum(losses) / len(losses) if losses else 0.0
            if alone and self.world > 1:
                sent = torch.tensor([value], dtype=torch.float64)  # a Python float is a double: sent exactly
                dist.broadcast(sent, src=0, group=self.group)
                value = sent.item()
        return value

    def save(self, path: str | Path) -> None:
        """The evaluation model's full weights to `path` (a collective under FSDP2: every rank calls it)."""
        with self.evaluation_model() as model:
            self._save_model(path, model)

    def final_evals(self) -> None:
        """Checkpoint and downstream scores of the evaluation model, off the clock and off the ledger."""
        with self.timing.phase("final_evals_s"):
            self._final_evals()

    def _final_evals(self) -> None:
        cfg = self.cfg
        names = [n for n in cfg.evals.split(",") if n]
        image = self.task.kind == "image"
        if not (names or image or cfg.checkpoint):
            return
        with self.evaluation_model() as model:
            if cfg.checkpoint:
                self._save_model(cfg.checkpoint, model)
            if not (names or image):
                return
            state = full_state(model)  # a collective under FSDP2: every rank takes part
            if self.rank != 0:
                return
            # inside: the state may share the evaluated model's buffers, which are restored on leaving
            plain = plain_model(cfg.model, self.record["model"]["config"], state, self.device)
        if names:
            limit = None if cfg.eval_limit is None else int(cfg.eval_limit)
            self.record["evals"].update(run_evals(plain, names, self.device, limit=limit, seed=cfg.seed))
        if image:
            self.record["evals"]["top1"] = image_accuracy(plain, self.data, self.device)

    def _save_model(self, path: str | Path, model: nn.Module) -> None:
        config, data = self.record["model"]["config"], self.record["data"]["name"]
        save_checkpoint(model, path, self.cfg.model, config, data=data)
