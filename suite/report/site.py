"""One index for every report folder under a site root (reports/index.html): each reproduction, its paper,
its verdict counts, and a link to every page its folder holds.

Each folder's build (build.py) writes summary.json beside its index: what the site index needs of it, so the
index is built from the committed folders alone, without reading a record or judging a claim again. Pages a
reproduction writes itself (flash-io's io.html) and figures drawn by other commands (dion's step-time.png)
are found by listing the folder.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from suite.errors import UsageError
from suite.judge.claims import Claim

SUMMARY = "summary.json"
OWN_PAGES = (".html", ".png", ".svg")  # a folder's top-level files that a reader opens (not its summaries)


def paper_of(claims: list[Claim]) -> str:
    """The paper most of the claims cite; a reproduction without claims compares runs only."""
    papers = Counter(c.source.paper for c in claims if c.source.paper)
    return papers.most_common(1)[0][0] if papers else "no paper (compares runs only)"


def paper_href(paper: str) -> str | None:
    """The arXiv abstract page of the paper a reproduction cites, where its name carries an arXiv id."""
    found = re.search(r"arXiv (\d{4}\.\d{4,5})", paper)
    return f"https://arxiv.org/abs/{found.group(1)}" if found else None


def summary(entries: list[dict], n_records: int, n_skipped: int) -> str:
    """summary.json's text, indented and ending in a newline like the other committed files."""
    return json.dumps({"records": n_records, "skipped": n_skipped, "reproductions": entries}, indent=1) + "\n"


def _folder(folder: Path, site: Path) -> dict | None:
    """One report folder as the site index shows it; None for a folder no build wrote."""
    path = folder / SUMMARY
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    prefix = folder.relative_to(site).as_posix()
    own = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix in OWN_PAGES and p.name != "index.html")
    return {
        "name": folder.name,
        "href": f"{prefix}/index.html",
        "records": data["records"],
        "own": [(f"{prefix}/{name}", name) for name in own],
        "reproductions": [
            {
                **entry,
                "href": f"{prefix}/{entry['href']}",
                "paper_href": paper_href(entry["paper"]),
                "hardware": entry.get("hardware", "not recorded"),  # a folder written before it was kept
                "check": entry.get("check", ""),
                "trends": [(f"{prefix}/{href}", card, words) for href, card, words in entry.get("trends", [])],
                "decided": {
                    title: [
                        (side, [(f"{prefix}/{href}", card, short) for href, card, short in cards])
                        for side, cards in sides
                    ]
                    for title, sides in entry.get("decided", [])
                },
                "run_pages": [(f"{prefix}/{href}", run_id, status) for href, run_id, status in entry["run_pages"]],
            }
            for entry in data["reproductions"]
        ],
    }


def site_context(site: Path) -> dict:
    """The site index's context: every report folder directly under `site` that a build wrote."""
    if not site.is_dir():
        raise UsageError(f"no site folder {str(site)!r}; give the folder that holds the report folders (reports)")
    folders = [f for f in (_folder(p, site) for p in sorted(site.iterdir()) if p.is_dir()) if f is not None]
    return {"title": "Reproductions", "root": "", "site_href": "index.html", "folders": folders}
