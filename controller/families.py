"""The Jev-Mem question catalogue: every built-in decision family, its state shape and its questions.

One definition serves the memory engine (which asks), training (which labels) and the heuristic backend
(which recognises a question by its canonical instructions). Instructions always name the state fields
they read; stored text only ever appears inside the state, as data.

Question names here are the *suffixes* the engine uses (`pair_3_semantic` -> `semantic`); keys never reach
the model. `PARAPHRASES` gives alternative wordings so a trained model reads instructions instead of
memorising them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

TEMPORAL_RELATIONS: tuple[str, ...] = ("before", "after", "during", "contains", "overlaps", "same_time", "unknown")
REPRESENTATIONS: tuple[str, ...] = ("keep_separate", "link", "merge_summary", "supersede")
MEMORY_TYPES: tuple[str, ...] = ("episodic", "semantic", "procedural", "preference")
ROUTES: tuple[str, ...] = ("semantic", "temporal", "causal", "entity", "multi_hop", "recency")
STOP_SIGNALS: tuple[str, ...] = ("evidence_sufficient", "continue_useful", "missing_evidence", "contradiction")
PAIR_RELATIONS: tuple[str, ...] = ("semantic", "causal", "same_episode", "entity_equivalence", "update")
CONSOLIDATION_SIGNALS: tuple[str, ...] = ("redundant", "contradiction", "obsolete", "link_useful")
RELEVANCE_SIGNALS: tuple[str, ...] = ("relevant", "bridge")


@dataclass(frozen=True)
class Family:
    """A decision family: the state fields it expects and its questions (wire dicts by name)."""

    name: str
    state_fields: tuple[str, ...]
    questions: dict[str, dict[str, Any]]
    optional_fields: tuple[str, ...] = ()  # state fields a request may add after the required ones


def _noul(instructions: str, true: str | None = None, false: str | None = None) -> dict[str, Any]:
    q: dict[str, Any] = {"type": "noul", "instructions": instructions}
    if true is not None or false is not None:
        q["criteria"] = {"true": true, "false": false}
    return q


# Wording is compact on purpose: every branch costs tokens on every request (the pair request is about
# 290 packed tokens). Criteria are kept only where they separate a near miss from the real thing.
TYPING = Family(
    "typing",
    ("observation",),
    {
        "episodic": _noul(
            "Does state.observation report a specific event or experience on some occasion?",
            None,
            "a general fact, habit, instruction or opinion",
        ),
        "semantic": _noul(
            "Does state.observation state a lasting fact about a person, thing or the world?",
            "identity, relationship, job, possession, attribute",
            "a passing event, greeting or momentary feeling",
        ),
        "procedural": _noul("Does state.observation explain how to do something: steps, a method or a routine?"),
        "preference": _noul("Does state.observation express what someone likes, dislikes, wants or prefers?"),
    },
)

PAIR = Family(
    "pair",
    ("memory_a", "memory_b"),
    {
        "semantic": _noul(
            "Are state.memory_a and state.memory_b about the same specific subject?",
            None,
            "only the same speaker or broad domain",
        ),
        "causal": _noul("Did state.memory_b's event cause, enable or motivate state.memory_a's event?"),
        "same_episode": _noul("Are state.memory_a and state.memory_b parts of one episode (event, activity or thread)?"),
        "entity_equivalence": _noul(
            "Do differently named entities in state.memory_a and state.memory_b refer to the same real one?",
            None,
            "similar but different",
        ),
        "update": _noul("Does state.memory_a update or correct a fact stated in state.memory_b?"),
        "temporal": {
            "type": "choice",
            "instructions": "When did state.memory_a's event happen relative to state.memory_b's?",
            "criteria": {
                "before": None,
                "after": None,
                "during": None,
                "contains": "a spans b",
                "overlaps": "partly",
                "same_time": None,
                "unknown": "order not stated",
            },
        },
    },
)

CONSOLIDATION = Family(
    "consolidation",
    ("memory_a", "memory_b"),
    {
        "redundant": _noul("Does state.memory_a only repeat what state.memory_b says, adding nothing new?"),
        "contradiction": _noul("Do state.memory_a and state.memory_b make claims that cannot both be true?"),
        "obsolete": _noul("Is state.memory_b outdated because state.memory_a reports a later state of the same fact?"),
        "link_useful": _noul("Would a link from state.memory_a to state.memory_b help answer questions needing both?"),
        "representation": {
            "type": "choice",
            "instructions": "How should state.memory_a and state.memory_b be kept in memory?",
            "criteria": {
                "keep_separate": "apart, no link",
                "link": "both, linked",
                "merge_summary": "both plus a merged summary",
                "supersede": "memory_b marked superseded",
            },
        },
    },
)

ROUTING = Family(
    "routing",
    ("query",),
    {
        "semantic": _noul("Can memories on the same topic as state.query, found by meaning, answer it?"),
        "temporal": _noul(
            "Does state.query ask about time: when, in what order, or how long?",
            "when, how long ago, before/after, duration",
        ),
        "causal": _noul("Does state.query ask why something happened, or what it led to?"),
        "entity": _noul("Does state.query center on one named person, place, object or organisation?"),
        "multi_hop": _noul(
            "Does answering state.query need several separate memories combined?",
            "lists, comparisons, inferences, counts",
            "one memory holds the whole answer",
        ),
        "recency": _noul("Does state.query ask about the latest or current state of something?"),
    },
)

RELEVANCE = Family(
    "relevance",
    ("query", "memory"),
    {
        "relevant": _noul(
            "Does state.memory contain information that helps answer state.query?",
            "part of the answer or evidence it depends on",
            "shares words but does not help",
        ),
        "bridge": _noul("Does state.memory point to where more evidence for state.query can be found?"),
    },
    ("previous",),  # the memory written just before state.memory, when the caller supplies it (`previous_text`)
)

STOPPING = Family(
    "stopping",
    ("query", "evidence", "depth"),
    {
        "evidence_sufficient": _noul("Do the items in state.evidence together contain everything needed to answer state.query?"),
        "continue_useful": _noul("Given state.evidence at depth state.depth, would another retrieval round likely find needed evidence for state.query?"),
        "missing_evidence": _noul("Does state.query mention something that no item in state.evidence covers?"),
        "contradiction": _noul("Do items in state.evidence contradict each other about state.query?"),
    },
)

FAMILIES: dict[str, Family] = {f.name: f for f in (TYPING, PAIR, CONSOLIDATION, ROUTING, RELEVANCE, STOPPING)}

# Alternative wordings per (family, question); training samples them so the model reads instructions.
PARAPHRASES: dict[tuple[str, str], tuple[str, ...]] = {
    ("typing", "episodic"): ("Is state.observation an account of a particular event that took place?",),
    ("typing", "preference"): ("Does state.observation reveal a like, dislike or wish of the speaker?",),
    ("pair", "semantic"): ("Do state.memory_a and state.memory_b concern the same specific subject?",),
    ("pair", "same_episode"): ("Are state.memory_a and state.memory_b two parts of a single episode?",),
    ("routing", "temporal"): ("Is state.query a question about when or in what order things happened?",),
    ("routing", "multi_hop"): ("Must several different memories be put together to answer state.query?",),
    ("relevance", "relevant"): ("Is state.memory useful evidence for answering state.query?",),
    ("stopping", "evidence_sufficient"): ("Is state.evidence enough to answer state.query completely?",),
}


def family_questions(family: str, names: tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
    """Fresh copies of a family's wire questions (optionally a subset, in the given order)."""
    import copy

    qs = FAMILIES[family].questions
    chosen = names if names is not None else tuple(qs)
    return {n: copy.deepcopy(qs[n]) for n in chosen}


def lookup(instructions: object) -> tuple[str, str] | None:
    """(family, question name) whose canonical or paraphrased instructions equal `instructions`."""
    if not isinstance(instructions, str):
        return None
    return _INDEX.get(instructions)


def catalogue_key(question: object) -> str | None:
    """`family.question` of a catalogue question object (its `instructions` looked up), or None: the key
    its calibration is looked up by (`controller.calibration`)."""
    found = lookup(getattr(question, "instructions", None))
    return f"{found[0]}.{found[1]}" if found is not None else None


def state_family(state: Any) -> str | None:
    """The one family whose state shape `state` has (its required fields, plus any of its optional ones, and
    nothing else), or None: no family, or several (pair and consolidation states share one shape)."""
    if not isinstance(state, Mapping):
        return None
    keys = set(state)
    found = [f.name for f in FAMILIES.values() if set(f.state_fields) <= keys <= set(f.state_fields) | set(f.optional_fields)]
    return found[0] if len(found) == 1 else None


def calibration_key(question: object, state: object = None) -> str | None:
    """The key a question's calibration is looked up by: its catalogue key (`family.question`); for other
    wording (a paraphrase outside the catalogue, a client's own question), the family whose state shape the
    request has, so it gets that family's calibration rather than its kind's pooled one; None when neither
    tells. Training labels and serving both key by this function."""
    return catalogue_key(question) or state_family(state)


_INDEX: dict[str, tuple[str, str]] = {
    q["instructions"]: (f.name, name) for f in FAMILIES.values() for name, q in f.questions.items()
}
_INDEX.update({text: key for key, texts in PARAPHRASES.items() for text in texts})


# How a stored memory appears inside a controller state (pair / consolidation memories, relevance memory,
# stopping evidence items): its text, prefixed by its date when known — `[8 May 2023] Caroline: ...`.
# Training data and the engine both build states through these two functions, so they cannot drift apart.
_DATE_PREFIX = re.compile(r"^\[(\d{1,2}) ([A-Z][a-z]+) (\d{4})\] ")


def memory_text(content: str, when: datetime | None = None) -> str:
    """`[8 May 2023] content` when the date is known, else `content`."""
    return f"[{when.day} {when:%B} {when.year}] {content}" if when is not None else content


PREVIOUS_MAX_CHARS = 240


def previous_text(content: str, max_chars: int = PREVIOUS_MAX_CHARS) -> str:
    """The optional `previous` field of a relevance state: the text of the memory written just before the
    judged one (in a conversation, the turn it answers), cut visibly to `max_chars`. Context only: the
    questions judge state.memory."""
    return content if len(content) <= max_chars else content[: max_chars - 14].rstrip() + " [truncated]"


def split_memory_text(text: str) -> tuple[datetime | None, str]:
    """Inverse of `memory_text`: (date or None, content)."""
    m = _DATE_PREFIX.match(text)
    if m is None:
        return None, text
    try:
        when = datetime.strptime(f"{m.group(1)} {m.group(2)} {m.group(3)}", "%d %B %Y")
    except ValueError:
        return None, text
    return when, text[m.end() :]
