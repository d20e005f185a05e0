"""Every document a file cites is in the repository: no source, README or claims file names a document that
ships without it (the papers' claims and the suite's derivations are in docs/sources.md), every relative link
of README.md and docs/*.md reaches a file, and every citation of a section of docs/sources.md names one it has."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

# documents outside the repository, spelled in parts so that this file does not name them itself
ABSENT = tuple(name + ".md" for name in ("CLAIMS", "DESIGN", "PRACTICE"))
SUFFIXES = (".py", ".md", ".yaml", ".yml")
SKIPPED = ("results", "reports")  # records and pages written by runs, not edited by hand
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CITATION = re.compile(r"docs/sources\.md#([A-Za-z0-9_-]+)")


def tracked() -> list[Path]:
    """The repository's files (git's list where this is a checkout, else a walk without build folders)."""
    try:
        names = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout.split(b"\0")
        paths = [ROOT / n.decode() for n in names if n]
    except (OSError, subprocess.SubprocessError):
        paths = [
            p
            for p in ROOT.rglob("*")
            if not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(ROOT).parts)
        ]
    return [p for p in paths if p.suffix in SUFFIXES and p.is_file() and p.relative_to(ROOT).parts[0] not in SKIPPED]


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors for the headings of `markdown`: lower case, punctuation dropped, spaces as hyphens."""
    out = set()
    for line in markdown.splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def test_no_file_names_a_document_outside_the_repository():
    found = [
        f"{path.relative_to(ROOT)}:{i}: {name}"
        for path in tracked()
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for name in ABSENT
        if name in line
    ]
    assert not found, "cite docs/sources.md or the module that holds the formula instead:\n" + "\n".join(found)


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_a_file(doc: Path):
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address, or a heading of the same page
        path = target.split("#", 1)[0]
        if not (doc.parent / path).exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)} links to files that do not exist: {broken}"


def test_citations_of_sources_name_one_of_its_sections():
    sources = ROOT / "docs" / "sources.md"
    assert sources.is_file(), "docs/sources.md is missing"
    sections = anchors(sources.read_text())
    missing = [
        f"{path.relative_to(ROOT)}:{i}: #{anchor}"
        for path in tracked()
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for anchor in CITATION.findall(line)
        if anchor not in sections
    ]
    assert not missing, f"docs/sources.md has no such section (it has {sorted(sections)}):\n" + "\n".join(missing)
