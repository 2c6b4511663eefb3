"""Authored links that contradict themselves or the user's other authored links are refused
(`memory.link_rules`), and a refused request changes nothing; derived edges neither refuse nor are refused."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from controller.families import TEMPORAL_RELATIONS
from memory.errors import InvalidLinkError, NodeNotFoundError
from memory.types import RELATIONS, SYMMETRIC_RELATIONS, Edge, EdgeOrigin
from tests.memory.engine_fakes import RuleBackend, make_engine, obs

DIRECTED = ("causal", "supersedes", "summary_of", "temporal_next", "update")  # which end comes first matters


def engine_with(n: int = 3, **changes: Any) -> tuple[Any, list[str]]:
    engine = make_engine(RuleBackend(), consolidation_every=0, **changes)
    texts = ["Mira: my old bicycle broke", "Mira: I bought a new bicycle", "Tom: the weather is lovely", "Ana: I adopted a cat"]
    return engine, [engine.write(obs(t, i)).node_id for i, t in enumerate(texts[:n])]


def snapshot(engine: Any) -> tuple[list[Any], list[Any]]:
    nodes = sorted(engine.store.iter_nodes(), key=lambda n: n.id)
    edges = sorted((e for n in nodes for e in engine.store.edges_from(n.id)), key=lambda e: (e.src, e.dst, e.relation))
    return nodes, edges


def refused(engine: Any, call: Any, *words: str) -> InvalidLinkError:
    before = snapshot(engine)
    with pytest.raises(InvalidLinkError) as info:
        call()
    assert all(w in str(info.value) for w in words), str(info.value)
    assert snapshot(engine) == before  # nothing changed: no edge, no metadata (`links_authored`, refusals)
    return info.value


def test_directed_relations_are_neither_symmetric_nor_unknown() -> None:
    from memory.link_rules import REVERSE_ORDER
    from memory.types import DIRECTED_RELATIONS

    assert DIRECTED_RELATIONS == set(DIRECTED) and not DIRECTED_RELATIONS & SYMMETRIC_RELATIONS
    assert set(RELATIONS) == DIRECTED_RELATIONS | SYMMETRIC_RELATIONS  # every relation is one or the other
    assert set(REVERSE_ORDER) == set(TEMPORAL_RELATIONS) - {"unknown"}
    assert all(REVERSE_ORDER[REVERSE_ORDER[o]] == o for o in REVERSE_ORDER)


@pytest.mark.parametrize("relation", RELATIONS)
def test_a_self_link_is_refused_for_every_relation(relation: str) -> None:
    engine, (a, _, _) = engine_with()
    error = refused(engine, lambda: engine.link(a, a, relation), "itself")
    assert error.value == (a, a, relation)
    refused(engine, lambda: engine.set_links(a, [(a, relation)]), "itself")


def test_supersedes_both_ways_is_refused() -> None:
    engine, (a, b, _) = engine_with()
    engine.link(b, a, "supersedes")
    refused(engine, lambda: engine.link(a, b, "supersedes"), "contradicts", "authored", "unlink")
    refused(engine, lambda: engine.set_links(a, [(b, "supersedes")]), "contradicts")
    assert engine.unlink(b, a, "supersedes")  # withdrawn first, the other direction is fine
    assert engine.link(a, b, "supersedes").dst == b


def test_a_longer_supersedes_cycle_is_refused() -> None:
    engine, (a, b, c) = engine_with()
    engine.link(c, b, "supersedes")
    engine.link(b, a, "supersedes")
    error = refused(engine, lambda: engine.link(a, c, "supersedes"), "cycle", repr(c), repr(b), repr(a))
    assert error.value == (a, c, "supersedes")
    refused(engine, lambda: engine.set_links(a, [(c, "supersedes")]), "cycle")
    engine.link(c, a, "supersedes")  # a shortcut in the same direction closes no cycle


@pytest.mark.parametrize("relation", DIRECTED)
def test_the_reverse_of_a_directed_relation_is_refused(relation: str) -> None:
    engine, (a, _, c) = engine_with()  # a and c share no derived edge of these relations
    engine.link(a, c, relation)
    refused(engine, lambda: engine.link(c, a, relation), "contradicts", relation)
    refused(engine, lambda: engine.set_links(c, [(a, relation)]), "contradicts")


def test_the_reverse_of_a_derived_edge_is_accepted_and_overrules_it() -> None:
    """A derived edge is the engine's guess: the user's authored link may contradict it, and the guess goes (refused,
    as an `unlink` would, so no later judgment brings it back)."""
    engine, (a, b, _) = engine_with()
    (derived,) = [e for e in engine.store.edges_from(a, ["temporal_next"])]
    assert derived.dst == b and derived.origin == EdgeOrigin.DETERMINISTIC
    assert engine.link(b, a, "temporal_next").origin == EdgeOrigin.EXPLICIT
    assert engine.store.edges_from(a, ["temporal_next"]) == []
    assert [a, b, "temporal_next"] in engine.get(a).node.metadata["links_refused"]
    refused(engine, lambda: engine.link(a, b, "temporal_next"), "contradicts")  # now the reverse is authored


@pytest.mark.parametrize("how", ["link", "set_links"])
def test_an_authored_supersedes_marks_its_target_superseded(how: str) -> None:
    """Only consolidation set `superseded_by`: a user's "b supersedes a" left a ranked as a current memory."""
    engine, (a, b, c) = engine_with()
    engine.store.add_edge(Edge(a, b, "supersedes", EdgeOrigin.INFERRED, 0.9))  # consolidation's opposite guess
    engine.store.update_node(replace(engine.store.get_node(b), superseded_by=a))
    if how == "link":
        engine.link(b, a, "supersedes")
    else:
        engine.set_links(b, [(a, "supersedes")])
    assert engine.get(a).node.superseded_by == b
    assert engine.get(b).node.superseded_by is None  # the overruled guess took its mark with it
    assert engine.store.edges_from(a, ["supersedes"]) == []
    engine.unlink(b, a, "supersedes")
    assert engine.get(a).node.superseded_by is None


@pytest.mark.parametrize("relation", sorted(SYMMETRIC_RELATIONS))
def test_symmetric_relations_take_both_directions(relation: str) -> None:
    engine, (a, _, c) = engine_with()
    engine.link(a, c, relation)
    engine.link(c, a, relation)
    engine.set_links(c, [(a, relation)])
    edges = [*engine.store.edges_from(a, [relation]), *engine.store.edges_from(c, [relation])]
    assert {(e.src, e.dst) for e in edges if e.origin == EdgeOrigin.EXPLICIT} == {(a, c), (c, a)}


def test_a_temporal_order_that_contradicts_the_reverse_is_refused() -> None:
    engine, (a, _, c) = engine_with()
    engine.link(a, c, "temporal", attrs={"order": "before"})
    refused(engine, lambda: engine.link(c, a, "temporal", attrs={"order": "before"}), "'before'", "'after'")
    refused(engine, lambda: engine.link(c, a, "temporal", attrs={"order": "same_time"}), "contradicts")
    assert engine.link(c, a, "temporal", attrs={"order": "after"}).attrs == {"order": "after"}
    engine.link(c, a, "temporal", attrs={"order": "unknown"})  # no claim, no contradiction
    engine.link(c, a, "temporal", attrs={"order": ["before"]})  # not an order at all


def test_a_duplicate_entry_in_an_authored_list_is_refused() -> None:
    engine, (a, b, c) = engine_with()
    engine.set_links(a, [(c, "causal")])
    error = refused(engine, lambda: engine.set_links(a, [(b, "semantic"), (c, "update"), (b, "semantic")]), "twice", repr(b))
    assert error.value == (a, b, "semantic")
    view = engine.set_links(a, [(b, "semantic"), (b, "causal")])  # same target, other relation: fine
    explicit = sorted((e.dst, e.relation) for e in view.edges_out if e.origin == EdgeOrigin.EXPLICIT)
    assert explicit == [(b, "causal"), (b, "semantic")]


def test_a_list_refused_after_its_first_entries_changes_nothing() -> None:
    engine, (a, b, c) = engine_with()
    engine.link(a, b, "causal")
    engine.link(c, a, "supersedes")
    refused(engine, lambda: engine.set_links(a, [(b, "semantic"), (c, "supersedes")]), "contradicts")
    assert [(e.dst, e.relation) for e in engine.store.edges_from(a) if e.origin == EdgeOrigin.EXPLICIT] == [(b, "causal")]


def test_unknown_nodes_are_still_reported_first() -> None:
    engine, (a, _, _) = engine_with()
    with pytest.raises(NodeNotFoundError):
        engine.set_links(a, [("nope", "semantic"), ("nope", "semantic")])
    with pytest.raises(NodeNotFoundError):
        engine.link("nope", "nope", "semantic")


def test_a_supersedes_cycle_through_a_derived_edge_is_accepted() -> None:
    engine, (a, b, c) = engine_with()
    engine.link(c, b, "supersedes")
    engine.store.add_edge(Edge(b, a, "supersedes", EdgeOrigin.INFERRED, 0.9))  # as consolidation would write it
    assert engine.link(a, c, "supersedes").origin == EdgeOrigin.EXPLICIT  # c -> b -> a is not all authored
    refused(engine, lambda: engine.link(b, a, "supersedes"), "cycle", repr(a), repr(c), repr(b))  # authoring it is


def test_derived_edges_do_not_contradict_an_authored_directed_link() -> None:
    """Consolidation judged "the newer supersedes the older" against the user's "the older supersedes the newer"
    and marked both superseded; a pair judgment could write causal a -> b beside the authored b -> a."""
    from tests.memory.test_write_consolidation import TEXTS, represent

    engine = make_engine(RuleBackend(represent("supersede")), consolidation_every=0)
    older, newer = (engine.write(obs(t, i, source=f"D1:{i + 1}")).node_id for i, t in enumerate(TEXTS[:2]))
    engine.link(older, newer, "supersedes")
    assert engine.consolidate().superseded == 0
    assert engine.store.edges_from(newer, ["supersedes"]) == []
    assert (engine.get(older).node.superseded_by, engine.get(newer).node.superseded_by) == (None, older)

    backend = RuleBackend()
    engine = make_engine(backend, consolidation_every=0)
    a = engine.write(obs("Mira: my old bicycle broke", 0)).node_id
    b = engine.write(obs("Mira: I bought a new bicycle", 1)).node_id
    engine.link(b, a, "causal")
    backend.rules[("pair", "causal")] = lambda s: 0.9  # the model now judges that a caused b
    engine.edit(b, "Mira: I bought a new bicycle at the shop")
    engine.relink([a, b])  # the rules are the user-facing API's: the judgment is skipped, not refused with an error
    assert [e.src for e in [*engine.store.edges_from(a, ["causal"]), *engine.store.edges_from(b, ["causal"])]] == [b]
    assert engine.link(b, a, "causal").origin == EdgeOrigin.EXPLICIT
