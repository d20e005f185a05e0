"""The report in headless Chromium: no console errors, every figure loads, sorting works, not blank.

A probe script is put first in <head> of a copy of each page (before the page's Content-Security-
Policy, which would refuse it later in the document). It records script errors, console errors,
refused resources, failed images and alert() calls into attributes of <html>, which --dump-dom
prints once the page has loaded. A second run takes a screenshot, checked for more than one colour.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from tests.report_fixtures import built_study

CHROMIUM = Path("/usr/bin/chromium")
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
  window.addEventListener("load", function () {
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
    root.setAttribute("data-problems", JSON.stringify(problems));
    root.setAttribute("data-probed", "yes");
  });
})();
</script>"""


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
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
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        *args,
    ]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def probe(page: Path, tmp: Path) -> dict[str, str]:
    """Load a probed copy of `page` (beside it, so its relative links still work) and read the probe's attributes."""
    copy = page.with_name(f"probed-{page.name}")
    copy.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
    try:
        dom = chromium(tmp, "--dump-dom", copy.as_uri()).stdout
    finally:
        copy.unlink()
    html_tag = re.search(r"<html[^>]*>", dom).group(0)
    return {
        k: v.replace("&quot;", '"').replace("&amp;", "&") for k, v in re.findall(r'data-([a-z]+)="([^"]*)"', html_tag)
    }


def not_blank(png: Path) -> int:
    """The number of distinct colours in the screenshot."""
    with Image.open(png) as image:
        return len(image.convert("RGB").getcolors(maxcolors=1 << 20) or [0] * (1 << 20))


@pytest.fixture(scope="module")
def site() -> Path:
    return built_study()[1]


@pytest.mark.parametrize("page", ["index", "sdp"])
def test_page_renders_without_errors(site, tmp_path, page):
    path = site / "index.html" if page == "index" else next((site / "reproductions").glob("sdp-*.html"))
    state = probe(path, tmp_path)
    assert state.get("probed") == "yes", state
    assert json.loads(state.get("problems", "[]")) == []
    assert state["loaded"] == state["images"]
    assert '<table class="sortable claims">' in path.read_text()
    if page == "sdp":
        assert int(state["images"]) == 7
        assert state["ascending"] == "0,0,0,1,1,1,2,2,2" and state["descending"] == "2,2,2,1,1,1,0,0,0"
    shot = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", path.as_uri())
    assert not_blank(shot) > 50


def test_hostile_record_runs_no_script(site, tmp_path):
    run = next(p for p in (site / "runs").glob("*.html") if "alert(1)" in p.read_text())
    state = probe(run, tmp_path)
    assert state.get("probed") == "yes" and json.loads(state.get("problems", "[]")) == []
