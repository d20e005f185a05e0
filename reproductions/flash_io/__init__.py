"""FlashAttention's IO claims (arXiv 2205.14135): HBM accesses counted, SDPA backends measured."""

from reproductions.flash_io.count import count_io

__all__ = ["count_io"]
