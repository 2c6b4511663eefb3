"""Heuristic rules for the write-path families: typing, pair relations and consolidation.

Every rule returns logits (one per Noul, one per known option for a Choice); the backend maps them
through a logistic / softmax and clips. The slopes were set by hand on a few LoCoMo-like examples so that
unrelated inputs land near 0.05-0.2 and clear cases near 0.8-0.95; they are a baseline, not a fit.

Features of a pair: `lexical` (rarity-weighted shared stems / the smaller side), `cosine` (embedding, rescaled),
`related` (their mean), shared entities, hours between the timestamps, the order of the event times (a
timestamp shifted by "last week", "two days ago", ...), negation / number / antonym mismatches.

- typing: cue counts. episodic: yesterday / last week / went / did / a relative time; semantic: works as /
  lives in / is a / has a (+ weak is / has); procedural: how to / steps / first ... then / recipe verbs;
  preference: love / like / prefer / hate / favorite (minus "looks like"-style uses of like).
- pair.semantic: lexical + cosine + shared entities. same_episode: related + timestamps within an hour
  (strong), a day (weak), days apart (against). causal (b causes a): causal cues (because, so, after, led to,
  ...) + related + b earlier. entity_equivalence: a name only in a aliases a name only in b (nickname table,
  prefix `Mel`/`Melanie`, part of a full name). update (a updates b): related + change cues (now, no longer,
  switched, ...) + a later + same speaker + mismatches, the positive signals gated by relatedness.
  temporal (Choice): before / after from the event times, same_time within 30 minutes, unknown without times.
- consolidation: redundant = share of a's stems found in b and cosine, minus any negation / number mismatch;
  contradiction = mismatches scaled by relatedness; obsolete = the update rule; link_useful = relatedness +
  entities; representation (Choice) from those: merge_summary when redundant, supersede when obsolete,
  link when linked, keep_separate otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from datetime import datetime

from controller import heuristic_text as ht
from controller.families import split_memory_text

Similarity = Callable[[str, str], float]  # rescaled embedding cosine in [0, 1]

# ---------------------------------------------------------------- typing (state {"observation"})

_EPISODIC = ht.cue_pattern(
    ["yesterday", "today", "tonight", "this morning", "this afternoon", "this weekend", "last night", "last week",
     "last weekend", "last month", "last year", "ago", "went", "visited", "attended", "met", "saw", "did", "took",
     "got", "had", "bought", "made", "tried", "finished", "started", "joined", "won", "lost", "celebrated", "just",
     "recently", "trip", "happened", "came back", "on monday", "on tuesday", "on wednesday", "on thursday",
     "on friday", "on saturday", "on sunday"]
)
_SEMANTIC_STRONG = ht.cue_pattern(
    ["works as", "work as", "works at", "lives in", "live in", "my name", "married", "born", "job", "years old",
     "grew up", "i'm a", "i am a", "owns", "studies", "is a", "are a", "has a", "have a", "is my", "allergic",
     "member of", "graduated", "degree"]
)
_SEMANTIC_WEAK = ht.cue_pattern(["is", "are", "am", "has", "have", "usually", "always", "every"])
_PROCEDURAL = ht.cue_pattern(
    ["how to", "steps", "step", "then", "next", "finally", "recipe", "instructions", "method", "routine",
     "make sure", "start by", "you need to", "you should", "tip", "tips", "technique", "process", "mix", "stir",
     "bake", "press", "click", "install", "preheat"]
)
_FIRST_THEN = ht.cue_pattern(["first"])
_PREFERENCE = ht.cue_pattern(
    ["love", "loves", "loved", "like", "likes", "liked", "prefer", "prefers", "preferred", "hate", "hates",
     "favorite", "favourite", "enjoy", "enjoys", "enjoyed", "dislike", "dislikes", "can't stand", "fan of",
     "adore", "wish", "passionate about", "obsessed with", "crazy about", "rather", "into"]
)
_LIKE_PREPOSITION = ht.cue_pattern(["looks like", "look like", "feels like", "feel like", "sounds like", "seems like", "just like"])


def _ed_words(text: str) -> int:
    return sum(1 for w in text.lower().split() if len(w.strip(".,!?")) > 4 and w.strip(".,!?").endswith("ed"))


def typing_logit(name: str, state: Mapping[str, object], sim: Similarity) -> float | None:
    text = ht.content_of(state.get("observation"))
    if name == "episodic":
        strong = ht.count(_EPISODIC, text) + (1 if ht.relative_offset(text) else 0)
        return -2.0 + 1.4 * min(strong, 3) + 0.35 * min(_ed_words(text), 3)
    if name == "semantic":
        return -1.6 + 1.3 * min(ht.count(_SEMANTIC_STRONG, text), 2) + 0.4 * min(ht.count(_SEMANTIC_WEAK, text), 3)
    if name == "procedural":
        first_then = 1 if ht.count(_FIRST_THEN, text) and ht.count(ht.cue_pattern(["then", "next", "after that"]), text) else 0
        return -2.6 + 1.1 * min(ht.count(_PROCEDURAL, text), 3) + 1.3 * first_then
    if name == "preference":
        n = max(0, ht.count(_PREFERENCE, text) - ht.count(_LIKE_PREPOSITION, text))
        return -2.3 + 1.8 * min(n, 2)
    return None


# ---------------------------------------------------------------- pair / consolidation (state {"memory_a","memory_b"})

_CAUSAL = ht.cue_pattern(
    ["because", "so", "since", "after", "led to", "lead to", "due to", "as a result", "therefore", "thanks to",
     "made me", "inspired", "motivated", "that's why", "caused", "reason", "helped me", "encouraged", "decided to"]
)
_CHANGE = ht.cue_pattern(
    ["now", "no longer", "anymore", "changed", "switched", "moved", "new", "instead", "actually", "update",
     "recently", "just", "started", "quit", "became", "stopped", "finally", "not anymore", "these days"]
)
_ANTONYMS = (("love", "hate"), ("like", "dislike"), ("alive", "dead"), ("married", "divorced"), ("married", "single"),
             ("always", "never"), ("open", "closed"), ("won", "lost"), ("true", "false"), ("yes", "no"))
NICKNAMES: dict[str, tuple[str, ...]] = {
    "robert": ("bob", "rob", "bobby", "robbie"), "william": ("bill", "will", "billy", "liam"),
    "elizabeth": ("liz", "beth", "lizzie", "betty", "eliza"), "katherine": ("kate", "kathy", "katie", "kat"),
    "michael": ("mike", "mikey", "mick"), "james": ("jim", "jimmy", "jamie"), "thomas": ("tom", "tommy"),
    "david": ("dave", "davey"), "christopher": ("chris", "topher"), "alexander": ("alex", "xander", "sasha"),
    "jennifer": ("jen", "jenny"), "nicholas": ("nick", "nicky"), "daniel": ("dan", "danny"),
    "matthew": ("matt",), "joseph": ("joe", "joey"), "anthony": ("tony",), "steven": ("steve",),
    "stephen": ("steve",), "rebecca": ("becky", "becca"), "andrew": ("andy", "drew"), "benjamin": ("ben", "benny"),
    "patricia": ("pat", "patty", "tricia"), "patrick": ("pat", "paddy"), "margaret": ("meg", "maggie", "peggy"),
    "richard": ("rick", "dick", "richie"), "edward": ("ed", "ted", "eddie", "ned"), "samantha": ("sam",),
    "samuel": ("sam", "sammy"), "melanie": ("mel",), "caroline": ("carol", "carrie"), "jonathan": ("jon", "jonny"),
    "johnathan": ("john",), "john": ("johnny", "jack"), "charles": ("charlie", "chuck"), "deborah": ("deb", "debbie"),
    "susan": ("sue", "susie"), "victoria": ("vicky", "tori"), "gregory": ("greg",), "timothy": ("tim", "timmy"),
}
_ALIAS = {nick: full for full, nicks in NICKNAMES.items() for nick in nicks}


@dataclass(frozen=True)
class Memory:
    """What the rules read from one memory value (a dict with content/timestamp/entities or plain text)."""

    text: str
    terms: tuple[str, ...]
    entities: frozenset[str]
    time: datetime | None  # when it was said / observed
    event: datetime | None  # time shifted by a relative phrase ("last week")
    shifted: bool
    speaker: str | None
    negations: int
    numbers: frozenset[str]


def read_memory(value: object) -> Memory:
    text = ht.content_of(value)
    speaker: str | None = None
    stamp: str | int | float | None = None
    given: tuple[str, ...] = ()
    if isinstance(value, str):
        when, text = split_memory_text(text)  # `[8 May 2023] Speaker: text`, the engine's form
        stamp = when.isoformat() if when is not None else None
    if isinstance(value, Mapping):
        raw_speaker = value.get("speaker")
        speaker = raw_speaker.strip().lower() if isinstance(raw_speaker, str) and raw_speaker.strip() else None
        for key in ("timestamp", "event_time", "observed_at", "time", "date"):
            if value.get(key) is not None:
                raw = value[key]
                stamp = raw if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else None
                break
        raw_entities = value.get("entities")
        if isinstance(raw_entities, (list, tuple)):
            given = tuple(str(e).strip().lower() for e in raw_entities if isinstance(e, str) and e.strip())
    return _read_memory(text, speaker, stamp, given)


@lru_cache(maxsize=8192)  # the same memory is read by every question of a request, and across requests
def _read_memory(text: str, speaker: str | None, stamp: str | int | float | None, given: tuple[str, ...]) -> Memory:
    head, sep, _ = text.partition(":")
    if sep and 0 < len(head) <= 30 and head[:1].isupper() and len(head.split()) <= 3:
        speaker = speaker or head.strip().lower()  # "Caroline: ..." names the speaker
    names = set(ht.entities(text)) | set(given)
    names.discard(speaker or "")
    time = ht.parse_time(stamp)
    offset = ht.relative_offset(text)
    event = time + offset if time is not None and offset is not None else time
    return Memory(text, tuple(ht.terms(text)), frozenset(names), time, event, offset is not None and bool(offset),
                  speaker, ht.negations(text), ht.numbers(text))


@dataclass(frozen=True)
class Pair:
    a: Memory
    b: Memory
    lexical: float  # weighted |A & B| / min
    a_in_b: float  # share of a's terms found in b
    cosine: float
    shared_entities: float
    hours_apart: float | None  # observation times
    order: int | None  # sign(event_a - event_b): -1 a earlier, 0 same, 1 a later
    neg_mismatch: float  # 1 when exactly one side is negated
    num_conflict: float  # both give numbers and they differ
    antonym: float

    @property
    def related(self) -> float:
        return 0.5 * self.lexical + 0.5 * self.cosine


def read_pair(state: Mapping[str, object], sim: Similarity) -> Pair:
    a, b = read_memory(state.get("memory_a")), read_memory(state.get("memory_b"))
    ents = len(a.entities & b.entities) / min(len(a.entities), len(b.entities)) if a.entities and b.entities else 0.0
    hours = abs((a.time - b.time).total_seconds()) / 3600.0 if a.time and b.time else None
    order = None
    if a.event and b.event:
        delta = (a.event - b.event).total_seconds()
        order = 0 if abs(delta) < 1800 else (1 if delta > 0 else -1)
    words_a, words_b = set(a.text.lower().split()), set(b.text.lower().split())
    antonym = any((x in words_a and y in words_b) or (y in words_a and x in words_b) for x, y in _ANTONYMS)
    return Pair(
        a, b,
        lexical=ht.overlap(a.terms, b.terms),
        a_in_b=ht.coverage(a.terms, b.terms),
        cosine=sim(a.text, b.text),
        shared_entities=ents,
        hours_apart=hours,
        order=order,
        neg_mismatch=1.0 if (a.negations > 0) != (b.negations > 0) else 0.0,
        num_conflict=1.0 if a.numbers and b.numbers and not (a.numbers & b.numbers) else 0.0,
        antonym=1.0 if antonym else 0.0,
    )


def alias_match(left: frozenset[str], right: frozenset[str]) -> float:
    """1 when a name only on one side plausibly names an entity only on the other side (nickname, prefix, part)."""
    only_l, only_r = left - right, right - left
    for x in sorted(only_l):
        for y in sorted(only_r):
            if _ALIAS.get(x) == y or _ALIAS.get(y) == x or (_ALIAS.get(x) is not None and _ALIAS.get(x) == _ALIAS.get(y)):
                return 1.0
            short, long_ = sorted((x, y), key=len)
            if len(short) >= 3 and (long_.startswith(short) or short in long_.split()):
                return 1.0 if " " in long_ or len(short) >= 4 else 0.8
    return 0.0


def _hours_term(hours: float | None) -> float:
    if hours is None:
        return 0.0
    if hours <= 1.0:
        return 2.2
    if hours <= 24.0:
        return 1.0
    if hours <= 72.0:
        return -0.5
    return -1.8


def pair_logit(name: str, state: Mapping[str, object], sim: Similarity) -> float | None:
    p = read_pair(state, sim)
    order_term = {None: 0.0, 1: 0.5, 0: 0.0, -1: -1.0}
    if name == "semantic":
        return -2.6 + 4.0 * p.lexical + 3.0 * p.cosine + 1.2 * p.shared_entities
    if name == "same_episode":
        return -1.8 + 2.5 * p.related + _hours_term(p.hours_apart)
    if name == "causal":  # does b cause a?
        cues_a, cues_b = ht.count(_CAUSAL, p.a.text), ht.count(_CAUSAL, p.b.text)
        return -2.8 + 1.2 * min(cues_a, 2) + 0.5 * min(cues_b, 1) + 3.0 * p.related + order_term[p.order]
    if name == "entity_equivalence":
        return -2.5 + 3.6 * alias_match(p.a.entities, p.b.entities) + 1.0 * p.related
    if name == "update":  # does a update b?
        return -3.0 + 2.5 * p.lexical + 1.5 * p.cosine + _change_evidence(p)
    return None


def _change_evidence(p: Pair) -> float:
    """Signals that a states a later version of b's fact; they only count when the two share a subject."""
    gate = min(1.0, 2.5 * p.related)
    signals = (0.9 * min(ht.count(_CHANGE, p.a.text), 2) + {None: 0.0, 1: 0.8, 0: 0.0, -1: -1.5}[p.order]
               + 0.3 * (p.a.speaker is not None and p.a.speaker == p.b.speaker)
               + 0.6 * p.num_conflict + 0.5 * p.neg_mismatch)
    return gate * signals if signals > 0 else signals


def temporal_logits(state: Mapping[str, object], sim: Similarity) -> dict[str, float]:
    """Logits over the temporal relations from the two memories' (relative-shifted) times."""
    a, b = read_memory(state.get("memory_a")), read_memory(state.get("memory_b"))
    out = {"before": 0.0, "after": 0.0, "during": -1.0, "contains": -1.0, "overlaps": -0.8, "same_time": 0.0, "unknown": 0.0}
    if a.event is None or b.event is None:
        out["unknown"] = 2.0
        return out
    strength = 1.3 if (a.shifted or b.shifted) else 2.0
    delta = (a.event - b.event).total_seconds()
    if abs(delta) < 1800:
        out.update(same_time=strength - 0.5, unknown=0.8, overlaps=0.0, during=-0.5, contains=-0.5, before=-0.5, after=-0.5)
    else:
        days = abs(delta) / 86400.0
        key = "before" if delta < 0 else "after"
        out[key] = strength + 0.5 * min(1.0, math.log10(1.0 + days))
        out["unknown"] = 0.3
    return out


def consolidation_logit(name: str, state: Mapping[str, object], sim: Similarity) -> float | None:
    p = read_pair(state, sim)
    if name == "redundant":
        dup = 0.7 * p.a_in_b + 0.3 * p.cosine
        return -6.5 + 9.5 * dup - 4.0 * p.neg_mismatch - 2.0 * p.num_conflict
    if name == "contradiction":
        conflict = 2.2 * p.neg_mismatch + 1.0 * p.num_conflict + 1.2 * p.antonym
        return -3.2 + 1.5 * p.lexical + conflict * min(1.0, 2.0 * p.related)
    if name == "obsolete":  # is b outdated because a is later?
        return -3.2 + 2.0 * p.lexical + 1.0 * p.cosine + _change_evidence(p)
    if name == "link_useful":
        return -2.2 + 3.0 * p.lexical + 2.5 * p.cosine + 1.2 * p.shared_entities
    return None


def representation_logits(state: Mapping[str, object], sim: Similarity) -> dict[str, float]:
    """Consistent with the four consolidation Nouls: merge when redundant, supersede when obsolete."""
    p_red, p_obs, p_link = (ht.logistic(consolidation_logit(n, state, sim) or 0.0) for n in ("redundant", "obsolete", "link_useful"))
    return {
        "keep_separate": 1.5 - 3.0 * p_link,
        "link": 3.0 * p_link - 1.5 - 1.5 * max(p_red, p_obs),
        "merge_summary": 5.0 * p_red - 2.5,
        "supersede": 5.0 * p_obs - 2.5,
    }
