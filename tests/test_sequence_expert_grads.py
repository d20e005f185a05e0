"""Expert and context parallelism give one process's loss and gradients on the same batch (gloo, 2 and 4 ranks;
cp at 3).

Each spawned rank builds the method's model through its own hooks (setup, build, forward_backward,
after_backward), with the seed one process uses, and runs one micro-batch: ep its own rows of the batch, cp
its chunk of every sequence. The gradients are compared parameter by parameter with one process's on the whole
batch (AdamW would hide a wrong gradient scale from a loss trajectory, so the gradients are read directly).
With --ac (the recomputation repeats the exchanges in backward) they are equal within the same tolerance; in
bf16 they are compared with one process's under the same autocast, as a relative error of each tensor, since
rows grouped differently round differently.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager, nullcontext

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from suite import models
from suite.config import RunConfig
from suite.meters.comm import CommLedger
from suite.run.strategy import Context, get_strategy

pytestmark = pytest.mark.slow

ROWS, SEQ = 4, 48  # 48 positions: chunks of equal length at 2, 3 and 4 ranks
MODELS = {"ep": "llama-tiny-moe", "cp": "llama-tiny"}


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, 256, (ROWS, SEQ + 1), generator=torch.Generator().manual_seed(7))
    return tokens[:, :-1], tokens[:, 1:]


def loss_fn(model, x, y) -> torch.Tensor:
    out = model(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def one_process(method: str, precision: str = "fp32") -> tuple[float, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = models.build_model(MODELS[method])
    with autocast(precision):
        loss = loss_fn(model, *batch())
    loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters()}


def autocast(precision: str) -> AbstractContextManager:
    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else nullcontext()


def _worker(rank: int, world: int, method: str, ac: bool, precision: str, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    cfg = RunConfig(
        method=method, model=MODELS[method], nproc=world, seq_len=SEQ, micro_batch=ROWS, ac=ac, precision=precision
    )
    strategy = get_strategy(cfg)
    ctx = Context(cfg, rank, world, torch.device("cpu"), CommLedger())
    strategy.setup(ctx)
    torch.manual_seed(0)
    model = strategy.build(lambda: models.build_model(MODELS[method]), ctx)
    x, y = batch()
    if method == "ep":  # a data replica: its own rows
        x, y = (t.chunk(world)[rank] for t in (x, y))

    def scoped_loss(model, x, y) -> torch.Tensor:  # as the loop's: under the strategy's autocast
        with strategy.autocast(ctx):
            return loss_fn(model, x, y)

    loss = strategy.forward_backward(model, x, y, scoped_loss, lambda loss: loss.backward())
    strategy.after_backward(model, ctx)
    dist.all_reduce(loss)
    grads = {n: p.grad for n, p in model.named_parameters()}
    torch.save({"loss": loss.item() / world, "grads": grads}, f"{out}.{rank}")
    dist.destroy_process_group()


def global_name(method: str, name: str, rank: int, world: int) -> str:
    """The one-process name of a rank's parameter: cp wraps the model; ep's experts are numbered per rank."""
    if method == "cp":
        return name.removeprefix("module.")
    if match := re.fullmatch(r"(.*\.experts\.)(\d+)(\..*)", name):
        per_rank = models.model_config(MODELS[method])["n_experts"] // world
        return f"{match[1]}{rank * per_rank + int(match[2])}{match[3]}"
    return name


CASES = [(2, False, "fp32"), (4, False, "fp32"), (2, True, "fp32"), (2, False, "bf16")]
# cp at 3 ranks too (48 positions, 16 each); ep cannot spread 8 experts over 3 (tests/test_expert_parallel.py)
ALL = [(m, *case) for m in ("ep", "cp") for case in CASES] + [("cp", 3, False, "fp32")]


@pytest.mark.parametrize(("method", "world", "ac", "precision"), ALL)
def test_gradients_equal_one_process(method, world, ac, precision, tmp_path):
    args = (world, method, ac, precision, str(tmp_path / "init"), str(tmp_path / "out"))
    mp.spawn(_worker, args=args, nprocs=world, join=True)
    ref_loss, ref = one_process(method, precision)
    covered = set()
    for rank in range(world):
        got = torch.load(tmp_path / f"out.{rank}")
        assert got["loss"] == pytest.approx(ref_loss, abs=1e-5 if precision == "fp32" else 1e-2)
        for name, grad in got["grads"].items():
            full = global_name(method, name, rank, world)
            covered.add(full)
            if precision == "fp32":
                torch.testing.assert_close(grad, ref[full], rtol=1e-4, atol=1e-6, msg=lambda m, n=full: f"{n}: {m}")
            else:  # bf16 keeps 8 bits of mantissa: a few roundings apart, within a few percent
                assert (grad - ref[full]).norm() <= 0.05 * ref[full].norm() + 1e-6, full
    assert covered == set(ref)  # every parameter's gradient is on some rank
