"""Text features the LoCoMo label rules use: turn renderings, content tokens, entities, question forms."""

from __future__ import annotations

import re
from datetime import datetime

from controller.lexical import tokenize

# Conversational words that say nothing about a topic when two turns share them.
COMMON: frozenset[str] = frozenset(
    """also always really thing things something anything everything one two get got go going went gone make
    made know knew think thought say said tell told see saw look looking want wanted like liked good great nice new
    old time times day days week weeks year years way people lot lots much many well back still even right yeah
    yes oh hey hi thanks thank sure feel felt feeling take took come came give gave use used work working let need
    keep kind little big long last first next life today tomorrow yesterday love loved happy fun glad awesome amazing
    cool wow hope totally definitely absolutely sounds sound super pretty lately recently hard help helped try trying
    tried glad enjoy enjoyed proud wonderful beautiful special mean means share sharing talk talking chat""".split()
)
NOT_NAMES: frozenset[str] = frozenset(
    """I I'm I've I'd I'll Ok Okay Oh Wow Hey Hi Hello Yes Yeah Yep No Thanks Thank Lol Omg Haha Aw Aww Awesome Sure
    Sorry Please Congrats Congratulations The A An And But Or So My Your Our Their His Her Its It It's That's This
    These Those What When Where Why How Who Which There Here Well Just Also Really Good Great Nice Glad Love
    January February March April May June July August September October November December Monday Tuesday
    Wednesday Thursday Friday Saturday Sunday Today Tomorrow Yesterday""".split()
)
_CAP = re.compile(r"(?<![\w'])([A-Z][a-z]+(?:'s)?)")
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+|[\"“(]\s*)([A-Z][a-z]+)")

TEMPORAL_FORM = re.compile(
    r"\b(when|what (?:year|month|day|date|time)|how long|how many (?:years|months|weeks|days)|before|after|since|"
    r"until|first time|last time|ago|which (?:year|month|day))\b",
    re.IGNORECASE,
)
CAUSAL_FORM = re.compile(
    r"\b(why|what (?:led|made|caused|motivated|inspired|prompted|drove)|reasons?|because|caus\w*|motivat\w*|inspir\w*)\b",
    re.IGNORECASE,
)
RECENCY_FORM = re.compile(r"\b(now|currently|current|latest|most recent(?:ly)?|recently|still|these days|anymore|nowadays)\b", re.IGNORECASE)
DATE_WINDOW = re.compile(
    r"^(what|which).{0,40}\b(on|in|during)\s+(\d{1,2}\s+)?"
    r"(January|February|March|April|May|June|July|August|September|October|November|December)\b",
    re.IGNORECASE,
)
RELATIVE_WORDS = re.compile(
    r"\b(\w+)'s (sister|brother|mom|mother|dad|father|husband|wife|partner|kids?|children|son|daughter|friends?|"
    r"grandma|grandmother|grandpa|grandfather|family|dog|cat|pets?|boss|colleague|coworker|mentor|team|band|"
    r"neighbou?r|cousin|aunt|uncle)\b",
    re.IGNORECASE,
)
# A turn that places its own event away from the session date (used to skip session-date order labels).
SHIFTED_TIME = re.compile(
    r"\b(last (?:year|month|week|summer|winter|spring|fall|autumn|weekend|night|friday|saturday|sunday|monday|tuesday|wednesday|thursday)|"
    r"years? ago|months? ago|weeks? ago|days? ago|when i was|used to|back in|as a kid|growing up|next (?:year|month|week|summer)|"
    r"tomorrow|yesterday|someday|one day|in the future|plan(?:ning)? to|going to|gonna|will)\b",
    re.IGNORECASE,
)
CHANGE_MARKERS = re.compile(r"\b(now|no longer|anymore|switched|changed|moved|quit|started|new job|finally|instead)\b", re.IGNORECASE)


def date_text(date: datetime | None) -> str:
    return f"{date.day} {date:%B} {date.year}" if date else "unknown date"


def content_tokens(text: str, stop: frozenset[str] = frozenset()) -> set[str]:
    """Topic-bearing tokens: BM25 tokens minus conversational words, short tokens and `stop`."""
    return {t for t in tokenize(text) if len(t) >= 4 and t not in COMMON and t not in stop and not t.isdigit()}


def speaker_stop(speakers: tuple[str, ...]) -> frozenset[str]:
    """Lower-cased speaker names and their 3+ letter prefixes ("Mel" for "Melanie")."""
    out = set()
    for name in speakers:
        low = name.lower()
        out.update(low[:k] for k in range(3, len(low) + 1))
    return frozenset(out)


def entities(text: str, stop: frozenset[str]) -> set[str]:
    """Capitalised words that are not sentence-initial, not common capitalised words, not speakers."""
    starts = {m.start(1) for m in _SENTENCE_START.finditer(text)}
    out = set()
    for m in _CAP.finditer(text):
        word = m.group(1)
        base = word[:-2] if word.endswith("'s") else word
        if m.start(1) in starts or base in NOT_NAMES or base.lower() in stop:
            continue
        out.add(base.lower())
    return out
