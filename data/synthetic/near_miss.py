"""Near misses from the relationship blog, and update pairs (PAIR and CONSOLIDATION families at once).

"No link" is a valid answer; these states teach it beside their positive counterparts. Each state is
labelled for the pair questions it settles and for the consolidation questions (same state shape, so the
two families pack into one request). memory_a is the newer memory.

| case                | example                                                     | pair labels               | consolidation (r c o l; rep) |
|---------------------|-------------------------------------------------------------|---------------------------|------------------------------|
| industry            | two people, both freelance engineers on energy projects     | semantic 0, entity 0, ... | 0 0 0 0 keep_separate        |
| projects            | project Atlas chose React; project Orion also chose React   | semantic 0, update 0      | 0 0 0 0 keep_separate        |
| project_switch      | Atlas dropped React for Vue; Atlas chose React              | semantic 1, update 1      | 0 0 1 1 supersede            |
| project_detail      | who decided Atlas's React choice; Atlas chose React         | semantic 1, update 0      | 0 0 0 1 link                 |
| other_preference    | my client prefers short contracts; I prefer long ones       | update 0, entity 0        | 0 0 0 0 keep_separate        |
| changed_preference  | these days I prefer short contracts; I prefer long ones     | semantic 1, update 1      | 0 0 1 1 supersede            |
| subject_after_detail| (newer) Orion is the new platform; (older) Orion kickoff    | semantic 1, update 0      | 0 0 0 1 link                 |
| expands_on          | what I like about my work; my work                          | semantic 1, update 0      | 0 0 0 1 link                 |
| update / stale      | moved from Lisbon to Denver; lives in Lisbon (and reversed)  | semantic 1, update 1 / 0  | (consolidation.py)           |
"""

from __future__ import annotations

import random
from collections.abc import Callable

from data.synthetic import banks as b
from data.synthetic import consolidation as cons
from data.synthetic.emit import Emitter
from data.synthetic.registry import register

INDUSTRIES = ("construction", "healthcare", "retail", "logistics", "education", "energy", "banking", "film")
PREFERENCES: tuple[tuple[str, str], ...] = (
    ("long-term assignments where I can work closely with the team", "short contracts with no strings attached"),
    ("working from home", "working from the office every day"), ("early morning meetings", "meetings after lunch"),
    ("beach holidays", "city breaks"), ("phone calls", "long emails"), ("fixed-price projects", "hourly billing"),
    ("small teams", "large departments"), ("quiet cafés", "busy bars"),
)
KINDS = ("analytics platform", "booking app", "customer portal", "mobile game", "data pipeline", "training programme")
SAME_EPISODE_FALSE = {"same_episode": 0}

Case = tuple[str, str, dict[str, int], tuple[int, int, int, int], object]


def _industry(rng: random.Random, p: b.Person, q: b.Person) -> Case:
    job, ind = rng.choice(b.JOBS), rng.choice(INDUSTRIES)
    return (f"{p.first} works as a freelance {job} on {ind} projects.", f"{q.first} is also a freelance {job} on {ind} projects.",
            {"semantic": 0, "entity_equivalence": 0, "update": 0, "causal": 0, **SAME_EPISODE_FALSE}, (0, 0, 0, 0), "keep_separate")


def _projects(rng: random.Random, p: b.Person, q: b.Person) -> Case:
    x, y = b.pick(rng, b.PROJECTS, 2)
    tool = rng.choice(b.TOOLS)
    return (f"For project {x}, the team decided to use {tool}.", f"For project {y}, the team also decided to use {tool}.",
            {"semantic": 0, "update": 0, "causal": 0, **SAME_EPISODE_FALSE}, (0, 0, 0, 0), "keep_separate")


def _project_switch(rng: random.Random, p: b.Person, q: b.Person) -> Case:
    x = rng.choice(b.PROJECTS)
    t1, t2 = b.pick(rng, b.TOOLS, 2)
    return (f"For project {x}, the team dropped {t1} and switched to {t2}.", f"For project {x}, the team decided to use {t1}.",
            {"semantic": 1, "update": 1}, (0, 0, 1, 1), "supersede")


def _project_detail(rng: random.Random, p: b.Person, q: b.Person) -> Case:
    x, tool = rng.choice(b.PROJECTS), rng.choice(b.TOOLS)
    return (f"{p.first} was the one who pushed for {tool} on project {x}, after a two-week trial.", f"For project {x}, the team decided to use {tool}.",
            {"semantic": 1, "update": 0}, (0, 0, 0, 1), "link")


def _other_preference(rng: random.Random, p: b.Person, q: b.Person) -> Case:
    mine, theirs = rng.choice(PREFERENCES)
    rel = rng.choice(("client", "manager", "sister", "roommate", "business partner"))
    if rng.random() < 0.5:
        a, bb = f"{p.first}: My {rel} prefers {theirs}.", f"{p.first}: I prefer {mine}."
    else:
        a, bb = f"{q.first}, {p.first}'s {rel}, prefers {theirs}.", f"{p.first} prefers {mine}."
    return a, bb, {"update": 0, "entity_equivalence": 0, "causal": 0}, (0, 0, 0, 0), "keep_separate"


def _changed_preference(rng: random.Random, p: b.Person, q: b.Person) -> Case:
    mine, theirs = rng.choice(PREFERENCES)
    return (f"{p.first}: These days I prefer {theirs}; I've changed my mind since last year.", f"{p.first}: I prefer {mine}.",
            {"semantic": 1, "update": 1}, (0, 0, 1, 1), "supersede")


def _subject_after_detail(rng: random.Random, p: b.Person, q: b.Person) -> Case:
    x, kind, company = rng.choice(b.PROJECTS), rng.choice(KINDS), rng.choice(b.COMPANIES)
    subject = f"{x} is the new {kind} that {company} is building for its customers."
    detail = f"The {x} kickoff is on {rng.choice(b.WEEKDAYS)} at nine, in the big meeting room."
    if rng.random() < 0.5:
        return subject, detail, {"semantic": 1, "update": 0, "causal": 0}, (0, 0, 0, 1), "link"
    return detail, subject, {"semantic": 1, "update": 0, "causal": 0}, (0, 0, 0, 1), "link"


def _expands_on(rng: random.Random, p: b.Person, q: b.Person) -> Case:
    mine, _ = rng.choice(PREFERENCES)
    job, ind = rng.choice(b.JOBS), rng.choice(INDUSTRIES)
    return (f"What {p.first} likes about {p.his} work: {mine}.", f"{p.first} works as a freelance {job} on {ind} projects.",
            {"semantic": 1, "update": 0}, (0, 0, 0, 1), "link")


def _update_pair(rng: random.Random, p: b.Person, q: b.Person) -> Case:
    new, old = cons.updated_fact(rng, p)
    if rng.random() < 0.5:
        return new, old, {"semantic": 1, "update": 1}, (0, 0, 1, 1), "supersede"
    return old, new, {"semantic": 1, "update": 0}, (0, 0, 0, 1), "link"


def _unrelated_pair(rng: random.Random, p: b.Person, q: b.Person) -> Case:
    a, bb = cons.unrelated_facts(rng, p)
    return a, bb, {"semantic": 0, "update": 0, "causal": 0}, (0, 0, 0, 0), "keep_separate"


MAKERS: tuple[tuple[Callable[[random.Random, b.Person, b.Person], Case], int], ...] = (
    (_industry, 2), (_projects, 2), (_project_switch, 1), (_project_detail, 1), (_other_preference, 2),
    (_changed_preference, 1), (_subject_after_detail, 1), (_expands_on, 1), (_update_pair, 2), (_unrelated_pair, 1),
)


@register("near_miss", "pair", share=0.5)
def near_miss_examples(rng: random.Random, emit: Emitter, n: int) -> None:
    makers, weights = zip(*MAKERS)
    for _ in range(n):
        make = rng.choices(makers, weights=weights)[0]
        p, q = b.people(rng, 2)
        a, bb, pair_labels, nouls, representation = make(rng, p, q)
        state = {"memory_a": a, "memory_b": bb}
        case = make.__name__.strip("_")
        emit.emit("pair", state, pair_labels, notes=f"near_miss:{case}")
        targets: dict[str, object] = dict(zip(cons.NAMES, nouls))
        targets["representation"] = representation
        emit.emit("consolidation", state, targets, notes=f"near_miss:{case}")  # type: ignore[arg-type]
