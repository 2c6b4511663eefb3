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


def _noul(instructions: str, true: str | None = None, false: str | None = None) -> dict[str, Any]:
    q: dict[str, Any] = {"type": "noul", "instructions": instructions}
    if true is not None or false is not None:
        q["criteria"] = {"true": true, "false": false}
    return q


TYPING = Family(
    "typing",
    ("observation",),
    {
        "episodic": _noul(
            "Does state.observation describe a specific event or experience that happened at a particular time?",
            "It reports something that happened, was done or was experienced on some occasion.",
            "It is a general fact, habit, instruction or opinion with no particular occasion.",
        ),
        "semantic": _noul(
            "Does state.observation state a general fact about a person, thing or the world that stays true beyond one moment?",
            "It states a lasting fact (identity, relationship, job, possession, attribute).",
            "It only reports a passing event, a greeting, or a feeling of the moment.",
        ),
        "procedural": _noul(
            "Does state.observation describe how to do something: steps, a method, a routine or a skill?",
            "It explains a procedure, method, recipe or routine.",
            "It does not explain how something is done.",
        ),
        "preference": _noul(
            "Does state.observation express what someone likes, dislikes, wants or prefers?",
            "It states a preference, taste, wish or aversion.",
            "It states no preference.",
        ),
    },
)

PAIR = Family(
    "pair",
    ("memory_a", "memory_b"),
    {
        "semantic": _noul(
            "Are state.memory_a and state.memory_b about the same topic, person, object or event, so that reading one helps understand the other?",
            "They share a specific subject: the same event, plan, object, person's situation or topic.",
            "They only share general vocabulary, the same speaker, or the same broad domain.",
        ),
        "causal": _noul(
            "Did what state.memory_b describes cause, enable or motivate what state.memory_a describes?",
            "memory_b is a reason, cause or precondition of memory_a.",
            "There is no cause-effect link in that direction.",
        ),
        "same_episode": _noul(
            "Do state.memory_a and state.memory_b belong to the same episode: one event, activity or conversation thread?",
            "They describe parts of one and the same episode.",
            "They describe different episodes, even if similar.",
        ),
        "entity_equivalence": _noul(
            "Do the differently named entities in state.memory_a and state.memory_b refer to the same real person, place or thing?",
            "The names or descriptions co-refer (alias, nickname, pronoun resolved, same object).",
            "They are different entities, even if similar or in the same category.",
        ),
        "update": _noul(
            "Does state.memory_a update, correct or change a fact stated in state.memory_b?",
            "memory_a gives newer information that changes or replaces what memory_b says.",
            "memory_a does not change what memory_b says.",
        ),
        "temporal": {
            "type": "choice",
            "instructions": "How is the event in state.memory_a placed in time relative to the event in state.memory_b?",
            "criteria": {
                "before": "memory_a's event happened before memory_b's event.",
                "after": "memory_a's event happened after memory_b's event.",
                "during": "memory_a's event happened during memory_b's event.",
                "contains": "memory_a's event spans memory_b's event.",
                "overlaps": "The two events partly overlap in time.",
                "same_time": "Both events happened at the same time.",
                "unknown": "The texts do not say how the events are ordered.",
            },
        },
    },
)

CONSOLIDATION = Family(
    "consolidation",
    ("memory_a", "memory_b"),
    {
        "redundant": _noul(
            "Does state.memory_a repeat the information of state.memory_b without adding anything new?",
            "Everything memory_a says is already in memory_b.",
            "memory_a adds information memory_b lacks.",
        ),
        "contradiction": _noul(
            "Do state.memory_a and state.memory_b make claims that cannot both be true?",
            "They contradict each other.",
            "They are compatible.",
        ),
        "obsolete": _noul(
            "Is state.memory_b outdated because state.memory_a reports a later state of the same fact?",
            "memory_b's fact no longer holds given memory_a.",
            "memory_b is still current.",
        ),
        "link_useful": _noul(
            "Would a reader answering questions about state.memory_a benefit from a link to state.memory_b?",
            "The link would help answer questions that need both.",
            "The link would add noise.",
        ),
        "representation": {
            "type": "choice",
            "instructions": "How should state.memory_a and state.memory_b be represented in memory?",
            "criteria": {
                "keep_separate": "They are unrelated enough to keep apart without a link.",
                "link": "Keep both and link them.",
                "merge_summary": "Keep both and add a summary node that merges them.",
                "supersede": "memory_a supersedes memory_b; keep both and mark memory_b as superseded.",
            },
        },
    },
)

ROUTING = Family(
    "routing",
    ("query",),
    {
        "semantic": _noul(
            "Does answering state.query need memories that are about the same topic as the query, found by meaning?",
            "Topical similarity will find the evidence.",
            "Topical similarity alone will not help.",
        ),
        "temporal": _noul(
            "Does state.query ask about time: when something happened, the order of events, or a duration?",
            "It asks when, how long ago, before/after, or how long.",
            "Time is not what it asks about.",
        ),
        "causal": _noul(
            "Does state.query ask why something happened, or what it led to?",
            "It asks for a reason, cause, motivation or consequence.",
            "It does not ask about causes or effects.",
        ),
        "entity": _noul(
            "Does state.query center on a specific named person, place, object or organisation whose mentions should be gathered?",
            "Collecting the mentions of a specific entity will answer it.",
            "No single entity is central.",
        ),
        "multi_hop": _noul(
            "Does answering state.query need several separate memories combined, rather than a single one?",
            "The answer must combine two or more memories (lists, comparisons, inferences, counts).",
            "One memory contains the whole answer.",
        ),
        "recency": _noul(
            "Does state.query care about the latest or current state of something, so newer memories matter more?",
            "It asks about the current, latest or most recent situation.",
            "Older memories are as useful as newer ones.",
        ),
    },
)

RELEVANCE = Family(
    "relevance",
    ("query", "memory"),
    {
        "relevant": _noul(
            "Does state.memory contain information that helps answer state.query?",
            "It states part of the answer or evidence the answer depends on.",
            "It does not help answer the query, even if it shares words with it.",
        ),
        "bridge": _noul(
            "Does state.memory mention a person, event or detail that points to where more evidence for state.query can be found?",
            "It is a useful stepping stone toward the answer.",
            "It leads nowhere useful for the query.",
        ),
    },
)

STOPPING = Family(
    "stopping",
    ("query", "evidence", "depth"),
    {
        "evidence_sufficient": _noul(
            "Do the items in state.evidence together contain everything needed to answer state.query?",
            "A careful reader could answer the query from the evidence alone.",
            "Some needed fact is missing.",
        ),
        "continue_useful": _noul(
            "Given state.evidence gathered at retrieval depth state.depth, is another retrieval round likely to find useful new evidence for state.query?",
            "More searching is likely to add needed evidence.",
            "More searching is unlikely to help.",
        ),
        "missing_evidence": _noul(
            "Does state.query refer to something that none of the items in state.evidence mentions?",
            "A needed person, event or detail is absent from the evidence.",
            "Everything the query mentions is covered.",
        ),
        "contradiction": _noul(
            "Do items in state.evidence contradict each other about what state.query asks?",
            "They give conflicting answers.",
            "They agree or do not overlap.",
        ),
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
