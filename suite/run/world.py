"""The end of a process's world: its process groups, and the DTensor caches that outlive them.

DTensor caches sharding and redistribution plans under keys that compare device meshes by ranks and dimension
names, not by process group. A later world in the same process (the next run of a shared launch,
suite/plan/multirun.py; the next estimate, suite/estimate) on a mesh of the same shape was handed plans naming
destroyed groups ("Could not resolve the process group registered under the name 2"), or, where the name had been
given again, groups of the new world that the plan never meant.
"""

from __future__ import annotations

import torch.distributed as dist

from suite.meters import comm_check


def destroy_world() -> None:
    """destroy_process_group() where a group exists, the counting backends of its groups (suite/meters/
    comm_check.py), and every DTensor plan cached while it existed."""
    from torch.distributed.tensor import _redistribute
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    if dist.is_initialized():
        dist.destroy_process_group()
    comm_check.forget()
    _clear_sharding_prop_cache()
    _redistribute.clear_redistribute_planner_cache()
    _redistribute._gen_transform_infos.cache_clear()
