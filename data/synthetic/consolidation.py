"""Consolidation (CONSOLIDATION family): redundant, contradicting, obsolete, worth linking, unrelated.

memory_a is the newer memory, memory_b the older one. Labels per case
(redundant, contradiction, obsolete, link_useful; representation):

- redundant: a restates b in other words                       1 0 0 0  merge_summary
- elaborates: a restates b and adds a detail                   0 0 0 1  link 0.5 / merge_summary 0.5 (soft)
- contradiction: same person, incompatible claims, no change   0 1 0 1  link
  marker (two birthdays, "never been to X" vs a stay in X)
- obsolete: a reports a later state of b's fact ("moved", "now") 0 0 1 1  supersede
- stale_new: the same update seen the other way round (a is the 0 0 0 1  link
  old state, b the new one): b is not outdated by a
- link: complementary facts about one subject                   0 0 0 1  link
- unrelated: the same person, different subjects                0 0 0 0  keep_separate

The blog's near misses (another person's preference, two people in one industry, similar decisions in
different projects, a detail written before its subject) come from `near_miss.py`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from data.synthetic import banks as b
from data.synthetic.emit import Emitter
from data.synthetic.registry import register

Pair = tuple[str, str]


def _redundant(rng: random.Random, p: b.Person) -> Pair:
    company, city, pet, food = rng.choice(b.COMPANIES), rng.choice(b.CITIES), rng.choice(b.PETS), rng.choice(b.FOODS)
    rel = rng.choice(b.RELATIONS)
    return rng.choice((
        (f"{p.first} is employed by {company}.", f"{p.first} works at {company}."),
        (f"{p.first} has a {rel} who lives in {city}.", f"{p.first}'s {rel} lives in {city}."),
        (f"{p.first}'s dog is called {pet}.", f"{p.first} has a dog named {pet}."),
        (f"{food} gives {p.first} an allergic reaction.", f"{p.first} is allergic to {food}."),
        (f"{p.first} was born and raised in {city}.", f"{p.first} grew up in {city}."),
    ))


def _elaborates(rng: random.Random, p: b.Person) -> Pair:
    company, city, pet = rng.choice(b.COMPANIES), rng.choice(b.CITIES), rng.choice(b.PETS)
    return rng.choice((
        (f"{p.first} works at {company} as a {rng.choice(b.JOBS)} and has been there since {rng.randint(2010, 2023)}.", f"{p.first} works at {company}."),
        (f"{p.first}'s dog {pet} is a three-year-old beagle who loves the beach.", f"{p.first} has a dog named {pet}."),
        (f"{p.first} grew up in {city}, in a flat above {p.his} parents' bakery.", f"{p.first} grew up in {city}."),
    ))


def _contradiction(rng: random.Random, p: b.Person) -> Pair:
    d1, d2 = b.date_phrase(rng), b.date_phrase(rng)
    while d2 == d1:
        d2 = b.date_phrase(rng)
    city = rng.choice(b.CITIES)
    q = b.person(rng, gender="m", exclude={p.first})
    return rng.choice((
        (f"{p.first}'s birthday is on {d1}.", f"{p.first}'s birthday is on {d2}."),
        (f"{p.first} has never been to {city}.", f"{p.first} spent a whole summer in {city} as a student."),
        (f"{p.first} is an only child.", f"{p.first}'s brother {q.first} is a {rng.choice(b.JOBS)}."),
        (f"{p.first} has been a strict vegetarian all {p.his} life.", f"{p.first}'s favourite dish is {p.his} father's beef stew."),
        (f"{p.first} does not know how to swim.", f"{p.first} swam across the lake at summer camp as a kid."),
    ))


def updated_fact(rng: random.Random, p: b.Person) -> Pair:
    """(new state, old state)."""
    c1, c2 = b.pick(rng, b.CITIES, 2)
    k1, k2 = b.pick(rng, b.COMPANIES, 2)
    obj = rng.choice(b.OBJECTS)
    q = b.person(rng, exclude={p.first})
    month, hobby = rng.choice(b.MONTHS), rng.choice(b.HOBBIES)
    return rng.choice((
        (f"{p.first} moved from {c1} to {c2} last month.", f"{p.first} lives in {c1}."),
        (f"{p.first} left {k1} in {month} and now works at {k2}.", f"{p.first} works at {k1}."),
        (f"{p.first} sold {obj} at a garage sale.", f"{p.first} owns {obj}."),
        (f"{p.first} and {q.first} broke up in {month}.", f"{p.first} is dating {q.first}."),
        (f"{p.first} gave up {hobby} for good after {p.his} knee surgery.", f"{p.first} spends every weekend on {hobby}."),
    ))


def _link(rng: random.Random, p: b.Person) -> Pair:
    company, city, pet = rng.choice(b.COMPANIES), rng.choice(b.CITIES), rng.choice(b.PETS)
    return rng.choice((
        (f"{p.first}'s team at {company} is launching a new app in {rng.choice(b.MONTHS)}.", f"{p.first} works at {company}."),
        (f"{p.first} takes {pet} to the vet in {city} every spring.", f"{p.first} has a dog named {pet}."),
        (f"{p.first}'s sister is getting married in {city} next summer.", f"{p.first}'s sister lives in {city}."),
    ))


def unrelated_facts(rng: random.Random, p: b.Person) -> Pair:
    return rng.choice((
        (f"{p.first} loves {rng.choice(b.FOODS)}.", f"{p.first} works at {rng.choice(b.COMPANIES)}."),
        (f"{p.first} has a dog named {rng.choice(b.PETS)}.", f"{p.first} grew up in {rng.choice(b.CITIES)}."),
        (f"{p.first} {rng.choice(b.ACTIVITIES)[1]} last weekend.", f"{p.first} is allergic to {rng.choice(b.FOODS)}."),
    ))


# (maker, swap a/b, redundant, contradiction, obsolete, link_useful, representation target)
CASES: tuple[tuple[Callable[[random.Random, b.Person], Pair], bool, tuple[int, int, int, int], object], ...] = (
    (_redundant, False, (1, 0, 0, 0), "merge_summary"),
    (_elaborates, False, (0, 0, 0, 1), {"link": 0.5, "merge_summary": 0.5}),
    (_contradiction, False, (0, 1, 0, 1), "link"),
    (updated_fact, False, (0, 0, 1, 1), "supersede"),
    (updated_fact, True, (0, 0, 0, 1), "link"),
    (_link, False, (0, 0, 0, 1), "link"),
    (unrelated_facts, False, (0, 0, 0, 0), "keep_separate"),
)
NAMES = ("redundant", "contradiction", "obsolete", "link_useful")


def consolidation_case(rng: random.Random, emit: Emitter, index: int, p: b.Person) -> None:
    make, swap, nouls, representation = CASES[index]
    a, bb = make(rng, p)
    if swap:
        a, bb = bb, a
    if make is _contradiction and rng.random() < 0.5:
        a, bb = bb, a  # contradiction is symmetric
    targets: dict[str, object] = dict(zip(NAMES, nouls))
    targets["representation"] = representation
    case = make.__name__.strip("_") + ("_reversed" if swap else "")
    emit.emit("consolidation", {"memory_a": a, "memory_b": bb}, targets, notes=f"consolidation:{case}")  # type: ignore[arg-type]


@register("consolidation", "consolidation")
def consolidation_examples(rng: random.Random, emit: Emitter, n: int) -> None:
    for _ in range(n):
        consolidation_case(rng, emit, rng.choices(range(len(CASES)), weights=(2, 1, 2, 2, 1, 2, 2))[0], b.person(rng))
