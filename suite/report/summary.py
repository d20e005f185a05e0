"""A reproduction's findings in words, written from its verdicts: what holds, what does not, by how much, at what
scale, and what would decide the rest. Pages open with it (the folder index, the reproduction's page) and the site
index shows its headline.

Three groups, as the verdict counts (glance.counts): the paper's claims judged in its regime, small-scale findings
(each with its scale), and the suite's own checks (counted only: they have no paper value to hold or not). An item
gives the effect with the interval its verdict judged: a quality claim's difference with the 90% Welch interval and
its test named in words, a ratio's value with its interval against the paper's; a compound card names its halves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from suite.judge.claims import Claim
from suite.judge.sides import Sides
from suite.judge.verdicts import Verdict
from suite.report import glance
from suite.report.tables import css_token, fmt_number

HOLDS = ("reproduced", "exceeded", "holds at small scale")
FAILS = ("fell short", "does not hold at small scale")
OPEN = ("inconclusive", "inconclusive at small scale")
TESTS = {  # what each quality test asks, in words (suite/judge/verdicts.py _judge_quality)
    "non-inferiority": "is it worse by less than {m}?",
    "superiority": "is it better by more than {m}?",
    "equivalence": "does the difference lie within ±{m}?",
}
SEEDS_NEEDED = re.compile(r"about (\d+) seeds per arm would decide it")


@dataclass(frozen=True)
class Item:
    """One card in the summary: its anchor on the reproduction's page, its word, what it found."""

    card: str
    href: str
    word: str
    text: str
    short: str  # the effect in a few characters, for the site index: a difference with its interval, or a value


@dataclass(frozen=True)
class Group:
    title: str
    lead: str  # the group in one sentence: how many claims got which word
    items: tuple[Item, ...] = ()
    tests: tuple[str, ...] = ()  # what would test the paper's claims this group leaves open, each once


def _number(value: float) -> str:
    return fmt_number(float(f"{value:.4g}"))


def _signed(value: float) -> str:
    return f"{'+' if value >= 0 else ''}{_number(value)}"


def _quality(claim: Claim, verdict: Verdict) -> str:
    """'B-SDP 1.566 against DDP 1.376 nats: +0.19, 90% interval [+0.18, +0.20]; non-inferiority: is it worse by
    less than 0.008? (one-sided Welch at 5%, p = 1.5e-11)'."""
    # each side by its method, optimizer and what sets the two apart ("ddp dion rank_fraction=0.25")
    sides = Sides.of(claim.metric)
    method, baseline = (s.label(sides.differing()) for s in (sides.mine, sides.theirs))
    gap = verdict.measured - verdict.baseline
    text = (
        f"{method} {_number(verdict.measured)} against {baseline} {_number(verdict.baseline)} ({claim.unit}, "
        f"{claim.better} is better): difference {_signed(gap)}"
    )
    if verdict.interval is not None:
        low, high = verdict.interval
        text += f", 90% interval [{_signed(low)}, {_signed(high)}]"
    if claim.test and claim.margin is not None:
        asks = TESTS.get(claim.test, claim.test).format(m=_number(claim.margin.value))
        p = f", p = {verdict.p_value:.2g}" if verdict.p_value is not None else ""
        text += f"; {claim.test} test, {asks} (one-sided Welch at 5%{p})"
    return text


def _ratio(claim: Claim, verdict: Verdict) -> str:
    """'0.4928 x DDP peak bytes per rank (95% interval [0.49, 0.50]) against the paper's 0.4 to 0.72'."""
    text = f"{_number(verdict.measured)} {claim.unit}".strip()
    if verdict.interval is not None and verdict.interval[0] != verdict.interval[1]:
        kind = "95% interval" if verdict.spread is not None else "range over settings"
        text += f" ({kind} [{_number(verdict.interval[0])}, {_number(verdict.interval[1])}])"
    if claim.paper_range is not None and not claim.derived:
        low, high = claim.paper_range
        paper = _number(low) if low == high else f"{_number(low)} to {_number(high)}"
        text += f" against the paper's {paper}"
    elif claim.derived:
        text += " against the suite's own formula"
    return text


def effect(claim: Claim, verdict: Verdict) -> str:
    """What a card found, by how much, in one sentence; a compound card names its own half and each other half."""
    if verdict.measured is None:
        found = glance.brief(verdict.reason)
    elif claim.kind == "quality" and verdict.baseline is not None:
        found = _quality(claim, verdict)
    else:
        found = _ratio(claim, verdict)
    if not verdict.parts:
        return found
    halves = "; ".join(f"{part}: {word}" for part, word in verdict.parts)
    return f"a compound claim, its weakest half decides. This card's half {glance.own_word(verdict)}: {found}; {halves}"


def _decides(claim: Claim, verdict: Verdict) -> str:
    """What would decide an open card: the seeds a noisy test planned, else what would test the paper's claim."""
    if found := SEEDS_NEEDED.search(verdict.reason):
        return f"about {found.group(1)} seeds per arm would decide it at this spread"
    return f"what would test it: {_first(claim.what_would_test)}" if claim.what_would_test else ""


def _first(text: str) -> str:
    """A what-would-test text's first clause (its caveats follow a "; ")."""
    return glance.plain_words(text, 240)


def _item(claim: Claim, verdict: Verdict, href: str, scales: int) -> Item:
    text = effect(claim, verdict)
    if verdict.small_scale and scales > 1:
        text = f"at {verdict.at}: {text}"
    if verdict.verdict in OPEN and (decides := _decides(claim, verdict)):
        text += f". {decides[0].upper()}{decides[1:]}"
    return Item(claim.id, f"{href}#claim-{css_token(claim.id)}", verdict.verdict, text, _short(claim, verdict))


def _short(claim: Claim, verdict: Verdict) -> str:
    if verdict.measured is None:
        return ""
    if claim.kind == "quality" and verdict.baseline is not None:
        gap = f"{verdict.measured - verdict.baseline:+.2g}"
        return gap if verdict.interval is None else f"{gap} [{verdict.interval[0]:+.2g}, {verdict.interval[1]:+.2g}]"
    return f"{verdict.measured:.3g}"


def _said(words: list[str]) -> str:
    """'1 holds, 8 do not hold, 1 inconclusive' from the words of a group's cards."""
    counts = {
        "holds": sum(w in HOLDS for w in words),
        "does not hold": sum(w in FAILS for w in words),
        "inconclusive": sum(w in OPEN for w in words),
        "not testable here": words.count("not testable here"),
    }
    plural = {"holds": "hold", "does not hold": "do not hold"}
    return ", ".join(f"{n} {plural.get(w, w) if n > 1 else w}" for w, n in counts.items() if n)


def _tests(pairs: list[tuple[Claim, Verdict]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_first(c.what_would_test) for c, _ in pairs if c.what_would_test))


def summarize(verdicts: list[tuple[Claim, Verdict]], href: str = "") -> list[Group]:
    """The summary's groups for a reproduction's verdicts, its cards linked at `href`#claim-ID."""
    small = [(c, v) for c, v in verdicts if v.small_scale]
    paper = [(c, v) for c, v in verdicts if not v.small_scale and v.verdict in glance.PAPER_WORDS]
    own = [(c, v) for c, v in verdicts if not v.small_scale and v.verdict not in glance.PAPER_WORDS]
    groups = []
    if paper:
        untestable = [(c, v) for c, v in paper if v.verdict == "not testable here"]
        decided = any(v.verdict in (*HOLDS, *FAILS) for _, v in paper)
        lead = _said([v.verdict for _, v in paper]) + ("" if decided else "; none decided")
        if untestable:
            lead += f" (not testable here: {', '.join(c.id for c, _ in untestable)})"
        items = tuple(_item(c, v, href, 1) for c, v in _ordered(paper) if v.verdict != "not testable here")
        groups.append(Group(glance.PAPER, lead, items, _tests(untestable)))
    if small:
        scales = list(dict.fromkeys(s for _, v in small for s in v.at.split("; ")))
        lead = (
            f"{_said([v.verdict for _, v in small])}; each a finding at its scale, not a verdict on the paper's claim"
        )
        items = tuple(_item(c, v, href, len(scales)) for c, v in _ordered(small))
        groups.append(Group(f"{glance.SMALL} ({'; '.join(scales)})", lead, items, _tests(small)))
    if own:
        words = "; ".join(f"{w} ({n})" for _, pairs in glance.counts(own) for w, n in pairs)
        groups.append(Group(glance.OWN, f"{words}: the claims table lists each; none has a paper value to hold"))
    return groups


def _ordered(pairs: list[tuple[Claim, Verdict]]) -> list[tuple[Claim, Verdict]]:
    """Holds first, then does not hold, then open: the order a reader asks in."""
    rank = {w: i for i, w in enumerate((*HOLDS, *FAILS, *OPEN))}
    return sorted(pairs, key=lambda p: rank.get(p[1].verdict, len(rank)))


def decided(verdicts: list[tuple[Claim, Verdict]], href: str) -> list[tuple[str, list[tuple[str, list]]]]:
    """For the site index, per group title (as glance.counts names it): the cards that hold, then those that do
    not, each as (link, card, the effect in a few characters)."""
    out = []
    for group in summarize(verdicts, href):
        sides = [
            (side, [(i.href, i.card, i.short) for i in group.items if i.word in words])
            for side, words in (("holds", HOLDS), ("does not hold", FAILS))
        ]
        if any(cards for _, cards in sides):
            out.append((group.title, [(side, cards) for side, cards in sides if cards]))
    return out
