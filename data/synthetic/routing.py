"""Query routing (ROUTING family): queries whose six needs are fixed by their template.

Labels are (semantic, temporal, causal, entity, multi_hop, recency), following the catalogue's criteria:
- semantic: topical search finds the evidence (0 only for queries indexed by a date alone);
- temporal: when / how long / before-after / a date window;
- causal: why, what led to, what happened as a result;
- entity: the query gathers the mentions of a named person, place or organisation *other than the person
  the question is about* ("Who is Maya's mentor?", "What do we know about Tom Berg?"); "What does Maya
  like?" is not an entity query (same rule as the LoCoMo routing labels);
- multi_hop: lists, counts, comparisons, inferences, or two facts chained;
- recency: current / latest / still / now.
"""

from __future__ import annotations

import random

from data.synthetic import banks as b
from data.synthetic.emit import Emitter
from data.synthetic.registry import register

NEEDS = ("semantic", "temporal", "causal", "entity", "multi_hop", "recency")

# template, labels; slots: {p} {q} {full} {base} {past} {ger} {event} {city} {company} {rel} {hobby} {genre} {date} {day} {month}
TEMPLATES: tuple[tuple[str, tuple[int, int, int, int, int, int]], ...] = (
    ("When did {p} {base}?", (1, 1, 0, 0, 0, 0)),
    ("What year did {p} start {ger}?", (1, 1, 0, 0, 0, 0)),
    ("How long has {p} been {ger}?", (1, 1, 0, 0, 0, 0)),
    ("How long ago did {p} {base}?", (1, 1, 0, 0, 0, 0)),
    ("What did {p} do the week before {event}?", (1, 1, 0, 0, 1, 0)),
    ("Did {p} {base} before or after {event}?", (1, 1, 0, 0, 1, 0)),
    ("Which came first for {p}: {ger} or {event}?", (1, 1, 0, 0, 1, 0)),
    ("Why did {p} {base}?", (1, 0, 1, 0, 0, 0)),
    ("What made {p} decide to {base}?", (1, 0, 1, 0, 0, 0)),
    ("What led {p} to move to {city}?", (1, 0, 1, 0, 0, 0)),
    ("What happened as a result of {p}'s trip to {city}?", (1, 0, 1, 0, 0, 0)),
    ("Why did {p} leave {company}, and when?", (1, 1, 1, 0, 1, 0)),
    ("Who is {p}'s {rel}?", (1, 0, 0, 1, 0, 0)),
    ("What do we know about {full}?", (1, 0, 0, 1, 1, 0)),
    ("What did {p}'s {rel} {q} recommend?", (1, 0, 0, 1, 0, 0)),
    ("What has {p} said about {company} so far?", (1, 0, 0, 1, 1, 0)),
    ("Tell me everything about {p}'s visits to {city}.", (1, 0, 0, 1, 1, 0)),
    ("What do {p} and {q} have in common?", (1, 0, 0, 0, 1, 0)),
    ("How many times has {p} been to {city}?", (1, 0, 0, 0, 1, 0)),
    ("List all the hobbies {p} has mentioned.", (1, 0, 0, 0, 1, 0)),
    ("Would {p} enjoy a {hobby} class?", (1, 0, 0, 0, 1, 0)),
    ("What activities does {p} do with {p_his} kids?", (1, 0, 0, 0, 1, 0)),
    ("Where does {p} live now?", (1, 0, 0, 0, 0, 1)),
    ("What is {p}'s current job?", (1, 0, 0, 0, 0, 1)),
    ("Is {p} still working at {company}?", (1, 0, 0, 0, 0, 1)),
    ("What's the latest on {p}'s plans for {event}?", (1, 0, 0, 0, 0, 1)),
    ("How is {p} feeling these days?", (1, 0, 0, 0, 0, 1)),
    ("What did {p} and I talk about on {date}?", (0, 1, 0, 0, 0, 0)),
    ("What happened on {day}, {date}?", (0, 1, 0, 0, 0, 0)),
    ("What did {p} and I discuss in {month}?", (0, 1, 0, 0, 0, 0)),
    ("What kind of {genre} does {p} like?", (1, 0, 0, 0, 0, 0)),
    ("What does {p} think about {hobby}?", (1, 0, 0, 0, 0, 0)),
    ("What did {p} {past_short} at {event}?", (1, 0, 0, 0, 0, 0)),
    ("Is {p} allergic to anything?", (1, 0, 0, 0, 0, 0)),
)


def query(rng: random.Random, template: str) -> str:
    p, q = b.people(rng, 2)
    base, past, ger = rng.choice(b.ACTIVITIES)
    return template.format(
        p=p.first, q=q.first, full=q.full, base=base, past=past, ger=ger, event=rng.choice(b.EVENTS),
        city=rng.choice(b.CITIES), company=rng.choice(b.COMPANIES), rel=rng.choice(b.RELATIONS),
        hobby=rng.choice(b.HOBBIES), genre=rng.choice(b.GENRES), date=b.date_phrase(rng), day=rng.choice(b.WEEKDAYS),
        month=rng.choice(b.MONTHS), p_his=p.his, past_short=rng.choice(("eat", "wear", "bring", "say", "buy")),
    )


@register("routing", "routing")
def routing_examples(rng: random.Random, emit: Emitter, n: int) -> None:
    for _ in range(n):
        template, labels = rng.choice(TEMPLATES)
        emit.emit("routing", {"query": query(rng, template)}, dict(zip(NEEDS, labels)), notes="routing")
