"""A plan's recorded command gives back the run's config: command_line and the CLI are inverse."""

from __future__ import annotations

import dataclasses
import shlex

from hypothesis import given, settings
from hypothesis import strategies as st

from suite.cli import config_from_args, parser
from suite.config import RunConfig, command_line
from suite.params import Param

configs = st.builds(
    RunConfig,
    method=st.sampled_from(["ddp", "fsdp", "b-sdp"]),
    model=st.sampled_from(["llama-tiny", "llama-1b", "resnet18"]),
    nproc=st.integers(1, 16),
    tokens=st.one_of(st.none(), st.integers(1, 10**9).map(float)),
    seed=st.integers(0, 5),
    ac=st.booleans(),
    precision=st.sampled_from(["fp32", "bf16"]),
    micro_batch=st.integers(1, 64),
    seq_len=st.sampled_from([64, 128, 1024]),
    lr=st.sampled_from([3e-3, 1e-3, 6e-4]),
    eval_every=st.integers(1, 500),
    meters=st.booleans(),
    reproduction=st.sampled_from(["harness", "sdp"]),
    variant=st.one_of(st.just({}), st.builds(lambda c: {"C": c}, st.sampled_from([0.5, 0.69, 0.75]))),
)


@settings(max_examples=60, deadline=None)
@given(cfg=configs)
def test_run_command_parses_back_to_the_same_config(cfg):
    argv = shlex.split(command_line(cfg))[3:]
    back = config_from_args(parser().parse_args(argv), argv)
    assert dataclasses.replace(back, command="", variant={}) == dataclasses.replace(cfg, command="", variant={})
    # method parameters come back as the text the method's declared Param reads (suite.params)
    assert {k: Param(float).parse(k, v) for k, v in back.variant.items()} == cfg.variant


def test_estimate_command_names_the_world_size_and_no_budget():
    cfg = RunConfig(method="fsdp", model="llama-1b", nproc=8, tokens=1e6, ac=True, micro_batch=4, seq_len=1024)
    assert command_line(cfg, "estimate") == (
        "python -m suite estimate fsdp --model llama-1b --world-size 8 --ac --set micro_batch=4 --set seq_len=1024"
    )
