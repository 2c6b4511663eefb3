"""sqlite3 failures of the SQLite store surface as store errors: every public method raises a `StoreError` chained
from the sqlite3 error, naming the operation and the database file, and a failed write leaves nothing behind.
A raw `sqlite3.OperationalError` ("database is locked", "database or disk is full") escaped before."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory.store import SQLiteStore, StoreDatabaseError, StoreError, StoreUnavailableError
from memory.types import Edge, EdgeOrigin, LinkStatus
from tests.memory.sqlite_faults import INSERT_NODE, FailingConnection, statement_is
from tests.memory.store_contract import DIM, make_node, snapshot, unit

Call = Callable[[SQLiteStore], Any]

CALLS: dict[str, Call] = {
    "next_seq": lambda s: s.next_seq(),
    "add_node": lambda s: s.add_node(make_node("new", 9, "new cats"), unit(5)),
    "get_node": lambda s: s.get_node("n0"),
    "get_nodes": lambda s: s.get_nodes(["n0", "n1"]),
    "update_node": lambda s: s.update_node(make_node("n1", 1, "dogs chase birds"), unit(6)),
    "delete_node": lambda s: s.delete_node("n1"),
    "iter_nodes": lambda s: list(s.iter_nodes()),
    "count_nodes": lambda s: s.count_nodes(),
    "set_link_status": lambda s: s.set_link_status("n0", LinkStatus.STALE),
    "nodes_with_status": lambda s: s.nodes_with_status(LinkStatus.STALE),
    "add_edge": lambda s: s.add_edge(Edge("n1", "n2", "semantic", EdgeOrigin.INFERRED, 0.8)),
    "remove_edge": lambda s: s.remove_edge("n0", "n1", "semantic"),
    "edges_from": lambda s: s.edges_from("n0"),
    "edges_to": lambda s: s.edges_to("n1"),
    "edges_touching": lambda s: s.edges_touching(["n0"]),
    "remove_edges": lambda s: s.remove_edges("n0", EdgeOrigin.INFERRED),
    "count_edges": lambda s: s.count_edges(),
    "vector_search": lambda s: s.vector_search(unit(0), 2),
    "text_search": lambda s: s.text_search("cats", 2),
    "nodes_with_entity": lambda s: s.nodes_with_entity("alice", 2),
    "nodes_near_time": lambda s: s.nodes_near_time(1, 2),
    "nearest_in_time": lambda s: s.nearest_in_time(datetime(2024, 1, 2), 9, after=False, kind="memory"),
    "embedding": lambda s: s.embedding("n0"),
    "check": lambda s: s.check(),
    "rebuild_vectors": lambda s: s.rebuild_vectors(),
    "replace_embeddings": lambda s: s.replace_embeddings(range(3), np.stack([unit(i + 1) for i in range(3)]), "other"),
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "mem.db", dim=DIM)
    times = [datetime(2024, 1, 1), datetime(2024, 1, 3), None]
    for i, text in enumerate(["cats chase mice", "dogs chase cats", "Alice sings at dawn"]):
        s.add_node(make_node(f"n{i}", i, text, entities=("Alice",) if i == 2 else (), observed_at=times[i]), unit(i))
    s.add_edge(Edge("n0", "n1", "semantic", EdgeOrigin.INFERRED, 0.9))
    yield s
    FailingConnection.restore(s)
    s.close()


def _not_the_transaction(sql: str) -> bool:
    return sql.split(" ")[0] not in ("BEGIN", "COMMIT", "ROLLBACK")


@pytest.mark.parametrize("operation", list(CALLS))
def test_every_public_method_raises_a_store_error_naming_operation_and_path(store: SQLiteStore, operation: str) -> None:
    before = snapshot(store)
    FailingConnection.install(store, when=_not_the_transaction)  # every statement inside the method fails
    with pytest.raises(StoreUnavailableError) as caught:
        CALLS[operation](store)
    error = caught.value
    assert isinstance(error.__cause__, sqlite3.OperationalError)
    assert operation in str(error) and str(store.path) in str(error) and "disk is full" in str(error)
    assert (error.operation, error.path, error.reason) == (operation, str(store.path), "database or disk is full")
    FailingConnection.restore(store)
    assert snapshot(store) == before and store.check() == []  # rolled back, faiss index included
    CALLS[operation](store)  # and the store still works


@pytest.mark.parametrize("statement", ["COMMIT", "BEGIN"])
def test_a_failed_begin_or_commit_is_a_store_error_and_rolls_back(store: SQLiteStore, statement: str) -> None:
    before = snapshot(store)
    FailingConnection.install(store, when=statement_is(statement), times=1)
    with pytest.raises(StoreUnavailableError, match=f"{statement.lower()} add_node") as caught:
        store.add_node(make_node("new", 9, "new cats"), unit(5))
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert not store._conn.in_transaction
    assert snapshot(store) == before and store.check() == [] and store.vector_search(unit(5), 1)[0][0] != "new"
    store.add_node(make_node("new", 9, "new cats"), unit(5))  # the next write goes through
    assert store.vector_search(unit(5), 1)[0][0] == "new" and store.check() == []


def test_a_failure_in_the_middle_of_a_write_undoes_its_earlier_statements(store: SQLiteStore) -> None:
    """The node row is written, then its FTS row fails: the row and its faiss vector are rolled back."""
    before = snapshot(store)
    FailingConnection.install(store, when=statement_is("INSERT INTO nodes_fts"))
    with pytest.raises(StoreUnavailableError, match="add_node"):
        store.add_node(make_node("new", 9, "new cats"), unit(5))
    FailingConnection.restore(store)
    assert snapshot(store) == before and store.check() == [] and store.count_nodes() == 3


def test_a_failed_rollback_does_not_hide_the_error_that_caused_it(store: SQLiteStore) -> None:
    failing = FailingConnection.install(store, when=lambda sql: sql.startswith((INSERT_NODE, "ROLLBACK")))
    with pytest.raises(StoreUnavailableError, match="add_node"):
        store.add_node(make_node("new", 9, "new cats"), unit(5))
    assert failing.raised == 2  # the INSERT, then the ROLLBACK
    FailingConnection.restore(store)
    store._conn.execute("ROLLBACK")
    assert store.count_nodes() == 3 and store.check() == []


def test_a_database_locked_by_another_connection_is_store_unavailable(store: SQLiteStore) -> None:
    store._conn.execute("PRAGMA busy_timeout = 20")
    other = sqlite3.connect(str(store.path), isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailableError, match="database is locked") as caught:
            store.add_node(make_node("new", 9, "new cats"), unit(5))
        assert caught.value.transient and caught.value.operation == "begin add_node"
        with pytest.raises(StoreUnavailableError, match="begin transaction"):
            with store.transaction():
                pass
        assert store.count_nodes() == 3  # WAL: reads go on
    finally:
        other.execute("ROLLBACK")
        other.close()
    store.add_node(make_node("new", 9, "new cats"), unit(5))
    assert store.count_nodes() == 4 and store.check() == []


def test_a_damaged_or_closed_database_is_a_store_database_error(store: SQLiteStore) -> None:
    FailingConnection.install(store, when=_not_the_transaction, error=sqlite3.DatabaseError("database disk image is malformed"))
    with pytest.raises(StoreDatabaseError, match="get_node") as caught:
        store.get_node("n0")
    assert not isinstance(caught.value, StoreUnavailableError) and not caught.value.transient
    FailingConnection.restore(store)
    store.close()
    with pytest.raises(StoreDatabaseError, match="count_nodes.*closed database"):
        store.count_nodes()


def test_domain_errors_are_unchanged(store: SQLiteStore) -> None:
    """Only sqlite3 errors are translated: the store's own errors keep their types."""
    from memory.store import DuplicateNodeError, NodeNotFoundError

    with pytest.raises(DuplicateNodeError):
        store.add_node(make_node("n0", 42, "again"), unit(1))
    with pytest.raises(NodeNotFoundError):
        store.set_link_status("missing", LinkStatus.STALE)
    with pytest.raises(StoreError, match="immutable"):
        store.update_node(make_node("n0", 7, "moved"))
    assert store.check() == []


def test_a_vector_index_that_cannot_be_saved_on_close_is_rebuilt_on_the_next_open(
        store: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The faiss file is derived data: a full disk at close raised out of `close()` (leaving callers' cleanup
    half done) although the database was whole."""
    import faiss

    def full_disk(index: Any, path: str) -> None:
        Path(path).write_bytes(b"partial")  # as a write cut short would leave it
        raise RuntimeError("Error: 'fwrite' failed: No space left on device")

    monkeypatch.setattr(faiss, "write_index", full_disk)
    store.close()
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp" in p.name) == []
    reopened = SQLiteStore(tmp_path / "mem.db", dim=DIM)
    try:
        assert reopened.check() == [] and reopened.vector_search(unit(2), 1)[0][0] == "n2"
    finally:
        reopened.close()
