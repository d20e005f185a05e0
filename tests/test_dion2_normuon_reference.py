"""NorMuon and Dion2 against numbers produced by running microsoft/dion's normuon.py and dion2.py
(reproductions/dion/fixtures/reference-dion2-normuon.json, made by fixtures/make_reference_fixture.py; command,
commit and settings inside the fixture).

Ten steps on a tall, a wide and a square matrix (Dion2 picks columns of the tall one, rows of the others).
Against the reference run eagerly both agree within float32 rounding: the bf16 orthogonalization is the same
computation, and what differs is rounding in float32 arithmetic (1 - beta2 as a float32 tensor there, a
Python float here; sqrt of a sum of squares against torch.norm): measured at most 2.4e-7 on values near 1,
so 1e-6 absolute. The reference as shipped (torch.compile) fuses Polar Express's pointwise steps in float32,
so against it the tolerance is bf16's: X10 - X0 within 5% in norm per matrix (measured 1.5-3.7%; the same
ten steps with Polar Express in float32 instead of bf16 differ from ours by 1.4-3.4%).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from reproductions.dion.dion2 import Dion2
from reproductions.dion.normuon import NorMuon

FIXTURE = json.loads(
    (Path(__file__).parents[1] / "reproductions/dion/fixtures/reference-dion2-normuon.json").read_text()
)
NAMES = {"muon_beta2": "beta2"}  # the reference's name -> ours; every other setting has the same name


def _tensors(flat: list) -> list[torch.Tensor]:
    return [torch.tensor(v, dtype=torch.float32).reshape(s) for v, s in zip(flat, FIXTURE["shapes"])]


def ours(name: str, settings: dict) -> list[torch.Tensor]:
    params = [nn.Parameter(x) for x in _tensors(FIXTURE["x0"])]
    cls = NorMuon if name.startswith("normuon") else Dion2
    opt = cls(params, **{NAMES.get(k, k): v for k, v in settings.items()})
    for grads in FIXTURE["grads"]:
        for p, g in zip(params, _tensors(grads)):
            p.grad = g
        opt.step()
    return [p.detach() for p in params]


def cases(mode: str) -> list[tuple[str, dict]]:
    return list(FIXTURE["runs"][mode].items())


def test_fixture_says_where_it_came_from():
    assert FIXTURE["source"]["repository"] == "https://github.com/microsoft/dion"
    assert len(FIXTURE["source"]["commit"]) == 40 and FIXTURE["command"]
    assert FIXTURE["steps"] == 10 and {n.split("-")[0] for n in FIXTURE["runs"]["eager"]} == {"normuon", "dion2"}


@pytest.mark.parametrize("name,case", cases("eager"))
def test_equals_the_eager_reference_within_float32_rounding(name, case):
    for got, want in zip(ours(name, case["settings"]), _tensors(case["x_after_last_step"])):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name,case", cases("compiled"))
def test_agrees_with_the_compiled_reference_in_bf16(name, case):
    x0 = _tensors(FIXTURE["x0"])
    for start, got, ref in zip(x0, ours(name, case["settings"]), _tensors(case["x_after_last_step"])):
        assert (got - ref).norm() / (ref - start).norm() < 0.05
