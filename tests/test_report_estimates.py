"""The report's estimates beside measurements, and simulated numbers kept out of measured tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from suite.estimate.beside import config_key
from suite.report import build_report_for
from suite.report.tables import sort_key
from tests.report_fixtures import make_record

SIMULATED_SCALE = 3.0  # the simulated record's state memory: 3x, so its numbers are its own


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """Two measured ddp seeds (harness), an estimate of their configuration and one of a configuration
    never measured (sdp, so the match crosses reproductions), and a simulated ddp of the same
    configuration as the measured ones."""
    records = {
        "measured0": make_record("ddp", 0),
        "measured1": make_record("ddp", 1),
        "estimate": make_record("ddp", 0, reproduction="sdp", provenance="estimated", memory_scale=1.25),
        "lonely": make_record("fsdp", 0, reproduction="sdp", provenance="estimated", world_size=4),
        "simulated": make_record("ddp", 0, provenance="simulated", device="cuda", memory_scale=SIMULATED_SCALE),
    }
    site = tmp_path_factory.mktemp("site")
    build_report_for(list(records.values()), [], site)
    return site, records


def _page(site: Path, prefix: str) -> str:
    (path,) = (site / "reproductions").glob(f"{prefix}-*.html")
    return path.read_text()


def _between(html: str, start: str, end: str) -> str:
    return html[html.index(start) : html.index(end, html.index(start))]


def _rows(html: str) -> list[list[str]]:
    """Each body row of the tables in `html`, as the inner HTML of its cells."""
    body = "".join(re.findall(r"<tbody>(.*?)</tbody>", html, re.S))
    return [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def _estimate_rows(html: str, run_id: str) -> list[list[str]]:
    section = _between(html, 'id="estimates"', 'id="environment"')
    start = section.index(f">{run_id}</a>")
    end = section.find("<h4", start)
    return _rows(section[start : end if end != -1 else len(section)])


def test_an_estimate_is_shown_beside_each_measurement_with_the_ratio(built):
    site, records = built
    html = _page(site, "sdp")
    rows = _estimate_rows(html, records["estimate"]["run_id"])
    assert len(rows) == 2 * 7  # two measured seeds, seven quantities each
    params = [r for r in rows if r[0] == "parameters per rank (max)"]
    assert [re.sub("<[^>]+>", "", r[-1]) for r in params] == [records[k]["run_id"] for k in ("measured0", "measured1")]
    quantity, estimated, measured, ratio, agreement, _ = params[0]
    assert estimated.startswith("15 MiB") and 'class="badge badge-estimated"' in estimated  # 1.25 x 12 MiB
    assert measured.startswith("12 MiB") and 'class="badge badge-measured-cpu"' in measured
    assert ratio == "1.2500" and agreement.startswith("differs by 3 MiB (must be equal)")
    flops = next(r for r in rows if r[0] == "model FLOPs per step (all ranks)")
    assert flops[3] == "1.0000" and flops[4] == "agrees (must be equal)"
    assert "2 measured run(s)" in html


def test_estimates_without_a_measurement_share_one_table(built):
    site, records = built
    html = _page(site, "sdp")
    section = _between(html, 'id="unmeasured"', "</table>")
    (row,) = _rows(section)
    assert re.sub("<[^>]+>", "", row[0]) == records["lonely"]["run_id"] and row[1] == "fsdp n4"
    assert row[-1] == "no measurement" and all(not cell.startswith("—") for cell in row[2:-1])
    assert "<strong>No measurement</strong>" in html and records["estimate"]["run_id"] not in section


def test_measured_runs_of_another_reproduction_are_linked(built):
    site, records = built
    section = _between(_page(site, "sdp"), 'id="estimates"', 'id="environment"')
    links = re.findall(r'href="\.\./(runs/[^"]+)"', section)
    assert len(links) == 1 + 2 * 7 + 1  # the measured estimate, the measured run on each row, the lonely one
    assert all((site / link).is_file() for link in links)


def test_simulated_numbers_stay_in_their_own_section(built):
    site, records = built
    html = _page(site, "harness")
    simulated_id = records["simulated"]["run_id"]
    measured = _between(html, 'id="runs-measured-cpu"', "</table>")
    simulated = _between(html, 'id="runs-simulated"', "</table>")
    assert simulated_id not in measured and "badge-simulated" not in measured
    assert simulated_id in simulated and "measured (cpu)" not in simulated
    peak = records["simulated"]["memory"]["per_rank"][0]["peak_bytes"]
    simulated_rows = _rows(simulated)
    assert any("badge-simulated" in cell for row in simulated_rows for cell in row)
    assert f'data-sort="{sort_key(float(peak))}"' not in measured  # its peak is in no measured cell
    estimates = _between(_page(site, "sdp"), 'id="estimates"', 'id="environment"')
    assert simulated_id not in estimates and "badge-simulated" not in estimates


def test_a_configuration_is_method_model_variant_and_batch_not_seed_device_or_reproduction():
    base = make_record("ddp", 0)
    same = [make_record("ddp", 3), make_record("ddp", 0, device="cuda"), make_record("ddp", 0, reproduction="x")]
    other = [
        make_record("fsdp", 0),
        make_record("ddp", 0, world_size=4),
        make_record("ddp", 0, variant={"ac": True}),
        make_record("ddp", 0, model="llama-50m"),
        {**base, "parallel": {**base["parallel"], "micro_batch": 8}},
        {**base, "settings": {"seq_len": 64, "optimizer": "adamw"}},
    ]
    assert all(config_key(r) == config_key(base) for r in same)
    assert len({config_key(r) for r in [base, *other]}) == 1 + len(other)
