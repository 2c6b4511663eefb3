"""More wordings of every catalogue question, so a trained model reads instructions instead of keys.

`wordings(family, name)` = the canonical instructions, then `controller.families.PARAPHRASES`, then the
extra wordings below. Every wording names the same state fields as the canonical one and keeps its
polarity (a "yes" means the same thing), so targets never change with the wording.
"""

from __future__ import annotations

from controller.families import FAMILIES, PARAPHRASES

EXTRA: dict[tuple[str, str], tuple[str, ...]] = {
    ("typing", "episodic"): (
        "Is state.observation about something that happened on a particular occasion?",
        "Does state.observation recount a specific experience or event?",
    ),
    ("typing", "semantic"): (
        "Does state.observation give a lasting fact about someone or something?",
        "Is state.observation a piece of general, durable knowledge rather than a one-off event?",
    ),
    ("typing", "procedural"): (
        "Does state.observation explain a method, a routine or the steps to do something?",
        "Is state.observation a how-to: a procedure, recipe or set of steps?",
    ),
    ("typing", "preference"): (
        "Does state.observation say what someone likes, dislikes or would rather have?",
        "Is a taste, wish, aversion or preference expressed in state.observation?",
    ),
    ("pair", "semantic"): (
        "Would reading state.memory_b help someone understand state.memory_a because both are about the same specific thing?",
        "Do state.memory_a and state.memory_b share a specific subject, not just a broad domain or common words?",
    ),
    ("pair", "causal"): (
        "Is what state.memory_b describes a cause, reason or precondition of what state.memory_a describes?",
        "Did the situation in state.memory_b lead to, enable or motivate the one in state.memory_a?",
    ),
    ("pair", "same_episode"): (
        "Are state.memory_a and state.memory_b parts of the same event, activity or conversation thread?",
        "Do state.memory_a and state.memory_b describe one single episode rather than two separate ones?",
    ),
    ("pair", "entity_equivalence"): (
        "Do the names or descriptions used in state.memory_a and state.memory_b point to one and the same real entity?",
        "Is the person, place or thing named in state.memory_a the same one named differently in state.memory_b?",
    ),
    ("pair", "update"): (
        "Does state.memory_a change, correct or replace a fact given in state.memory_b?",
        "Is state.memory_a newer information that revises what state.memory_b says?",
    ),
    ("pair", "temporal"): (
        "Relative to the event in state.memory_b, when did the event in state.memory_a take place?",
        "Place the event of state.memory_a in time with respect to the event of state.memory_b.",
    ),
    ("consolidation", "redundant"): (
        "Is everything in state.memory_a already said by state.memory_b?",
        "Does state.memory_a only restate state.memory_b, adding nothing new?",
    ),
    ("consolidation", "contradiction"): (
        "Are state.memory_a and state.memory_b incompatible, so that both cannot be true?",
        "Do the claims of state.memory_a and state.memory_b conflict with each other?",
    ),
    ("consolidation", "obsolete"): (
        "Has state.memory_b been made out of date by the later situation reported in state.memory_a?",
        "Given state.memory_a, does the fact in state.memory_b no longer hold?",
    ),
    ("consolidation", "link_useful"): (
        "Would linking state.memory_a to state.memory_b help answer questions that need both?",
        "Is a link from state.memory_a to state.memory_b worth keeping for future questions?",
    ),
    ("consolidation", "representation"): (
        "Which representation suits state.memory_a and state.memory_b best?",
        "Decide how memory should store state.memory_a together with state.memory_b.",
    ),
    ("routing", "semantic"): (
        "Can the evidence for state.query be found by searching for memories on the same topic?",
        "Will topical, meaning-based search find what state.query needs?",
    ),
    ("routing", "temporal"): (
        "Is state.query about timing: when, how long, or in which order things happened?",
        "Does state.query need dates, durations or the order of events?",
    ),
    ("routing", "causal"): (
        "Does state.query ask for a reason, a cause or a consequence?",
        "Is state.query a why-question, or one about what something led to?",
    ),
    ("routing", "entity"): (
        "Is state.query about one specific named person, place, object or organisation whose mentions should be collected?",
        "Would gathering every mention of a particular entity answer state.query?",
    ),
    ("routing", "multi_hop"): (
        "Does state.query need two or more separate memories combined to be answered?",
        "Is state.query a question that no single memory answers on its own?",
    ),
    ("routing", "recency"): (
        "Does state.query ask about the current or most recent state of things, so newer memories count more?",
        "Should newer memories be preferred when answering state.query?",
    ),
    ("relevance", "relevant"): (
        "Does state.memory help answer state.query, beyond sharing some words with it?",
        "Is state.memory part of the answer to state.query, or evidence it depends on?",
    ),
    ("relevance", "bridge"): (
        "Does state.memory point toward other memories that hold evidence for state.query?",
        "Is state.memory a stepping stone: does it name a person, event or detail that leads to evidence for state.query?",
    ),
    ("stopping", "evidence_sufficient"): (
        "Could a careful reader answer state.query from the items in state.evidence alone?",
        "Does state.evidence contain every fact that state.query needs?",
    ),
    ("stopping", "continue_useful"): (
        "After retrieval depth state.depth, would one more retrieval round likely add needed evidence for state.query beyond state.evidence?",
        "Is it worth searching again for state.query, given state.evidence and state.depth?",
    ),
    ("stopping", "missing_evidence"): (
        "Is a person, event or detail that state.query needs absent from every item of state.evidence?",
        "Does state.evidence leave out something that state.query asks about?",
    ),
    ("stopping", "contradiction"): (
        "Do the items of state.evidence disagree with each other about what state.query asks?",
        "Does state.evidence contain conflicting answers to state.query?",
    ),
}


def wordings(family: str, name: str) -> tuple[str, ...]:
    """Canonical instructions first, then every known paraphrase (no duplicates)."""
    canonical = FAMILIES[family].questions[name].get("instructions")
    texts = [canonical, *PARAPHRASES.get((family, name), ()), *EXTRA.get((family, name), ())]
    out: list[str] = []
    for text in texts:
        if isinstance(text, str) and text not in out:
            out.append(text)
    return tuple(out)
