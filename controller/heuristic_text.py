"""Deterministic text features for the heuristic backend: flattening, stems, entities, cues and times.

Everything here is a pure function of its input text (no state, no randomness, no I/O), so answers built
from it depend only on the request's state and question content.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone

from controller.lexical import STOPWORDS, tokenize

# Frequent English content words: they carry little evidence when two texts share them (a small
# frequency prior standing in for corpus idf).
COMMON_WORDS: frozenset[str] = frozenset(
    """also always really thing things something anything everything one two get got go going went gone make
    made know knew think thought say said tell told see saw look looking want wanted like good great nice new
    old time times day days week weeks year years way people person lot lots much many well back still even
    right yeah yes oh hey hi thanks thank sure feel felt take took come came give gave use used work working
    let need keep kind sort little big long last first next life today tomorrow yesterday love happy fun""".split()
)

MONTHS = (
    "january february march april may june july august september october november december".split()
)
WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_NOT_ENTITIES = frozenset([*MONTHS, *WEEKDAYS, *(m[:3] for m in MONTHS), "ok", "okay", "wow", "lol", "omg"])

_WORD = re.compile(r"[A-Za-z0-9]+(?:['\u2019][A-Za-z]+)?")
_SENTENCE_END = re.compile(r"[.!?:;\n]")
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nobody|nothing|neither|nor|cannot|without|no longer|any ?more)\b|n['\u2019]t\b",
    re.IGNORECASE,
)
_NUMBER_WORDS = {
    w: i
    for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())
}
_NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")


def flatten(value: object) -> str:
    """The text leaves (strings, numbers) of a JSON value joined by spaces; object keys are skipped."""
    parts: list[str] = []
    _collect(value, parts)
    return " ".join(parts)


def _collect(value: object, parts: list[str]) -> None:
    if isinstance(value, str):
        parts.append(value)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, (int, float)):
        parts.append(str(value))
    elif isinstance(value, Mapping):
        for v in value.values():
            _collect(v, parts)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect(v, parts)


def content_of(value: object) -> str:
    """The main text of a memory-like value: its `content` / `text` field when it has one."""
    if isinstance(value, Mapping):
        for key in ("content", "text", "observation", "memory"):
            if isinstance(value.get(key), str):
                return str(value[key])
    return flatten(value)


def stem(token: str) -> str:
    """A tiny suffix stripper so `hiking` / `hikes` / `hiked` meet; good enough for overlap features."""
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 5 and token.endswith("ing"):
        token = token[:-3]
    elif len(token) > 4 and token.endswith("ed"):
        token = token[:-2]
    elif len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        token = token[:-1]
    if len(token) > 3 and token.endswith("e"):
        token = token[:-1]
    if len(token) > 3 and token[-1] == token[-2] and token[-1] not in "aeiouls":
        token = token[:-1]  # running -> runn -> run
    return token


def terms(text: str) -> list[str]:
    """Stemmed content words (lower-cased, stop words removed)."""
    return [stem(t) for t in tokenize(text)]


def term_weight(term: str) -> float:
    """Rarity prior: frequent words count little, longer words a bit more."""
    if term.isdigit():
        return 1.2
    if term in _COMMON_STEMS:
        return 0.3
    return 1.0 + 0.05 * min(len(term), 10)


_COMMON_STEMS = frozenset(stem(w) for w in COMMON_WORDS)


def coverage(query: Iterable[str], doc: Iterable[str]) -> float:
    """Weighted share of the distinct query terms that appear in the document (0 when the query is empty)."""
    q = set(query)
    if not q:
        return 0.0
    d = set(doc)
    total = math.fsum(term_weight(t) for t in sorted(q))
    hit = math.fsum(term_weight(t) for t in sorted(q & d))
    return hit / total


def overlap(a: Iterable[str], b: Iterable[str]) -> float:
    """|A & B| / min(|A|, |B|) over distinct terms, weighted by rarity; 0 when either side is empty."""
    sa, sb = set(a), set(b)
    if not sa or not sb:
        return 0.0
    shared = math.fsum(term_weight(t) for t in sorted(sa & sb))
    smaller = min(math.fsum(term_weight(t) for t in sorted(sa)), math.fsum(term_weight(t) for t in sorted(sb)))
    return min(1.0, shared / smaller)


def entities(text: str) -> tuple[str, ...]:
    """Capitalised names (multi-word runs joined), lower-cased, in order of first mention.

    A capitalised word counts unless it is a stop word, a month / weekday, or a common word opening a
    sentence, so `Caroline: I went to Paris` gives (`caroline`, `paris`).
    """
    out: list[str] = []
    run: list[str] = []
    sentence_start = True
    pos = 0
    for match in _WORD.finditer(text):
        if _SENTENCE_END.search(text, pos, match.start()):
            sentence_start = True
        pos = match.end()
        word = match.group()
        low = word.lower().replace("\u2019", "'")
        base = low.split("'")[0]
        is_name = (
            word[0].isupper()
            and base not in STOPWORDS
            and base not in _NOT_ENTITIES
            and not (sentence_start and (base in COMMON_WORDS or len(base) < 2))
        )
        if is_name:
            run.append(base)
        elif run:
            out.append(" ".join(run))
            run = []
        sentence_start = False
    if run:
        out.append(" ".join(run))
    seen: dict[str, None] = {}
    for name in out:
        seen.setdefault(name, None)
    return tuple(seen)


def negations(text: str) -> int:
    """How many negation cues the text carries (`not`, `never`, `n't`, `no longer`, ...)."""
    return len(_NEGATION.findall(text))


def numbers(text: str) -> frozenset[str]:
    """Numbers written with digits or as small number words, normalised to digit strings."""
    found = set(_NUMBER.findall(text))
    for word in _WORD.findall(text.lower()):
        if word in _NUMBER_WORDS:
            found.add(str(_NUMBER_WORDS[word]))
    return frozenset(found)


def cue_pattern(cues: Iterable[str]) -> re.Pattern[str]:
    """One case-insensitive pattern matching any cue phrase on word boundaries (longest first)."""
    ordered = sorted(set(cues), key=lambda c: (-len(c), c))
    return re.compile(r"\b(?:" + "|".join(re.escape(c).replace(r"\ ", r"\s+") for c in ordered) + r")\b", re.IGNORECASE)


def count(pattern: re.Pattern[str], text: str) -> int:
    return len(pattern.findall(text))


_DATE_FORMATS = (
    "%I:%M %p on %d %B, %Y",  # LoCoMo session date
    "%I:%M %p on %d %b, %Y",
    "%d %B, %Y",
    "%d %B %Y",
    "%B %d, %Y",
    "%b %d, %Y",
    "%Y/%m/%d",
)


def parse_time(value: object) -> datetime | None:
    """A naive UTC datetime from ISO 8601 text, a LoCoMo session date or epoch seconds; None otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            return None
        seconds = value / 1000.0 if abs(value) > 1e11 else float(value)
        try:
            return datetime.fromtimestamp(seconds, tz=timezone.utc).replace(tzinfo=None)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
        for fmt in _DATE_FORMATS:
            try:
                parsed = datetime.strptime(text, fmt)
                break
            except ValueError:
                continue
    if parsed is None:
        return None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(timezone.utc).replace(tzinfo=None)
    return parsed


_UNITS = {"day": 1, "night": 1, "week": 7, "weekend": 7, "month": 30, "year": 365}
_AGO = re.compile(
    r"\b(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|few|couple of)\s+(day|night|week|month|year)s?\s+ago\b",
    re.IGNORECASE,
)
_LAST = re.compile(r"\blast\s+(night|week|weekend|month|year)\b", re.IGNORECASE)
_RELATIVE_DAYS = {"yesterday": -1, "tomorrow": 1, "today": 0, "tonight": 0}
_NEXT = re.compile(r"\bnext\s+(week|weekend|month|year)\b", re.IGNORECASE)


def relative_offset(text: str) -> timedelta | None:
    """The shift a relative time phrase puts between the telling and the event (`last week` -> -7 days)."""
    match = _AGO.search(text)
    if match:
        raw = match.group(1).lower()
        amount = {"a": 1, "an": 1, "few": 3, "couple of": 2}.get(raw)
        if amount is None:
            amount = int(raw) if raw.isdigit() else _NUMBER_WORDS.get(raw, 1)
        return timedelta(days=-amount * _UNITS[match.group(2).lower()])
    match = _LAST.search(text)
    if match:
        return timedelta(days=-_UNITS[match.group(1).lower()])
    match = _NEXT.search(text)
    if match:
        return timedelta(days=_UNITS[match.group(1).lower()])
    for word in _WORD.findall(text.lower()):
        if word in _RELATIVE_DAYS:
            return timedelta(days=_RELATIVE_DAYS[word])
    return None


def logistic(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)
