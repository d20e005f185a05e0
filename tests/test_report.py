"""The HTML report: pages, claim cards, skipped files, escaping, figures, provenance and links."""

from __future__ import annotations

import html as htmllib
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.judge.claims import load_claims
from suite.plan.command import plan_runs
from suite.records import load_records
from suite.report import build_report, build_report_for
from suite.report.labels import arms
from tests.report_fixtures import HOSTILE, SDP_CLAIMS_YAML, built_study, make_record


class Page(HTMLParser):
    """The parts of a page the tests look at: links and sources, element ids, and script elements."""

    def __init__(self, path: Path):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.scripts: list[dict] = []
        self.images: list[str] = []
        self.svgs: list[dict] = []  # attributes of each top-level <svg>, with its title and text lines
        self._depth = 0
        self._in: str | None = None
        self.policy = ""
        self.feed(path.read_text())

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.ids.update([attrs["id"]] if "id" in attrs else [])
        self.links.extend(attrs[a] for a in ("href", "src") if a in attrs)
        if tag == "script":
            self.scripts.append(attrs)
        if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy":
            self.policy = attrs["content"]
        if tag == "img":
            self.images.append(attrs["src"])
        if tag == "svg":
            self._depth += 1
            if self._depth == 1:
                self.svgs.append({**attrs, "title": "", "texts": [], "rasters": 0})
        elif self._depth and tag in ("title", "text"):
            self._in = tag
        elif self._depth and tag == "image":
            self.svgs[-1]["rasters"] += 1

    def handle_endtag(self, tag):
        if tag == "svg":
            self._depth -= 1
        self._in = None

    def handle_data(self, data):
        if self._in == "title" and not self.svgs[-1]["title"]:
            self.svgs[-1]["title"] = data
        elif self._in == "text":
            self.svgs[-1]["texts"].append(data)


@pytest.fixture(scope="module")
def site() -> Path:
    return built_study()[1]


def page_of(site: Path, folder: str, prefix: str) -> Path:
    (path,) = [p for p in (site / folder).glob("*.html") if p.name.startswith(prefix)]
    return path


def test_index_lists_each_reproduction_with_its_verdicts(site):
    html = (site / "index.html").read_text()
    assert re.search(r'<a href="reproductions/harness-[0-9a-f]{8}\.html">harness</a>', html)
    claims = html[html.index('class="sortable claims"') :]
    for claim_id, verdict in [
        ("sdp-memory", "reproduced"),
        ("sdp-quality", "reproduced"),
        ("sdp-inter-node", "not testable here"),
    ]:
        row = claims[claims.index(f">{claim_id}</a>") :]
        assert verdict in row[: row.index("</tr>")]
    assert "No claims: this reproduction compares runs only." in html  # harness


def test_bad_files_are_listed_as_skipped_with_the_reason(site):
    html = (site / "index.html").read_text()
    skipped = html[html.index('id="skipped"') :]
    for name, reason in [
        ("corrupt.json", "not valid JSON"),
        ("truncated.json", "not valid JSON"),
        ("old-schema.json", "unknown record schema 0"),
    ]:
        row = skipped[skipped.index(name) :]
        assert reason in row[: row.index("</tr>")]
    assert "17 run record(s) read, 3 skipped" in html


def test_empty_folder_gives_a_page_that_says_so(tmp_path):
    (tmp_path / "results").mkdir()
    html = build_report(tmp_path / "results", tmp_path / "site").read_text()
    assert "No records found" in html and "Skipped files" not in html
    (tmp_path / "results" / "broken.json").write_text("[")
    html = build_report(tmp_path / "results", tmp_path / "site").read_text()
    assert "No records found: every file was skipped" in html and "broken.json" in html


def test_missing_results_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="results folder .* does not exist"):
        build_report(tmp_path / "nowhere", tmp_path / "site")


def test_one_report_reads_several_plan_runs_and_names_the_commit_of_each(tmp_path):
    for folder, sha, seed in (("sdp-smoke", "a" * 40, 0), ("sdp-quality", "b" * 40, 1)):
        record = make_record(reproduction="sdp", seed=seed)
        record["env"] |= {"git_sha": sha, "git_dirty": False}
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "r.json").write_text(json.dumps(record))
    build_report([tmp_path / "sdp-smoke", tmp_path / "sdp-quality"], tmp_path / "site")
    page = next((tmp_path / "site").glob("reproductions/sdp-*.html")).read_text()
    assert 'badge-records-clean">one clean commit per plan run: sdp-quality bbbbbbb, sdp-smoke aaaaaaa' in page
    record["env"]["git_dirty"] = True
    (tmp_path / "sdp-quality" / "r.json").write_text(json.dumps(record))
    build_report([tmp_path / "sdp-smoke", tmp_path / "sdp-quality"], tmp_path / "site")
    page = next((tmp_path / "site").glob("reproductions/sdp-*.html")).read_text()
    assert 'badge-records-mixed">sdp-quality: dirty tree; sdp-smoke: one clean commit aaaaaaa' in page


def test_reproduce_reports_every_preset_folder_of_its_reproduction_beside_its_own(tmp_path):
    for name in ("sdp-smoke", "sdp-quality", "sdp-report", "dion-smoke"):
        (tmp_path / name).mkdir()
    assert plan_runs(tmp_path / "sdp-smoke", "sdp") == [tmp_path / "sdp-quality", tmp_path / "sdp-smoke"]
    assert plan_runs(tmp_path / "mine", "sdp") == [tmp_path / "mine", tmp_path / "sdp-quality", tmp_path / "sdp-smoke"]


def test_values_from_records_are_escaped_everywhere(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) == 1 + 2 + 17  # index, two reproductions, one page per run
    shown = 0
    for page in pages:
        html = page.read_text()
        assert "<script>alert" not in html and "<img src=x" not in html, page
        assert len(Page(page).scripts) == 1, page  # only the page's own sorting script
        shown += htmllib.escape(HOSTILE, quote=False) in html
    hostile_run = next(p for p in (site / "runs").glob("*.html") if "alert(1)" in p.read_text())
    html = hostile_run.read_text()
    assert "&lt;img src=x onerror=alert(2)&gt;" in html and "&lt;script&gt;alert(3)&lt;/script&gt;" in html
    assert shown >= 3  # index, harness page, the run's own page


def test_pages_forbid_outside_resources_and_foreign_scripts(site):
    policy = Page(site / "index.html").policy
    assert "default-src 'none'" in policy and re.search(r"script-src 'sha256-[A-Za-z0-9+/=]+'", policy)
    # the page's own script alone: no 'unsafe-inline', no 'self' (which, on a file: page, admits any file on disk)
    assert re.fullmatch(r" 'sha256-[A-Za-z0-9+/=]+'", policy.split("script-src")[1].split(";")[0])


def test_figures_are_inline_svg_with_text_and_a_title(site):
    sdp = Page(page_of(site, "reproductions", "sdp-"))
    harness = Page(page_of(site, "reproductions", "harness-"))
    # sdp: at a glance (ratio claims, quality panels), two cards with runs, measured (loss, memory, comm,
    # throughput), estimated (loss, memory, comm: the lone estimate has no baseline, so no throughput)
    assert len(sdp.svgs) == 2 + 2 + 4 + 3
    assert len(harness.svgs) == 4  # no claims: the measurements only
    for svg in sdp.svgs + harness.svgs:
        assert svg["role"] == "img" and svg["title"] and "viewbox" in svg and "width" not in svg
        assert svg["rasters"] == 0 and len(svg["texts"]) > 3  # vector, with its words as text
    assert not sdp.images and not harness.images
    run = Page(page_of(site, "runs", "sdp-ddp-s1-measured")).svgs
    assert [svg["title"] for svg in run] == [
        "Loss against step (measured (cpu))",
        "Memory of every rank (measured (cpu))",
    ]


def test_claims_come_first_then_what_was_run_then_measurements(site):
    html = page_of(site, "reproductions", "sdp-").read_text()
    order = ['id="claims-at-a-glance"', 'id="claim-sdp-memory"', 'id="what-was-run"', 'id="measurements"']
    assert [html.index(marker) for marker in order] == sorted(html.index(marker) for marker in order)
    start = html.index('id="claims-at-a-glance"')
    glance = html[start : html.index("</section>", start)]
    for word, n in [("reproduced", 2), ("not testable here", 1)]:
        assert re.search(rf">{word}</span> {n}</span>", glance), word
    assert "Claims at a glance: ratio claims" in glance and "every seed" in glance
    index = (site / "index.html").read_text()
    summary = index[index.index('id="repro-sdp"') :]
    assert re.search(r">reproduced</span> 2</span>", summary) and "Claims at a glance" in summary


def test_the_glance_figure_shows_every_claim_and_every_seed(site):
    sdp = Page(page_of(site, "reproductions", "sdp-"))
    ratio, quality = sdp.svgs[:2]
    assert {"sdp-memory", "sdp-inter-node", "reproduced", "not testable here"} <= set(ratio["texts"])
    assert {"sdp-quality", "b-sdp", "ddp"} <= set(quality["texts"])
    html = page_of(site, "reproductions", "sdp-").read_text()
    start = html.index("Claims at a glance: quality")
    panel = html[start : html.index("</svg>", start)]
    # three seeds of b-sdp (filled) and three of ddp (hollow): six markers
    assert len(re.findall(r"<use [^>]*xlink:href=", panel)) == 6


def test_arms_have_short_labels_one_colour_and_a_legend(site):
    html = page_of(site, "reproductions", "sdp-").read_text()
    legend = html[html.index('class="sortable arms"') : html.index("</table>", html.index('class="sortable arms"'))]
    colours = dict(
        (label, colour) for colour, label in re.findall(r'background:(#[0-9a-f]{6})"></span>([^<]+)</td>', legend)
    )
    # the estimate runs on 8 ranks, the measurements on 2: only that tells them apart
    assert list(colours) == ["ddp", "b-sdp C=0.5", "b-sdp C=0.75", "b-sdp C=0.5 n8"]
    # colours are counted afresh per kind of evidence: the measured arms differ among themselves
    assert len(set(list(colours.values())[:3])) == 3
    assert "b-sdp C=0.5; llama-tiny on 2 ranks; micro-batch 4, accumulation 1; equal flops" in legend
    measured = html[html.index('id="section-measured-cpu"') : html.index('id="section-estimated"')]
    for label, figures in [
        ("ddp", ["Val loss against"]),
        ("b-sdp C=0.5", ["Val loss against", "Speed against"]),
        ("b-sdp C=0.75", ["Val loss against", "Speed against"]),
    ]:
        for figure in figures:
            svg = measured[measured.index(figure) :]
            assert colours[label] in svg[: svg.index("</svg>")], (label, figure)
    estimated = html[html.index('id="section-estimated"') :]
    assert colours["b-sdp C=0.5 n8"] in estimated[: estimated.index("</svg>")]


def test_runs_tables_show_varying_parameters_as_columns(site):
    html = page_of(site, "reproductions", "sdp-").read_text()
    runs = html[html.index('class="sortable runs"') :]
    runs = runs[: runs.index("</table>")]
    header = re.findall(r"<th>([^<]*)</th>", runs)
    assert "C" in header and "variant" not in header and "{&#34;C&#34;" not in runs and '{"C"' not in runs


def test_throughput_lists_each_arm_once(site):
    html = page_of(site, "reproductions", "sdp-").read_text()
    section = html[html.index("<h4>Throughput against ddp") :]
    rows = re.findall(r"<tr>(.*?)</tr>", section[: section.index("</table>")], re.S)[1:]
    assert len(rows) == 2 and len(set(rows)) == 2 and "geometric mean" not in section[: section.index("</table>")]


def test_estimates_are_never_mixed_into_measured_tables(site):
    html = page_of(site, "reproductions", "sdp-").read_text()
    measured = html[html.index('id="runs-measured-cpu"') : html.index('id="runs-estimated"')]
    estimated = html[html.index('id="runs-estimated"') : html.index('id="measurements"')]
    assert "-estimated-cpu-w8" not in measured and "-estimated-cpu-w8" in estimated
    assert "measured (cpu)" not in estimated and measured.count("badge-measured-cpu") >= 9


def test_claim_cards_show_paper_value_measurement_and_verdict(site):
    html = page_of(site, "reproductions", "sdp-").read_text()
    card = html[html.index('id="claim-sdp-memory"') :]
    card = card[: card.index("</article>")]
    for text in [
        "0.6 x DDP peak bytes",
        "arXiv 2507.09029, Table 3, v5",
        "unverified",
        "(3 seeds)",
        "±",
        "the paper&#39;s value",
        "equal flops",
        "world size 2",
        "reproduced",
        "0.6 ± 0.1 (a test band)",
        "python -m suite reproduce sdp --preset smoke",
    ]:
        assert text in card, text
    untestable = html[html.index('id="claim-sdp-inter-node"') :]
    assert "needs cuda, network" in untestable and "8 GPUs over 2 nodes" in untestable


def test_every_link_resolves_to_a_file_and_anchor(site):
    for path in site.rglob("*.html"):
        for link in Page(path).links:
            if link.startswith("data:"):
                continue
            parts = urlsplit(link)
            assert not parts.scheme and not parts.netloc, f"{path.name} links outside: {link}"
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            assert target.is_file(), f"{path.name}: {link}"
            inside = site.resolve() in target.parents or target == site.resolve().parent / "index.html"
            assert inside or target.suffix == ".json", f"{path.name} links outside the site: {link}"  # a record
            if parts.fragment:
                assert parts.fragment in Page(target).ids, f"{path.name}: {link}"


def test_run_page_shows_curve_memory_ledger_and_environment(site):
    html = page_of(site, "runs", "sdp-ddp-s1-measured").read_text()
    for text in [
        "the 8 recorded point(s) of its loss curve",
        "Memory per rank",
        "MemTracker",
        "Communication ledger (8 steps)",
        "dispatch",
        "all_reduce",
        "intra-node",
        "0123456789abcdef",
        "gloo",
        "2.14.1",
        "hellaswag",
        "python -m suite run ddp --seed 1",
    ]:
        assert text in html, text


def test_a_claim_that_cannot_be_judged_is_reported_on_the_page(tmp_path):
    """Its baseline side matches DDP at two world sizes: two arms, which a verdict never pools."""
    (tmp_path / "claims.yaml").write_text(SDP_CLAIMS_YAML)
    records = [make_record("ddp", 0, reproduction="sdp", protocol="flops", world_size=w) for w in (2, 4)]
    records.append(make_record("b-sdp", 0, reproduction="sdp", protocol="flops", variant={"C": 0.5}))
    index = build_report_for(records, [], tmp_path / "site", {"sdp": load_claims(tmp_path / "claims.yaml")})
    assert "Claims not evaluated: " in index.read_text() and "matches 2 arms" in index.read_text()


def test_rebuilding_removes_pages_of_runs_that_are_gone(tmp_path):
    build_report_for([_bare(make_record("ddp", s)) for s in range(2)], [], tmp_path)
    assert len(list((tmp_path / "runs").glob("*.html"))) == 2
    build_report_for([_bare(make_record("ddp", 0))], [], tmp_path)
    assert len(list((tmp_path / "runs").glob("*.html"))) == 1


def _bare(record: dict) -> dict:
    """A record with nothing to draw (an early failure), so building its report is quick."""
    return {
        **record,
        "status": "failed",
        "curve": [],
        "memory": {"method": "none", "per_rank": []},
        "comm": {"method": "none", "steps": 0, "per_rank": []},
    }


def test_records_sharing_a_run_id_each_get_a_page(tmp_path):
    twins = [_bare(make_record("ddp", 0)), _bare(make_record("ddp", 0, world_size=4))]
    twins[1]["run_id"] = twins[0]["run_id"]
    build_report_for(twins, [], tmp_path)
    assert len(list((tmp_path / "runs").glob("*.html"))) == 2


def _arm_labels(configs: list[tuple[str, dict]], **kwargs) -> list[str]:
    page = arms([_bare(make_record(method, 0, variant=variant, **kwargs)) for method, variant in configs])
    return [a.label for a in page.values()]


def test_arm_labels_name_only_what_varies():
    configs = [
        ("ddp", {"ac": False}),
        ("fsdp", {"ac": False}),
        ("fsdp", {"ac": True}),
        ("b-sdp", {"C": 0.5, "aggregation": "groups", "K": 4}),
        ("b-sdp", {"C": 0.5, "aggregation": "dense", "K": 4}),
        ("b-sdp", {"C": 0.75, "aggregation": "groups", "K": 4}),
    ]
    assert _arm_labels(configs) == ["ddp", "fsdp", "fsdp+ac", "b-sdp C=0.5", "b-sdp C=0.5 dense", "b-sdp C=0.75"]


def test_a_switched_off_string_against_another_default_says_what_is_off():
    """Streaming DiLoCo's quantize=none beside its default e3m0: both read as the method alone before, one label."""
    configs = [("streaming-diloco", {"quantize": "e3m0"}), ("streaming-diloco", {"quantize": "none"})]
    assert _arm_labels(configs) == ["streaming-diloco", "streaming-diloco no quantize"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ddp", "b-sdp"]),
            st.fixed_dictionaries(
                {
                    "C": st.sampled_from([0.5, 0.75]),
                    "ac": st.booleans(),
                    "aggregation": st.sampled_from(["groups", "dense", "none"]),
                }
            ),
            st.sampled_from([2, 4]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_distinct_configurations_never_share_a_label(configs):
    records = [_bare(make_record(m, 0, variant=v, world_size=w)) for m, v, w in configs]
    page = arms(records)
    labels = [a.label for a in page.values()]
    assert len(set(labels)) == len(page) == len({json.dumps([m, v, w], sort_keys=True) for m, v, w in configs})
    assert all(len(label) <= 40 for label in labels)
    assert len({a.colour for a in page.values()}) == len(page)


def _section(html: str, marker: str) -> str:
    start = html.index(marker)
    return html[start : html.index("</section>", start)]


def _row(table: str, claim_id: str) -> str:
    row = table[table.index(f">{claim_id}</a>") :]
    return htmllib.unescape(re.sub(r"<[^>]+>", " ", row[: row.index("</tr>")]))


def test_each_glance_row_gives_the_claim_numbers_units_direction_verdict_and_why(site):
    glance = _section(page_of(site, "reproductions", "sdp-").read_text(), 'id="claims-at-a-glance"')
    assert glance.index('class="sortable claims"') < glance.index("<svg")  # the numbers first, as text
    header = re.findall(r"<th>([^<]*)</th>", glance[: glance.index("</thead>")])
    assert header == ["claim", "in plain words", "paper", "ours", "better", "verdict", "why"]
    memory = _row(glance, "sdp-memory")
    for text in ["lowers peak memory", "0.6 x DDP peak bytes", "x DDP peak bytes (3 seeds)", "lower ↓", "reproduced"]:
        assert text in memory, text
    assert re.search(r"\[0\.\d+, 0\.\d+\] inside the band \[0\.5, 0\.7\]", memory)  # the seeds' interval
    quality = _row(glance, "sdp-quality")
    assert "against 2." in quality and "validation loss" in quality  # ours against the baseline's mean
    untestable = _row(glance, "sdp-inter-node")
    assert "not testable here" in untestable and "needs cuda, network, world_size>=8" in untestable
    index = (site / "index.html").read_text()
    assert "in plain words" in _section(index, 'id="repro-sdp"')


def test_a_check_of_the_suites_own_formula_is_marked_as_such(tmp_path):
    derived = SDP_CLAIMS_YAML.replace("source_status: unverified", "source_status: derived, not a paper number", 1)
    (tmp_path / "claims.yaml").write_text(derived)
    records = [make_record("ddp", s, reproduction="sdp", protocol="flops") for s in range(3)]
    records += [
        make_record("b-sdp", s, reproduction="sdp", protocol="flops", variant={"C": 0.5}, memory_scale=0.5)
        for s in range(3)
    ]
    build_report_for(records, [], tmp_path / "site", {"sdp": load_claims(tmp_path / "claims.yaml")})
    html = page_of(tmp_path / "site", "reproductions", "sdp-").read_text()
    assert "0.6 x DDP peak bytes (our formula, not the paper's)" in _row(html, "sdp-memory")
    start = html.index('id="claim-sdp-memory"')
    card = html[start - 40 : html.index("</article>", start)]
    assert 'class="card derived"' in card and "A check of the suite's own formula" in card
    assert "matches the model" in card


def test_brief_reasons_and_plain_words_keep_clauses_and_drop_asides():
    from suite.report.glance import brief, plain_words

    assert brief("0.5 inside the band [0.4, 0.6]; lower is better (estimated, not a measurement; checked by x)") == (
        "0.5 inside the band [0.4, 0.6]"
    )
    assert brief("runs too short: it changed by 8%; the claim needs 2% (a rule (issue 12))") == (
        "runs too short: it changed by 8%; the claim needs 2%"
    )
    cut = brief("needs cuda; " + "word " * 60)  # the clause that does not fit is cut where there is room
    assert cut.startswith("needs cuda; word word") and cut.endswith(" …") and len(cut) <= 160
    assert brief("a" * 130 + "; " + "b " * 40) == "a" * 130  # and left out where there is none
    assert brief("x" * 200).endswith("x …") and len(brief("x" * 200)) <= 160
    assert brief("unbalanced (aside; still one line") == "unbalanced (aside; still one line"
    assert plain_words("B-SDP lowers memory (8 workers; bf16); here the count of ...") == (
        "B-SDP lowers memory (8 workers; bf16)"
    )
    assert plain_words("word " * 60).endswith(" …") and len(plain_words("word " * 60)) <= 160


def test_numbers_per_arm_open_the_page_with_seeds_pooled_and_kinds_apart(site):
    html = page_of(site, "reproductions", "sdp-").read_text()
    numbers = _section(html, 'id="numbers"')
    assert html.index('id="numbers"') < html.index('id="claims-at-a-glance"')
    measured = numbers[numbers.index('id="numbers-measured-cpu"') : numbers.index('id="numbers-estimated"')]
    estimated = numbers[numbers.index('id="numbers-estimated"') :]
    header = re.findall(r"<th>([^<]*)</th>", measured)
    assert header == [
        "arm",
        "seeds",
        "tokens/s",
        "peak GiB/rank",
        "model state GiB/rank",
        "bytes/step/rank",
        "final val loss",
        "tokens/s spread",
    ]  # no CPU time nor MFU in these records: columns no arm has are left out; 3 seeds: their spread
    ddp = [r for r in load_records(built_study()[0])[0] if r["reproduction"] == "sdp" and r["method"] == "ddp"]
    mean = sum(r["throughput"]["tokens_per_s"] for r in ddp) / len(ddp)
    peak = max(m["peak_bytes"] for m in ddp[0]["memory"]["per_rank"]) / 2**30
    (ddp_row,) = [r for r in re.findall(r"<tr>(.*?)</tr>", measured, re.S) if "</span>ddp</td>" in r]
    cells = [htmllib.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td.*?</td>", ddp_row, re.S)]
    assert cells[:4] == ["ddp", "3", f"{mean:,.0f}", f"{peak:.3g}"]
    assert "b-sdp C=0.5 n8" not in measured and "b-sdp C=0.5 n8" in estimated
    assert "tokens/s" not in estimated and "final val loss" not in estimated and "peak GiB/rank" in estimated


def test_the_runs_tables_lr_column_gives_each_runs_rate(tmp_path):
    """Issue 45: the lr column was empty on every page (the rate lives in a record's settings, not its variant)."""
    records = [make_record("ddp", seed=s, reproduction="lrs") for s in (0, 1)]
    for record, lr in zip(records, (1.5e-3, 7.5e-4)):
        record["settings"] = {"lr": lr}
    out = build_report_for(records, [], tmp_path / "site", claims_by_reproduction={"lrs": []})
    html = page_of(out.parent, "reproductions", "lrs").read_text()
    runs = html[html.index('class="sortable runs"') :]
    runs = runs[: runs.index("</table>")]
    header = re.findall(r"<th>([^<]*)</th>", runs)
    rates = [re.findall(r"<td[^>]*>(.*?)</td>", row)[header.index("lr")] for row in runs.split("<tr>")[2:]]
    assert sorted(rates) == ["0.00075", "0.0015"]
