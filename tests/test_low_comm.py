"""The low-communication row (reproductions/low_comm). Streaming DiLoCo: the E3M0 code, the fragments and their
schedule, the one-line refusals, and real gloo runs at 2, 3 and 4 workers (one fragment, no delay and no quantization
is DiLoCo; the ledger holds each fragment's exchange once per period, to the derived byte). IsoLoCo: Iso-C's merge
(a property), the pseudo-gradient it steps on, and real runs at 2, 3 and 4 workers whose groups agree after every
round and whose ledger is DiLoCo's."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reproductions.low_comm import quantize as q
from reproductions.low_comm.isoloco import IsoAverager, IsoLoCo, iso, iso_matrices
from reproductions.low_comm.streaming import (
    StreamingDiLoCo,
    exchange_bytes,
    fragment_blocks,
    fragment_params,
    offsets,
)
from suite.config import RunConfig
from suite.models import blocks_of, build_model

from .conftest import SharedRuns


@settings(deadline=None, max_examples=50)
@given(st.lists(st.floats(-1e3, 1e3, allow_subnormal=False), min_size=1, max_size=300))
def test_e3m0_sends_each_value_as_its_nearest_level_of_the_blocks_scale(values):
    x = torch.tensor(values, dtype=torch.float32)
    message = q.quantize(x, block=16)
    assert message.dtype == torch.uint8 and message.numel() == q.payload_bytes(x.numel(), block=16)
    back = q.dequantize(message, x.numel(), block=16)
    for start in range(0, x.numel(), 16):
        part, got = x[start : start + 16], back[start : start + 16]
        scale = part.abs().max()
        if scale == 0:
            assert torch.equal(got, torch.zeros_like(got))
            continue
        levels = q.LEVELS * scale
        nearest = levels[(part.abs()[:, None] - levels[None, :]).abs().argmin(1)]
        assert torch.allclose(got.abs(), nearest, rtol=1e-6, atol=0)
        assert torch.all((got == 0) | (torch.sign(got) == torch.sign(part)))


def test_e3m0_keeps_powers_of_two_of_the_scale_exactly_and_costs_68_bytes_a_block_of_128():
    x = torch.tensor([1.0, -0.5, 0.25, -1 / 64, 0.0, 1 / 256] * 30)
    assert q.dequantize(q.quantize(x), x.numel()).tolist() == [1.0, -0.5, 0.25, -1 / 64, 0.0, 0.0] * 30
    assert q.payload_bytes(128) == 68 and q.payload_bytes(129) == 136


@pytest.mark.parametrize(
    ("pattern", "blocks"),
    [("strided", [[0, 3, 6], [1, 4, 7], [2, 5]]), ("sequential", [[0, 1, 2], [3, 4, 5], [6, 7]])],
)
def test_fragments_hold_every_block_once_strided_or_sequential(pattern, blocks):
    assert fragment_blocks(8, 3, pattern) == blocks


def test_the_embedding_goes_with_the_first_fragment_and_the_head_with_the_last():
    model = build_model("llama-tiny")
    parts = fragment_params(model, 2, "strided")
    assert sorted(id(t) for part in parts for t in part) == sorted(id(t) for t in model.parameters())
    blocks = blocks_of(model)
    assert {id(t) for t in blocks[1].parameters()} <= {id(t) for t in parts[1]}
    assert any(t is model.tok_embeddings.weight for t in parts[0])
    assert any(t is model.output.weight for t in parts[1]) and any(t is model.norm.weight for t in parts[1])


@given(st.integers(1, 40).flatmap(lambda h: st.tuples(st.just(h), st.integers(1, h), st.integers(1, 200))))
def test_in_any_h_consecutive_steps_every_fragment_sends_once(case):
    h, p, start = case
    sends = [j for t in range(start, start + h) for j, t_p in enumerate(offsets(h, p)) if (t - t_p) % h == 0]
    assert sorted(sends) == list(range(p))


@pytest.mark.parametrize(
    ("method", "variant", "fix"),
    [
        (StreamingDiLoCo, {"F": 4, "tau": 4}, "tau < 4"),
        (StreamingDiLoCo, {"F": 2, "P": 3}, "raise F or lower P"),
        (StreamingDiLoCo, {"outer": "none"}, "keep an outer optimizer"),
        (StreamingDiLoCo, {"inner": "fsdp"}, "use inner=ddp"),
        (StreamingDiLoCo, {"average_moments": True}, "drop it for streaming-diloco"),
        (StreamingDiLoCo, {"F": 8, "P": 5}, "llama-tiny's 4 blocks leave one empty: P <= 4"),
        (IsoLoCo, {"outer": "none"}, "keep an outer optimizer"),
        (IsoLoCo, {"inner": "fsdp"}, "use inner=ddp"),
        (IsoLoCo, {"average_moments": True}, "drop it for isoloco"),
    ],
)
def test_bad_settings_name_the_fix(method, variant, fix):
    with pytest.raises(ValueError, match=fix):
        method(RunConfig(method=method.name, nproc=2), variant)


# ---- real gloo runs ----------------------------------------------------------------------------------------------
SMALL = ("--set", "micro_batch=2", "--set", "seq_len=64", "--set", "F=2")
AS_DILOCO = ("--set", "P=1", "--set", "tau=0", "--set", "alpha=0", "--set", "quantize=none", "--no-meters")
STREAMING = ("--set", "check=true")  # P = 2, tau = 1, alpha = 0.5, E3M0: the defaults
NPROCS = (2, 3, 4)


def _run(method: str, nproc: int, *sets: str) -> tuple[str, ...]:
    return (method, "--nproc", str(nproc), "--tokens", str(5 * nproc * 2 * 64), *SMALL, *sets)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> SharedRuns:
    commands = [_run("streaming-diloco", 4, "--set", "quantize=none")]
    for n in NPROCS:
        commands += [_run("streaming-diloco", n, *AS_DILOCO), _run("diloco", n, "--no-meters")]
        commands += [_run("streaming-diloco", n, *STREAMING), _run("isoloco", n, "--set", "check=true")]
    return SharedRuns(tmp_path_factory.mktemp("streaming-diloco"), commands)


def _curve(record: dict, field: str) -> list[float]:
    """The field at every logged step; a validation loss only where every group holds the global model (a multiple
    of F = 2): DiLoCo evaluates rank 0's own model, equal to the global one there only, streaming-diloco the global
    copies."""
    return [
        p[field] for p in record["curve"] if p.get(field) is not None and (field != "val_loss" or p["step"] % 2 == 0)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("nproc", NPROCS)
def test_one_fragment_without_delay_or_quantization_trains_and_evaluates_as_diloco(runs, nproc):
    """The outer gradient averaged (the paper's) against the parameters averaged (DiLoCo here): one rounding apart."""
    streaming, diloco = runs(*_run("streaming-diloco", nproc, *AS_DILOCO)), runs(*_run("diloco", nproc, "--no-meters"))
    for field in ("train_loss", "val_loss"):
        assert _curve(streaming, field) == pytest.approx(_curve(diloco, field), abs=1e-5)
    assert len(_curve(streaming, "val_loss")) == 2
    assert streaming["curve"][-1]["val_loss"] != diloco["curve"][-1]["val_loss"]  # step 5: global against rank 0's


@pytest.mark.slow
@pytest.mark.parametrize("nproc", NPROCS)
def test_the_ledger_holds_each_fragments_exchange_once_a_period_to_the_derived_byte(runs, nproc):
    """check=true: after every outer step the groups' global copies of the fragment are compared, off the ledger."""
    record = runs(*_run("streaming-diloco", nproc, *STREAMING))
    streaming = record["parallel"]["fl"]["streaming"]
    assert streaming["blocks"] == [[0, 2], [1, 3]] and streaming["offsets"] == [0, 1]
    derived = [exchange_bytes(n, nproc, "e3m0") for n in streaming["elements"]]
    assert streaming["payload_bytes_per_exchange"] == derived
    ops = [o for o in record["comm"]["per_rank"][0]["ops"] if o["group"] == "fed"]
    assert [(o["op"], o["count"], o["bytes"]) for o in ops] == [("all_gather", 2, sum(derived))]
    assert record["comm"]["steps"] == 2 and sum(streaming["elements"]) == record["model"]["params"]


@pytest.mark.slow
def test_without_quantization_each_fragment_all_reduces_its_fp32_outer_gradient(runs):
    record = runs(*_run("streaming-diloco", 4, "--set", "quantize=none"))
    ops = [o for o in record["comm"]["per_rank"][0]["ops"] if o["group"] == "fed"]
    assert [(o["op"], o["count"], o["bytes"]) for o in ops] == [("all_reduce", 2, 4 * record["model"]["params"])]


# ---- IsoLoCo -----------------------------------------------------------------------------------------------------
@settings(deadline=None, max_examples=30)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_iso_c_sets_every_singular_value_to_their_mean_and_keeps_the_nuclear_norm(m, n, seed):
    delta = torch.randn(m, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).float()
    s = torch.linalg.svdvals(delta)
    merged = torch.linalg.svdvals(iso(delta))
    assert torch.allclose(merged, torch.full_like(merged, s.mean().item()), rtol=1e-4, atol=1e-5)
    assert merged.sum().item() == pytest.approx(s.sum().item(), rel=1e-4)


@pytest.mark.parametrize("which", ["all", "blocks"])
def test_the_pseudo_gradient_is_iso_c_on_the_chosen_matrices_and_the_plain_difference_elsewhere(which):
    torch.manual_seed(0)
    model = build_model("llama-tiny")
    params = list(model.parameters())
    chosen = iso_matrices(model, which)
    averager = IsoAverager(params, None, 1, outer="sgd", outer_momentum=0.0, iso_params=chosen)
    with torch.no_grad():
        for t in params:
            t.add_(torch.randn_like(t) * 0.01)
    target = torch.cat([t.detach().flatten() for t in params])
    delta = averager.pseudo_gradient(target.clone())
    start = 0
    for t, before in zip(params, torch.split(averager.anchor.detach() - target, [t.numel() for t in params])):
        part = delta[start : start + t.numel()].view(t.shape)
        expected = iso(before.view(t.shape)) if id(t) in chosen else before.view(t.shape)
        assert torch.allclose(part, expected, atol=1e-6)
        start += t.numel()
    embedding, head = model.tok_embeddings.weight, model.output.weight
    assert (id(embedding) in chosen) == (id(head) in chosen) == (which == "all")
    assert sum(t.ndim == 2 for t in blocks_of(model)[0].parameters()) == 7  # attention's 4 and the MLP's 3


@pytest.mark.slow
@pytest.mark.parametrize("nproc", NPROCS)
def test_isoloco_groups_agree_after_every_round_and_send_what_diloco_sends(runs, nproc):
    """check=true: after each round every group holds the same parameters (each took the same SVD of the same
    average); the ledger's calls and bytes are DiLoCo's, the merge being local arithmetic."""
    isoloco, diloco = runs(*_run("isoloco", nproc, "--set", "check=true")), runs(*_run("diloco", nproc, "--no-meters"))
    fed = [(o["op"], o["count"], o["bytes"]) for o in isoloco["comm"]["per_rank"][0]["ops"] if o["group"] == "fed"]
    assert fed == [("all_reduce", 1, 4 * isoloco["model"]["params"])]
    assert len(isoloco["parallel"]["fl"]["merge"]["merged_shapes"]) == 30  # 4 blocks of 7, the embedding, the head
    assert _curve(isoloco, "train_loss")[0] == _curve(diloco, "train_loss")[0]  # same start; the merge comes at F
    assert _curve(isoloco, "val_loss")[-1] != _curve(diloco, "val_loss")[-1]
