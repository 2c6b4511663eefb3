"""Candidate relevance (RELEVANCE) and stopping (STOPPING) over a small generated fact world.

A question about person p needs one fact (single hop) or two chained facts (p's relative is q; q lives in
X). Distractors are the traps a lexical or dense retriever brings back:
- another person with the same kind of fact (the blog's "another person's preference" included);
- the same person, a different fact;
- a lexical look-alike ("Maya's neighbour works at Bluepeak" for "Where does Maya work?").

Relevance: a needed fact -> relevant 1 (the first hop of a chain also bridge 1, the second hop bridge 0; a
single-hop fact gets no bridge label); a distractor -> relevant 0, bridge 0.
Stopping (evidence = 2..5 items, shuffled; depth 0..3): every needed fact present -> evidence_sufficient 1,
missing_evidence 0, continue_useful 0; a needed fact absent -> 0 / 1 / 1; a needed fact plus a conflicting
version of it -> contradiction 1, evidence_sufficient 0, continue_useful 1, missing_evidence 0. Other
states have contradiction 0. continue_useful does not depend on depth here (the missing fact exists).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from data.synthetic import banks as b
from data.synthetic.emit import Emitter
from data.synthetic.registry import register


@dataclass(frozen=True)
class Need:
    query: str
    facts: tuple[str, ...]  # needed facts, hop order
    distractors: tuple[str, ...]
    conflict: str  # a fact that contradicts the last needed fact


def _name(rng: random.Random, p: b.Person) -> str:
    """How the question names its person: first name or full name."""
    return p.full if rng.random() < 0.5 else p.first


def _work(rng: random.Random, p: b.Person, q: b.Person) -> Need:
    (j1, j2), (c1, c2, c3) = b.pick(rng, b.JOBS, 2), b.pick(rng, b.COMPANIES, 3)
    rel, name = rng.choice(b.RELATIONS), _name(rng, p)
    return Need(
        rng.choice((f"Where does {name} work?", f"What company does {name} work for?", f"Who is {name}'s employer?",
                    f"Which company employs {name}?")),
        (f"{p.first} works as a {j1} at {c1}.",),
        (f"{q.first} works as a {j2} at {c2}.", f"{p.first}'s {rel} works at {c3}.", f"{p.first} has a dog named {rng.choice(b.PETS)}."),
        f"{p.first} works as a {j1} at {c2}.",
    )


def _home(rng: random.Random, p: b.Person, q: b.Person) -> Need:
    c1, c2, c3 = b.pick(rng, b.CITIES, 3)
    name = _name(rng, p)
    return Need(
        rng.choice((f"Which city does {name} live in?", f"Where does {name} live?", f"Where is {name}'s home?",
                    f"In which city is {name} based?")),
        (f"{p.first} lives in {c1}.",),
        (f"{q.first} lives in {c2}.", f"{p.first} would love to visit {c3} someday.", f"{p.first} is allergic to {rng.choice(b.FOODS)}."),
        f"{p.first} lives in {c2}.",
    )


def _preference(rng: random.Random, p: b.Person, q: b.Person) -> Need:
    f1, f2, f3 = b.pick(rng, b.FOODS, 3)
    name = _name(rng, p)
    return Need(
        rng.choice((f"What food does {name} love?", f"What is {name}'s favourite food?", f"Which food does {name} like best?")),
        (f"{p.first} loves {f1}.",),
        (f"{q.first} loves {f2}.", f"{p.first}'s roommate loves {f3}.", f"{p.first} works at {rng.choice(b.COMPANIES)}."),
        f"{p.first} can't stand {f1}.",
    )


def _event(rng: random.Random, p: b.Person, q: b.Person) -> Need:
    (base, past, _), (base2, _, _) = rng.sample(b.ACTIVITIES, 2)
    d1, d2 = b.date_phrase(rng), b.date_phrase(rng)
    if d2 == d1:  # the conflicting date must differ, or a consistent evidence set is labelled a contradiction;
        day, month = d1.split(" ", 1)  # the next day (no draw: every other need is generated as before)
        d2 = f"{int(day) % 28 + 1} {month}"
    name = _name(rng, p)
    return Need(
        rng.choice((f"When did {name} {base}?", f"On what date did {name} {base}?", f"What day did {name} {base}?")),
        (f"On {d1}, {p.first} {past}.",),
        (f"{q.first} {past} on {d2}.", f"{p.first} is planning to {base2} in {rng.choice(b.MONTHS)}.", f"{p.first} lives in {rng.choice(b.CITIES)}."),
        f"{p.first} {past} on {d2}, not earlier.",
    )


def _chain(rng: random.Random, p: b.Person, q: b.Person) -> Need:
    rel = rng.choice(("sister", "brother", "best friend", "mentor", "cousin"))
    r = b.person(rng, exclude={p.first, q.first})
    c1, c2, c3 = b.pick(rng, b.CITIES, 3)
    name = _name(rng, p)
    return Need(
        rng.choice((f"Where does {name}'s {rel} live?", f"Which city does {name}'s {rel} live in?", f"Where is {name}'s {rel} based?")),
        (f"{p.first}'s {rel} is {q.full}.", f"{q.first} lives in {c1}."),
        (f"{r.first} lives in {c2}.", f"{p.first} lives in {c3}.", f"{r.first}'s {rel} is a {rng.choice(b.JOBS)}."),
        f"{q.first} lives in {c2}.",
    )


MAKERS = (_work, _home, _preference, _event, _chain)


def _relevance(rng: random.Random, emit: Emitter, need: Need) -> None:
    chain = len(need.facts) > 1
    for hop, fact in enumerate(need.facts):
        labels = {"relevant": 1, "bridge": int(hop == 0)} if chain else {"relevant": 1}
        emit.emit("relevance", {"query": need.query, "memory": fact}, labels, notes="relevance:needed")
    for fact in rng.sample(need.distractors, rng.randint(1, len(need.distractors))):
        emit.emit("relevance", {"query": need.query, "memory": fact}, {"relevant": 0, "bridge": 0}, notes="relevance:distractor")


def _stopping(rng: random.Random, emit: Emitter, need: Need) -> None:
    case = rng.choices(("sufficient", "missing", "conflict"), weights=(4, 4, 2))[0]
    facts = list(need.facts)
    if case == "missing":
        facts = facts[: rng.randrange(len(facts))]  # drop at least the last hop
    elif case == "conflict":
        facts.append(need.conflict)
    extra = rng.sample(need.distractors, rng.randint(0 if facts else 1, len(need.distractors)))
    evidence = facts + extra
    rng.shuffle(evidence)
    targets = {
        "sufficient": {"evidence_sufficient": 1, "continue_useful": 0, "missing_evidence": 0, "contradiction": 0},
        "missing": {"evidence_sufficient": 0, "continue_useful": 1, "missing_evidence": 1, "contradiction": 0},
        "conflict": {"evidence_sufficient": 0, "continue_useful": 1, "missing_evidence": 0, "contradiction": 1},
    }[case]
    emit.emit("stopping", {"query": need.query, "evidence": evidence, "depth": rng.randint(0, 3)}, targets, notes=f"stopping:{case}")


def _need(rng: random.Random) -> Need:
    p, q = b.people(rng, 2)
    return rng.choice(MAKERS)(rng, p, q)


@register("relevance", "relevance")
def relevance_examples(rng: random.Random, emit: Emitter, n: int) -> None:
    while emit.states < n:
        _relevance(rng, emit, _need(rng))


@register("stopping", "stopping")
def stopping_examples(rng: random.Random, emit: Emitter, n: int) -> None:
    for _ in range(n):
        _stopping(rng, emit, _need(rng))
