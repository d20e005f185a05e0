"""NorMuon, Dion2 and Dion3 against numbers produced by running microsoft/dion's normuon.py, dion2.py and
nordion2.py (reproductions/dion/fixtures/reference-dion2-normuon.json and reference-dion3.json, made by
fixtures/make_reference_fixture.py; command, commit and settings inside each fixture).

Ten steps on a tall, a wide and a square matrix (Dion2 picks columns of the tall one, rows of the others;
Dion3 always rows). Against the reference run eagerly all agree within float32 rounding: the bf16
orthogonalization is the same computation, and what differs is rounding in float32 arithmetic (1 - beta2 as a
float32 tensor there, a Python float here; sqrt of a sum of squares against torch.norm): measured at most
2.4e-7 on values near 1, so 1e-6 absolute. The reference as shipped (torch.compile) fuses Polar Express's
pointwise steps in float32, so against it the tolerance is bf16's: X10 - X0 within 5% in norm per matrix
(measured 1.3-3.7%; the same ten steps with Polar Express in float32 instead of bf16 move NorMuon's and
Dion2's by 1.4-3.4%).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from reproductions.dion.dion2 import Dion2
from reproductions.dion.dion3 import Dion3
from reproductions.dion.normuon import NorMuon

FOLDER = Path(__file__).parents[1] / "reproductions/dion/fixtures"
FIXTURES = {
    name: json.loads((FOLDER / name).read_text()) for name in ("reference-dion2-normuon.json", "reference-dion3.json")
}
CLASSES = {"normuon": NorMuon, "dion2": Dion2, "dion3": Dion3}  # by the case name's first word
NAMES = {"muon_beta2": "beta2"}  # the reference's name -> ours; every other setting has the same name


def _tensors(fixture: dict, flat: list) -> list[torch.Tensor]:
    return [torch.tensor(v, dtype=torch.float32).reshape(s) for v, s in zip(flat, fixture["shapes"])]


def ours(fixture: dict, name: str, settings: dict) -> list[torch.Tensor]:
    params = [nn.Parameter(x) for x in _tensors(fixture, fixture["x0"])]
    opt = CLASSES[name.split("-")[0]](params, **{NAMES.get(k, k): v for k, v in settings.items()})
    for grads in fixture["grads"]:
        for p, g in zip(params, _tensors(fixture, grads)):
            p.grad = g
        opt.step()
    return [p.detach() for p in params]


def cases(mode: str) -> list[tuple[str, str]]:
    return [(f, name) for f, fixture in FIXTURES.items() for name in fixture["runs"][mode]]


@pytest.mark.parametrize("fixture", FIXTURES.values(), ids=FIXTURES)
def test_fixture_says_where_it_came_from(fixture):
    assert fixture["source"]["repository"] == "https://github.com/microsoft/dion"
    assert len(fixture["source"]["commit"]) == 40 and fixture["command"] and fixture["steps"] == 10


def test_every_optimizer_has_reference_numbers():
    assert {name.split("-")[0] for _, name in cases("eager")} == set(CLASSES)


@pytest.mark.parametrize("file,name", cases("eager"))
def test_equals_the_eager_reference_within_float32_rounding(file, name):
    fixture = FIXTURES[file]
    case = fixture["runs"]["eager"][name]
    for got, want in zip(ours(fixture, name, case["settings"]), _tensors(fixture, case["x_after_last_step"])):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("file,name", cases("compiled"))
def test_agrees_with_the_compiled_reference_in_bf16(file, name):
    fixture = FIXTURES[file]
    case = fixture["runs"]["compiled"][name]
    x0 = _tensors(fixture, fixture["x0"])
    for start, got, ref in zip(x0, ours(fixture, name, case["settings"]), _tensors(fixture, case["x_after_last_step"])):
        assert (got - ref).norm() / (ref - start).norm() < 0.05
