"""LoCoMo routing labels from categories (labels only) and question forms (see `data.builders.locomo`)."""

from __future__ import annotations

from data.builders.locomo import ConversationIndex, LocomoRules
from data.builders.text import CAUSAL_FORM, DATE_WINDOW, RECENCY_FORM, RELATIVE_WORDS, TEMPORAL_FORM, entities
from data.locomo import Question
from data.synthetic.emit import Emitter

WEIGHTS = {"semantic": 0.3, "entity": 0.5, "recency": 0.7}


def route_labels(ix: ConversationIndex, q: Question) -> dict[str, int]:
    text = q.question
    sessions = {ix.turns[ix.position[d]].session for d in q.evidence if d in ix.position}
    speakers = {s.lower() for s in ix.conv.speakers}
    relative = any(m.group(1).lower() in ix.stop or m.group(1).lower() in speakers for m in RELATIVE_WORDS.finditer(text))
    # The question's first word is capitalised anyway; entities() skips sentence starts and speakers.
    named = entities(text, ix.stop)
    return {
        "semantic": 0 if DATE_WINDOW.search(text) else 1,
        "temporal": int(q.category == 2 or bool(TEMPORAL_FORM.search(text))),
        "causal": int(bool(CAUSAL_FORM.search(text))),
        "entity": int(bool(named) or relative),
        "multi_hop": int(q.category == 1 or len(sessions) >= 2),
        "recency": int(bool(RECENCY_FORM.search(text))),
    }


def routing_examples(ix: ConversationIndex, emit: Emitter, rules: LocomoRules) -> None:
    for q in ix.conv.questions:
        emit.emit("routing", {"query": q.question}, route_labels(ix, q), weights=WEIGHTS, notes=f"locomo:category{q.category}")
