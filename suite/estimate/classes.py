"""Rank classes: ranks whose steps are the same up to the names of their tensors and groups.

SDP's ranks hold different blocks, so no rank's tensors carry another's names, yet every rank holds as many
blocks of the same sizes and sits in as many holder groups of the same sizes: its memory and bytes are another
rank's under other group names. Ranks are classed by `suite.estimate.rank.layout` (storage bytes, elements and
dtypes of the local tensors in order, sizes and tiers of the groups, no names); the first rank of a class is
stepped for all of it, and the second is stepped as well, as a check: its own numbers must equal the first
one's with the groups paired by size and tier (in the order each rank labelled them, `renamed`), or the estimate
steps every rank. The others take the first one's numbers under their own group names, in their own ledger's
order.
"""

from __future__ import annotations

from collections.abc import Callable

from suite.estimate.rank import RankEstimate


class RankClasses:
    """Ranks by layout, in the order they were added: members[0] stands for its class, members[1] checks it."""

    def __init__(self) -> None:
        self.members: dict[tuple, list[int]] = {}
        self.added: set[int] = set()

    def __contains__(self, rank: int) -> bool:
        return rank in self.added

    def add(self, est: RankEstimate) -> bool:
        """File `est` under its layout; True where it must be stepped (its class's first or second rank)."""
        members = self.members.setdefault(est.layout, [])
        members.append(est.rank)
        self.added.add(est.rank)
        return len(members) <= 2

    def stands_for(self) -> dict[int, int]:
        """Each rank's class representative."""
        return {r: members[0] for members in self.members.values() for r in members}

    def checked(self) -> list[int]:
        return sorted(members[1] for members in self.members.values() if len(members) > 1)

    def failed(self, ests: dict[int, RankEstimate], kept: Callable[[int, dict], dict]) -> list[int]:
        """The checked ranks whose own numbers differ from their representative's under their group names, as
        `kept(rank, results)` (what the record keeps of them) sees them."""
        by = self.stands_for()
        return [
            r
            for r in self.checked()
            if (s := renamed(ests[by[r]], ests[r])) is None or kept(r, s) != kept(r, ests[r].results)
        ]

    def results(self, ests: dict[int, RankEstimate]) -> dict[int, dict]:
        """Every rank's meter results: its own where it was stepped, else its representative's, renamed."""
        by = self.stands_for()
        return {r: ests[r].results if ests[r].stepped else renamed(ests[by[r]], ests[r]) for r in sorted(by)}

    def describe(self) -> str:
        classes = "; ".join(f"{{{','.join(map(str, sorted(m)))}}}" for m in self.members.values())
        return (
            f"ranks of the same local tensors (storage bytes, elements, dtypes, in order) and groups (sizes, tiers), "
            f"names aside, form one class (classes {classes}); each class's first rank is stepped for it, its second "
            f"as well, equal to the first under its own group names (checked_ranks); the others take the first one's "
            f"numbers under their own group names"
        )


def _by_kind(groups: list[tuple]) -> list[tuple]:
    """Groups by size and tier, each kind in the order the rank labelled them."""
    return sorted(groups, key=lambda g: (g[2], g[3]))


def renamed(source: RankEstimate, target: RankEstimate) -> dict | None:
    """`source`'s meter results as `target`'s: each collective on `target`'s group of the same size and tier and
    the same place among those, the ledger's rows in `target`'s order (by op and process group, suite/meters/
    comm.py). None where a row's group is not one `source` labelled once, or the groups do not pair."""
    comm = source.results.get("comm")
    if comm is None:
        return source.results
    mine, theirs = _by_kind(source.groups), _by_kind(target.groups)
    labels = [g[1] for g in mine]
    if len(set(labels)) < len(labels) or [g[2:] for g in mine] != [g[2:] for g in theirs]:
        return None
    pair = dict(zip(labels, theirs))
    rows = []
    for row in comm["ops"]:
        if row["group"] not in pair:
            return None
        name, label = pair[row["group"]][:2]
        rows.append(((row["op"], name), {**row, "group": label}))
    ops = [row for _, row in sorted(rows, key=lambda item: item[0])]
    return {**source.results, "comm": {**comm, "ops": ops}}
