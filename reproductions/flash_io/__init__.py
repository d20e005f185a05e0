"""FlashAttention's IO claims (arXiv 2205.14135): HBM accesses counted, SDPA backends measured on this machine."""

from pathlib import Path

from reproductions.flash_io import metrics  # noqa: F401  (registers the claim metrics over micro records)
from reproductions.flash_io.count import count_io
from reproductions.flash_io.meter import AttentionIoMeter
from reproductions.flash_io.method import METHODS
from reproductions.flash_io.plan import plan
from suite.extensions import Reproduction
from suite.plan.pairs import Config, Pair


def write_report(results_dir: str | Path, out_dir: str | Path) -> Path:
    """io.html (reproductions/flash_io/report.py), imported on use: matplotlib costs every worker seconds, and
    every worker imports this declaration when it discovers the reproductions."""
    from reproductions.flash_io.report import write

    return write(results_dir, out_dir)


# llama-tiny at sequence 1024 on one worker: attention is a visible part of the step there (at the pairs'
# default 128 it is not); micro-batch 2 keeps a launch under a minute on 2 cores
_ATTENTION = (("seq_len", 1024), ("micro_batch", 2))

REPRODUCTION = Reproduction(
    methods=METHODS,
    meters=(AttentionIoMeter,),
    plan=plan,
    claims=Path(__file__).with_name("claims.yaml"),
    report=write_report,  # io.html: fits, slopes and log-log figures over the microbenchmark rows
    pairs=(
        Pair(
            "sdpa-flash/sdpa-math",
            Config("sdpa-flash", nproc=1, sets=_ATTENTION, steps=6),
            Config("sdpa-math", nproc=1, sets=_ATTENTION, steps=6),
            tolerance=0.15,
        ),
    ),
)

__all__ = ["REPRODUCTION", "count_io"]
