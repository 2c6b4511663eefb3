"""Directional causality (PAIR family, `causal` and `semantic`): A caused B, B caused A, or unrelated.

The catalogue's causal Noul asks whether memory_b caused / enabled / motivated memory_a. From a bank of
(cause, effect) situations about one person:

- effect in memory_a, cause in memory_b           -> causal 1, semantic 1
- cause in memory_a, effect in memory_b (reversed) -> causal 0, semantic 1 (related, wrong direction)
- two situations of the same person, unrelated     -> causal 0, semantic 0 (same person is not same subject)
- the cause happened to someone else               -> causal 0, semantic 0 (another person's situation)
"""

from __future__ import annotations

import random

from data.synthetic import banks as b
from data.synthetic.emit import Emitter
from data.synthetic.registry import register

# (cause, effect); {p} first name, {his}/{him}/{he} pronouns, {city}, {company}, {pet}, {event}.
PAIRS: tuple[tuple[str, str], ...] = (
    ("{p} sprained {his} ankle during training.", "{p} had to pull out of the marathon."),
    ("{p} got a promotion at {company}.", "{p} threw a dinner party for friends to celebrate."),
    ("{p}'s flight to {city} was cancelled.", "{p} missed the first day of {event}."),
    ("{p} adopted a puppy named {pet}.", "{p} started getting up at six for morning walks."),
    ("A storm knocked out the power on {p}'s street for three days.", "{p} had to throw away all the food in {his} freezer."),
    ("{p} failed {his} driving test.", "{p} booked ten more driving lessons."),
    ("{p}'s landlord raised the rent by a third.", "{p} moved into a smaller flat across town."),
    ("{p} was diagnosed with high blood pressure.", "{p} cut salt out of {his} diet."),
    ("{p} read a book about minimalism.", "{p} gave away half of {his} clothes."),
    ("{p} won a scholarship to study in {city}.", "{p} moved to {city} in the autumn."),
    ("{p}'s laptop was stolen from {his} car.", "{p} lost two weeks of work on {his} thesis."),
    ("{p} volunteered at the animal shelter all summer.", "{p} decided to study veterinary medicine."),
    ("{p}'s grandmother taught {him} to knit.", "{p} knits scarves for the whole family every winter."),
    ("{p} stayed up all night finishing the report.", "{p} fell asleep during the Monday meeting."),
    ("{p} forgot to water the garden for two weeks.", "{p}'s tomato plants dried out."),
    ("{p}'s team lost its biggest client.", "{p}'s department froze all hiring."),
    ("{p} dropped {his} phone in the lake.", "{p} bought a new phone on Saturday."),
    ("{p} heard a moving talk about climate change.", "{p} started cycling to work."),
    ("{p}'s car broke down on the highway.", "{p} arrived three hours late to {event}."),
    ("{p} got food poisoning from bad sushi.", "{p} stayed home from work for two days."),
    ("{p}'s best friend moved to {city}.", "{p} started flying to {city} every few months."),
    ("{p} saved money for two years.", "{p} bought {his} first house."),
    ("{p} had a bad fall while skiing.", "{p} spent the holidays with {his} leg in a cast."),
    ("{p}'s daughter was born in the spring.", "{p} took six months of parental leave."),
    ("The canteen at {p}'s office closed.", "{p} started bringing lunch from home."),
    ("{p} was laid off from {company}.", "{p} started {his} own consulting business."),
    ("{p} missed the last bus home.", "{p} walked home in the rain."),
    ("{p} studied Spanish every evening for a year.", "{p} could finally chat with the locals in Seville."),
    ("{p}'s doctor told {him} to exercise more.", "{p} joined a running club."),
    ("{p} found mould in {his} bathroom.", "{p} called the landlord and asked for repairs."),
    ("{p} lost {his} keys at the beach.", "{p} had to sleep at {his} sister's place."),
    ("{p}'s article went viral.", "{p} got three job offers in one week."),
    ("{p} watched a documentary about ocean plastic.", "{p} stopped buying bottled water."),
    ("{p}'s son joined the school band.", "{p} bought a second-hand trumpet."),
)


def _fill(template: str, p: b.Person, rng: random.Random, slots: dict[str, str]) -> str:
    return template.format(p=p.first, his=p.his, him=p.him, he=p.he, **slots)


def _slots(rng: random.Random) -> dict[str, str]:
    return {"city": rng.choice(b.CITIES), "company": rng.choice(b.COMPANIES), "pet": rng.choice(b.PETS), "event": rng.choice(b.EVENTS)}


@register("causal", "pair", share=0.5)
def causal_examples(rng: random.Random, emit: Emitter, n: int) -> None:
    for _ in range(n):
        p, q = b.people(rng, 2)
        slots = _slots(rng)
        i, j = rng.sample(range(len(PAIRS)), 2)
        cause, effect = (_fill(t, p, rng, slots) for t in PAIRS[i])
        case = rng.choices(("forward", "reverse", "unrelated", "other_person"), weights=(3, 3, 2, 2))[0]
        if case == "forward":
            a, bb, labels = effect, cause, {"causal": 1, "semantic": 1}
        elif case == "reverse":
            a, bb, labels = cause, effect, {"causal": 0, "semantic": 1}
        elif case == "unrelated":
            other = _fill(PAIRS[j][rng.randrange(2)], p, rng, slots)
            a, bb = (effect, other) if rng.random() < 0.5 else (other, effect)
            labels = {"causal": 0, "semantic": 0}
        else:
            # q's trouble did not cause p's outcome: the texts never connect the two people.
            a, bb, labels = effect, _fill(PAIRS[i][0], q, rng, slots), {"causal": 0, "semantic": 0}
        emit.emit("pair", {"memory_a": a, "memory_b": bb}, labels, notes=f"causal:{case}")
