"""Seeded sampling shared by the text and image data.

Every rank of a data-parallel run computes its own rows of the same global batch without talking to
the others: the global batch of a step is a pure function of (seed, step), drawn whole on every rank
and then sliced. Drawing only a rank's rows would make the data depend on how rows are split, and
DDP, FSDP and HSDP runs at one seed must see identical global data.
"""

import numpy as np
import torch


def step_generator(seed: int, step: int) -> torch.Generator:
    """The generator for one step's global batch.

    SeedSequence mixes the pair so that nearby pairs give unrelated streams; a linear combination such
    as seed * K + step would make (seed, step + K) and (seed + 1, step) collide.
    """
    if seed < 0 or step < 0:
        raise ValueError(f"seed and step must be >= 0, got seed={seed}, step={step}")
    state = np.random.SeedSequence([seed, step]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def rows(global_batch: int, start: int, count: int | None) -> slice:
    """The rows start..start+count of a global batch; count None means the rest of it."""
    if global_batch < 1:
        raise ValueError(f"global_batch must be >= 1, got {global_batch}")
    count = global_batch - start if count is None else count
    if start < 0 or count < 0 or start + count > global_batch:
        raise ValueError(
            f"rows {start}..{start + count} do not fit in a global batch of {global_batch}: "
            "pass 0 <= start and start + count <= global_batch"
        )
    return slice(start, start + count)
