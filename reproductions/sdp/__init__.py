"""Subnetwork Data Parallelism (arXiv 2507.09029) against DDP: memory, bytes per step and loss.

B-SDP with its two FSDP readings, backward-masked B-SDP and neuron-level N-SDP (README.md here).
"""

from pathlib import Path

from reproductions.sdp import metrics  # noqa: F401  (registers the claim metric against the design)
from reproductions.sdp.compose import HolderShardedBlockSDP, WorkerShardedBlockSDP
from reproductions.sdp.method import BackwardBlockSDP, BlockSDP
from reproductions.sdp.neurons import NeuronSDP
from reproductions.sdp.plan import PRESETS, plan
from suite.extensions import Reproduction
from suite.plan.pairs import Config, Pair

_BSDP = Config("b-sdp", sets=(("C", 0.5),))

REPRODUCTION = Reproduction(
    methods=(BlockSDP, HolderShardedBlockSDP, WorkerShardedBlockSDP, BackwardBlockSDP, NeuronSDP),
    plan=plan,
    presets=tuple(PRESETS),
    claims=Path(__file__).with_name("claims.yaml"),
    # 2 of llama-tiny's 4 blocks per worker, against DDP at the same world size; b-sdp/ddp was 7.7% below
    # its 3-round median in one round on a quiet machine, hence 15%
    pairs=(
        Pair("b-sdp/ddp", _BSDP, Config("ddp"), tolerance=0.15, short=True),
        Pair("b-sdp-dense/b-sdp", Config("b-sdp", sets=(("C", 0.5), ("aggregation", "dense"))), _BSDP),
    ),
)
