"""The estimator's speed-ups change no number (issue 31): estimates re-run to records equal, field by field, to
references made before them. Two small configurations cover the paths the speed-ups touch:
- FSDP2 with the symmetric-rank shortcut: the committed fl-fsdp smoke estimate (FSDPMemTracker, rank 0 stands
  for all);
- SDP, whose ranks differ: a b-sdp llama-tiny estimate on 4 ranks, its reference written by the estimator
  before the speed-ups (tests/references; MemTracker, every rank stepped), rerun by rank class.
The DDP path is the committed sdp smoke estimate of tests/test_rerun.py.
"""

from __future__ import annotations

from pathlib import Path

from suite.records import read_record
from tests.test_rerun import _committed, _rerun, differences

REFERENCES = Path(__file__).with_name("references")


def test_the_committed_fsdp_estimate_reruns_to_an_equal_record(tmp_path):
    record = _committed(method="fsdp", model="llama-1b", provenance="estimated")
    assert differences(record, _rerun(record, tmp_path)) == []


def test_an_sdp_estimate_with_differing_ranks_reruns_to_its_reference(tmp_path):
    """The reference stepped every rank; the rerun steps one rank of the one class and checks another (suite/
    estimate/classes.py): only the fields that say which ranks were stepped and why differ."""
    record = read_record(REFERENCES / "estimate-b-sdp-llama-tiny-n4.json")
    again = _rerun(record, tmp_path)
    assert again["estimate"]["estimated_ranks"] == [0, 1] and again["estimate"]["checked_ranks"] == [1]
    assert "(classes {0,1,2,3})" in again["estimate"]["symmetry"]
    which = ("estimate.estimated_ranks", "estimate.checked_ranks", "estimate.symmetry")
    assert [d for d in differences(record, again) if not d[0].startswith(which)] == []
