import multiprocessing

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils.checkpoint import checkpoint

from suite.meters.memory import CATEGORIES, MemoryMeter
from suite.meters.process import peak_rss_bytes, process_rss_bytes, reset_peak_rss


class MLP(nn.Module):
    def __init__(self, dim: int, depth: int, checkpointed: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)) for _ in range(depth)
        )
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list[torch.Tensor]) -> None:
    for x in batches:
        model(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def measure(model: nn.Module, batches: list[torch.Tensor]) -> dict:
    """Meter the second step, once Adam's state exists, as the training loop does after warm-up."""
    optimizer = torch.optim.AdamW(model.parameters())
    train_step(model, optimizer, batches)
    meter = MemoryMeter(model, optimizer, torch.device("cpu"))
    with meter.measure():
        train_step(model, optimizer, batches)
    return meter.result()


def local_param_bytes(model: nn.Module) -> int:
    """Bytes of this rank's parameters: the local shard of a DTensor."""
    return sum(getattr(p, "_local_tensor", p).untyped_storage().nbytes() for p in model.parameters())


def adam_state_bytes(model: nn.Module) -> int:
    """exp_avg and exp_avg_sq like each parameter, plus one fp32 scalar `step` per parameter."""
    return 2 * local_param_bytes(model) + 4 * len(list(model.parameters()))


@settings(max_examples=4, deadline=None)
@given(dim=st.sampled_from([32, 64, 128]), depth=st.integers(1, 3), micro_batches=st.integers(2, 3))
def test_categories_at_peak_are_the_analytic_state_and_sum_to_peak(dim, depth, micro_batches):
    torch.manual_seed(0)
    model = MLP(dim, depth)
    # Activations of a 512-row batch outweigh Adam's temporaries, so the peak falls in the last
    # micro-batch's forward, with every parameter's gradient accumulated from the earlier ones.
    result = measure(model, [torch.randn(512, dim) for _ in range(micro_batches)])
    param_bytes = local_param_bytes(model)
    assert result["params"] == pytest.approx(param_bytes, rel=0.02)
    assert result["grads"] == pytest.approx(param_bytes, rel=0.02)
    assert result["optimizer"] == pytest.approx(adam_state_bytes(model), rel=0.02)
    assert result["activations"] > 0
    assert sum(result[c] for c in CATEGORIES) == result["peak_bytes"]
    # taken at the end of the optimizer step, before zero_grad(set_to_none=True) frees the gradients
    assert result["state_params"] == result["state_grads"] == param_bytes
    assert result["state_optimizer"] == adam_state_bytes(model)
    assert result["state_bytes"] == 2 * param_bytes + adam_state_bytes(model)


def test_optimizer_step_temporaries_are_other_not_optimizer_state():
    torch.manual_seed(0)
    model = MLP(64, 2)
    # With a tiny batch the peak falls inside AdamW's step, beside the temporaries of its foreach maths.
    result = measure(model, [torch.randn(4, 64)])
    assert result["optimizer"] == adam_state_bytes(model)
    assert result["grads"] == local_param_bytes(model)
    assert result["other"] > 0


def test_frozen_parameters_count_as_params_without_gradients():
    torch.manual_seed(0)
    model = MLP(64, 2)
    model.blocks[0].requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    batches = [torch.randn(64, 64)]
    train_step(model, optimizer, batches)
    meter = MemoryMeter(model, optimizer, torch.device("cpu"))
    with meter.measure():
        model(batches[0]).square().mean().backward()
        optimizer.step()
    result = meter.result()
    trained = sum(p.numel() * 4 for p in model.blocks[1].parameters())
    optimizer_state = 2 * trained + 4 * len(list(model.blocks[1].parameters()))
    assert result["params"] == local_param_bytes(model)
    # at the end of the optimizer step: every parameter, and gradients and optimizer state of the trained ones only
    assert result["state_bytes"] == local_param_bytes(model) + trained + optimizer_state


def test_checkpointing_lowers_activations_at_peak():
    torch.manual_seed(0)
    batches = [torch.randn(512, 64)]
    plain = measure(MLP(64, 4), batches)
    checkpointed = measure(MLP(64, 4, checkpointed=True), batches)
    assert checkpointed["activations"] < plain["activations"] / 2
    assert checkpointed["peak_bytes"] < plain["peak_bytes"]
    assert checkpointed["state_bytes"] == plain["state_bytes"]


@pytest.fixture(params=[("gloo", 1), ("fake", 4)], ids=["gloo-1", "fake-4"])
def process_group(request):
    """A real one-rank gloo group, and a fake 4-rank one (collectives are no-ops) to see 1/N shards."""
    backend, world_size = request.param
    store = dist.HashStore() if backend == "gloo" else FakeStore()
    dist.init_process_group(backend, store=store, rank=0, world_size=world_size)
    yield world_size
    dist.destroy_process_group()


def test_fsdp2_reports_local_shards(process_group):
    world_size = process_group
    torch.manual_seed(0)
    batches = [torch.randn(512, 64) for _ in range(2)]
    unsharded = measure(MLP(64, 2), batches)
    model = MLP(64, 2)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    result = measure(model, batches)
    assert "FSDPMemTracker" in result["method"]
    assert result["params"] == local_param_bytes(model) == pytest.approx(unsharded["params"] / world_size, rel=0.02)
    assert result["optimizer"] == adam_state_bytes(model)
    assert result["state_bytes"] == pytest.approx(unsharded["state_bytes"] / world_size, rel=0.02)
    assert sum(result[c] for c in CATEGORIES) == result["peak_bytes"]
    # The all-gathered block is the unsharded parameter, counted as other, not as params.
    assert result["other"] >= local_param_bytes(model.blocks[0]) * world_size


def allocate_and_free(nbytes: int) -> None:
    """Make `nbytes` resident (ones writes every page), then free them on return."""
    torch.ones(nbytes // 4)


def _step_with_a_transient() -> tuple[int, int, int, int]:
    """The step of the test below, run in a fresh interpreter: pages that earlier tests left resident in this
    process's malloc arenas would let the transient reuse them, and no peak could see it (seen once in a full run)."""
    mib = 2**20
    model = MLP(32, 1)
    optimizer = torch.optim.AdamW(model.parameters())
    meter = MemoryMeter(model, optimizer, torch.device("cpu"))
    allocate_and_free(192 * mib)  # a high-water mark before the step, which the reset must forget
    rss_before = process_rss_bytes()
    with meter.measure():
        train_step(model, optimizer, [torch.randn(8, 32)])
        allocate_and_free(48 * mib)  # freed within the step, so only the peak sees it
    return rss_before, process_rss_bytes(), meter.result()["rss_peak_bytes"], peak_rss_bytes()


@pytest.mark.skipif(not reset_peak_rss(), reason="needs a writable /proc/self/clear_refs (Linux)")
def test_peak_rss_is_reset_before_the_step_and_sees_transients():
    mib = 2**20
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        rss_before, rss_after, rss_peak, high_water = pool.apply(_step_with_a_transient)
    assert rss_peak >= rss_after + 40 * mib
    assert rss_peak < rss_before + 160 * mib
    assert high_water >= rss_peak


def test_bad_use_gets_a_clear_error():
    model = MLP(8, 1)
    optimizer = torch.optim.SGD(model.parameters())
    with pytest.raises(RuntimeError, match="measure"):
        MemoryMeter(model, optimizer, torch.device("cpu")).result()
    with pytest.raises(ValueError, match="cpu or cuda"):
        MemoryMeter(model, optimizer, torch.device("meta"))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            MemoryMeter(model, optimizer, torch.device("cuda"))
    with pytest.raises(TypeError, match="nn.Module"):
        MemoryMeter(optimizer, optimizer, torch.device("cpu"))


def test_every_optimizer_state_counts_as_optimizer(process_group):
    """An outer optimizer (DiLoCo's Nesterov momentum over the same parameters) is optimizer state too."""
    torch.manual_seed(0)
    model = MLP(64, 2)
    if process_group > 1:
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    inner = torch.optim.AdamW(model.parameters())
    outer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    x = torch.randn(64, 64)

    def step() -> None:
        model(x).square().mean().backward()
        inner.step()
        outer.step()
        inner.zero_grad()

    step()  # both optimizers' state exists before the metered step, as in steady state
    meter = MemoryMeter(model, [inner, outer], torch.device("cpu"))
    with meter.measure():
        step()
    result = meter.result()
    param_bytes = local_param_bytes(model)
    assert result["state_optimizer"] == adam_state_bytes(model) + param_bytes  # plus one momentum buffer
    assert result["optimizer"] == result["state_optimizer"]
    assert result["state_grads"] == param_bytes


def test_several_steps_give_the_highest_peak_and_state():
    torch.manual_seed(0)
    model = MLP(64, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    train_step(model, optimizer, [torch.randn(8, 64)])
    meter = MemoryMeter(model, optimizer, torch.device("cpu"))
    for rows in (8, 512, 8):
        with meter.measure():
            train_step(model, optimizer, [torch.randn(rows, 64)])
    result = meter.result()
    assert result["steps"] == 3
    assert result["activations"] > 512 * 64 * 4  # the large step's peak, with its activations
    assert sum(result[c] for c in CATEGORIES) == result["peak_bytes"]
    assert result["state_bytes"] == 2 * local_param_bytes(model) + adam_state_bytes(model)
