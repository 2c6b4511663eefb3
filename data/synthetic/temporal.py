"""Implicit temporal relations (PAIR family, the 7-option `temporal` Choice) from generated timelines.

Each state comes from two events with day intervals on one timeline. One memory mentions the other
event with relative phrasing ("the week before", "while", "a few days after", "on the same day"), or both
give calendar days of one month, or neither says anything about time. The label is computed from the
intervals by `relation` (point events are one day long):

    before / after      A ends before B starts / starts after B ends
    during / contains   A strictly inside B / B strictly inside A
    overlaps            they share some days, neither inside the other, not identical
    same_time           identical intervals
    unknown             the texts carry no order (the intervals exist but are not shown)

Labels are always computed from the intervals, never written next to a template by hand; half the pairs
are shown mirrored (memory_a and memory_b swapped, label mirrored).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from data.synthetic import banks as b
from data.synthetic.emit import Emitter
from data.synthetic.registry import register

BEFORE_GAPS: tuple[tuple[str, int], ...] = (
    ("the day before", 1), ("two days before", 2), ("a few days before", 4), ("the week before", 7),
    ("two weeks before", 14), ("a month before", 30), ("shortly before", 3),
)
AFTER_GAPS: tuple[tuple[str, int], ...] = (
    ("the day after", 1), ("two days after", 2), ("a few days after", 4), ("the week after", 7),
    ("two weeks after", 14), ("a month after", 30), ("right after", 1),
)
STAYS: tuple[str, ...] = (
    "spent three weeks in {city} for work", "spent a month in {city} visiting family",
    "was in {city} for a two-week course", "spent the summer working at a hotel in {city}",
)
LONG_ACTIVITIES: tuple[str, ...] = (
    "took a {hobby} course", "did an internship at {company}", "trained for {event}", "renovated {his} kitchen",
    "looked after {his} neighbour's dog", "worked night shifts at {company}",
)


@dataclass(frozen=True)
class Interval:
    start: int
    end: int  # inclusive day


def relation(a: Interval, b_: Interval) -> str:
    """The catalogue relation of A relative to B."""
    if a == b_:
        return "same_time"
    if a.end < b_.start:
        return "before"
    if a.start > b_.end:
        return "after"
    if b_.start <= a.start and a.end <= b_.end:
        return "during"
    if a.start <= b_.start and b_.end <= a.end:
        return "contains"
    return "overlaps"


def _fmt(text: str, p: b.Person, rng: random.Random) -> str:
    return text.format(city=rng.choice(b.CITIES), hobby=rng.choice(b.HOBBIES), company=rng.choice(b.COMPANIES),
                       event=rng.choice(b.EVENTS), his=p.his, he=p.he)


def _relative(rng: random.Random, p: b.Person) -> tuple[str, str, Interval, Interval]:
    """A short event dated relative to another short event (before / after / same day)."""
    ev = rng.choice(b.EVENTS)
    (_, act_a, _), = rng.sample(b.ACTIVITIES, 1)
    anchor = Interval(100, 100)
    kind = rng.choice(("before", "after", "same"))
    if kind == "before":
        phrase, gap = rng.choice(BEFORE_GAPS)
        a = Interval(100 - gap, 100 - gap)
        text_a = f"{p.first} {act_a} {phrase} {ev}."
    elif kind == "after":
        phrase, gap = rng.choice(AFTER_GAPS)
        a = Interval(100 + gap, 100 + gap)
        text_a = f"{p.first} {act_a} {phrase} {ev}."
    else:
        a = anchor
        text_a = f"On the same day as {ev}, {p.first} {act_a}."
    text_b = f"{p.first} went to {ev}." if rng.random() < 0.5 else f"{ev[0].upper()}{ev[1:]} finally took place and {p.first} was there."
    return text_a, text_b, a, anchor


def _stay(rng: random.Random, p: b.Person) -> tuple[str, str, Interval, Interval]:
    """A short event inside, before or after a long stay; or a long activity partly overlapping the stay."""
    city = rng.choice(b.CITIES)
    stay = rng.choice(STAYS).format(city=city)
    long_b = Interval(100, 121)
    text_b = f"{p.first} {stay}."
    _, act, _ = rng.choice(b.ACTIVITIES)
    kind = rng.choice(("inside", "before", "after", "overlap"))
    if kind == "inside":
        return f"While {p.first} was in {city}, {p.he} {act}.", text_b, Interval(110, 110), long_b
    if kind == "before":
        phrase, gap = rng.choice(BEFORE_GAPS)
        return f"{p.first} {act} {phrase} {p.his} trip to {city}.", text_b, Interval(100 - gap, 100 - gap), long_b
    if kind == "after":
        phrase, gap = rng.choice(AFTER_GAPS)
        return f"{p.first} {act} {phrase} getting back from {city}.", text_b, Interval(121 + gap, 121 + gap), long_b
    activity = _fmt(rng.choice(LONG_ACTIVITIES), p, rng)
    return (f"{p.first} {activity}; it began while {p.he} was still in {city} and went on for weeks after {p.he} got back.",
            text_b, Interval(115, 150), long_b)


def _months(rng: random.Random, p: b.Person) -> tuple[str, str, Interval, Interval]:
    """Two long activities given as month ranges of one year."""
    m = rng.sample(range(12), 4)
    m.sort()
    acts = rng.sample(LONG_ACTIVITIES, 2)
    pairs = {
        "overlaps": ((m[0], m[2]), (m[1], m[3])),
        "during": ((m[1], m[2]), (m[0], m[3])),
        "before": ((m[0], m[1]), (m[2], m[3])),
    }
    kind = rng.choice(tuple(pairs))
    (a0, a1), (b0, b1) = pairs[kind]
    if rng.random() < 0.5:  # also produce after / contains / the mirrored overlap
        (a0, a1), (b0, b1) = (b0, b1), (a0, a1)
    text = "From {s} to {e}, {p} {act}."
    text_a = text.format(s=b.MONTHS[a0], e=b.MONTHS[a1], p=p.first, act=_fmt(acts[0], p, rng))
    text_b = text.format(s=b.MONTHS[b0], e=b.MONTHS[b1], p=p.first, act=_fmt(acts[1], p, rng))
    # Month m spans days [30 m, 30 m + 29].
    return text_a, text_b, Interval(30 * a0, 30 * a1 + 29), Interval(30 * b0, 30 * b1 + 29)


def _calendar(rng: random.Random, p: b.Person) -> tuple[str, str, Interval, Interval]:
    """Two single days of the same month."""
    month = rng.choice(b.MONTHS)
    d1 = rng.randint(1, 28)
    d2 = d1 if rng.random() < 0.2 else rng.randint(1, 28)
    (_, act_a, _), (_, act_b, _) = rng.sample(b.ACTIVITIES, 2)
    return (f"On {d1} {month}, {p.first} {act_a}.", f"{p.first} {act_b} on {d2} {month}.", Interval(d1, d1), Interval(d2, d2))


def _unknown(rng: random.Random, p: b.Person) -> tuple[str, str, None, None]:
    """No order in the texts: plain events, sometimes with time words that order nothing."""
    (_, act_a, ger), (_, act_b, _) = rng.sample(b.ACTIVITIES, 2)
    text_a = rng.choice((f"{p.first} {act_a}.", f"{p.first} always stretches before {ger}.",
                         f"{p.first} {act_a} with {p.his} cousin."))
    text_b = rng.choice((f"{p.first} {act_b}.", f"{p.first} went to {rng.choice(b.EVENTS)}.",
                         f"After a long day, {p.first} likes to {rng.choice(b.ACTIVITIES)[0]}."))
    return text_a, text_b, None, None


MAKERS = (_relative, _stay, _months, _calendar, _unknown)


@register("temporal", "pair", share=0.75)
def temporal_examples(rng: random.Random, emit: Emitter, n: int) -> None:
    for _ in range(n):
        p = b.person(rng)
        make = rng.choices(MAKERS, weights=(2, 3, 3, 2, 1))[0]
        text_a, text_b, a, bb = make(rng, p)
        label = "unknown" if a is None or bb is None else relation(a, bb)
        if rng.random() < 0.5:  # the same pair seen from the other side
            text_a, text_b = text_b, text_a
            label = MIRROR[label]
        emit.emit("pair", {"memory_a": text_a, "memory_b": text_b}, {"temporal": label}, notes=f"temporal:{make.__name__.strip('_')}")


MIRROR: dict[str, str] = {
    "before": "after", "after": "before", "during": "contains", "contains": "during",
    "overlaps": "overlaps", "same_time": "same_time", "unknown": "unknown",
}
