"""Turn run records into an HTML site: index.html, one page per reproduction, one per run, and their stylesheet.

Pages open from disk with no network. The table-sorting script and the figures (SVG with real text, compacted by
compact.py) are inlined; a folder's pages share its style.css; a run page links its record's file, relative to the
page, where the build read it (the record is committed under results/, so the page repeats none of it; a record
held only in memory is written into its page). A Content-Security-Policy forbids loading anything else and runs
only the page's own script (pinned by its hash), so a value from a record can never execute even if it slipped
past escaping. The site index (site.py) and a reproduction's own pages (render_page) carry their style inline.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import multiprocessing
import os
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from suite.atomic import write_text
from suite.errors import UsageError
from suite.judge.claims import Claim, ClaimsError, claims_for
from suite.judge.command import GPU_CHECK, is_gpu_check
from suite.judge.verdicts import judge_all, trend_words
from suite.records import load_records
from suite.report import figures, site, summary
from suite.report.figures import Chart
from suite.report.pages import Reproduction, hardware, index_context, reproduction_context, run_context
from suite.report.tables import Table, css_token, fields_html, html

UNASSIGNED = "(no reproduction)"


@lru_cache(maxsize=1)
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("suite.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["css_token"] = css_token
    env.globals["table_html"] = html
    env.globals["fields_html"] = fields_html
    source = env.loader.get_source(env, "sort.js")[0]
    # inlined without its comment lines and indentation: every page carries it
    script = "\n".join(line.strip() for line in source.splitlines() if not line.lstrip().startswith("//"))
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    env.globals["script"] = Markup(script)
    # 'self' admits the folder's stylesheet from disk (Chromium matches file: URLs to a file: page's 'self'); the
    # script stays inline, pinned by its hash: 'self' would admit any script file on the disk
    env.globals["csp"] = Markup(  # a constant with no double quote: safe in the attribute as it is
        f"default-src 'none'; img-src data:; style-src 'self' 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )
    return env


STYLESHEET = "style.css"  # at the top of a report folder, linked by its pages


def _stylesheet(root: str) -> dict:
    """The template context that links a folder's stylesheet from a page `root` below the folder's top."""
    return {"stylesheet": f"{root}{STYLESHEET}"}


def _slug(name: str, key: str) -> str:
    """A file name that is safe on any file system and unique for `key`."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:60] or "x"
    return f"{readable}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def _page_key(record: dict, position: int) -> str:
    """A record's file names its page, so links stay put across rebuilds; records held only in memory
    fall back to their position, so two with one run_id still get a page each."""
    return record.get("_path") or f"{record['run_id']}#{position}"


def build_report(results: str | Path | Sequence[str | Path], out_dir: str | Path) -> Path:
    """Read every run record under each results folder and write the site to `out_dir`; returns index.html.

    Several folders are one reproduction's plan runs (a preset each, say results/sdp-smoke and
    results/sdp-quality): each record keeps the folder it came from (`_folder`), so a page can say which plan
    run, and commit, each part of it comes from."""
    folders = [Path(results)] if isinstance(results, (str, Path)) else [Path(f) for f in results]
    records, skipped = [], []
    for folder in folders:
        if not folder.is_dir():
            raise FileNotFoundError(
                f"results folder {folder} does not exist; pass the folder that holds the run "
                f"records (for example results/runs)"
            )
        found, missed = load_records(folder)
        records += [{**r, "_folder": str(folder)} for r in found]
        skipped += missed
    return build_report_for(records, skipped, out_dir)


def build_report_for(
    records: list[dict],
    skipped: list[tuple[str, str]],
    out_dir: str | Path,
    claims_by_reproduction: dict[str, list[Claim]] | None = None,
) -> Path:
    """Write the site for these records. Claims default to reproductions/<name>/claims.yaml for each
    reproduction that has runs; passing `claims_by_reproduction` uses those instead (and lists
    reproductions that have claims but no runs yet)."""
    out = Path(out_dir)
    figures.restart_ids()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _unwritable(out, err) from None
    groups: dict[str, list[dict]] = {}
    for record in records:
        groups.setdefault(record["reproduction"] or UNASSIGNED, []).append(record)
    for name in claims_by_reproduction or {}:
        groups.setdefault(name, [])
    run_files = {id(r): f"runs/{_slug(r['run_id'], _page_key(r, i))}.html" for i, r in enumerate(records)}
    check = machinery_check(records)
    repros = [_evaluated(name, groups[name], claims_by_reproduction) for name in sorted(groups)]

    templates, written = _templates(), []

    def write(relative: str, template: str, context: dict) -> None:
        page = templates.get_template(template).render(**context, **_stylesheet(context["root"]))
        written.append(_write_page(out, relative, page))

    _write_page(out, STYLESHEET, templates.loader.get_source(templates, STYLESHEET)[0])

    runs = [(run_files[id(r)], r, f"../{repro.href}") for repro in repros for r in repro.records]
    with _run_pages(out, runs) as run_pages:
        write("index.html", "index.html.j2", {**index_context(repros, skipped, len(records)), "check": check})
        run_hrefs = {key: f"../{path}" for key, path in run_files.items()}
        for repro in repros:
            write(repro.href, "reproduction.html.j2", reproduction_context(repro, run_hrefs, records))
    written += run_pages
    entries = [{**_summary_entry(r, run_files), "check": check} for r in repros]
    write_text(out / site.SUMMARY, site.summary(entries, len(records), len(skipped)), durable=False)
    _remove_stale(out, written)
    return out / "index.html"


def machinery_check(records: list[dict]) -> str:
    """What a folder of a GPU check's records is (suite.judge.command.is_gpu_check), said on its index and the site
    index; '' for plan runs."""
    folders = {Path(r["_folder"]).parent for r in records if r.get("_folder")}
    if not any(is_gpu_check(f) for f in folders):
        return ""
    return (
        f"a GPU check ({GPU_CHECK}): its runs cut short to fit a lent GPU's minutes, a check of the machinery; the "
        "words here are these records' alone and decide no card of the other folders"
    )


# from this many run pages on, a second process writes them while this one builds the reproductions' pages (a
# thousand-record report: about 3 of its 10 CPU seconds); below it, forking costs more than it saves
PARALLEL_RUN_PAGES = 200


def _write_page(out: Path, relative: str, text: str) -> Path:
    """One page of the site at `out`, written atomically (suite.atomic); an unwritable site is a one-line error."""
    path = out / relative
    try:
        write_text(path, text, durable=False)
    except OSError as err:
        raise _unwritable(out, err) from None
    return path


def _write_run_pages(out: Path, runs: list[tuple[str, dict, str]]) -> list[Path]:
    """Each run's page (file, record, link back to its reproduction's page); the files written."""
    template, written = _templates().get_template("run.html.j2"), []
    for relative, record, back in runs:
        context = run_context(record, back, record_href(record, out / relative))
        written.append(_write_page(out, relative, template.render(**context, **_stylesheet(context["root"]))))
    return written


def record_href(record: dict, page: Path) -> str | None:
    """The link from `page` to the record's file (`_path`, relative to where the build runs), or None where the
    record has no file to link (one held in memory, or a file gone since it was read)."""
    path = record.get("_path")
    if not path or not Path(path).is_file():
        return None
    return quote(Path(os.path.relpath(os.path.abspath(path), os.path.abspath(page.parent))).as_posix())


@contextlib.contextmanager
def _run_pages(out: Path, runs: list[tuple[str, dict, str]]) -> Iterator[list[Path]]:
    """Writes the run pages while the body runs: in a second process where there are many and the platform
    forks (a fork starts without importing the suite again), else here first; the list holds the files once the
    block ends."""
    written: list[Path] = []
    if len(runs) < PARALLEL_RUN_PAGES or "fork" not in multiprocessing.get_all_start_methods():
        written += _write_run_pages(out, runs)
        yield written
        return
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        pages = pool.submit(_write_run_pages, out, runs)
        yield written
        written += pages.result()


def _summary_entry(repro: Reproduction, run_files: dict[int, str]) -> dict:
    """What the site index shows of one reproduction (site.py): no record is read again there."""
    return {
        "name": repro.name,
        "href": repro.href,
        "paper": site.paper_of([c for c, _ in repro.verdicts]),
        "hardware": hardware(repro.records),
        "counts": repro.counts,
        "decided": summary.decided(repro.verdicts, repro.href),
        "claims_error": repro.claims_error,
        "trends": [
            (f"{repro.href}#claim-{css_token(c.id)}", c.id, trend_words(v.trend).removeprefix("; "))
            for c, v in repro.verdicts
            if trend_words(v.trend)
        ],
        "run_pages": [(run_files[id(r)], r["run_id"], r["status"]) for r in repro.records],
    }


def build_site(site_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """The index of every report folder under `site_dir` (each written by build_report), at
    `out_dir`/index.html (default: `site_dir` itself, the committed reports/index.html)."""
    site_dir = Path(site_dir)
    out = Path(out_dir) if out_dir is not None else site_dir
    context = site.site_context(site_dir)
    path = out / "index.html"
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_text(path, _templates().get_template("site.html.j2").render(**context), durable=False)
    except OSError as err:
        raise _unwritable(out, err) from None
    return path


@dataclass(frozen=True)
class Section:
    """One section of a page a reproduction writes itself (render_page): a heading, a note, a table, figures."""

    heading: str
    note: str = ""
    table: Table | None = None
    charts: tuple[Chart, ...] = ()  # inline SVG, drawn as the suite's own figures (figures.py)


def render_page(title: str, intro: str, sections: list[Section]) -> str:
    """A page in the site's style and navigation, for a report folder's own pages (flash-io's io.html): the same
    stylesheet, escaping and Content-Security-Policy as the suite's pages."""
    context = {"title": title, "root": "", "intro": intro, "sections": sections}
    return _templates().get_template("page.html.j2").render(**context)


def _unwritable(out: Path, err: OSError) -> UsageError:
    return UsageError(
        f"cannot write the report to {str(out)!r} ({err.strerror or err}); choose a writable folder "
        f"(report -o DIR, reproduce --report DIR)"
    )


def _evaluated(name: str, records: list[dict], claims_by_reproduction: dict[str, list[Claim]] | None) -> Reproduction:
    """The reproduction with its verdicts; a broken claims.yaml or metric is reported on the page, not raised."""
    href = f"reproductions/{_slug(name, name)}.html"
    try:
        if claims_by_reproduction is not None:
            claims = claims_by_reproduction.get(name, [])
        else:
            claims = [] if name == UNASSIGNED else claims_for(name)
        verdicts = judge_all(claims, records)
    except ClaimsError as err:
        return Reproduction(name, records, [], str(err), href)
    return Reproduction(name, records, verdicts, None, href)


def _remove_stale(out: Path, written: list[Path]) -> None:
    """Pages of runs or reproductions that an earlier build wrote and this one did not."""
    keep = set(written)
    for folder in ("runs", "reproductions"):
        for page in (out / folder).glob("*.html"):
            if page not in keep:
                page.unlink()
