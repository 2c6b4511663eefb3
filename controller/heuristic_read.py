"""Heuristic rules for the read-path families: routing, candidate relevance and stopping.

Same conventions as `heuristic_write`: rules return logits, hand-set slopes, a baseline rather than a fit.

- routing: temporal = when / what date / how long / before / after / year / month names; causal = why /
  because / reason / what made; entity = number of capitalised names; multi_hop = both / compare / how many /
  list / plural "what activities" / present perfect "what has X done" / would / likely, + two or more names;
  recency = latest / current / now / recently / still; semantic = high unless the query has no content word.
- relevance.relevant: rarity-weighted coverage of the query's stems by the memory (a BM25-like idf prior:
  frequent words count 0.3, longer words a bit more; names count here, once) + cosine + a bonus when a
  "when" query meets a memory with a date or relative time. bridge: shares a
  non-speaker name with the query while covering little of it.
- stopping: coverage of the query's stems (and names) by all evidence texts; evidence_sufficient rises with
  it; continue_useful falls with depth and coverage; missing_evidence = uncovered names (or stems);
  contradiction = the strongest negation / number mismatch between two overlapping evidence items.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from controller import heuristic_text as ht
from controller.lexical import STOPWORDS
from controller.heuristic_write import Similarity, read_memory

# ---------------------------------------------------------------- routing (state {"query"})

_TEMPORAL = ht.cue_pattern(
    ["when", "what date", "what time", "what day", "what year", "which year", "which month", "how long", "before",
     "after", "year", "years", "month", "months", "week", "weeks", "ago", "since", "until", "first time",
     "last time", "date", "how often", "duration", "earlier", "later", "yesterday", *ht.MONTHS, *ht.WEEKDAYS]
)
_CAUSAL_Q = ht.cue_pattern(
    ["why", "because", "reason", "reasons", "cause", "caused", "led to", "lead to", "leads to", "result",
     "motivated", "motivation", "inspired", "inspire", "what made", "how come", "consequence", "effect",
     "due to", "so that", "what prompted"]
)
_MULTI_HOP = ht.cue_pattern(
    ["both", "compare", "comparison", "how many", "list", "what are", "what kinds", "what kind", "in common",
     "all", "each", "activities", "hobbies", "things", "events", "places", "ways", "times", "books", "pets",
     "likely", "would", "might", "together", "other", "types", "various", "some", "ever"]
)
# "What books has Melanie read", "Where has she camped": present perfect gathers several occasions.
_PERFECT = re.compile(
    r"\b(?:has|have)\b(?:\s+[\w']+){1,4}?\s+\w+(?:ed|en|ne|wn|ught|ead|ung|ade|een|one)\b", re.IGNORECASE
)
_WH_NOUN = re.compile(r"\b(?:what|which)\s+(?:[\w+]+\s+)?(\w{3,}s)\b", re.IGNORECASE)


def _multi_hop_cues(query: str) -> int:
    plural = any(m.group(1).lower() not in STOPWORDS for m in _WH_NOUN.finditer(query))
    return ht.count(_MULTI_HOP, query) + (1 if _PERFECT.search(query) else 0) + (1 if plural else 0)
_RECENCY = ht.cue_pattern(
    ["latest", "current", "currently", "now", "recent", "recently", "still", "these days", "at the moment",
     "nowadays", "anymore", "present", "newest", "most recent", "today", "right now", "lately"]
)


def routing_logit(name: str, state: Mapping[str, object], sim: Similarity) -> float | None:
    query = ht.content_of(state.get("query"))
    temporal = ht.count(_TEMPORAL, query)
    if name == "semantic":
        return (1.8 if ht.terms(query) else 0.0) - 0.5 * min(temporal, 1)
    if name == "temporal":
        return -2.0 + 3.4 * min(temporal, 1) + 0.6 * min(max(temporal - 1, 0), 2)
    if name == "causal":
        n = ht.count(_CAUSAL_Q, query)
        return -2.4 + 3.4 * min(n, 1) + 0.5 * min(max(n - 1, 0), 2)
    if name == "entity":
        return -1.2 + 1.6 * min(len(ht.entities(query)), 3)
    if name == "multi_hop":
        n = _multi_hop_cues(query)
        return -1.6 + 1.0 * min(n, 3) + 0.8 * (len(ht.entities(query)) >= 2)
    if name == "recency":
        return -2.4 + 3.3 * min(ht.count(_RECENCY, query), 1)
    return None


# ---------------------------------------------------------------- relevance (state {"query","memory"})

_TIME_MENTION = ht.cue_pattern([*ht.MONTHS, *ht.WEEKDAYS, "yesterday", "today", "tonight", "ago", "last", "next"])
_YEAR = re.compile(r"\b(?:19|20)\d\d\b")


def _entity_hit(query_entities: Sequence[str], names: frozenset[str], text: str, speaker: str | None) -> float:
    if not query_entities:
        return 0.0
    low = text.lower()
    hits = sum(1 for e in query_entities if e in names or e == speaker or re.search(rf"\b{re.escape(e)}\b", low))
    return hits / len(query_entities)


# relevant = -3.4 + 5.0 coverage + 2.5 cosine + 1.0 timely. Names count once, through coverage (their stems
# are query words like any other): an extra name bonus favoured the memories of the person a question names,
# and adversarial LoCoMo questions name the other speaker (6 dev conversations, seeds fused with k 60 / dense
# 0.5, relevance_weight 0.3, R_frac@10: 0.635 -> 0.644, adversarial 0.664 -> 0.686). A "when" question meeting
# a dated / relative-time memory gets 1.0 (0.5 before; temporal R_frac@10 0.778 -> 0.792).
_TIMELY = 1.0


def relevance_logit(name: str, state: Mapping[str, object], sim: Similarity) -> float | None:
    query = ht.content_of(state.get("query"))
    memory = read_memory(state.get("memory"))
    q_terms = ht.terms(query)
    m_terms = list(memory.terms) + [t for e in sorted(memory.entities) for t in ht.terms(e)]
    cover = ht.coverage(q_terms, m_terms)
    cosine = sim(query, memory.text)
    if name == "relevant":
        timely = _TIMELY if ht.count(_TEMPORAL, query) and (
            ht.count(_TIME_MENTION, memory.text) or _YEAR.search(memory.text) or memory.shifted
        ) else 0.0
        return -3.4 + 5.0 * cover + 2.5 * cosine + timely
    if name == "bridge":
        # Names something the query is about, but does not itself cover the query.
        q_ents = ht.entities(query)
        ent = _entity_hit(q_ents, memory.entities, memory.text, memory.speaker)
        other = [e for e in q_ents if e != memory.speaker]
        shared = _entity_hit(other, memory.entities, memory.text, None) if other else 0.5 * ent
        return -2.4 + 2.6 * shared * (1.0 - cover) + 1.2 * cosine
    return None


# ---------------------------------------------------------------- stopping (state {"query","evidence","depth"})


def _evidence_texts(evidence: object) -> list[str]:
    if isinstance(evidence, (list, tuple)):
        return [t for t in (ht.content_of(item) for item in evidence) if t.strip()]
    text = ht.content_of(evidence)
    return [text] if text.strip() else []


def _depth(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            return max(0.0, float(str(value)))
        except ValueError:
            return 0.0
    return max(0.0, min(float(value), 20.0))


def stopping_logit(name: str, state: Mapping[str, object], sim: Similarity) -> float | None:
    query = ht.content_of(state.get("query"))
    texts = _evidence_texts(state.get("evidence"))
    joined = " ".join(texts)
    cover = ht.coverage(ht.terms(query), ht.terms(joined))
    q_ents = ht.entities(query)
    ent_cover = _entity_hit(q_ents, frozenset(ht.entities(joined)), joined, None) if q_ents else None
    empty = 0.0 if texts else 1.0
    if name == "evidence_sufficient":
        return -3.6 + 5.5 * cover + 0.8 * (ent_cover if ent_cover is not None else cover) - 2.0 * empty
    if name == "continue_useful":
        return 1.6 - 0.7 * _depth(state.get("depth")) - 3.5 * cover + 1.0 * empty
    if name == "missing_evidence":
        if ent_cover is None:
            return -2.2 + 3.5 * (1.0 - cover)
        return -2.2 + 3.0 * (1.0 - ent_cover) + 2.0 * (1.0 - cover)
    if name == "contradiction":
        return -3.2 + 3.5 * _max_conflict(texts)
    return None


def _max_conflict(texts: Sequence[str]) -> float:
    """Strongest negation / number mismatch between two overlapping evidence items (order-free)."""
    items = [(ht.terms(t), ht.negations(t) > 0, ht.numbers(t)) for t in texts[:16]]
    best = 0.0
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            (ta, na, ua), (tb, nb, ub) = items[i], items[j]
            lex = ht.overlap(ta, tb)
            signal = max(1.0 if na != nb else 0.0, 0.7 if ua and ub and not (ua & ub) else 0.0)
            best = max(best, min(1.0, 1.5 * lex) * signal)
    return best
