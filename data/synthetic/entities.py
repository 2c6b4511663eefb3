"""Entity equivalence (PAIR family, `entity_equivalence`): aliases that co-refer, and the traps.

Co-referring (label 1), always with a shared anchor that makes the identity certain:
- nickname + the same workplace / role ("Katherine Osei runs design at Bluepeak" / "Kate from Bluepeak's
  design team"), title + surname + the same role ("Dr. Okafor" / "Amara Okafor, the surgeon"), full
  name vs a unique description ("Tom, Maya's only brother" / "Maya's brother"), place aliases ("NYC" /
  "New York City").
Traps (label 0): the same first name with different surnames and roles; the same surname with a different
title, gender or role; two people in the same job at the same company; a nickname whose surname and city
differ; places that share a name ("Portland, Maine" / "Portland, Oregon").
"""

from __future__ import annotations

import random

from data.synthetic import banks as b
from data.synthetic.emit import Emitter
from data.synthetic.registry import register

SAME_NAME_PLACES: tuple[tuple[str, str], ...] = (
    ("Portland, Maine", "Portland, Oregon"), ("Paris, Texas", "Paris, France"), ("Cambridge, Massachusetts", "Cambridge, England"),
    ("London, Ontario", "London, England"), ("Birmingham, Alabama", "Birmingham, England"), ("Valencia, Venezuela", "Valencia, Spain"),
    ("Perth, Scotland", "Perth, Australia"), ("Córdoba, Argentina", "Córdoba, Spain"), ("Sydney, Nova Scotia", "Sydney, Australia"),
)
ROLES: tuple[str, ...] = ("surgeon", "dentist", "family doctor", "physiotherapist", "vet", "paediatrician")
TEAMS: tuple[str, ...] = ("design", "finance", "sales", "data", "support", "legal")


def _nickname(rng: random.Random, p: b.Person) -> tuple[str, str]:
    full = rng.choice(sorted(b.NICKNAMES))
    nick, last = b.NICKNAMES[full], rng.choice(b.SURNAMES)
    team, company = rng.choice(TEAMS), rng.choice(b.COMPANIES)
    a = rng.choice((f"{p.first}'s coworker {full} {last} runs the {team} team at {company}.",
                    f"{full} {last} leads {company}'s {team} team."))
    bb = rng.choice((f"{nick} from the {team} team at {company} sent {p.first} the new plan.",
                     f"{p.first} had lunch with {nick} {last}, who heads {team} at {company}."))
    return a, bb


def _title(rng: random.Random, p: b.Person) -> tuple[str, str]:
    q = b.person(rng)
    role = rng.choice(ROLES)
    a = f"Dr. {q.last} examined {p.first}'s knee on {rng.choice(b.WEEKDAYS)}."
    bb = f"{q.full}, {p.first}'s {role}, ordered an X-ray of the knee."
    return a, bb


def _description(rng: random.Random, p: b.Person) -> tuple[str, str]:
    q = b.person(rng, gender="m", exclude={p.first})
    job = rng.choice(b.JOBS)
    a = f"{q.first}, {p.first}'s only brother, works as a {job}."
    bb = rng.choice((f"{p.first}'s brother has been a {job} for ten years.", f"{p.first} visited {p.his} brother at work; he is a {job}."))
    return a, bb


def _place(rng: random.Random, p: b.Person) -> tuple[str, str]:
    short, long = rng.choice(b.PLACE_ALIASES)
    a = f"{p.first} spent a week in {short} for {rng.choice(b.EVENTS)}."
    bb = f"{p.first} says the food in {long} was the best part of the trip."
    return a, bb


def _same_first(rng: random.Random, p: b.Person) -> tuple[str, str]:
    first = rng.choice([n for n in b.FEMALE + b.MALE if n != p.first])
    l1, l2 = b.pick(rng, b.SURNAMES, 2)
    r1, r2 = b.pick(rng, ROLES, 2)
    return (f"{first} {l1}, {p.first}'s {r1}, retired last year.", f"{first} {l2} from {p.first}'s book club hosted the meeting.") if rng.random() < 0.5 \
        else (f"{first} {l1} is {p.first}'s {r1}.", f"{first} {l2} is a {r2} in {rng.choice(b.CITIES)}.")


def _same_surname(rng: random.Random, p: b.Person) -> tuple[str, str]:
    last = rng.choice(b.SURNAMES)
    woman = rng.choice(b.FEMALE)
    return rng.choice((
        (f"Mr. {last}, the maths teacher, gave {p.first} extra homework.", f"{woman} {last} runs {rng.choice(b.VENUES)}."),
        (f"Dr. {last} is {p.first}'s {rng.choice(ROLES)}.", f"{rng.choice(b.MALE)} {last}, the plumber, fixed {p.first}'s sink."),
    ))


def _same_job(rng: random.Random, p: b.Person) -> tuple[str, str]:
    q1, q2 = b.people(rng, 2)
    job, company = rng.choice(b.JOBS), rng.choice(b.COMPANIES)
    return f"{q1.full} is a {job} at {company}.", f"{q2.full} also works as a {job} at {company}."


def _nick_trap(rng: random.Random, p: b.Person) -> tuple[str, str]:
    full = rng.choice(sorted(b.NICKNAMES))
    l1, l2 = b.pick(rng, b.SURNAMES, 2)
    c1, c2 = b.pick(rng, b.CITIES, 2)
    return f"{full} {l1} is an architect in {c1}.", f"{b.NICKNAMES[full]} {l2} teaches yoga in {c2}."


def _place_trap(rng: random.Random, p: b.Person) -> tuple[str, str]:
    one, other = rng.choice(SAME_NAME_PLACES)
    return f"{p.first} flew to {one} for a wedding.", f"{p.first} has always wanted to see {other}."


MAKERS = ((_nickname, 1), (_title, 1), (_description, 1), (_place, 1),
          (_same_first, 0), (_same_surname, 0), (_same_job, 0), (_nick_trap, 0), (_place_trap, 0))


@register("entities", "pair", share=0.5)
def entity_examples(rng: random.Random, emit: Emitter, n: int) -> None:
    for _ in range(n):
        make, label = rng.choices(MAKERS, weights=(2, 2, 2, 2, 2, 2, 2, 1, 1))[0]
        a, bb = make(rng, b.person(rng))
        if rng.random() < 0.5:
            a, bb = bb, a  # co-reference is symmetric
        emit.emit("pair", {"memory_a": a, "memory_b": bb}, {"entity_equivalence": label}, notes=f"entities:{make.__name__.strip('_')}")
