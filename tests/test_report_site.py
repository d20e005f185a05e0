"""The site around the reports (issue 28 items 3 and 4): one index of every report folder, run pages that draw
their losses and say the machine's load, throughput beside CPU time with a warning where repeats disagree, and
arm colours apart from the verdicts'."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgb

from benchmarks.gate import TOLERANCE
from suite.records import load_records
from suite.report import build_report_for, build_site, frames
from suite.report.glance import COLOURS, SHOWN
from suite.report.labels import PALETTE
from suite.report.tables import Cell, Table, fields_html, fmt_bytes, html, mapping_table, number, text
from tests.report_fixtures import built_study, make_record, study, write_records
from tests.test_report import Page


@pytest.fixture(scope="module")
def site() -> Path:
    return built_study()[1]


def _site_index(site: Path, tmp_path: Path) -> Path:
    """The fixture's report folder, copied under a site root of its own, indexed there."""
    root = tmp_path / "reports"
    (root / "harness").mkdir(parents=True)
    for path in site.rglob("*"):
        if path.is_file():
            (root / "harness" / path.relative_to(site)).parent.mkdir(parents=True, exist_ok=True)
            (root / "harness" / path.relative_to(site)).write_bytes(path.read_bytes())
    (root / "harness" / "figure.png").write_bytes(b"\x89PNG")  # a figure another command drew
    return build_site(root)


def test_the_site_index_links_every_page_and_counts_each_verdict(site, tmp_path):
    index = _site_index(site, tmp_path)
    links = set(Page(index).links)
    pages = {p.relative_to(index.parent).as_posix() for p in index.parent.rglob("*") if p.suffix in (".html", ".png")}
    assert pages - {"index.html"} <= links, sorted(pages - links)
    html = index.read_text()
    row = html[html.index('href="harness/reproductions/sdp-') :].split("</tr>")[0]
    assert '<a href="https://arxiv.org/abs/2507.09029">arXiv 2507.09029</a>' in row  # its paper, linked
    assert re.search(r"badge-reproduced\">reproduced</span> \d", row)  # each verdict word with its count


def test_every_folder_page_links_the_site_index_not_itself(site, tmp_path):
    index = _site_index(site, tmp_path)
    folder = index.parent / "harness"
    for page in [folder / "index.html", *folder.glob("reproductions/*.html"), *list(folder.glob("runs/*.html"))[:3]]:
        first = next(link for link in Page(page).links if not link.endswith(".css"))  # after the stylesheet
        assert (page.parent / first).resolve() == index.resolve(), (page, first)


def test_the_report_command_builds_the_site_index(site, tmp_path, capsys):
    from suite.cli import main

    _site_index(site, tmp_path)
    (tmp_path / "reports" / "index.html").unlink()
    assert main(["report", "--site", str(tmp_path / "reports")]) == 0
    assert (tmp_path / "reports" / "index.html").is_file()


def _run_page(site: Path, prefix: str) -> str:
    return next((site / "runs").glob(f"{prefix}*.html")).read_text()


def test_a_run_page_draws_its_losses_and_shows_no_raw_dict(site):
    html = _run_page(site, "sdp-ddp-s1-measured")
    assert "<title>Loss against step (measured (cpu))</title>" in html
    fields = html[html.index('<div class="fields">') : html.index("<h2>Memory per rank")]
    assert "{&#34;" not in fields and "{&quot;" not in fields, "a nested section shown as a raw dict"
    assert "groups" in fields and "name=dp tier=intra-node size=2" in fields


def test_a_run_page_links_its_records_file_and_carries_a_record_with_none(tmp_path):
    """A record read from a file is linked, relative to the page, wherever the site is written; one held only in
    memory has no file to link, so its page carries it."""
    write_records(tmp_path / "results", [make_record("ddp", 0)])
    records, _ = load_records(tmp_path / "results")
    site = build_report_for([*records, make_record("ddp", 1)], [], tmp_path / "deep" / "site").parent
    on_disk, in_memory = sorted((site / "runs").glob("*.html"), key=lambda p: "s1" in p.name)
    (link,) = re.findall(r'href="([^"]+\.json)"', on_disk.read_text())
    assert link.startswith("../../../results/") and (on_disk.parent / link).resolve() == Path(records[0]["_path"])
    assert "<pre>" not in on_disk.read_text()
    assert "not on disk" in in_memory.read_text() and "&#34;run_id&#34;" in in_memory.read_text()


def test_a_run_page_shows_the_machine_load_it_ran_under(tmp_path):
    record = make_record("ddp", 0)
    timed = copy.deepcopy(record) | {"run_id": "loaded"}
    timed["timing"] = {
        "before_s": 0.0,
        "setup_s": 0.1,
        "steps_s": None,
        "eval_s": 0.0,
        "final_evals_s": 0.0,
        "run_s": 1.0,
        "load_average": [3.25, 7.5],
    }
    write_records(tmp_path / "results", [record, timed])
    records, skipped = load_records(tmp_path / "results")
    site = build_report_for(records, skipped, tmp_path / "site").parent
    assert "Machine load: 3.25 at set-up, 7.50 at the record" in _run_page(site, "loaded")
    assert "Machine load: not recorded" in _run_page(site, record["run_id"][:20])


def test_bytes_never_read_in_exponent_notation():
    assert fmt_bytes(1000 * 2**20) == "1,000 MiB"
    assert fmt_bytes(1.5 * 2**30) == "1.5 GiB"


def test_a_cell_carries_a_sort_key_only_where_its_text_is_not_it():
    """The page's script sorts a cell by its text where it has no data-sort (most cells: a name, a whole number);
    a key stays where the text is not it: bytes with a unit, "—" (sorts last), a number with a badge after it."""
    cells = [
        text("ddp"),
        number(4.0),
        number(12582912.0, fmt_bytes),
        number(None),
        Cell("31%", 0.31, badge="unsteady"),
        Cell("fell short (at 1B)", "fell short (at 1B)", badge="fell short"),
    ]
    written = re.findall(r"<td[^>]*>", html(Table(["x"], [[c] for c in cells])))
    keys = ["<td>", '<td class="num">', '<td class="num" data-sort="12582912">', '<td data-sort="">']
    assert written == keys + ['<td class="num" data-sort="0.31">', "<td>"]


def test_a_run_pages_field_table_is_rows_alone():
    fields = fields_html(mapping_table({"params": 3148032, "name": "llama-tiny"}))
    assert fields == '<table>\n<tr><td>params<td class="num">3,148,032</tr>\n<tr><td>name<td>llama-tiny</tr>\n</table>'


def test_the_repeat_tolerance_is_the_gates_wall_time_tolerance():
    assert frames.REPEAT_TOLERANCE == TOLERANCE["wall_units"]


def _with_cpu_time(records: list[dict], unsteady_seed: int | None = None) -> list[dict]:
    """Records given CPU time per step; one ddp seed's tokens/s halved where `unsteady_seed` says."""
    out = copy.deepcopy(records)
    for r in out:
        r["throughput"]["cpu_step_s_median"] = r["throughput"]["step_s"] * 0.9
        if r["method"] == "ddp" and r["env"]["seed"] == unsteady_seed and r["reproduction"] == "harness":
            r["throughput"]["tokens_per_s"] /= 2
    return out


def _harness_page(tmp_path: Path, records: list[dict]) -> str:
    site = build_report_for(records, [], tmp_path).parent
    return next((site / "reproductions").glob("harness-*.html")).read_text()


def test_throughput_is_drawn_beside_cpu_time(tmp_path):
    html = _harness_page(tmp_path, _with_cpu_time([r for r in study() if r["reproduction"] == "harness"]))
    assert "by CPU time" in html and "CPU s/step ratio" in html
    assert 'class="warning"' not in html  # seeds within 3% of each other: no warning


def test_repeats_that_differ_beyond_the_gates_tolerance_are_flagged(tmp_path):
    html = _harness_page(tmp_path, _with_cpu_time([r for r in study() if r["reproduction"] == "harness"], 1))
    assert html.count('<p class="warning">') == 2  # above the numbers and above the throughput figure
    assert "ddp (" in html and "than 15%" in html
    assert 'badge-unsteady">unsteady' in html  # the numbers table's spread column
    assert "Warning, hatched" in html  # the figure's caption
    index = (tmp_path / "index.html").read_text()
    section = index[index.index('id="repro-harness"') :]
    assert index.count('<p class="warning">') == 1 and section.index('<p class="warning">') < section.index("claims")


def _lab(colour: str) -> np.ndarray:
    """CIELAB (D65) of an sRGB colour, for the ΔE76 distances the palette's rule is stated in."""
    c = np.array(to_rgb(colour))
    c = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ c
    t = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > 0.008856, np.cbrt(t), 7.787 * t + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _distance(a: str, b: str) -> float:
    return float(np.linalg.norm(_lab(a) - _lab(b)))


def test_arm_colours_stay_apart_from_the_verdicts_and_each_other():
    assert len(PALETTE) >= 15  # the baselines page has 15 arms (7 data-parallel, 8 model-parallel)
    for colour in PALETTE:
        assert min(_distance(colour, v) for v in COLOURS.values()) >= 30, colour
        assert _distance(colour, SHOWN) >= 20, colour
        assert _lab(colour)[0] <= 80, f"{colour} is too light to read on white"
    assert min(_distance(a, b) for i, a in enumerate(PALETTE) for b in PALETTE[i + 1 :]) >= 25


def test_the_site_index_gives_each_cards_trend_word_linked_to_its_card(tmp_path):
    folder = tmp_path / "reports" / "sdp"
    folder.mkdir(parents=True)
    entry = {"name": "sdp", "href": "reproductions/sdp.html", "paper": "p", "counts": {}, "claims_error": None}
    trends = [("reproductions/sdp.html#claim-eight", "eight", "moves toward the paper's claim along blocks")]
    both = [{**entry, "trends": trends, "run_pages": []}, {**entry, "name": "other", "trends": [], "run_pages": []}]
    (folder / "summary.json").write_text(json.dumps({"records": 0, "skipped": 0, "reproductions": both}))
    html = build_site(tmp_path / "reports").read_text()
    assert (
        '<a href="sdp/reproductions/sdp.html#claim-eight">eight</a>: moves toward the paper&#39;s claim along blocks'
        in html
    )
    other = html[html.index(">other</a>") :].split("</tr>")[0]
    assert "<td>—</td>" in other


def test_a_folder_index_is_titled_by_the_reproductions_it_judges(site):
    assert "<title>Reproduction report: sdp" in (site / "index.html").read_text()
