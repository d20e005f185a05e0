"""Network projections: price a run record's communication ledger on a cluster topology (alpha-beta per
collective and tier), add compute, and report step time and tokens/s as a `simulated` record.
"""

from suite.sim.project import Projection, format_projection, project, simulated_record
from suite.sim.topology import PRESETS, Tier, Topology, get_topology

__all__ = [
    "PRESETS",
    "Projection",
    "Tier",
    "Topology",
    "format_projection",
    "get_topology",
    "project",
    "simulated_record",
]
