"""Network projections: alpha-beta costs against hand-computed cases, tiers, projection, simulated records."""

import json
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from suite.cli import main
from suite.config import RunConfig
from suite.records import read_record, validate
from suite.run.recorder import new_record
from suite.sim import PRESETS, Tier, Topology, format_projection, get_topology, project, simulated_record
from suite.sim.collectives import cost
from suite.sim.loopback import fit_tier
from suite.sim.topology import packed_ranks

GB = 1e9
H100 = PRESETS["8xH100-nvlink4-8x400gbIB"]
A100 = PRESETS["4xA100-nvlink-4x200gbIB"]


def test_ring_all_reduce_by_hand():
    # 8 ranks, 1 GB, 100 GB/s, 5 us: 2*7 steps of latency, 2*7/8 of the payload over the link
    assert cost("all_reduce", 1e9, 8, 100 * GB, 5e-6, "ring") == pytest.approx(14 * 5e-6 + 1.75e9 / 100e9)


def test_tree_all_reduce_by_hand():
    # 8 ranks: log2(8) = 3 levels up and 3 down; the whole payload twice over the link
    assert cost("all_reduce", 1e9, 8, 100 * GB, 5e-6, "tree") == pytest.approx(6 * 5e-6 + 2e9 / 100e9)


def test_gather_scatter_broadcast_by_hand():
    assert cost("all_gather", 4e8, 4, 50 * GB, 1e-5, "ring") == pytest.approx(3e-5 + 0.75 * 4e8 / 50e9)
    assert cost("reduce_scatter", 4e8, 4, 50 * GB, 1e-5, "tree") == pytest.approx(2e-5 + 0.75 * 4e8 / 50e9)
    assert cost("broadcast", 4e8, 4, 50 * GB, 1e-5, "ring") == pytest.approx(3e-5 + 4e8 / 50e9)
    assert cost("send", 4e8, 2, 50 * GB, 1e-5) == pytest.approx(1e-5 + 4e8 / 50e9)


def test_calls_pay_latency_each_and_one_rank_pays_nothing():
    assert cost("all_reduce", 1e6, 2, GB, 1e-3, "ring", calls=10) == pytest.approx(10 * 2e-3 + 1e6 / GB)
    assert cost("all_reduce", 1e9, 1, GB, 1e-3) == 0.0


def test_auto_takes_tree_for_small_and_ring_for_large_payloads():
    small = cost("all_reduce", 1e3, 64, 100 * GB, 1e-5, "auto")
    large = cost("all_reduce", 1e10, 64, 100 * GB, 1e-5, "auto")
    assert small == cost("all_reduce", 1e3, 64, 100 * GB, 1e-5, "tree")
    assert large == cost("all_reduce", 1e10, 64, 100 * GB, 1e-5, "ring")


@given(
    st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]),
    st.integers(2, 1024),
    st.floats(1.0, 1e11),
    st.sampled_from(["ring", "tree"]),
)
def test_cost_is_affine_in_payload(op, n, payload, algorithm):
    at = [cost(op, p, n, 10 * GB, 2e-6, algorithm) for p in (0.0, payload, 2 * payload)]
    assert at[2] - at[1] == pytest.approx(at[1] - at[0], rel=1e-9)
    assert at[1] > at[0] > 0


def test_unknown_collective_names_itself():
    with pytest.raises(ValueError, match="no cost formula for collective 'barrier'"):
        cost("barrier", 1.0, 4, GB, 1e-6, "ring")


def test_tiers_from_ranks():
    assert H100.link(list(range(8))) == ("nvlink4", 450 * GB, 3e-6)
    # two nodes with 8 ranks each: one ring per NIC, 8 NICs of 50 GB/s
    assert H100.link(list(range(16))) == ("ib-ndr-400g", 8 * 50 * GB, 8e-6)
    # an HSDP replicate group: one rank per node drives one NIC
    assert H100.link([0, 8, 16, 24]) == ("ib-ndr-400g", 50 * GB, 8e-6)
    assert A100.link([0, 1, 4, 5]) == ("ib-hdr-200g", 2 * 25 * GB, 8e-6)


def test_groups_known_by_size_and_tier_are_packed():
    assert packed_ranks(4, "intra-node", 8) == [0, 1, 2, 3]
    assert packed_ranks(16, "inter-node", 8) == list(range(16))
    assert packed_ranks(6, "inter-node", 8) == [0, 1, 2, 8, 9, 10]


def test_bad_topologies_and_names():
    with pytest.raises(ValueError, match="choose one of"):
        get_topology("dgx-1")
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        Tier("x", 0.0, 1e-6)
    with pytest.raises(ValueError, match="gpus_per_node"):
        Topology("x", 0, 1, Tier("a", 1.0, 0.0), Tier("b", 1.0, 0.0), "gpu", None, "")


def ddp_record(world: int, param_bytes: int = 4 * 10**9, steps: int = 2, flops_per_step: float = 6e15) -> dict:
    """A record shaped like a DDP run's: one gradient all-reduce of `param_bytes` per step."""
    cfg = RunConfig(method="ddp", model="llama-1b", nproc=world, tokens=1.0, run_id="synthetic-ddp")
    rec = new_record(cfg, world, torch.device("cpu"), "gloo", None)
    ranks = list(range(world))
    rec["parallel"].update(
        {
            "global_batch_tokens": 8192 * world,
            "groups": [{"name": "replicate", "size": world, "tier": "inter-node", "ranks": ranks}],
        }
    )
    rec["totals"].update(
        {
            "steps": steps,
            "tokens": steps * 8192 * world,
            "flops": steps * flops_per_step,
            "hardware_flops": steps * flops_per_step,
        }
    )
    rec["comm"] = {
        "method": "synthetic",
        "steps": steps,
        "per_rank": [
            {
                "rank": 0,
                "ops": [
                    {
                        "op": "all_reduce",
                        "group": "replicate",
                        "tier": "inter-node",
                        "group_size": world,
                        "count": 4 * steps,
                        "bytes": steps * param_bytes,
                        "wire_bytes": 0.0,
                    }
                ],
            }
        ],
    }
    rec["status"] = "complete"
    return rec


def test_projection_by_hand_inside_one_node():
    rec = ddp_record(8)
    proj = project(rec, H100, overlap=0.0, mfu=0.5, algorithm="ring")
    comm = 4 * 14 * 3e-6 + 2 * 7 / 8 * 4e9 / (450 * GB)  # 4 buckets of a ring all-reduce over NVLink
    compute = 6e15 / 8 / (989e12 * 0.5)  # each rank's share of the step's FLOPs at half of peak
    assert proj.comm_s == pytest.approx(comm)
    assert proj.compute_s == pytest.approx(compute)
    assert proj.step_s == pytest.approx(comm + compute)
    assert proj.step_s_bounds == pytest.approx((max(comm, compute), comm + compute))
    assert proj.tokens_per_s == pytest.approx(8192 * 8 / (comm + compute))
    assert proj.mfu == pytest.approx(6e15 / ((comm + compute) * 989e12 * 8))
    assert project(rec, H100, overlap=1.0, mfu=0.5, algorithm="ring").step_s == pytest.approx(max(comm, compute))


def test_projection_across_nodes_uses_the_network():
    rec = ddp_record(16)
    proj = project(rec, H100, algorithm="ring", compute=(0.1, "given"))
    assert proj.ops[0].tier == "ib-ndr-400g"
    assert proj.comm_s == pytest.approx(4 * 30 * 8e-6 + 2 * 15 / 16 * 4e9 / (8 * 50 * GB))
    assert proj.step_s == pytest.approx(0.1 + proj.comm_s)
    assert "overlap assumption: 0" in format_projection(proj)
    assert "SIMULATED" in format_projection(proj)


def test_simulated_record_is_labelled_and_valid():
    rec = ddp_record(16)
    sim = simulated_record(rec, project(rec, A100), "python -m suite simulate r.json --topology a100")
    validate(sim)
    assert sim["provenance"] == "simulated" and sim["command"] == "python -m suite simulate r.json --topology a100"
    assert sim["env"]["device_name"] == A100.gpu
    assert sim["throughput"]["tokens_per_s"] > 0
    assert sim["simulation"]["topology"]["name"] == A100.name
    assert rec["provenance"] == "measured"  # the source is left as it was
    with pytest.raises(ValueError, match="itself simulated"):
        project(sim, A100)


def test_bad_projection_inputs_name_the_fix():
    rec = ddp_record(8)
    with pytest.raises(ValueError, match="overlap must be in"):
        project(rec, H100, overlap=1.5)
    with pytest.raises(ValueError, match="mfu must be in"):
        project(rec, H100, mfu=0.0)
    rec["comm"]["steps"] = 0
    with pytest.raises(ValueError, match="meters on"):
        project(rec, H100)


@given(st.floats(1e-7, 1e-3), st.floats(1e8, 1e12), st.integers(2, 64))
def test_fit_recovers_latency_and_bandwidth(latency, bandwidth, n):
    timings = [
        {"op": "all_reduce", "n": n, "payload": p, "seconds": cost("all_reduce", p, n, bandwidth, latency, "ring")}
        for p in (1e3, 1e5, 1e7, 1e9)
    ]
    tier = fit_tier(timings)
    assert tier.latency == pytest.approx(latency, rel=1e-5)
    assert tier.bandwidth == pytest.approx(bandwidth, rel=1e-5)


def test_simulate_command(tmp_path, capsys):
    path = tmp_path / "ddp.json"
    path.write_text(json.dumps(ddp_record(16)))
    assert main(["simulate", str(path), "--topology", A100.name, "--overlap", "0.5", "--write", str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith("SIMULATED projection of synthetic-ddp")
    written = json.loads(open(out[-1]).read())
    assert written["provenance"] == "simulated" and math.isclose(written["simulation"]["overlap"], 0.5)


def test_the_written_projection_carries_its_own_machine_load(tmp_path, capsys):
    """A projection's record keeps the load average at its start and end (`timing.load_average`, as a run's), never
    the source run's timing: the source's load is not the condition the projection was made under."""
    source = ddp_record(16)
    source["timing"] = {
        "before_s": 1.0, "setup_s": 2.0, "steps_s": None, "eval_s": 0.0, "final_evals_s": 0.0, "run_s": 3.0,
        "load_average": [99.0, 99.0],
    }  # fmt: skip
    path = tmp_path / "ddp.json"
    path.write_text(json.dumps(source))
    assert main(["simulate", str(path), "--topology", A100.name, "--write", str(tmp_path / "sim")]) == 0
    written = read_record(capsys.readouterr().out.strip().splitlines()[-1])
    load = written["timing"]["load_average"]
    assert len(load) == 2 and all(0 <= x < 99.0 for x in load) and "before_s" not in written["timing"]
    assert "load_start" not in written["simulation"]


def test_simulate_command_errors_are_one_line(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "missing.json"), "--topology", A100.name]) == 2
    assert "no record at" in capsys.readouterr().err
    path = tmp_path / "ddp.json"
    path.write_text(json.dumps(ddp_record(8)))
    assert main(["simulate", str(path), "--topology", A100.name, "--overlap", "2"]) == 2
    assert capsys.readouterr().err.strip() == "error: overlap must be in [0, 1], got 2.0"
