"""LoCoMo relevance and stopping labels (rules and noise: see `data.builders.locomo`)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from controller.families import previous_text
from data.builders.locomo import ConversationIndex, LocomoRules, turn_text
from data.builders.text import content_tokens
from data.locomo import Question, normalise_evidence
from data.synthetic.banks import FEMALE, MALE
from data.synthetic.emit import Emitter

ANSWERABLE = (1, 2, 3, 4)  # adversarial questions (5) ask about things that did not happen to that person
OBSERVATION_WEIGHT = 0.7  # observation-fact queries: a restated fact makes some negatives unlabelled evidence


def _gold(ix: ConversationIndex, q: Question) -> list[int]:
    return sorted(ix.position[d] for d in q.evidence if d in ix.position)


def _blocked(gold: list[int], adjacency: int, n: int) -> set[int]:
    return {j for g in gold for j in range(max(0, g - adjacency), min(n, g + adjacency + 1))}


def _take(ranked: list[int], blocked: set[int], taken: set[int], k: int) -> list[int]:
    out = []
    for doc in ranked:
        if len(out) == k:
            break
        if doc not in blocked and doc not in taken:
            out.append(doc)
            taken.add(doc)
    return out


def bridge_candidates(ix: ConversationIndex, gold: list[int], blocked: set[int]) -> list[int]:
    """Non-gold turns sharing a named entity or >= 2 rare topic words with some gold turn."""
    out = []
    for i in range(len(ix.turns)):
        if i in blocked:
            continue
        for g in gold:
            if ix.ents[i] & ix.ents[g] or len(ix.rare[i] & ix.rare[g]) >= 2:
                out.append(i)
                break
    return out


def relevance_state(ix: ConversationIndex, query: str, turn: int, rules: LocomoRules) -> dict[str, str]:
    """{"query", "memory"} and, with `rules.relevance_context`, "previous": the turn before `turn` in its
    session (what the engine supplies from its `temporal_next` chain), absent for a session's first turn.
    With `rules.relevance_dated` the memory carries its session date."""
    state = {"query": query, "memory": turn_text(ix.turns[turn], dated=rules.relevance_dated)}
    if rules.relevance_context and turn > 0 and ix.turns[turn - 1].session == ix.turns[turn].session:
        state["previous"] = previous_text(turn_text(ix.turns[turn - 1]))
    return state


def speaker_renamer(speakers: tuple[str, str], rng: random.Random) -> Callable[[dict[str, str]], dict[str, str]]:
    """A function renaming both speakers, whole words, in a state's text fields: each becomes one of two distinct
    bank first names that are neither speaker (drawn from `rng` once, so every state it renames agrees)."""
    pool = sorted(set(FEMALE + MALE) - set(speakers))
    names = dict(zip(speakers, rng.sample(pool, 2)))
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")

    def rename(state: dict[str, str]) -> dict[str, str]:
        return {k: pattern.sub(lambda m: names[m.group(1)], v) if isinstance(v, str) else v for k, v in state.items()}

    return rename


def _ranked_negatives(ix: ConversationIndex, q: Question, blocked: set[int], taken: set[int], n_bm25: int,
                      n_dense: int) -> list[tuple[str, int]]:
    """The top `n_bm25` BM25 and then the top `n_dense` dense non-gold turns not blocked or taken (taken grows)."""
    out = [("bm25", i) for i in _take(ix.bm25_rank(q.question), blocked, taken, n_bm25)]
    return out + [("dense", i) for i in _take(ix.dense_rank(q.qid), blocked, taken, n_dense)]


def relevance_examples(ix: ConversationIndex, emit: Emitter, rules: LocomoRules) -> None:
    rng = emit.rng
    n = len(ix.turns)
    # its own generator, so that the other examples stay byte-identical with renaming on or off
    rename_rng = random.Random(f"{rules.seed}:{ix.conv.sample_id}:rename")
    for q in ix.conv.questions:
        gold = _gold(ix, q)
        if q.category not in ANSWERABLE or not gold:
            continue
        rename = None
        if rules.rename_speakers and emit.split == "train" and rename_rng.random() < rules.rename_speakers:
            rename = speaker_renamer(ix.conv.speakers, rename_rng)

        def state(turn: int) -> dict[str, str]:
            plain = relevance_state(ix, q.question, turn, rules)
            return rename(plain) if rename else plain

        blocked = _blocked(gold, rules.adjacency, n)
        for g in gold:
            labels = {"relevant": 1, "bridge": 1} if len(gold) > 1 else {"relevant": 1}
            emit.emit("relevance", state(g), labels, notes="locomo:gold")
        taken: set[int] = set()
        bridges = bridge_candidates(ix, gold, blocked)
        for i in rng.sample(bridges, min(rules.bridges, len(bridges))):
            taken.add(i)
            emit.emit("relevance", state(i), {"relevant": 0, "bridge": 1},
                      weights={"bridge": 0.5, "relevant": 0.5}, notes="locomo:bridge")
        bridge_set = set(bridges)
        train = emit.split == "train"
        n_bm25 = rules.train_bm25_negatives if train and rules.train_bm25_negatives is not None else rules.bm25_negatives
        n_dense = rules.train_dense_negatives if train and rules.train_dense_negatives is not None else rules.dense_negatives
        negatives = _ranked_negatives(ix, q, blocked, taken, n_bm25, n_dense)
        pool = [i for i in range(n) if i not in blocked and i not in taken]
        negatives += [("random", i) for i in rng.sample(pool, min(rules.random_negatives, len(pool)))]
        if rules.train_hard_negatives and train:  # after the rest, which stay as they are
            taken.update(i for _, i in negatives)
            negatives += _ranked_negatives(ix, q, blocked, taken, rules.train_hard_negatives, rules.train_hard_negatives)
        for kind, i in negatives:
            bridge = int(i in bridge_set)
            emit.emit("relevance", state(i), {"relevant": 0, "bridge": bridge},
                      weights={"bridge": 0.5}, notes=f"locomo:{kind}")
    if rules.query_swaps and emit.split == "train":
        swapped_query_examples(ix, emit, rules, random.Random(f"{rules.seed}:{ix.conv.sample_id}:swap"))
    if rules.observation_queries and emit.split == "train":
        observation_query_examples(ix, emit, rules, random.Random(f"{rules.seed}:{ix.conv.sample_id}:observation"))


def observation_query_examples(ix: ConversationIndex, emit: Emitter, rules: LocomoRules, rng: random.Random) -> None:
    """Observation facts as queries, their cited turn as evidence (rule and noise: `data.builders.locomo`)."""
    known = set(ix.position)
    facts = [(fact, [ix.position[d] for d in normalise_evidence(dia, known)]) for session in ix.conv.observations.values() for fact, dia in session]
    facts = [(fact, gold) for fact, gold in facts if len(gold) == 1 and fact.strip()]
    n = len(ix.turns)
    weights = {"relevant": OBSERVATION_WEIGHT}
    for fact, gold in rng.sample(facts, min(rules.observation_queries, len(facts))):
        emit.emit("relevance", relevance_state(ix, fact, gold[0], rules), {"relevant": 1}, weights=weights,
                  notes="locomo:observation-query")
        blocked = _blocked(gold, rules.adjacency, n)
        taken: set[int] = set()
        negatives = _take(ix.bm25_rank(fact), blocked, taken, rules.observation_bm25_negatives)
        pool = [i for i in range(n) if i not in blocked and i not in taken]
        negatives += rng.sample(pool, min(rules.observation_random_negatives, len(pool)))
        for i in negatives:
            emit.emit("relevance", relevance_state(ix, fact, i, rules), {"relevant": 0}, weights=weights,
                      notes="locomo:observation-query-negative")


def swapped_query_examples(ix: ConversationIndex, emit: Emitter, rules: LocomoRules, rng: random.Random) -> None:
    """Gold turns under other questions of the conversation (rule and noise: `data.builders.locomo`)."""
    questions = [(q, _gold(ix, q)) for q in ix.conv.questions if q.category in ANSWERABLE]
    questions = [(q, gold, _blocked(gold, rules.adjacency, len(ix.turns))) for q, gold in questions if gold]
    for q, gold, _ in questions:
        for g in gold:
            others = [o for o, _, blocked in questions if o.question != q.question and g not in blocked]
            if not others:
                continue
            if rules.random_swaps:
                chosen = rng.sample(others, min(rules.query_swaps, len(others)))
            else:
                chosen = [_nearest_question(ix, g, others)]
                rest = [o for o in others if o is not chosen[0]]
                chosen += rng.sample(rest, min(rules.query_swaps - 1, len(rest)))
            for o in chosen:
                emit.emit("relevance", relevance_state(ix, o.question, g, rules), {"relevant": rules.swap_target}, notes="locomo:swap")


def _nearest_question(ix: ConversationIndex, turn: int, questions: list[Question]) -> Question:
    """The question closest to a turn: dense cosine when the index has vectors, else BM25 of the turn's text."""
    if ix.turn_vectors is not None and all(q.qid in ix.query_vectors for q in questions):
        v = ix.turn_vectors[turn]
        return max(questions, key=lambda q: (float(ix.query_vectors[q.qid] @ v), q.qid))
    tokens = ix.tokens[turn]
    return max(questions, key=lambda q: (len(tokens & content_tokens(q.question, ix.stop)), q.qid))


def stopping_examples(ix: ConversationIndex, emit: Emitter, rules: LocomoRules) -> None:
    rng = emit.rng
    n = len(ix.turns)
    weights = {"missing_evidence": 0.7, "contradiction": 0.3}
    for q in ix.conv.questions:
        gold = _gold(ix, q)
        if q.category not in ANSWERABLE or not gold or len(gold) > rules.stopping_max_items:
            continue
        blocked = _blocked(gold, rules.adjacency, n)
        distractors = _take(ix.bm25_rank(q.question), blocked, set(), 2 * rules.stopping_max_items)
        room = rules.stopping_max_items - len(gold)
        chosen = gold + rng.sample(distractors, min(len(distractors), rng.randint(0, room)))
        _emit_set(ix, emit, q, chosen, sufficient=True, weights=weights, rng=rng)
        for _ in range(rules.stopping_insufficient):
            keep = rng.sample(gold, rng.randrange(len(gold)))  # drops at least one gold turn
            extra = rng.sample(distractors, min(len(distractors), rng.randint(1 if not keep else 0, rules.stopping_max_items - len(keep))))
            if keep or extra:
                _emit_set(ix, emit, q, keep + extra, sufficient=False, weights=weights, rng=rng)


def _emit_set(ix: ConversationIndex, emit: Emitter, q: Question, items: list[int], *, sufficient: bool,
              weights: dict[str, float], rng: random.Random) -> None:
    items = list(items)
    rng.shuffle(items)
    state = {"query": q.question, "evidence": [turn_text(ix.turns[i], dated=True) for i in items], "depth": rng.randint(0, 3)}
    s = int(sufficient)
    targets = {"evidence_sufficient": s, "continue_useful": 1 - s, "missing_evidence": 1 - s, "contradiction": 0}
    emit.emit("stopping", state, targets, weights=weights, notes=f"locomo:{'sufficient' if s else 'insufficient'}")
