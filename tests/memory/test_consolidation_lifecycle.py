"""Consolidation summaries are derived data: editing or deleting a source takes the summaries built from it
along (summaries of summaries too), on both stores, and leaves the store consistent. Originals stay."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from controller.client import SystemOneClient
from controller.embedding import HashingEmbedder
from memory.consolidation import _merge
from memory.engine import Engine
from memory.store import open_store
from memory.types import Edge, EdgeOrigin
from tests.memory.engine_fakes import RuleBackend, make_engine, obs
from tests.memory.test_write_consolidation import represent, write_all

BERLIN = "Mira: I live in Berlin."
FLAT = "Mira: My flat in Berlin has a balcony."


@pytest.fixture(params=["inmemory", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    path = None if request.param == "inmemory" else tmp_path / "mem.db"
    store = open_store(path, dim=64, embedder="hashing-64")
    engine = Engine(store, SystemOneClient(RuleBackend()), HashingEmbedder(64), make_engine(consolidation_every=0).config)
    yield engine
    store.close()


def merge(engine: Engine, *ids: str) -> str:
    with engine.store.transaction():
        made = _merge(engine.store, engine.embedder, engine.store.get_nodes(list(ids)), engine._take_seq, None, 0.9)
    assert made is not None
    return made


def consistent(engine: Engine) -> None:
    store = engine.store
    assert store.check() == []
    nodes = {n.id: n for n in store.iter_nodes()}
    for node in nodes.values():
        if node.superseded_by is not None:  # a supersession points at a live node, through a live edge
            assert node.superseded_by in nodes
            assert any(e.dst == node.id for e in store.edges_from(node.superseded_by, ["supersedes"]))
        if node.kind == "summary":  # a live summary still has every source it was built from, with that text
            sources = {e.dst: e for e in store.edges_from(node.id, ["summary_of"])}
            assert set(sources) == set(node.metadata["summary_of"])
            assert all(nodes[i].fingerprint == e.dst_fingerprint for i, e in sources.items())


def everything_returned(engine: Engine, text: str) -> set[str]:
    """Every node id any retrieval channel or query returns for `text`."""
    store = engine.store
    ids = {i for i, _ in store.text_search(text, 50)}
    ids |= {i for i, _ in store.vector_search(engine.embedder.embed([text])[0], 50)}
    ids |= {e.node_id for e in engine.query(text, k=20).evidence}
    return ids


def two(engine: Engine) -> tuple[str, str]:
    a = engine.write(obs(BERLIN, 0)).node_id
    b = engine.write(obs(FLAT, 1)).node_id
    return a, b


def test_editing_a_source_removes_its_summary(engine: Engine) -> None:
    a, b = two(engine)
    summary = merge(engine, a, b)
    assert summary in everything_returned(engine, "Where does Mira live?")
    view = engine.edit(a, "Mira: I live in Paris.")
    assert engine.store.get_node(summary) is None
    assert summary not in everything_returned(engine, "Where does Mira live?")
    assert all("I live in Berlin" not in n.content for n in engine.store.iter_nodes())
    assert engine.store.get_node(b).content == FLAT  # the other source is an original: kept as it was
    assert view.node.content == "Mira: I live in Paris." and all(e.src != summary for e in view.backlinks)
    consistent(engine)


def test_deleting_a_source_removes_its_text_from_every_summary(engine: Engine) -> None:
    a, b = two(engine)
    summary = merge(engine, a, b)
    assert engine.delete(b) is True
    assert engine.store.get_node(summary) is None
    assert all("balcony" not in n.content for n in engine.store.iter_nodes())
    assert summary not in everything_returned(engine, "balcony flat")
    assert engine.store.get_node(a).content == BERLIN
    consistent(engine)


def test_an_edit_that_keeps_the_text_keeps_the_summary(engine: Engine) -> None:
    a, b = two(engine)
    summary = merge(engine, a, b)
    before = engine.store.edges_from(summary)
    engine.edit(a, BERLIN)
    assert engine.store.get_node(summary) is not None and engine.store.edges_from(summary) == before
    consistent(engine)


def test_summaries_of_summaries_go_too_and_unrelated_ones_stay(engine: Engine) -> None:
    a, b = two(engine)
    c = engine.write(obs("Mira: The balcony faces the river.", 2)).node_id
    d = engine.write(obs("Tom: I cycle to work.", 3)).node_id
    e = engine.write(obs("Tom: My bicycle is green.", 4)).node_id
    inner = merge(engine, a, b)
    outer = merge(engine, inner, c)
    unrelated = merge(engine, d, e)
    engine.edit(a, "Mira: I live in Paris.")
    assert engine.store.get_node(inner) is None and engine.store.get_node(outer) is None
    assert engine.store.get_node(unrelated) is not None
    assert {n.id for n in engine.store.iter_nodes()} == {a, b, c, d, e, unrelated}
    consistent(engine)


def test_editing_or_deleting_a_summary_takes_the_summaries_built_on_it(engine: Engine) -> None:
    a, b = two(engine)
    c = engine.write(obs("Mira: The balcony faces the river.", 2)).node_id
    inner = merge(engine, a, b)
    outer = merge(engine, inner, c)
    engine.edit(inner, "Mira lives in Berlin, in a flat with a balcony.")  # the user rewrites the summary itself
    assert engine.store.get_node(outer) is None and engine.store.get_node(inner) is not None
    outer = merge(engine, inner, c)
    assert engine.delete(inner) is True
    assert engine.store.get_node(outer) is None
    assert {n.id for n in engine.store.iter_nodes()} == {a, b, c}
    consistent(engine)


def test_a_supersession_by_a_removed_summary_is_cleared(engine: Engine) -> None:
    a, b = two(engine)
    c = engine.write(obs("Mira: I rent a flat.", 2)).node_id
    summary = merge(engine, a, b)
    target = engine.store.get_node(c)
    with engine.store.transaction():
        engine.store.update_node(replace(target, superseded_by=summary))
        engine.store.add_edge(Edge(summary, c, "supersedes", EdgeOrigin.INFERRED, 0.9,
                                   engine.store.get_node(summary).fingerprint, target.fingerprint))
    engine.delete(a)
    assert engine.store.get_node(summary) is None and engine.store.get_node(c).superseded_by is None
    consistent(engine)


def test_an_observation_linked_by_summary_of_is_never_deleted(engine: Engine) -> None:
    a, b = two(engine)
    engine.link(b, a, "summary_of")  # authored between two originals: no derived data here
    engine.edit(a, "Mira: I live in Paris.")
    engine.delete(a)
    assert engine.store.get_node(b).content == FLAT
    consistent(engine)


def test_periodic_consolidation_summary_follows_its_sources() -> None:
    engine = make_engine(RuleBackend(represent("merge_summary")), consolidation_every=3, consolidation_max_pairs=1)
    write_all(engine)
    (summary,) = engine.last_consolidation.summaries  # type: ignore[union-attr]
    first, second = (e.dst for e in engine.store.edges_from(summary, ["summary_of"]))
    engine.edit(first, engine.store.get_node(first).content)  # type: ignore[union-attr]
    assert engine.store.get_node(summary) is not None
    engine.delete(second)
    assert engine.store.get_node(summary) is None and engine.store.get_node(first) is not None
    assert engine.store.check() == []


def test_a_failed_edit_or_delete_keeps_the_summary(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from memory import lifecycle

    a, b = two(engine)
    summary = merge(engine, a, b)

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("crash after the summaries went")

    monkeypatch.setattr(lifecycle, "refresh_entity_edges", boom)  # the last step of an edit
    with pytest.raises(RuntimeError):
        engine.edit(a, "Mira: I live in Paris.")
    real_delete = lifecycle._delete_one

    def fail_on_b(store: object, node_id: str) -> None:
        if node_id == b:
            boom()
        real_delete(store, node_id)  # type: ignore[arg-type]

    monkeypatch.setattr(lifecycle, "_delete_one", fail_on_b)  # the summary goes first, then the delete fails
    with pytest.raises(RuntimeError):
        engine.delete(b)
    assert engine.store.get_node(summary) is not None and engine.store.get_node(a).content == BERLIN
    assert {e.dst for e in engine.store.edges_from(summary, ["summary_of"])} == {a, b}
    consistent(engine)
