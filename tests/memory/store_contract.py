"""The contract every `Store` implementation must pass.

Subclass `StoreContract` in a `test_store_*.py` module and implement `make_store(tmp_path, dim)`; a future
PostgreSQL + pgvector backend only needs such a subclass.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from memory.store import DuplicateNodeError, EmbeddingError, NodeNotFoundError, StoreError
from memory.store.base import Store
from memory.types import Edge, EdgeOrigin, LinkStatus, Node

DIM = 8

NASTY_QUERIES = [
    '"a" OR b*',
    "NEAR(",
    "NEAR(cats dogs, 2)",
    '"',
    "'",
    '""cats""',
    "cats AND NOT dogs",
    "content: cats",
    "{content}: cats OR",
    "^cats",
    "cats*",
    "-cats",
    "(((",
    ")",
    "cats + dogs",
    "🐈 кошки 猫 café",
    "\x00 cats \u202e",
    "a" * 5000,
    "",
    "   ",
    "the and of",
]


def make_node(node_id: str, seq: int, content: str, **kw: object) -> Node:
    fields: dict[str, object] = dict(
        id=node_id,
        content=content,
        observed_at=None,
        event_time=None,
        speaker=None,
        source_ids=(),
        entities=(),
        types={},
        fingerprint=f"fp-{node_id}",
        seq=seq,
    )
    fields.update(kw)
    return Node(**fields)  # type: ignore[arg-type]


def unit(i: int, dim: int = DIM) -> np.ndarray:
    v = np.zeros(dim, dtype=np.float32)
    v[i % dim] = 1.0
    return v


def snapshot(store: Store) -> tuple[object, ...]:
    nodes = list(store.iter_nodes())
    edges = sorted((e for n in nodes for e in store.edges_from(n.id)), key=lambda e: (e.src, e.dst, e.relation))
    vecs = [store.embedding(n.id).tolist() for n in nodes]  # type: ignore[union-attr]
    return (nodes, edges, vecs, store.count_edges(), store.text_search("cats dogs birds", 10))


class StoreContract:
    """Tests any `Store` must pass. Subclasses provide `make_store`."""

    def make_store(self, tmp_path: Path, dim: int) -> Store:
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        s = self.make_store(tmp_path, DIM)
        yield s
        s.close()

    @pytest.fixture
    def filled(self, store: Store) -> Store:
        """Four nodes and a few edges."""
        texts = ["cats chase mice", "dogs chase cats", "birds sing at dawn", "Alice adopted two cats"]
        for i, text in enumerate(texts):
            store.add_node(make_node(f"n{i}", i, text, entities=("Alice",) if i in (0, 3) else ()), unit(i))
        store.add_edge(Edge("n0", "n1", "semantic", EdgeOrigin.INFERRED, 0.9, "fp-n0", "fp-n1"))
        store.add_edge(Edge("n0", "n1", "temporal_next", EdgeOrigin.DETERMINISTIC))
        store.add_edge(Edge("n2", "n0", "causal", EdgeOrigin.EXPLICIT, attrs={"note": "authored"}))
        return store

    def test_implements_every_protocol_member(self, store: Store) -> None:
        members = [name for name in vars(Store) if not name.startswith("_")] + ["dim"]
        assert [m for m in members if not hasattr(store, m)] == []
        assert store.dim == DIM

    # ------------------------------------------------------------------ nodes
    def test_node_round_trip_keeps_every_field(self, store: Store) -> None:
        node = make_node(
            "ü-1",
            7,
            "Ünïcødé 🐈 猫 кошка \u202e text\nwith lines and 'quotes' \"double\"",
            observed_at=datetime(2023, 5, 8, 13, 56, 7, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30))),
            event_time=datetime(1999, 12, 31, 23, 59, 59),
            speaker="Caroline",
            source_ids=("D1:3", "D2:7"),
            entities=("Caroline", "LGBTQ support group"),
            types={"episodic": 0.91, "semantic": 0.1, "procedural": 0.0, "preference": 0.5},
            fingerprint="abc123",
            link_status=LinkStatus.RELATIONS_PENDING,
            metadata={"session": 1, "nested": {"ok": [1, 2.5, None, "é"]}},
            superseded_by="other",
            kind="summary",
        )
        vec = np.arange(DIM, dtype=np.float32) - 3.5
        store.add_node(node, vec)
        assert store.get_node("ü-1") == node
        stored = store.get_node("ü-1")
        assert stored is not None and stored.observed_at is not None
        assert stored.observed_at.utcoffset() == timedelta(hours=5, minutes=30)
        np.testing.assert_array_equal(store.embedding("ü-1"), vec)
        assert store.embedding("ü-1").dtype == np.float32  # type: ignore[union-attr]
        assert store.count_nodes() == 1
        assert store.get_node("missing") is None
        assert store.embedding("missing") is None

    def test_get_nodes_keeps_request_order_and_skips_missing(self, filled: Store) -> None:
        assert [n.id for n in filled.get_nodes(["n3", "nope", "n0"])] == ["n3", "n0"]
        assert [n.id for n in filled.iter_nodes()] == ["n0", "n1", "n2", "n3"]
        assert filled.count_nodes() == 4

    def test_duplicates_and_bad_embeddings_are_rejected(self, filled: Store) -> None:
        with pytest.raises(DuplicateNodeError):
            filled.add_node(make_node("n0", 99, "x"), unit(0))
        with pytest.raises(DuplicateNodeError):
            filled.add_node(make_node("new", 1, "x"), unit(0))
        with pytest.raises(EmbeddingError):
            filled.add_node(make_node("new", 99, "x"), np.ones(DIM + 1))
        bad = np.ones(DIM, dtype=np.float32)
        bad[2] = np.nan
        with pytest.raises(EmbeddingError):
            filled.add_node(make_node("new", 99, "x"), bad)
        assert filled.count_nodes() == 4
        assert filled.get_node("new") is None
        assert filled.check() == []

    def test_update_node_changes_text_and_vector_channels(self, filled: Store) -> None:
        old = filled.get_node("n2")
        assert old is not None
        filled.update_node(replace(old, content="zebras graze", fingerprint="fp2"), unit(5))
        assert filled.get_node("n2").content == "zebras graze"  # type: ignore[union-attr]
        assert [i for i, _ in filled.text_search("zebras", 5)] == ["n2"]
        assert "n2" not in [i for i, _ in filled.text_search("birds dawn", 5)]
        assert filled.vector_search(unit(5), 1)[0][0] == "n2"
        filled.update_node(replace(old, speaker="Bob"))  # no embedding: the old one stays
        np.testing.assert_array_equal(filled.embedding("n2"), unit(5))
        assert filled.get_node("n2").speaker == "Bob"  # type: ignore[union-attr]
        assert len(filled.edges_to("n0", ["causal"])) == 1  # the store never drops edges on update
        with pytest.raises(NodeNotFoundError):
            filled.update_node(make_node("ghost", 50, "x"))
        with pytest.raises(StoreError):
            filled.update_node(replace(old, seq=42))
        assert filled.check() == []

    def test_delete_node_removes_its_edges_and_channels(self, filled: Store) -> None:
        assert filled.delete_node("n0") is True
        assert filled.delete_node("n0") is False
        assert filled.get_node("n0") is None
        assert filled.embedding("n0") is None
        assert filled.edges_to("n1") == []
        assert filled.edges_from("n2") == []
        assert filled.count_edges() == {}
        assert "n0" not in [i for i, _ in filled.text_search("mice", 5)]
        assert "n0" not in [i for i, _ in filled.vector_search(unit(0), 5)]
        assert filled.nodes_with_entity("alice", 10) == ["n3"]
        assert filled.count_nodes() == 3
        assert filled.check() == []

    def test_link_statuses(self, filled: Store) -> None:
        assert filled.nodes_with_status(LinkStatus.ASSESSED) == ["n0", "n1", "n2", "n3"]
        filled.set_link_status("n3", LinkStatus.STALE)
        filled.set_link_status("n1", LinkStatus.STALE)
        assert filled.nodes_with_status(LinkStatus.STALE) == ["n1", "n3"]
        assert filled.get_node("n1").link_status is LinkStatus.STALE  # type: ignore[union-attr]
        assert filled.nodes_with_status(LinkStatus.OVER_BUDGET) == []
        with pytest.raises(NodeNotFoundError):
            filled.set_link_status("ghost", LinkStatus.STALE)

    def test_next_seq_is_above_every_stored_seq(self, store: Store) -> None:
        assert store.next_seq() == 0  # type: ignore[attr-defined]
        store.add_node(make_node("a", 10, "x"), unit(0))
        assert store.next_seq() == 11  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ edges
    def test_edges_several_relations_per_pair_and_backlinks(self, filled: Store) -> None:
        out = filled.edges_from("n0")
        assert [(e.dst, e.relation) for e in out] == [("n1", "semantic"), ("n1", "temporal_next")]
        sem = out[0]
        assert (sem.origin, sem.weight) == (EdgeOrigin.INFERRED, 0.9)
        assert (sem.src_fingerprint, sem.dst_fingerprint) == ("fp-n0", "fp-n1")
        assert [e.relation for e in filled.edges_from("n0", ["temporal_next"])] == ["temporal_next"]
        assert filled.edges_from("n0", []) == []
        back = filled.edges_to("n0")
        assert back == [Edge("n2", "n0", "causal", EdgeOrigin.EXPLICIT, attrs={"note": "authored"})]
        assert filled.edges_to("n1", ["semantic", "causal"]) == [sem]
        assert filled.count_edges() == {"causal": 1, "semantic": 1, "temporal_next": 1}

    def test_edges_touching_either_end_once_in_order(self, filled: Store) -> None:
        everything = filled.edges_touching(["n0", "n1", "n2", "n0"])
        assert [(e.src, e.dst, e.relation) for e in everything] == [
            ("n0", "n1", "semantic"), ("n0", "n1", "temporal_next"), ("n2", "n0", "causal")]
        assert everything[0] == filled.edges_from("n0", ["semantic"])[0]  # the whole edge, attributes included
        assert filled.edges_touching(["n1"], ["temporal_next"]) == filled.edges_to("n1", ["temporal_next"])
        assert filled.edges_touching(["n2"]) == filled.edges_from("n2")
        assert filled.edges_touching(["n0"], []) == [] and filled.edges_touching([]) == []
        assert filled.edges_touching(["ghost"]) == []

    def test_add_edge_replaces_same_triple(self, filled: Store) -> None:
        filled.add_edge(Edge("n0", "n1", "semantic", EdgeOrigin.INFERRED, 0.95, "fpX", "fpY", {"k": "v"}))
        sem = filled.edges_from("n0", ["semantic"])
        assert sem == [Edge("n0", "n1", "semantic", EdgeOrigin.INFERRED, 0.95, "fpX", "fpY", {"k": "v"})]
        assert filled.count_edges()["semantic"] == 1

    def test_edge_endpoints_must_exist(self, filled: Store) -> None:
        with pytest.raises(NodeNotFoundError):
            filled.add_edge(Edge("n0", "ghost", "semantic", EdgeOrigin.INFERRED))
        with pytest.raises(NodeNotFoundError):
            filled.add_edge(Edge("ghost", "n0", "semantic", EdgeOrigin.INFERRED))
        assert filled.count_edges() == {"causal": 1, "semantic": 1, "temporal_next": 1}

    def test_remove_edge_and_remove_edges_by_origin(self, filled: Store) -> None:
        assert filled.remove_edge("n0", "n1", "semantic") is True
        assert filled.remove_edge("n0", "n1", "semantic") is False
        filled.add_edge(Edge("n3", "n0", "semantic", EdgeOrigin.INFERRED, 0.8))
        filled.add_edge(Edge("n1", "n2", "semantic", EdgeOrigin.INFERRED, 0.8))
        assert filled.remove_edges("n0", EdgeOrigin.INFERRED) == 1  # incoming n3 -> n0
        assert filled.remove_edges("n0", EdgeOrigin.INFERRED) == 0
        assert [(e.src, e.relation) for e in filled.edges_to("n0")] == [("n2", "causal")]
        assert filled.remove_edges("n0", EdgeOrigin.EXPLICIT) == 1
        assert filled.count_edges() == {"semantic": 1, "temporal_next": 1}

    # ------------------------------------------------------------------ retrieval channels
    def test_vector_search_is_cosine_best_first(self, store: Store) -> None:
        q = unit(0)
        vecs = {"same": unit(0) * 7.0, "close": unit(0) + 0.5 * unit(1), "ortho": unit(2), "opposite": -unit(0)}
        for seq, (name, vec) in enumerate(vecs.items()):
            store.add_node(make_node(name, seq, name), vec)
        hits = store.vector_search(q, 10)
        assert [i for i, _ in hits] == ["same", "close", "ortho", "opposite"]
        expected = [1.0, 1 / np.sqrt(1.25), 0.0, -1.0]
        np.testing.assert_allclose([s for _, s in hits], expected, atol=1e-5)
        assert [i for i, _ in store.vector_search(q * 3, 2)] == ["same", "close"]
        assert store.vector_search(q, 0) == []
        with pytest.raises(EmbeddingError):
            store.vector_search(np.ones(DIM + 2), 3)

    def test_vector_search_breaks_ties_by_seq_after_updates(self, store: Store) -> None:
        for seq in range(6):  # identical vectors (the same text embedded twice): every score ties
            store.add_node(make_node(f"d{seq}", seq, "thanks!"), unit(0))
        store.update_node(store.get_node("d0"), unit(0))  # re-embedded: faiss stores it last  # type: ignore[arg-type]
        store.delete_node("d1")
        store.add_node(make_node("d1", 1, "thanks!"), unit(0))
        assert [i for i, _ in store.vector_search(unit(0), 2)] == ["d0", "d1"]
        assert [i for i, _ in store.vector_search(unit(0), 5)] == ["d0", "d1", "d2", "d3", "d4"]
        assert [i for i, _ in store.vector_search(unit(0), 9)] == ["d0", "d1", "d2", "d3", "d4", "d5"]

    def test_vector_search_on_empty_store(self, store: Store) -> None:
        assert store.vector_search(unit(0), 5) == []

    def test_text_search_is_bm25_best_first(self, filled: Store) -> None:
        hits = filled.text_search("cats", 10)
        assert {i for i, _ in hits} == {"n0", "n1", "n3"}
        assert all(s > 0 for _, s in hits)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        assert filled.text_search("dawn birds", 10)[0][0] == "n2"
        both = filled.text_search("dogs mice", 10)  # each rare term matches one document
        assert {i for i, _ in both} == {"n0", "n1"}
        # a document matching two query terms outranks ones matching one
        assert filled.text_search("cats mice", 10)[0][0] == "n0"
        assert len(filled.text_search("cats", 2)) == 2
        assert filled.text_search("cats", 0) == []
        assert filled.text_search("CATS!!", 10)[0][0] == hits[0][0]

    def test_text_search_matches_other_inflections_of_a_word(self, store: Store) -> None:
        store.add_node(make_node("camp", 0, "Melanie: we went camping at the beach"), unit(0))
        store.add_node(make_node("research", 1, "Caroline: Researching adoption agencies"), unit(1))
        store.add_node(make_node("other", 2, "a pottery class on Tuesday"), unit(2))
        assert [i for i, _ in store.text_search("Where has Melanie camped?", 5)] == ["camp"]
        assert [i for i, _ in store.text_search("What did Caroline research?", 5)] == ["research"]
        assert [i for i, _ in store.text_search("classes", 5)] == ["other"]
        assert store.text_search("2023", 5) == []  # numbers are terms as they are

    def test_text_search_prefers_shorter_document_on_same_term(self, store: Store) -> None:
        store.add_node(make_node("long", 0, "apple " + "filler words here " * 10), unit(0))
        store.add_node(make_node("short", 1, "apple pie"), unit(1))
        store.add_node(make_node("other", 2, "banana bread"), unit(2))
        store.add_node(make_node("other2", 3, "cherry tart"), unit(3))
        assert [i for i, _ in store.text_search("apple", 5)] == ["short", "long"]

    @pytest.mark.parametrize("query", NASTY_QUERIES)
    def test_text_search_treats_query_as_data(self, filled: Store, query: str) -> None:
        filled.add_node(make_node("tricky", 10, 'NEAR( "a" OR b* {content}: -- café 🐈'), unit(4))
        hits = filled.text_search(query, 5)
        assert isinstance(hits, list)
        assert all(isinstance(i, str) and isinstance(s, float) for i, s in hits)
        assert filled.check() == []

    def test_text_search_empty_and_stopword_queries(self, filled: Store) -> None:
        assert filled.text_search("", 5) == []
        assert filled.text_search("the of and", 5) == []
        assert filled.text_search("zzzunknown", 5) == []

    def test_stored_text_with_query_syntax_is_found_literally(self, store: Store) -> None:
        store.add_node(make_node("q", 0, 'He typed "NEAR(" OR b* AND NOT c'), unit(0))
        store.add_node(make_node("p", 1, "plain words"), unit(1))
        assert [i for i, _ in store.text_search("near", 5)] == ["q"]
        assert [i for i, _ in store.text_search('"a" OR b*', 5)] == ["q"]

    def test_entity_channel_most_recent_first(self, filled: Store) -> None:
        filled.add_node(make_node("n4", 4, "x", entities=("alice ", "Bob")), unit(4))
        assert filled.nodes_with_entity("Alice", 10) == ["n4", "n3", "n0"]
        assert filled.nodes_with_entity("ALICE", 2) == ["n4", "n3"]
        assert filled.nodes_with_entity("bob", 10) == ["n4"]
        assert filled.nodes_with_entity("Carol", 10) == []
        assert filled.nodes_with_entity("Alice", 0) == []

    def test_time_channel(self, store: Store) -> None:
        for seq in (0, 1, 2, 3, 5, 9):
            store.add_node(make_node(f"s{seq}", seq, "x"), unit(seq))
        assert store.nodes_near_time(3, 2) == ["s2", "s1", "s5"]
        assert store.nodes_near_time(10, 1) == ["s9"]
        assert store.nodes_near_time(100, 5) == []
        assert store.nodes_near_time(3, 0) == []

    def test_nearest_in_time_orders_by_time_then_seq(self, store: Store) -> None:
        day = datetime(2024, 5, 10, 12)
        paris = timezone(timedelta(hours=2))
        rows = [  # (id, seq, observed_at, event_time, kind)
            ("late", 0, day + timedelta(days=2), None, "observation"),
            ("tie_b", 1, day, None, "observation"),
            ("untimed", 2, None, None, "observation"),
            ("tie_a", 3, day.replace(hour=14, tzinfo=paris), None, "observation"),  # 12:00 UTC, the same instant
            ("early", 4, day + timedelta(days=5), day - timedelta(days=3), "observation"),  # event_time wins
            ("summary", 5, day - timedelta(days=1), None, "summary"),
        ]
        for node_id, seq, observed, event, kind in rows:
            store.add_node(make_node(node_id, seq, "x", observed_at=observed, event_time=event, kind=kind), unit(seq))

        def around(when: datetime, seq: int, kind: str = "observation") -> tuple[str | None, str | None]:
            return (store.nearest_in_time(when, seq, after=False, kind=kind), store.nearest_in_time(when, seq, after=True, kind=kind))

        assert around(day, 1) == ("early", "tie_a")  # ties broken by seq; the node at (when, seq) itself is skipped
        assert around(day, 3) == ("tie_b", "late")
        assert around(day, 2) == ("tie_b", "tie_a")
        assert around(day.replace(hour=13, tzinfo=timezone.utc), 99) == ("tie_a", "late")
        assert around(day - timedelta(days=30), 99) == (None, "early")
        assert around(day + timedelta(days=30), 0) == ("late", None)
        assert around(day, 99, kind="summary") == ("summary", None)
        assert around(day, 99, kind="other") == (None, None)
        store.update_node(replace(store.get_node("early"), event_time=None))  # now 15 May, after "late"
        assert around(day + timedelta(days=3), 99) == ("late", "early")
        store.delete_node("late")
        assert around(day + timedelta(days=3), 99) == ("tie_a", "early")
        with pytest.raises(RuntimeError), store.transaction():
            store.add_node(make_node("backfill", 9, "x", observed_at=day - timedelta(days=9)), unit(9))
            assert around(day - timedelta(days=30), 99) == (None, "backfill")
            raise RuntimeError("roll back")
        assert around(day - timedelta(days=30), 99) == (None, "tie_b")
        assert store.check() == []

    # ------------------------------------------------------------------ transactions and consistency
    def test_transaction_rollback_leaves_nothing_behind(self, filled: Store) -> None:
        before = snapshot(filled)
        with pytest.raises(RuntimeError):
            with filled.transaction():
                filled.add_node(make_node("n9", 9, "birds and cats and dogs", entities=("Alice",)), unit(6))
                filled.add_edge(Edge("n9", "n0", "semantic", EdgeOrigin.INFERRED, 0.7))
                filled.set_link_status("n1", LinkStatus.STALE)
                n2 = filled.get_node("n2")
                assert n2 is not None
                filled.update_node(replace(n2, content="changed birds"), unit(7))
                filled.remove_edges("n0", EdgeOrigin.DETERMINISTIC)
                filled.delete_node("n3")
                with filled.transaction():  # nested: joins the outer transaction
                    filled.add_node(make_node("n10", 10, "inner"), unit(1))
                raise RuntimeError("boom")
        assert snapshot(filled) == before
        assert filled.get_node("n10") is None
        assert filled.nodes_with_entity("alice", 10) == ["n3", "n0"]
        assert [i for i, _ in filled.vector_search(unit(3), 1)] == ["n3"]
        assert filled.nodes_with_status(LinkStatus.STALE) == []
        assert filled.check() == []

    def test_failed_single_write_changes_nothing(self, filled: Store) -> None:
        before = snapshot(filled)
        with pytest.raises(NodeNotFoundError):
            with filled.transaction():
                filled.add_node(make_node("n9", 9, "cats"), unit(6))
                filled.add_edge(Edge("n9", "ghost", "semantic", EdgeOrigin.INFERRED))
        assert snapshot(filled) == before
        assert filled.get_node("n9") is None

    def test_committed_transaction_persists_all_writes(self, filled: Store) -> None:
        with filled.transaction():
            filled.add_node(make_node("n9", 9, "cats"), unit(6))
            filled.add_edge(Edge("n9", "n0", "semantic", EdgeOrigin.INFERRED, 0.7))
        assert filled.get_node("n9") is not None
        assert [e.dst for e in filled.edges_from("n9")] == ["n0"]
        assert filled.check() == []

    def test_check_is_clean_after_normal_use(self, filled: Store) -> None:
        filled.delete_node("n1")
        filled.update_node(replace(filled.get_node("n0"), content="new text"), unit(3))  # type: ignore[arg-type]
        filled.add_node(make_node("n5", 5, "more"), unit(5))
        filled.rebuild_vectors()
        assert filled.check() == []
        assert filled.vector_search(unit(5), 1)[0][0] == "n5"

    def test_concurrent_writers_and_readers(self, store: Store) -> None:
        errors: list[BaseException] = []

        def writer(t: int) -> None:
            try:
                for i in range(20):
                    seq = t * 100 + i
                    with store.transaction():
                        node_id, prev = f"t{t}-{i}", f"t{t}-{i - 1}"
                        store.add_node(make_node(node_id, seq, f"thread {t} item {i} cats"), unit(seq))
                        if i:
                            store.add_edge(Edge(node_id, prev, "temporal_next", EdgeOrigin.DETERMINISTIC))
                    store.text_search("cats", 3)
                    store.vector_search(unit(i), 3)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        assert store.count_nodes() == 80
        assert store.count_edges() == {"temporal_next": 76}
        assert store.check() == []
