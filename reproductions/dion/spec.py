"""`--optimizer dion`: Dion on the matrices, AdamW on embeddings, head, norms and biases.

Under DDP the reducer's all-reduce is silenced and Dion synchronizes (ddp_sync.py); under FSDP2 the
matrices are DTensor shards and Dion reduces only small factors; elsewhere it steps what it is given.
"""

from __future__ import annotations

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from baselines.muon import matrix_groups
from reproductions.dion import ddp_sync
from reproductions.dion.dion import Dion
from reproductions.dion.sharded import refuse_column_splits
from suite.config import RunConfig
from suite.params import Param
from suite.run.optim import OptimizerSpec
from suite.run.strategy import Context


def build_dion(model: nn.Module, cfg: RunConfig, ctx: Context, params: dict) -> Dion:
    fraction = params["rank_fraction"]
    groups = matrix_groups(
        model, cfg, "dion", params.get("scalar_lr"), weight_decay=cfg.weight_decay, rank_fraction=fraction
    )
    replicate = ddp_sync.silence(model) if isinstance(model, DistributedDataParallel) else None
    return Dion(
        groups,
        lr=cfg.lr,
        mu=params["mu"],
        rank_fraction=fraction,
        weight_decay=cfg.weight_decay,
        replicate_group=replicate,
    )


DION = OptimizerSpec(
    "dion",
    build_dion,
    "Dion (rank r = ceil(rank_fraction x min(m, n)), one power iteration, error feedback) on matrices, AdamW on "
    "the rest; under DDP it replaces the gradient all-reduce (--set rank_fraction, mu, scalar_lr)",
    params={
        "rank_fraction": Param(float, 1.0, "rank r over min(m, n) of each matrix", low=0, high=1, low_open=True),
        "mu": Param(float, 0.95, "momentum (error feedback)", low=0, high=1, high_open=True),
        "scalar_lr": Param(
            float, None, "learning rate of the AdamW part (default: the run's lr)", low=0, low_open=True
        ),
    },
    check=refuse_column_splits("dion"),
)
