"""The report in headless Chromium: no console errors, figures titled and legible, sorting works, fast.

A probe script is put first in <head> of a copy of each page (before the page's Content-Security-
Policy, which would refuse it later in the document). It records script errors, console errors,
refused resources, failed images, alert() calls and whether the stylesheet styled the page into attributes of
<html>, which --dump-dom prints once the page has loaded. It also measures every text of every figure as laid out: longer than
40 characters, ending cut ("…"), reaching outside its figure or overlapping another text is a problem; a page
wider than the window, a glance or numbers table wider than its column, or a glance row without its paper
value, our value (where its verdict judged one), direction, verdict and reason is one too. Every committed page
is probed so, run pages by a sample (the longest of each folder, kind of evidence and status).
Screenshots of the index and of a reproduction page are written for a person to look at.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from suite.records import load_records
from suite.report import build_report_for
from tests.report_fixtures import built_study

CHROMIUM = Path("/usr/bin/chromium")
# the committed SDP records; SDP_RESULTS points elsewhere (a copy) while they are being regenerated
SDP_RESULTS = Path(os.environ.get("SDP_RESULTS", Path(__file__).resolve().parents[1] / "results" / "sdp-smoke"))
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium: apt-get install -y chromium")

PROBE = """<script>
(function () {
  var problems = [];
  var root = document.documentElement;
  function note(kind, detail) { problems.push(kind + ": " + detail); root.setAttribute("data-problems", JSON.stringify(problems)); }
  window.addEventListener("error", function (e) {
    var t = e.target;
    if (t && t.tagName === "IMG") note("image", (t.alt || "") + " did not load"); else note("error", e.message);
  }, true);
  var consoleError = console.error;
  console.error = function () { note("console", Array.prototype.join.call(arguments, " ")); consoleError.apply(console, arguments); };
  window.alert = function (m) { note("alert", String(m)); };
  document.addEventListener("securitypolicyviolation", function (e) { note("refused", e.violatedDirective + " " + e.blockedURI); });
  function figures() {
    var found = [], all = Array.prototype.slice.call(document.querySelectorAll("figure"));
    root.setAttribute("data-figures", all.length);
    all.forEach(function (figure, index) {
      var svg = figure.querySelector("svg"), title = svg && svg.querySelector("title");
      if (!(svg && svg.getAttribute("role") === "img" && title && title.textContent.trim())) {
        found.push("figure " + index + " has no text alternative");
        return;
      }
      var box = svg.getBoundingClientRect();
      var texts = Array.prototype.map.call(svg.querySelectorAll("text"), function (t) {
        return {words: t.textContent, r: t.getBoundingClientRect()};
      }).filter(function (t) { return t.words.trim() && t.r.width > 0; });
      texts.forEach(function (t) {
        if (t.words.length > 40 || /(\\u2026|\\.\\.\\.)$/.test(t.words)) found.push("long or cut: " + t.words);
        if (t.r.left < box.left - 1 || t.r.right > box.right + 1 || t.r.top < box.top - 1 || t.r.bottom > box.bottom + 1)
          found.push("outside its figure: " + t.words);
      });
      for (var i = 0; i < texts.length; i++) for (var j = i + 1; j < texts.length; j++) {
        var a = texts[i].r, b = texts[j].r;
        var w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 1 && h > 1) found.push("overlapping: " + texts[i].words + " / " + texts[j].words);
      }
    });
    return found;
  }
  window.addEventListener("load", function () {
    root.setAttribute("data-loadms", Math.round(performance.now()));
    root.setAttribute("data-styled", getComputedStyle(document.body).backgroundColor);
    root.setAttribute("data-texts", JSON.stringify(figures()));
    var images = Array.prototype.slice.call(document.images);
    root.setAttribute("data-images", images.length);
    root.setAttribute("data-loaded", images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length);
    var table = document.querySelector("table.runs");
    if (table) {
      var column = Array.prototype.map.call(table.tHead.rows[0].cells, function (c) { return c.textContent; }).indexOf("seed");
      var seeds = function () { return Array.prototype.map.call(table.tBodies[0].rows, function (r) { return r.cells[column].textContent; }).join(","); };
      table.tHead.rows[0].cells[column].click();
      root.setAttribute("data-ascending", seeds());
      table.tHead.rows[0].cells[column].click();
      root.setAttribute("data-descending", seeds());
    }
    var wide = [], doc = document.documentElement;
    if (doc.scrollWidth > window.innerWidth + 1) wide.push("page: " + doc.scrollWidth + " > " + window.innerWidth);
    Array.prototype.forEach.call(document.querySelectorAll("table.claims, table.numbers"), function (t) {
      if (t.scrollWidth > t.parentElement.clientWidth + 1) wide.push(t.className + ": " + t.scrollWidth + " > " + t.parentElement.clientWidth);
    });
    root.setAttribute("data-wide", JSON.stringify(wide));
    var bare = [], decided = /^(reproduced|exceeded|fell short|matches the model|\\w+, no paper value)$/;
    Array.prototype.forEach.call(document.querySelectorAll("table.claims tbody tr"), function (r) {
      var cells = Array.prototype.map.call(r.cells, function (c) { return c.textContent.trim(); });
      // paper, ours (a dash where nothing ran), better, verdict and why: each says something; a verdict that
      // judged a value shows it, and the reason is a phrase, not a word
      if (cells.length !== 7 || cells.slice(2).some(function (c) { return !c; })) bare.push("empty: " + cells.join(" | "));
      else if (decided.test(cells[5]) && !/\\d/.test(cells[3])) bare.push("no value of ours: " + cells.join(" | "));
      else if (cells[6].split(/\\s+/).length < 3) bare.push("no reason: " + cells.join(" | "));
    });
    root.setAttribute("data-bare", JSON.stringify(bare));
    root.setAttribute("data-problems", JSON.stringify(problems));
    root.setAttribute("data-probed", "yes");
  });
})();
</script>"""


def chromium(tmp: Path, *args: str, budget: bool = True) -> subprocess.CompletedProcess:
    profile = tmp / "profile"
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--window-size=1400,1000",
        *(["--virtual-time-budget=5000"] if budget else []),
        *args,
    ]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=90, check=True)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def probe(page: Path, tmp: Path, budget: bool = True, slipped: str = "") -> dict[str, str]:
    """Load a probed copy of `page` and read the probe's attributes. The copy is written under `tmp`, never beside a
    committed page: a page loads nothing by path but its folder's stylesheet (its policy allows data: images and
    that), which is copied to the same place relative to the copy, so the page reads the same there. `slipped` is
    markup put at the start of <main>, as if it had slipped past escaping. Without the virtual time budget, the
    load time is the real one."""
    copy = tmp / "pages" / f"probed-{page.name}"
    copy.parent.mkdir(exist_ok=True)
    text = page.read_text()
    for href in re.findall(r'<link rel="stylesheet" href="([^"]+)">', text):
        shutil.copy(page.parent / href, copy.parent / href)
    copy.write_text(text.replace("<head>", "<head>" + PROBE, 1).replace("<main>", "<main>" + slipped, 1))
    try:
        dom = chromium(tmp, "--dump-dom", copy.as_uri(), budget=budget).stdout
    finally:
        copy.unlink()
    html_tag = re.search(r"<html(?:[^>\"]|\"[^\"]*\")*>", dom).group(0)
    return {
        k: v.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
        for k, v in re.findall(r'data-([a-z]+)="([^"]*)"', html_tag)
    }


def screenshot(page: Path, png: Path, tmp: Path, height: int = 2400) -> Path:
    chromium(tmp, f"--screenshot={png}", f"--window-size=1400,{height}", page.as_uri())
    return png


def not_blank(png: Path) -> int:
    """The number of distinct colours in the screenshot."""
    with Image.open(png) as image:
        return len(image.convert("RGB").getcolors(maxcolors=1 << 20) or [0] * (1 << 20))


@pytest.fixture(scope="module")
def site() -> Path:
    return built_study()[1]


@pytest.fixture(scope="module")
def sdp_site(tmp_path_factory) -> Path:
    """The committed SDP records' site, built once (skipped where the records are not in this checkout)."""
    if not any(SDP_RESULTS.glob("*.json")):
        pytest.skip(f"{SDP_RESULTS} has no records")
    records, skipped = load_records(SDP_RESULTS)
    return build_report_for(records, skipped, tmp_path_factory.mktemp("sdp-site")).parent


STYLED = "rgb(250, 251, 252)"  # the body's background in style.css: the stylesheet was read and applied


def assert_reads_well(state: dict[str, str]) -> None:
    assert state.get("probed") == "yes", state
    assert json.loads(state.get("problems", "[]")) == []
    assert state["styled"] == STYLED, "the page's stylesheet did not load"
    assert json.loads(state.get("texts", "[]")) == []
    assert state["loaded"] == state["images"]
    assert json.loads(state["wide"]) == [], "wider than the window"
    assert json.loads(state["bare"]) == [], "glance rows without their numbers or reason"


@pytest.mark.parametrize("page", ["site", "index", "sdp", "harness", "run"])
def test_page_renders_without_errors_and_its_figures_read_well(site, tmp_path, page):
    if page == "site":  # the index of every report folder, one level above the folder (report_fixtures)
        path = site.parent / "index.html"
    elif page == "index":
        path = site / "index.html"
    elif page == "run":
        path = next((site / "runs").glob("sdp-ddp-s1-*.html"))
    else:
        path = next((site / "reproductions").glob(f"{page}-*.html"))
    state = probe(path, tmp_path)
    assert_reads_well(state)
    assert int(state["figures"]) == {"site": 0, "index": 2, "sdp": 11, "harness": 4, "run": 2}[page]
    if page in ("index", "sdp"):
        assert '<table class="sortable claims">' in path.read_text()
    if page == "sdp":
        assert state["ascending"] == "0,0,0,1,1,1,2,2,2" and state["descending"] == "2,2,2,1,1,1,0,0,0"
    shot = screenshot(path, tmp_path / "shot.png", tmp_path, 1600)
    assert not_blank(shot) > 50


def test_hostile_record_runs_no_script(site, tmp_path):
    run = next(p for p in (site / "runs").glob("*.html") if "alert(1)" in p.read_text())
    state = probe(run, tmp_path)
    assert state.get("probed") == "yes" and json.loads(state.get("problems", "[]")) == []


def test_the_policy_refuses_a_script_slipped_into_a_committed_page(tmp_path):
    """Were escaping to fail, a script in the page or a script file beside it (on disk, where a file: page's 'self'
    reaches) would not run: the policy admits the page's own script alone, by its hash. The folder's stylesheet
    still styles the page and the page's own script still sorts its runs table."""
    page = next(REPORTS.glob("baselines/reproductions/*.html"))
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "slipped.js").write_text('alert("a script file ran")')
    slipped = '<script>alert("an inline script ran")</script><script src="slipped.js"></script>'
    state = probe(page, tmp_path, slipped=slipped)
    problems = json.loads(state["problems"])
    assert not [p for p in problems if p.startswith("alert")], problems
    # Chromium names a refused file by its scheme alone
    assert {"refused: script-src-elem inline", "refused: script-src-elem file"} <= set(problems), problems
    assert state["styled"] == STYLED
    seeds = state["ascending"].split(",")
    assert len(seeds) > 1 and seeds == sorted(seeds, key=float), state["ascending"]


def test_the_sdp_page_is_small_fast_and_legible(sdp_site, tmp_path_factory):
    """The committed SDP records: every page reads well, the reproduction page is under 3 MB and loads in
    under 2 s; screenshots of the index and the SDP page are kept for a person to look at."""
    tmp = tmp_path_factory.mktemp("sdp-browser")
    page = next((sdp_site / "reproductions").glob("sdp-*.html"))
    assert page.stat().st_size < 3 * 1024 * 1024
    state = probe(page, tmp, budget=False)
    assert_reads_well(state)
    assert int(state["loadms"]) < 2000, state["loadms"]
    assert_reads_well(probe(sdp_site / "index.html", tmp))
    assert_reads_well(probe(next((sdp_site / "runs").glob("*.html")), tmp))
    shots = tmp_path_factory.mktemp("screenshots")
    for name, path in (("index", sdp_site / "index.html"), ("sdp", page)):
        assert not_blank(screenshot(path, shots / f"{name}.png", tmp, 3000)) > 50
    print(f"\nscreenshots of the report for a person to look at: {shots}")


REPORTS = Path(__file__).resolve().parents[1] / "reports"


def run_kind(page: Path) -> tuple[str, str, str]:
    """A run page's folder, kind of evidence and status, as its first line says them."""
    said = re.search(
        r'<main>\s*<p><span class="badge badge-([a-z-]+)">.*?Status: <strong>(\w+)<', page.read_text(), re.S
    )
    return (page.parents[1].name, *(said.groups() if said else ("", "")))


def committed_pages(root: Path) -> list[Path]:
    """Every committed page but the run pages (the indexes, each reproduction's pages, io.html), and of the hundreds of
    run pages the longest of each folder, kind of evidence and status: one template draws them all, and the longest
    has the most rows and the longest values to fit."""
    runs: dict[tuple[str, str, str], Path] = {}
    for page in sorted(root.glob("*/runs/*.html")):
        kind = run_kind(page)
        if kind not in runs or page.stat().st_size > runs[kind].stat().st_size:
            runs[kind] = page
    return [p for p in sorted(root.rglob("*.html")) if p.parent.name != "runs"] + sorted(runs.values())


COMMITTED = committed_pages(REPORTS)


@pytest.mark.parametrize("page", COMMITTED, ids=[p.relative_to(REPORTS).as_posix() for p in COMMITTED])
def test_no_committed_page_is_wider_than_its_window_and_every_glance_row_says_its_numbers_and_why(
    page: Path, tmp_path: Path
) -> None:
    """Every kind of committed page (dion's among them, whose long source-status badges once widened it to 2,040 px)
    fits the 1,400 px window: no horizontal scrollbar (a long table scrolls inside its own box; the glance and numbers
    tables fit their column). Each glance row has the paper's value, ours where a verdict judged one, the direction,
    the verdict and a reason. No text of a figure is cut, longer than 40 characters, outside its figure or over another
    (merging's sweep once wrote its rates' ticks over each other)."""
    kinds = {p.name for p in COMMITTED} | {p.parent.name for p in COMMITTED}
    assert {"index.html", "io.html", "reproductions", "runs"} <= kinds and (REPORTS / "index.html") in COMMITTED
    state = probe(page, tmp_path)
    assert state.get("probed") == "yes", state
    assert state["styled"] == STYLED, f"{page.name}: its stylesheet did not load"
    assert json.loads(state["wide"]) == [], f"{page.name} is wider than the window, or its glance or numbers table"
    assert json.loads(state["bare"]) == [], "glance rows without their numbers or reason"
    assert json.loads(state["texts"]) == [], f"{page.name}'s figures have texts that do not read"
