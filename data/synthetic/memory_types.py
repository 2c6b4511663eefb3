"""Memory typing (TYPING family): observations with exact multi-label types.

Each template fixes its four labels (episodic, semantic, procedural, preference). The rules the labels
follow, from the catalogue's criteria: a particular occasion -> episodic; a lasting fact (identity,
relationship, job, possession, attribute) -> semantic; steps / a method / a routine -> procedural; a like,
dislike or wish -> preference. A pure preference is *not* also labelled semantic; small talk is none of
the four. Half the observations are written as a LoCoMo-style turn (`Name: I ...`).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from data.synthetic import banks as b
from data.synthetic.emit import Emitter
from data.synthetic.registry import register

PROCEDURES: tuple[tuple[str, str], ...] = (
    ("reset the router", "unplug it, wait thirty seconds, plug it back in and wait for the green light"),
    ("make cold brew", "mix coarse coffee with cold water, leave it in the fridge overnight, then strain it"),
    ("repot a cactus", "wear thick gloves, loosen the soil, lift the plant out and set it in dry cactus mix"),
    ("bleed a radiator", "turn the heating off, open the valve with a key until water comes out, then close it"),
    ("change a bike tyre", "release the brake, pop the wheel out, lever the tyre off and fit the new tube"),
    ("get a stain out of cotton", "blot it, soak it in cold water with a spoon of vinegar, then wash it normally"),
    ("start a sourdough starter", "mix equal flour and water, discard half every day and feed it for a week"),
    ("back up a phone", "plug it into the laptop, open the backup tool and tick 'encrypt' before you start"),
    ("season a cast-iron pan", "rub a thin layer of oil on it and bake it upside down for an hour"),
    ("teach a dog to sit", "hold a treat above its nose, move it back until it sits, then reward it at once"),
    ("file the travel expenses", "scan every receipt, fill in the form by date and send it to finance by Friday"),
    ("tune a guitar", "tune the low E string to a tuner first, then match each next string at the fifth fret"),
    ("make a budget", "list every fixed cost, subtract it from the monthly pay and split the rest into goals"),
    ("warm up before a run", "walk five minutes, do leg swings and lunges, then jog slowly for another five"),
)


def _speaker(rng: random.Random, p: b.Person, first: str, third: str) -> str:
    """First-person turn `Name: ...` or third-person text, half and half."""
    return f"{p.first}: {first}" if rng.random() < 0.5 else third


def _episodic(rng: random.Random, p: b.Person, q: b.Person) -> str:
    base, past, _ = rng.choice(b.ACTIVITIES)
    day = rng.choice(b.WEEKDAYS)
    return rng.choice([
        _speaker(rng, p, f"I {past} at {rng.choice(b.VENUES)} last {day}.", f"{p.first} {past} at {rng.choice(b.VENUES)} last {day}."),
        _speaker(
            rng, p,
            f"Yesterday my {rng.choice(b.RELATIONS)} and I {past}.",
            f"On {b.date_phrase(rng)}, {p.first} {past} with {p.his} {rng.choice(b.RELATIONS)}.",
        ),
        f"{p.first} missed the train this morning and arrived late to {rng.choice(b.EVENTS)}.",
        _speaker(
            rng, p,
            f"We {past} in {rng.choice(b.CITIES)} over the weekend.",
            f"Last {rng.choice(b.MONTHS)}, {p.first} and {q.first} {past} in {rng.choice(b.CITIES)}.",
        ),
    ])


def _semantic(rng: random.Random, p: b.Person, q: b.Person) -> str:
    return rng.choice([
        _speaker(
            rng, p,
            f"I work as a {rng.choice(b.JOBS)} at {rng.choice(b.COMPANIES)}.",
            f"{p.first} works as a {rng.choice(b.JOBS)} at {rng.choice(b.COMPANIES)}.",
        ),
        _speaker(
            rng, p,
            f"My {rng.choice(b.RELATIONS)} {q.first} lives in {rng.choice(b.CITIES)}.",
            f"{p.first}'s {rng.choice(b.RELATIONS)} lives in {rng.choice(b.CITIES)}.",
        ),
        _speaker(rng, p, f"I'm allergic to {rng.choice(b.FOODS)}.", f"{p.first} is allergic to {rng.choice(b.FOODS)}."),
        _speaker(rng, p, f"I have a dog named {rng.choice(b.PETS)}.", f"{p.first} has a cat named {rng.choice(b.PETS)}."),
        f"{p.full} grew up in {rng.choice(b.CITIES)} and is {rng.randint(24, 67)} years old.",
        _speaker(rng, p, f"{q.first} is my {rng.choice(b.RELATIONS)}.", f"{q.first} {q.last} is {p.first}'s {rng.choice(b.RELATIONS)}."),
    ])


def _procedural(rng: random.Random, p: b.Person, q: b.Person) -> str:
    goal, steps = rng.choice(PROCEDURES)
    return rng.choice([
        _speaker(rng, p, f"My trick to {goal}: {steps}.", f"{p.first}'s tip: to {goal}, {steps}."),
        _speaker(rng, p, f"The way to {goal} is to {steps}.", f"According to {p.first}, the way to {goal} is to {steps}."),
        f"How to {goal}: {steps}." if rng.random() < 0.3 else f"{p.first}'s notes on how to {goal}: {steps}.",
    ])


def _preference(rng: random.Random, p: b.Person, q: b.Person) -> str:
    f1, f2 = b.pick(rng, b.FOODS, 2)
    g1, g2 = b.pick(rng, b.GENRES, 2)
    a1, a2 = rng.sample(b.ACTIVITIES, 2)
    return rng.choice([
        _speaker(rng, p, f"I love {f1} but I can't stand {f2}.", f"{p.first} loves {f1} but can't stand {f2}."),
        _speaker(rng, p, f"I'd rather {a1[0]} than {a2[0]} any day.", f"{p.first} would rather {a1[0]} than {a2[0]}."),
        _speaker(rng, p, f"Honestly, I prefer {g1} to {g2}.", f"{p.first} prefers {g1} to {g2}."),
        _speaker(rng, p, f"I really dislike {f1}.", f"{p.first} really dislikes {f1}."),
        _speaker(
            rng, p,
            f"I wish I had more time for {rng.choice(b.HOBBIES)}.",
            f"{p.first} wishes {p.he} had more time for {rng.choice(b.HOBBIES)}.",
        ),
    ])


def _episodic_preference(rng: random.Random, p: b.Person, q: b.Person) -> str:
    _, past, _ = rng.choice(b.ACTIVITIES)
    return rng.choice([
        _speaker(
            rng, p,
            f"I tried {rng.choice(b.FOODS)} at {rng.choice(b.VENUES)} last {rng.choice(b.WEEKDAYS)} and loved it.",
            f"{p.first} tried {rng.choice(b.FOODS)} at {rng.choice(b.VENUES)} last {rng.choice(b.WEEKDAYS)} and loved it.",
        ),
        _speaker(rng, p, f"I {past} on Saturday and honestly I hated it.", f"{p.first} {past} on Saturday and hated every minute."),
    ])


def _episodic_procedural(rng: random.Random, p: b.Person, q: b.Person) -> str:
    goal, steps = rng.choice(PROCEDURES)
    return rng.choice([
        f"Last {rng.choice(b.WEEKDAYS)}, {p.first} showed {q.first} how to {goal}: {steps}.",
        _speaker(
            rng, p,
            f"Yesterday I finally learned how to {goal}: {steps}.",
            f"On {b.date_phrase(rng)}, {p.first} learned how to {goal}: {steps}.",
        ),
    ])


def _semantic_preference(rng: random.Random, p: b.Person, q: b.Person) -> str:
    g1, g2 = b.pick(rng, b.GENRES, 2)
    return rng.choice([
        f"{p.first}, a {rng.choice(b.JOBS)} from {rng.choice(b.CITIES)}, prefers {g1} over {g2}.",
        _speaker(
            rng, p,
            f"I'm a {rng.choice(b.JOBS)}, and I love {rng.choice(b.HOBBIES)} on my days off.",
            f"{p.first} is a {rng.choice(b.JOBS)} who loves {rng.choice(b.HOBBIES)} on days off.",
        ),
    ])


def _episodic_semantic(rng: random.Random, p: b.Person, q: b.Person) -> str:
    return rng.choice([
        f"{p.first} moved to {rng.choice(b.CITIES)} in {rng.choice(b.MONTHS)} and now works at {rng.choice(b.COMPANIES)}.",
        _speaker(
            rng, p,
            f"{q.first} and I got married on {b.date_phrase(rng)}.",
            f"{p.first} married {q.first} {q.last} on {b.date_phrase(rng)}.",
        ),
        _speaker(
            rng, p,
            f"I started my new job as a {rng.choice(b.JOBS)} last Monday.",
            f"{p.first} started a new job as a {rng.choice(b.JOBS)} last Monday.",
        ),
    ])


def _semantic_procedural(rng: random.Random, p: b.Person, q: b.Person) -> str:
    goal, steps = rng.choice(PROCEDURES)
    return f"{p.first} is a {rng.choice(b.JOBS)}; {p.his} method to {goal} is to {steps}."


def _small_talk(rng: random.Random, p: b.Person, q: b.Person) -> str:
    line = rng.choice(b.GREETINGS).format(n=q.first)
    return f"{p.first}: {line}" if rng.random() < 0.7 else line


# (episodic, semantic, procedural, preference) per template family.
TEMPLATES: tuple[tuple[Callable[[random.Random, b.Person, b.Person], str], tuple[int, int, int, int]], ...] = (
    (_episodic, (1, 0, 0, 0)),
    (_semantic, (0, 1, 0, 0)),
    (_procedural, (0, 0, 1, 0)),
    (_preference, (0, 0, 0, 1)),
    (_episodic_preference, (1, 0, 0, 1)),
    (_episodic_procedural, (1, 0, 1, 0)),
    (_semantic_preference, (0, 1, 0, 1)),
    (_episodic_semantic, (1, 1, 0, 0)),
    (_semantic_procedural, (0, 1, 1, 0)),
    (_small_talk, (0, 0, 0, 0)),
)


@register("typing", "typing")
def typing_examples(rng: random.Random, emit: Emitter, n: int) -> None:
    for _ in range(n):
        make, labels = rng.choice(TEMPLATES)
        p, q = b.people(rng, 2)
        text = make(rng, p, q)
        emit.emit("typing", {"observation": text}, dict(zip(("episodic", "semantic", "procedural", "preference"), labels)), notes=make.__name__.strip("_"))
