"""LoCoMo pair labels: same_episode, semantic, temporal order, update (rules and noise: `data.builders.locomo`)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable

from data.builders.locomo import ConversationIndex, LocomoRules, turn_text
from data.builders.text import CHANGE_MARKERS, SHIFTED_TIME
from data.synthetic.emit import Emitter

Pair = tuple[int, int]  # turn positions, i < j


def _ordered(i: int, j: int) -> Pair:
    return (i, j) if i < j else (j, i)


def co_evidence(ix: ConversationIndex, cap: int = 6) -> set[Pair]:
    """Pairs of turns cited together as the evidence of one question."""
    out: set[Pair] = set()
    for q in ix.conv.questions:
        gold = sorted({ix.position[d] for d in q.evidence if d in ix.position})
        out.update(list(itertools.combinations(gold, 2))[:cap])
    return out


def observation_pairs(ix: ConversationIndex) -> set[Pair]:
    """Turns of different sessions whose observation facts share >= 2 rare topic words."""
    by_token: dict[str, list[int]] = {}
    for i, toks in enumerate(ix.obs_rare):
        for tok in toks:
            by_token.setdefault(tok, []).append(i)
    out: set[Pair] = set()
    for members in by_token.values():
        for i, j in itertools.combinations(members, 2):
            if ix.turns[i].session != ix.turns[j].session and len(ix.obs_rare[i] & ix.obs_rare[j]) >= 2:
                out.add((i, j))
    return out


def update_pairs(ix: ConversationIndex) -> set[Pair]:
    """Same speaker, later session, >= 2 shared rare words, a change marker in the later turn."""
    out: set[Pair] = set()
    for i, j in observation_pairs(ix) | _rare_pairs(ix):
        a, b = ix.turns[i], ix.turns[j]
        if a.speaker == b.speaker and a.session < b.session and CHANGE_MARKERS.search(b.text) and len(ix.rare[i] & ix.rare[j]) >= 2:
            out.add((i, j))
    return out


def _rare_pairs(ix: ConversationIndex) -> set[Pair]:
    by_token: dict[str, list[int]] = {}
    for i, toks in enumerate(ix.rare):
        for tok in toks:
            by_token.setdefault(tok, []).append(i)
    return {p for members in by_token.values() for p in itertools.combinations(members, 2)}


def same_episode_label(ix: ConversationIndex, i: int, j: int) -> int | None:
    a, b = ix.turns[i], ix.turns[j]
    if a.session != b.session:
        return 0
    gap = abs(i - j)
    shared = bool(ix.tokens[i] & ix.tokens[j])
    if gap <= 2 and (gap == 1 or shared):
        return 1
    if gap >= 10 and not shared:
        return 0
    return None


def semantic_label(ix: ConversationIndex, i: int, j: int, coev: set[Pair], obs: set[Pair]) -> tuple[int, float] | None:
    if (i, j) in coev:
        return 1, 0.8
    if (i, j) in obs:
        return 1, 0.6
    far = ix.turns[i].session != ix.turns[j].session or abs(i - j) >= 10
    if far and not ix.tokens[i] & ix.tokens[j] and not ix.obs_rare[i] & ix.obs_rare[j]:
        return 0, 0.8
    return None


def _sample(rng: random.Random, pairs: Iterable[Pair], k: int) -> list[Pair]:
    items = sorted(pairs)
    return rng.sample(items, min(k, len(items)))


def candidate_pairs(ix: ConversationIndex, rules: LocomoRules, rng: random.Random) -> tuple[list[Pair], set[Pair], set[Pair], set[Pair]]:
    n = len(ix.turns)
    coev, obs, upd = co_evidence(ix), observation_pairs(ix), update_pairs(ix)
    near = {(i, i + d) for i in range(n) for d in (1, 2) if i + d < n and ix.turns[i].session == ix.turns[i + d].session}
    far = set()
    for _ in range(rules.pairs_far_session * 20):
        if len(far) >= rules.pairs_far_session:
            break
        i, j = _ordered(*rng.sample(range(n), 2))
        if ix.turns[i].session == ix.turns[j].session and j - i >= 10 and not ix.tokens[i] & ix.tokens[j]:
            far.add((i, j))
    rand = set()
    while len(rand) < min(rules.pairs_random, n * (n - 1) // 4):
        i, j = _ordered(*rng.sample(range(n), 2))
        if ix.turns[i].session != ix.turns[j].session:
            rand.add((i, j))
    chosen = set(coev) | set(upd) | set(_sample(rng, obs, rules.pairs_observation))
    chosen |= set(_sample(rng, near, rules.pairs_same_session)) | far | rand
    return sorted(chosen), coev, obs, upd


def pair_examples(ix: ConversationIndex, emit: Emitter, rules: LocomoRules) -> None:
    rng = emit.rng
    pairs, coev, obs, upd = candidate_pairs(ix, rules, rng)
    for i, j in pairs:
        targets: dict[str, object] = {}
        weights: dict[str, float] = {}
        episode = same_episode_label(ix, i, j)
        if episode is not None:
            targets["same_episode"] = episode
        semantic = semantic_label(ix, i, j, coev, obs)
        if semantic is not None:
            targets["semantic"], weights["semantic"] = semantic
        # memory_a is the later turn for update pairs; otherwise the order is random.
        first, second = (j, i) if (i, j) in upd or rng.random() < 0.5 else (i, j)
        if (i, j) in upd:
            targets["update"], weights["update"] = 1, 0.3
        elif semantic is not None and semantic[0] == 0:
            targets["update"], weights["update"] = 0, 0.3
        a, b = ix.turns[first], ix.turns[second]
        dated = rng.random() < 0.5
        if a.session != b.session and a.date and b.date and a.date.date() != b.date.date():
            if not dated:
                targets["temporal"], weights["temporal"] = "unknown", 0.5
            elif not SHIFTED_TIME.search(a.text) and not SHIFTED_TIME.search(b.text):
                targets["temporal"], weights["temporal"] = ("before" if a.date < b.date else "after"), 0.7
        if not targets:
            continue
        state = {"memory_a": turn_text(a, dated=dated), "memory_b": turn_text(b, dated=dated)}
        kind = "coevidence" if (i, j) in coev else "observation" if (i, j) in obs else "update" if (i, j) in upd else "sampled"
        emit.emit("pair", state, targets, weights=weights, notes=f"locomo:{kind}")  # type: ignore[arg-type]
