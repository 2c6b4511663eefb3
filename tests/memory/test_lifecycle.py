"""Link lifecycle (the Space blog's rules): explicit vs inferred, edits, backlinks, authored lists, relink."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from memory.errors import InvalidLinkError, InvalidObservationError, InvalidRelationError, NodeNotFoundError
from memory.types import EdgeOrigin, LinkStatus
from tests.memory.engine_fakes import RuleBackend, make_engine, obs

LINKING = {("pair", "semantic"): lambda s: 0.9}


def three(engine: Any) -> list[str]:
    texts = ["Mira: I work as a data scientist", "Mira: I prefer long-term data science work", "Mira: data science projects pay well"]
    return [engine.write(obs(t, i)).node_id for i, t in enumerate(texts)]


def inferred(engine: Any, node_id: str) -> list:
    return [e for e in [*engine.store.edges_from(node_id), *engine.store.edges_to(node_id)] if e.origin == EdgeOrigin.INFERRED]


def test_changed_text_drops_inferred_links_both_ways_and_marks_stale() -> None:
    engine = make_engine(RuleBackend(LINKING), consolidation_every=0)
    a, b, c = three(engine)
    engine.link(b, a, "update")
    assert inferred(engine, b)
    view = engine.edit(b, "Mira: my client prefers short contracts")
    assert view.node.link_status == LinkStatus.STALE and view.node.content.endswith("short contracts")
    assert inferred(engine, b) == []
    assert [e for e in view.edges_out if e.origin == EdgeOrigin.EXPLICIT] == [e for e in view.edges_out if e.relation == "update"]
    assert any(e.relation == "temporal_next" for e in view.backlinks)  # deterministic edges stay
    assert inferred(engine, a) or inferred(engine, c)  # edges between untouched nodes survive


def test_unchanged_text_keeps_inferred_links() -> None:
    engine = make_engine(RuleBackend(LINKING), consolidation_every=0)
    a, b, _ = three(engine)
    before = inferred(engine, b)
    view = engine.edit(b, engine.store.get_node(b).content)
    assert view.node.link_status == LinkStatus.ASSESSED
    assert inferred(engine, b) == before


def test_relink_reassesses_stale_nodes_with_fresh_fingerprints() -> None:
    engine = make_engine(RuleBackend(LINKING), consolidation_every=0)
    a, b, _ = three(engine)
    engine.edit(b, "Mira: I prefer short data science engagements")
    report = engine.relink()
    assert report.statuses == {b: LinkStatus.ASSESSED} and report.edges_written > 0
    node = engine.store.get_node(b)
    assert node.types and node.link_status == LinkStatus.ASSESSED
    for edge in inferred(engine, b):
        fp = edge.src_fingerprint if edge.src == b else edge.dst_fingerprint
        assert fp == node.fingerprint


def test_backlinks_are_views_of_stored_edges() -> None:
    engine = make_engine(consolidation_every=0)
    a = engine.write(obs("Mira: my work", 0)).node_id
    b = engine.write(obs("Mira: what I like about my work", 1)).node_id
    edge = engine.link(b, a, "semantic", attrs={"label": "expands_on"})
    assert edge in engine.get(a).backlinks and edge in engine.get(b).edges_out
    assert engine.get(a).node.content == "Mira: my work"  # nothing copied into the target
    assert engine.unlink(b, a, "semantic") is True
    assert all(e.relation != "semantic" or e.origin != EdgeOrigin.EXPLICIT for e in engine.get(a).backlinks)
    assert engine.unlink(b, a, "semantic") is False


def test_explicit_links_survive_edits_and_relink() -> None:
    engine = make_engine(RuleBackend(LINKING), consolidation_every=0)
    a, b, c = three(engine)
    engine.link(a, c, "causal")
    engine.edit(a, "Mira: I quit data science")
    engine.edit(c, "Mira: I became a gardener")
    engine.relink()
    explicit = [e for e in engine.get(a).edges_out if e.origin == EdgeOrigin.EXPLICIT]
    assert [(e.dst, e.relation) for e in explicit] == [(c, "causal")]


def test_an_authored_empty_link_list_stays_empty() -> None:
    engine = make_engine(RuleBackend(LINKING), consolidation_every=0)
    a, b, c = three(engine)
    engine.link(b, a, "update")
    engine.link(b, c, "causal")
    view = engine.set_links(b, [])
    assert [e for e in view.edges_out if e.origin == EdgeOrigin.EXPLICIT] == []
    assert view.node.metadata["links_authored"] is True
    engine.relink([b])
    engine.edit(b, "Mira: something else entirely")
    engine.relink()
    engine.consolidate()
    assert [e for e in engine.get(b).edges_out if e.origin == EdgeOrigin.EXPLICIT] == []
    engine.set_links(b, [(a, "semantic")])
    assert [(e.dst, e.relation) for e in engine.get(b).edges_out if e.origin == EdgeOrigin.EXPLICIT] == [(a, "semantic")]


def test_inferred_judgments_never_overwrite_an_explicit_edge() -> None:
    engine = make_engine(RuleBackend(LINKING), consolidation_every=0)
    a = engine.write(obs("Mira: data science work", 0)).node_id
    b = engine.write(obs("Mira: data science work again", 1)).node_id
    engine.link(b, a, "semantic", attrs={"by": "user"})
    engine.relink([b])
    (edge,) = [e for e in engine.store.edges_from(b, ["semantic"]) if e.dst == a]
    assert edge.origin == EdgeOrigin.EXPLICIT and edge.attrs == {"by": "user"}


def test_pending_vs_no_link_vs_not_assessed_are_distinct() -> None:
    backend = RuleBackend({("pair", n): (lambda s: 0.0) for n in ("semantic", "causal", "same_episode", "update")})
    engine = make_engine(backend, consolidation_every=0)
    first = engine.write(obs("Mira: one", 0))
    second = engine.write(obs("Mira: two", 1))
    backend.fail = True
    third = engine.write(obs("Mira: three", 2))
    assert [first.link_status, second.link_status, third.link_status] == [
        LinkStatus.EMPTY_SHORTLIST, LinkStatus.ASSESSED, LinkStatus.RELATIONS_PENDING]
    report = engine.relink()
    assert report.pending == (third.node_id,) and third.node_id in report.errors
    backend.fail = False
    assert engine.relink().statuses == {third.node_id: LinkStatus.ASSESSED}
    assert engine.stats().link_status["relations_pending"] == 0


def test_delete_rejoins_the_temporal_chain_and_clears_supersession() -> None:
    engine = make_engine(consolidation_every=0)
    a, b, c = (engine.write(obs(t, i)).node_id for i, t in enumerate(["one", "two", "three"]))
    engine.store.add_edge(_supersedes(engine, c, a))
    assert engine.delete(b) is True
    assert [(e.src, e.dst) for e in engine.store.edges_from(a, ["temporal_next"])] == [(a, c)]
    assert engine.delete(c) is True
    assert engine.store.get_node(a).superseded_by is None
    assert engine.delete(c) is False and engine.store.check() == []


def _supersedes(engine: Any, src: str, dst: str) -> Any:
    from dataclasses import replace

    from memory.types import Edge

    node = engine.store.get_node(dst)
    engine.store.update_node(replace(node, superseded_by=src))
    return Edge(src, dst, "supersedes", EdgeOrigin.INFERRED, 0.9, engine.store.get_node(src).fingerprint, node.fingerprint)


def test_editing_a_superseding_node_clears_the_supersession() -> None:
    engine = make_engine(consolidation_every=0)
    a = engine.write(obs("Mira: I live in Lyon", 0)).node_id
    b = engine.write(obs("Mira: I moved to Paris", 1)).node_id
    engine.store.add_edge(_supersedes(engine, b, a))
    engine.edit(b, "Mira: I visited Paris")
    assert engine.store.get_node(a).superseded_by is None


def test_errors_name_the_offending_value() -> None:
    engine = make_engine()
    a = engine.write(obs("Mira: one", 0)).node_id
    with pytest.raises(NodeNotFoundError) as missing:
        engine.get("nope")
    assert missing.value.node_id == "nope"
    with pytest.raises(NodeNotFoundError):
        engine.link(a, "nope", "semantic")
    with pytest.raises(InvalidRelationError) as bad:
        engine.link(a, a, "friend_of")
    assert bad.value.relation == "friend_of"
    with pytest.raises(InvalidObservationError):
        engine.edit(a, "  ")
    with pytest.raises(NodeNotFoundError):
        engine.relink(["nope"])
    assert engine.get(a).node.content == "Mira: one"


def test_an_edit_to_text_no_store_can_keep_is_refused_and_changes_nothing() -> None:
    engine = make_engine(RuleBackend(LINKING))
    a, b, _ = three(engine)
    before = engine.get(a)
    with pytest.raises(InvalidObservationError):
        engine.edit(a, "Mira: broken \ud800 text")
    assert engine.get(a) == before and engine.store.check() == []


def test_relink_records_a_node_over_the_input_limit_and_goes_on_with_the_others() -> None:
    backend = RuleBackend(LINKING)
    engine = make_engine(backend)
    engine.write(obs("Mira: data science work", 0))
    backend.fail = True  # both writes leave typing and pairs owed
    long_id = engine.write(obs("Mira: data science " + "東京" * 150, 1)).node_id
    short_id = engine.write(obs("Mira: data science projects", 2)).node_id
    backend.fail = False
    backend.max_state_chars = 200  # the long node's typing state is over the model's input limit
    report = engine.relink()
    assert report.statuses == {long_id: LinkStatus.OVER_BUDGET, short_id: LinkStatus.ASSESSED}
    assert engine.store.get_node(long_id).link_status == LinkStatus.OVER_BUDGET  # type: ignore[union-attr]
    assert engine.store.get_node(short_id).types  # type: ignore[union-attr]
    assert report.pending == () and engine.store.nodes_with_status(LinkStatus.RELATIONS_PENDING) == []


def test_a_write_between_two_nodes_in_time_keeps_an_authored_temporal_link() -> None:
    engine = make_engine(consolidation_every=0)
    a = engine.write(obs("Mira: packed the tent", 0)).node_id
    c = engine.write(obs("Mira: reached the lake", 20)).node_id
    engine.link(a, c, "temporal_next", attrs={"by": "user"})
    b = engine.write(obs("Mira: drove north", 10)).node_id  # lands between them: the derived chain is re-joined
    out = {(e.dst, e.origin) for e in engine.store.edges_from(a, ["temporal_next"])}
    assert out == {(c, EdgeOrigin.EXPLICIT), (b, EdgeOrigin.DETERMINISTIC)}
    assert [(e.dst, e.origin) for e in engine.store.edges_from(b, ["temporal_next"])] == [(c, EdgeOrigin.DETERMINISTIC)]


def test_a_write_between_two_nodes_in_time_replaces_the_derived_link() -> None:
    engine = make_engine(consolidation_every=0)
    a = engine.write(obs("Mira: packed the tent", 0)).node_id
    c = engine.write(obs("Mira: reached the lake", 20)).node_id
    b = engine.write(obs("Mira: drove north", 10)).node_id
    assert [e.dst for e in engine.store.edges_from(a, ["temporal_next"])] == [b]
    assert [e.dst for e in engine.store.edges_from(b, ["temporal_next"])] == [c]


def test_deleting_a_node_never_overwrites_an_authored_link_around_it() -> None:
    engine = make_engine(consolidation_every=0)
    a, b, c = (engine.write(obs(t, m)).node_id for t, m in (("Mira: packed", 0), ("Mira: drove", 10), ("Mira: arrived", 20)))
    engine.link(a, c, "temporal_next", attrs={"by": "user"})
    engine.delete(b)  # re-joins the derived chain a -> c, where an authored a -> c already is
    (edge,) = engine.store.edges_from(a, ["temporal_next"])
    assert (edge.dst, edge.origin, edge.attrs) == (c, EdgeOrigin.EXPLICIT, {"by": "user"})


def test_replacing_authored_links_clears_the_supersession_they_carried_like_unlink() -> None:
    from tests.memory.test_write_consolidation import represent, write_all

    engine = make_engine(RuleBackend(represent("supersede")), consolidation_every=3)
    write_all(engine)
    newer, older = next((e.src, e.dst) for n in engine.store.iter_nodes() for e in engine.store.edges_from(n.id, ["supersedes"]))
    engine.link(newer, older, "supersedes")  # the user confirms the model's supersession as an authored link
    engine.set_links(newer, [])  # ... then withdraws every authored link of that node
    assert [e for e in engine.store.edges_from(newer, ["supersedes"]) if e.dst == older] == []
    assert engine.store.get_node(older).superseded_by is None  # type: ignore[union-attr]
    engine.delete(newer)
    assert all(n.superseded_by is None or engine.store.get_node(n.superseded_by) for n in engine.store.iter_nodes())


def _sqlite_engine(tmp_path: Any) -> Any:
    from controller.client import SystemOneClient
    from controller.embedding import HashingEmbedder
    from memory.engine import Engine
    from memory.store import SQLiteStore

    return Engine(SQLiteStore(tmp_path / "m.db", dim=64), SystemOneClient(RuleBackend()), HashingEmbedder(64))


@pytest.mark.parametrize("attrs", [{"when": datetime(2024, 5, 1)}, {"note": "\ud800"}, {"p": float("nan")}, {1: "a", "b": 2}, ["by", "user"]])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_link_attrs_no_store_can_keep_are_refused_and_nothing_is_written(tmp_path: Any, kind: str, attrs: Any) -> None:
    # the in-memory store kept them as given while SQLite raised a bare TypeError / UnicodeEncodeError
    engine = make_engine(consolidation_every=0) if kind == "memory" else _sqlite_engine(tmp_path)
    a, b = (engine.write(obs(t, m)).node_id for t, m in (("Mira: packed", 0), ("Mira: drove", 10)))
    before = engine.store.edges_from(a)
    with pytest.raises(InvalidLinkError):
        engine.link(a, b, "causal", attrs=attrs)
    assert engine.store.edges_from(a) == before and engine.store.check() == []
    engine.store.close()


def test_link_attrs_are_stored_as_json_reads_them_back(tmp_path: Any) -> None:
    stored = []
    for engine in (make_engine(consolidation_every=0), _sqlite_engine(tmp_path)):
        a, b = (engine.write(obs(t, m)).node_id for t, m in (("Mira: packed", 0), ("Mira: drove", 10)))
        assert engine.link(a, b, "causal", attrs={"span": (1, 2)}).attrs == {"span": [1, 2]}
        stored.append(engine.store.edges_from(a, ["causal"])[0].attrs)
        engine.store.close()
    assert stored == [{"span": [1, 2]}, {"span": [1, 2]}]


@pytest.mark.parametrize("links", [[("x",)], [("x", "causal", "extra")], "ab", [None]])
def test_malformed_authored_link_lists_are_refused(links: Any) -> None:
    engine = make_engine(consolidation_every=0)
    a = engine.write(obs("Mira: packed", 0)).node_id
    with pytest.raises(InvalidLinkError):
        engine.set_links(a, links)
    assert "links_authored" not in engine.store.get_node(a).metadata
