"""A record cannot make the report run code: strings from records, however hostile (HTML, <script>, event
handlers, javascript: URLs, Jinja template syntax, mathtext), come out of every page as text. Checked on the
built HTML: one script per page (its own), no event-handler attribute, no active URL, no element that loads or
embeds anything, and the template syntax shown literally, never evaluated."""

from __future__ import annotations

import html as htmllib
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.records import load_records, validate, write_record
from suite.report import build_report, build_report_for
from suite.report.build import STYLESHEET
from tests.report_fixtures import make_record

# each would run, load or evaluate something if it reached the page unescaped; the `zq` markers are the
# output an evaluated template would print, and must appear nowhere
PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    '"><svg onload=alert(3)>',
    "' onmouseover='alert(4)",
    "javascript:alert(5)",
    " JaVaScRiPt:alert(6)",
    "data:text/html,<script>alert(7)</script>",
    "{{ 'zq' ~ 'zq' }}",
    "{% for x in 'zq' %}{{ x ~ x }}{% endfor %}",
    "{# zq #}{{ config }}{{ self.__init__.__globals__ }}",
    "${7*7}#{7*7}<%= 7*7 %>",
    "$\\frac{1}{$ $x^{$ \\$",
    "</title></style></textarea></script><!--",
    "<iframe src=//evil.example></iframe><base href=//evil.example/><meta http-equiv=refresh content=0;url=//e>",
    "<a href='javascript:alert(8)'>x</a><form action=//e><button formaction=//e>",
    "]]><![CDATA[<script>alert(9)</script>",
    "\u2028\u2029\x0b\x0c",
]
EVALUATED = ("zqzq", "zzqq", "__globals__ at", "<Config")
ACTIVE_URL = ("javascript:", "vbscript:", "data:text", "//")
# the one <link> a page may have: its folder's stylesheet, from the folder's top or a page one level below it
OWN_STYLESHEET = [[("rel", "stylesheet"), ("href", f"{up}{STYLESHEET}")] for up in ("", "../")]
FORBIDDEN_TAGS = {"iframe", "object", "embed", "form", "base", "link", "frame", "applet", "button", "input"}


class Page(HTMLParser):
    """What could act in a page: scripts, attributes, URLs, elements; and its text as a reader sees it."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.scripts: list[str] = []
        self.problems: list[str] = []
        self.text: list[str] = []
        self.policy = ""
        self._script = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self._script = tag == "script"
        if tag == "script":
            self.scripts.append("")
            if attrs:
                self.problems.append(f"<script {attrs}>")
        if tag in FORBIDDEN_TAGS and not (tag == "link" and attrs in OWN_STYLESHEET):
            self.problems.append(f"<{tag} {attrs}>")
        if tag == "meta" and any(k == "http-equiv" and v != "Content-Security-Policy" for k, v in attrs):
            self.problems.append(f"<meta {attrs}>")
        if tag == "meta" and ("http-equiv", "Content-Security-Policy") in attrs:
            self.policy = dict(attrs)["content"]
        for name, value in attrs:
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}=...>")
            url = "".join(ch for ch in (value or "") if ch.isprintable() and not ch.isspace()).lower()
            if name in ("href", "src", "xlink:href", "action", "formaction") and url.startswith(ACTIVE_URL):
                self.problems.append(f"<{tag} {name}={value!r}>")
            if tag == "img" and name == "src" and not url.startswith("data:image/"):
                self.problems.append(f"<img src={value!r}>")

    def handle_endtag(self, tag):
        self._script = False

    def handle_data(self, data):
        if self._script:
            self.scripts[-1] += data
        else:
            self.text.append(data)


def _hostile_record(payloads: list[str], seed: int = 0) -> dict:
    """A valid record with a payload in every free-text field the report shows."""
    cycle = iter(payloads * 20)
    record = make_record(
        next(cycle),
        seed,
        reproduction=next(cycle),
        variant={next(cycle): next(cycle), "C": next(cycle)},
        model=next(cycle),
        evals={next(cycle): 1.0, next(cycle): {"value": 0.5, "stderr": 0.1}},
        status="failed",
    )
    record["run_id"] = next(cycle)
    record["error"] = next(cycle)
    record["command"] = next(cycle)
    record["created"] = next(cycle)
    record["data"] |= {"name": next(cycle), "source": next(cycle), "split": next(cycle)}
    record["model"]["config"] = {next(cycle): next(cycle)}
    record["parallel"] |= {"strategy": next(cycle), "mesh": {next(cycle): 2}}
    record["parallel"]["groups"][0] |= {"name": next(cycle), "tier": next(cycle)}
    record["memory"]["method"] = next(cycle)
    record["comm"]["method"] = next(cycle)
    for rank in record["comm"]["per_rank"]:
        rank["ops"][0] |= {"op": next(cycle), "group": next(cycle), "tier": next(cycle)}
    record["env"] |= {"device_name": next(cycle), "torch": next(cycle), "git_sha": next(cycle)}
    validate(record)
    return record


def _own_script() -> str:
    from suite.report.build import _templates

    return str(_templates().globals["script"])


def _check_site(site: Path) -> list[Page]:
    pages = sorted(site.rglob("*.html"))
    assert pages
    parsed = []
    for path in pages:
        text = path.read_text(encoding="utf-8")
        page = Page(text)
        assert not page.problems, (path.name, page.problems)
        assert page.scripts == [_own_script()], path.name  # one script, the page's own
        assert page.policy.startswith("default-src 'none';"), path.name
        shown = htmllib.unescape("".join(page.text))
        assert not [e for e in EVALUATED if e in shown], (path.name, [e for e in EVALUATED if e in shown])
        parsed.append(page)
    return parsed


@pytest.fixture(scope="module")
def hostile_site() -> tuple[Path, list[dict]]:
    root = Path(tempfile.mkdtemp(prefix="fuzz-report-"))
    records = [_hostile_record(PAYLOADS), _hostile_record(PAYLOADS[5:] + PAYLOADS[:5], seed=1)]
    records.append(make_record("ddp", 0, reproduction=records[0]["reproduction"]))
    for i, record in enumerate(records):
        write_record(record, root / "results" / f"run-{i}.json")
    return build_report(root / "results", root / "site").parent, records


def test_no_page_runs_or_loads_anything_a_record_says(hostile_site):
    site, _ = hostile_site
    assert len(_check_site(site)) == 1 + 2 + 3  # index, two reproductions, three runs


def test_hostile_strings_are_shown_as_text(hostile_site):
    """Every payload is on some page as the literal text a reader sees, template syntax included."""
    site, _ = hostile_site
    shown = "".join("".join(Page(p.read_text(encoding="utf-8")).text) for p in site.rglob("*.html"))
    for payload in PAYLOADS:
        visible = " ".join(payload.split())
        assert visible in " ".join(shown.split()), payload


def test_run_pages_are_named_safely(hostile_site):
    site, _ = hostile_site
    names = [p.name for p in site.rglob("*.html")]
    assert all(name.isascii() and "<" not in name and ":" not in name and " " not in name for name in names), names


TEXT = st.text(
    st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from(list("<>&\"'`{}%$#\\/:;=()[]!-")),
    min_size=1,
    max_size=30,
).filter(lambda t: t.strip())


@settings(max_examples=6, deadline=None)
@given(st.lists(TEXT, min_size=3, max_size=6))
def test_any_text_in_a_record_stays_text(strings):
    root = Path(tempfile.mkdtemp(prefix="fuzz-report-"))
    write_record(_hostile_record(strings), root / "results" / "run.json")  # not named by its run_id: a dot-name
    records, skipped = load_records(root / "results")
    pages = _check_site(build_report_for(records, skipped, root / "site").parent)
    shown = " ".join("".join("".join(page.text) for page in pages).split())
    for text in strings:
        assert " ".join(text.split()) in shown, text
