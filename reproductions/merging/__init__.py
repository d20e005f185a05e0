"""Weight averaging and model merging: soups, task arithmetic, TIES-Merging and SWA over fine-tunes of one model."""

from pathlib import Path

from reproductions.merging import metrics  # noqa: F401  (registers the claim metric over the merge step's records)
from reproductions.merging.aggregation import MergedDiLoCo
from reproductions.merging.aggregation_plan import PRESETS as AGGREGATION_PRESETS
from reproductions.merging.merge import (
    MergeError,
    ensemble_log_probs,
    greedy_soup,
    load_dcp,
    swa,
    task_arithmetic,
    ties_merging,
    uniform_soup,
)
from reproductions.merging.plan import plan
from suite.extensions import Reproduction

REPRODUCTION = Reproduction(
    methods=(MergedDiLoCo,),
    plan=plan,
    presets=("smoke", "quality", "gpu", "swa-seeds", *AGGREGATION_PRESETS),
    claims=Path(__file__).with_name("claims.yaml"),
)

__all__ = [
    "REPRODUCTION",
    "MergeError",
    "MergedDiLoCo",
    "ensemble_log_probs",
    "greedy_soup",
    "load_dcp",
    "swa",
    "task_arithmetic",
    "ties_merging",
    "uniform_soup",
]
