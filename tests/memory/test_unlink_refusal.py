"""Unlinking is a user decision (the Space blog: "a later processing step must not quietly merge the old links
back"): no judgment, deterministic edge, relink, edit or consolidation re-adds an unlinked link, on both stores;
an explicit link lifts the refusal and deleting a node drops it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.client import SystemOneClient
from controller.embedding import HashingEmbedder
from memory.consolidation import consolidate
from memory.engine import Engine
from memory.store import open_store
from memory.types import EdgeOrigin
from memory.write_path import REFUSALS
from tests.memory.engine_fakes import RuleBackend, make_engine, obs

OLD = "Mira: My old bicycle broke in Berlin."
NEW = "Mira: I bought a new bicycle in Berlin because my old one broke."
RULES = {("pair", "semantic"): lambda s: 0.9, ("pair", "update"): lambda s: 0.9}


def open_engine(path: Path | None) -> Engine:
    store = open_store(path, dim=64, embedder="hashing-64")
    client = SystemOneClient(RuleBackend(RULES))
    engine = Engine(store, client, HashingEmbedder(64), make_engine(consolidation_every=0).config)
    engine._owned = [store, client]  # closed by `Engine.close`, as `Engine.open` arranges
    return engine


@pytest.fixture(params=["inmemory", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    engine = open_engine(None if request.param == "inmemory" else tmp_path / "mem.db")
    yield engine
    engine.close()


def between(engine: Engine, a: str, b: str, relation: str) -> list[tuple[str, str, str]]:
    """The (src, dst, origin) of every `relation` edge joining a and b, either way."""
    edges = [*engine.store.edges_from(a, [relation]), *engine.store.edges_from(b, [relation])]
    return sorted((e.src, e.dst, e.origin.value) for e in edges if {e.src, e.dst} == {a, b})


def consolidating(engine: Engine, label: str) -> None:
    """Make consolidation answer `label` for every pair."""
    engine.controller.client.backend.rules[("consolidation", "representation")] = lambda s: {label: 0.9}  # type: ignore[attr-defined]


def two(engine: Engine) -> tuple[str, str]:
    a = engine.write(obs(OLD, 0)).node_id
    b = engine.write(obs(NEW, 60)).node_id
    return a, b


def test_unlink_then_relink_keeps_the_link_gone_both_ways(engine: Engine) -> None:
    a, b = two(engine)
    assert between(engine, a, b, "semantic") == [(b, a, "inferred")]
    assert engine.unlink(b, a, "semantic")
    engine.relink([b, a])  # judging a writes a -> b: the same symmetric link
    assert between(engine, a, b, "semantic") == []
    assert between(engine, a, b, "update")  # other relations are untouched
    assert engine.store.check() == []


def test_unlink_then_edit_and_relink_keeps_it_gone(engine: Engine) -> None:
    a, b = two(engine)
    engine.unlink(b, a, "semantic")
    engine.edit(b, "Mira: I bought a new bicycle in Berlin since the old one broke.")
    report = engine.relink()
    assert report.statuses == {b: report.statuses[b]} and report.edges_written > 0
    assert between(engine, a, b, "semantic") == []
    assert [REFUSALS in engine.get(n).node.metadata for n in (a, b)] == [True, True]


def test_unlinked_deterministic_entity_edge_stays_gone_after_edits(engine: Engine) -> None:
    a, b = two(engine)
    assert between(engine, a, b, "entity") == [(b, a, "deterministic")]
    assert engine.unlink(b, a, "entity")
    engine.edit(a, "Mira: My old bicycle broke down in Berlin.")  # refreshing a's entity edges writes a -> b
    engine.edit(b, "Mira: I bought a new bicycle in Berlin after the old one broke.")
    assert between(engine, a, b, "entity") == []


def test_consolidation_does_not_readd_an_unlinked_link(engine: Engine) -> None:
    consolidating(engine, "link")
    a, b = two(engine)
    engine.unlink(b, a, "semantic")
    report = engine.consolidate()  # the pair is still joined by its inferred update edge
    assert report.pairs == 1 and report.linked == 0
    assert between(engine, a, b, "semantic") == []


def test_consolidation_does_not_readd_an_unlinked_supersession(engine: Engine) -> None:
    consolidating(engine, "supersede")
    a, b = two(engine)
    assert engine.consolidate().superseded == 1 and engine.get(a).node.superseded_by == b
    assert engine.unlink(b, a, "supersedes")
    report = consolidate(engine.store, engine.controller, engine.embedder, [a, b], engine.config,
                         next_seq=engine._take_seq, done=set())
    assert report.pairs == 1 and report.superseded == 0
    assert between(engine, a, b, "supersedes") == [] and engine.get(a).node.superseded_by is None


def test_an_explicit_link_lifts_the_refusal(engine: Engine) -> None:
    a, b = two(engine)
    engine.unlink(b, a, "semantic")
    engine.link(a, b, "semantic")  # the reverse direction of a symmetric relation lifts it too
    assert [REFUSALS in engine.get(n).node.metadata for n in (a, b)] == [False, False]
    engine.unlink(a, b, "semantic")  # the explicit link goes; refused again
    engine.relink([a, b])
    assert between(engine, a, b, "semantic") == []
    engine.set_links(b, [(a, "semantic")])  # an authored list links explicitly as well
    engine.set_links(b, [])
    engine.relink([a, b])
    assert between(engine, a, b, "semantic") == [(b, a, "inferred")]


def test_unlink_removes_the_derived_reverse_of_a_symmetric_link(engine: Engine) -> None:
    a, b = two(engine)
    engine.relink([a])  # a -> b temporal as well
    assert between(engine, a, b, "temporal") == sorted([(a, b, "deterministic"), (b, a, "deterministic")])
    assert engine.unlink(b, a, "temporal")
    assert between(engine, a, b, "temporal") == []
    engine.relink([a, b])
    assert between(engine, a, b, "temporal") == []


def test_deleting_a_node_drops_its_refusals(engine: Engine) -> None:
    a, b = two(engine)
    engine.unlink(b, a, "semantic")
    assert engine.get(b).node.metadata[REFUSALS] == [[b, a, "semantic"]]
    assert engine.delete(a)
    assert REFUSALS not in engine.get(b).node.metadata
    assert engine.store.check() == []


def test_a_refusal_survives_reopening_the_sqlite_store(tmp_path: Path) -> None:
    path = tmp_path / "mem.db"
    with open_engine(path) as engine:
        a, b = two(engine)
        engine.unlink(b, a, "semantic")
    with open_engine(path) as engine:
        assert engine.get(b).node.metadata[REFUSALS] == [[b, a, "semantic"]]
        engine.relink([a, b])
        assert between(engine, a, b, "semantic") == []
        assert engine.store.check() == []
        assert all(e.origin != EdgeOrigin.EXPLICIT for e in engine.store.edges_from(b))
