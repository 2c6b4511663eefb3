"""Deterministic entity extraction: what exact-identifier entity edges and the entity channel match on.

An entity id is a normalised (NFKC, lower-cased, blank-collapsed) surface form. Sources, in order of first
mention: the speaker; capitalised name runs ("Mira", "New York") except the first word of a sentence, which
counts only when it is a known name (a speaker seen before, or a name the caller passes); quoted titles
("Charlotte's Web"); numbers with units ("3 years", "$20", "10%"). No model, no state: the same text and
names always give the same ids.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from itertools import chain

# Capitalised words that are not names on their own (greetings, pronouns, calendar words).
_NOT_NAMES: frozenset[str] = frozenset(
    """i i'm i've i'd i'll im ive ok okay oh wow hey hi hello yes yeah yep no nope thanks thank lol omg haha
    mr mrs ms dr the a an and but or so my your our their his her its it it's that's this these those what
    when where why how who which there here well just also really sure sorry please congrats congratulations
    january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
    monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday""".split()
)
_JOINERS = frozenset({"of", "de", "van", "von", "da", "del", "la", "le"})

_WORD = re.compile(r"[^\W\d_][\w'’\-]*", re.UNICODE)
_SENTENCE_BREAK = re.compile(r"(?:[.!?]+[\"'”’)\]]*\s+|\n+|^\s*[^\W\d_][\w .'\-]{0,40}:\s+|^\s*)")
_QUOTED = re.compile(r"[\"“]([^\"“”\n]{2,80})[\"”]")
_UNITS = (
    r"years?|yrs?|months?|weeks?|days?|hours?|hrs?|minutes?|mins?|seconds?|km|kilomet(?:er|re)s?|miles?|"
    r"kg|kilos?|kilograms?|lbs?|pounds?|dollars?|euros?|percent|%|times|kids|children|people|pets?|cats?|dogs?"
)
_NUMBER_UNIT = re.compile(rf"(?<![\w.])(\d+(?:[.,]\d+)?)\s?({_UNITS})\b", re.IGNORECASE)
_MONEY = re.compile(r"([$€£])\s?(\d+(?:[.,]\d+)?)")


def normalise_entity(name: str) -> str:
    """The entity id of a surface form: NFKC, lower case, trimmed punctuation, single blanks."""
    text = unicodedata.normalize("NFKC", name).casefold()
    text = re.sub(r"['’]s\b", "", text)
    text = re.sub(r"\s+", " ", text).strip(" \t\n\"'“”’‘.,;:!?()[]{}-")
    return text


def _sentence_starts(text: str) -> set[int]:
    starts = set()
    for match in _SENTENCE_BREAK.finditer(text):
        starts.add(match.end())
    return starts


def _name_runs(text: str, known: set[str]) -> list[tuple[int, str]]:
    starts = _sentence_starts(text)
    words = [(m.start(), m.group()) for m in _WORD.finditer(text)]
    found: list[tuple[int, str]] = []
    run: list[tuple[int, str]] = []

    def flush() -> None:
        while run and run[-1][1].lower() in _JOINERS:
            run.pop()
        if run:
            found.append((run[0][0], " ".join(w for _, w in run)))
        run.clear()

    prev_end = -1
    for start, word in words:
        gap = text[prev_end:start] if prev_end >= 0 else ""
        contiguous = prev_end >= 0 and gap.strip() == ""
        if not contiguous:
            flush()
        prev_end = start + len(word)
        bare = normalise_entity(word)
        capitalised = word[0].isupper()
        if run and word.lower() in _JOINERS:
            run.append((start, word))
            continue
        if not capitalised or bare in _NOT_NAMES or len(bare) < 2:
            flush()
            continue
        if start in starts and not run and bare not in known:
            continue  # an ordinary capitalised first word of a sentence
        run.append((start, word))
    flush()
    return found


def extract_entities(
    text: str, *, speaker: str | None = None, known_names: Iterable[str] = (), limit: int = 12
) -> tuple[str, ...]:
    """Entity ids of `text`, first mention first, at most `limit` (the speaker always comes first)."""
    known = {normalise_entity(n) for n in known_names if n}
    if speaker:
        known.add(normalise_entity(speaker))
    mentions: list[tuple[int, str]] = []
    mentions.extend(_name_runs(text, known))
    mentions.extend((m.start(), m.group(1)) for m in _QUOTED.finditer(text))
    mentions.extend((m.start(), f"{m.group(1)} {m.group(2)}") for m in _NUMBER_UNIT.finditer(text))
    mentions.extend((m.start(), f"{m.group(1)}{m.group(2)}") for m in _MONEY.finditer(text))
    ordered = (normalise_entity(surface) for _, surface in sorted(mentions, key=lambda x: x[0]))
    return _first_distinct(chain([normalise_entity(speaker)] if speaker else [], ordered), limit)


def clean_entities(entities: Iterable[str], *, speaker: str | None = None, limit: int = 12) -> tuple[str, ...]:
    """Normalise caller-given entities the same way (the speaker is added first when given)."""
    ordered = (normalise_entity(str(e)) for e in entities)
    return _first_distinct(chain([normalise_entity(speaker)] if speaker else [], ordered), limit)


def _first_distinct(entities: Iterable[str], limit: int) -> tuple[str, ...]:
    """The first `limit` distinct non-empty ids, in order; stops there (a long text may mention thousands)."""
    out: dict[str, None] = {}
    for entity in entities:
        if len(out) >= limit:
            break
        if entity:
            out[entity] = None
    return tuple(out)
