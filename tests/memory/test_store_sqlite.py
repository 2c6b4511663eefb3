"""The store contract for the SQLite store, plus what only a persistent store has to do."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from memory.store import InMemoryStore, SQLiteStore, StoreConfigError, StoreCorruptionError, StoreError, open_store
from memory.store._common import fts_query
from memory.store.base import Store
from memory.types import Edge, EdgeOrigin, LinkStatus
from tests.memory.store_contract import DIM, StoreContract, make_node, snapshot, unit

REPO = Path(__file__).resolve().parents[2]


class TestSQLiteStoreContract(StoreContract):
    def make_store(self, tmp_path: Path, dim: int) -> Store:
        return SQLiteStore(tmp_path / "mem.db", dim=dim)


def _fill(store: Store, n: int = 6) -> None:
    for i in range(n):
        node = make_node(f"n{i}", i, f"note {i} about cats and item{i}", entities=(f"E{i % 2}",))
        store.add_node(node, unit(i) + 0.1)
        if i:
            store.add_edge(Edge(f"n{i}", f"n{i - 1}", "temporal_next", EdgeOrigin.DETERMINISTIC))
    store.set_link_status("n2", LinkStatus.STALE)


def test_open_store_with_path_is_sqlite(tmp_path: Path) -> None:
    store = open_store(tmp_path / "sub" / "m.db", dim=DIM, create_dirs=True)
    assert isinstance(store, SQLiteStore)
    assert not isinstance(store, InMemoryStore)
    store.close()
    store.close()  # closing twice is harmless


def test_pragmas(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "m.db", dim=DIM) as store:
        q = store._conn.execute
        assert q("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert q("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert q("PRAGMA foreign_keys").fetchone()[0] == 1


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with SQLiteStore(path, dim=DIM, embedder="tiny-embedder") as store:
        _fill(store)
        before = snapshot(store)
        near = store.vector_search(unit(3), 3)
    assert (tmp_path / "m.db.faiss").exists()
    with SQLiteStore(path, dim=DIM) as store:
        assert snapshot(store) == before
        assert store.embedder == "tiny-embedder"
        assert store.vector_search(unit(3), 3) == near
        assert store.nodes_with_status(LinkStatus.STALE) == ["n2"]
        assert store.nodes_with_entity("e1", 10) == ["n5", "n3", "n1"]
        assert store.check() == []


def test_reopen_with_other_dim_or_embedder_fails(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    SQLiteStore(path, dim=DIM, embedder="a").close()
    with pytest.raises(StoreConfigError):
        SQLiteStore(path, dim=DIM * 2)
    with pytest.raises(StoreConfigError):
        SQLiteStore(path, dim=DIM, embedder="b")


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_a_path_that_cannot_hold_a_store_is_a_store_error(tmp_path: Path, where: str) -> None:
    # a bare sqlite3.OperationalError / FileExistsError escaped before: no domain error, no path in the message
    (tmp_path / "notes.txt").write_text("mine", encoding="utf-8")
    path = tmp_path if where == "a directory" else tmp_path / "notes.txt" / "mem.db"
    with pytest.raises(StoreError, match="cannot open store") as caught:
        SQLiteStore(path, dim=DIM)
    assert caught.value.__cause__ is not None
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_missing_vector_file_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with SQLiteStore(path, dim=DIM) as store:
        _fill(store)
        expected = store.vector_search(unit(4), 6)
    (tmp_path / "m.db.faiss").unlink()
    with SQLiteStore(path, dim=DIM) as store:
        assert store.vector_search(unit(4), 6) == expected
        assert store.check() == []


def test_stale_or_garbage_vector_file_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "m.db"
    with SQLiteStore(path, dim=DIM) as store:
        _fill(store)
    with SQLiteStore(path, dim=DIM, persist_vectors=False) as store:  # writes without refreshing the file
        store.update_node(store.get_node("n0"), unit(7))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING), SQLiteStore(path, dim=DIM) as store:
        assert store.vector_search(unit(7), 1)[0][0] == "n0"
    assert "out of date" in caplog.text
    (tmp_path / "m.db.faiss").write_bytes(b"not a faiss index")
    with SQLiteStore(path, dim=DIM) as store:
        assert store.vector_search(unit(7), 1)[0][0] == "n0"
        assert store.check() == []


def test_vector_drift_is_detected_and_rebuilt(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "m.db", dim=DIM) as store:
        _fill(store)
        store._vectors.remove(3)
        assert [p for p in store.check() if p.startswith("vectors:")]
        store.rebuild_vectors()
        assert store.check() == []
        assert store.vector_search(unit(3), 1)[0][0] == "n3"


def _damage(path: Path, sql: str) -> None:
    """Change the database behind the store's back, as another tool or a crash might."""
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("damage", ["DROP TABLE node_times", "DELETE FROM node_times WHERE seq = 1"])
def test_a_store_without_its_time_rows_is_filled_on_open(tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    """A store written before `node_times` existed (or one that lost rows) gets them back from `nodes`."""
    path = tmp_path / "m.db"
    day = datetime(2024, 5, 10)
    with SQLiteStore(path, dim=DIM) as store:
        for i in range(4):
            store.add_node(make_node(f"n{i}", i, "x", observed_at=day - timedelta(days=i)), unit(i))
        store.add_node(make_node("u", 4, "x"), unit(4))
    _damage(path, damage)
    with caplog.at_level(logging.WARNING), SQLiteStore(path, dim=DIM) as store:
        assert store.check() == []
        assert store.nearest_in_time(day, 99, after=False, kind="observation") == "n0"
        assert store.nearest_in_time(day - timedelta(days=1), 1, after=False, kind="observation") == "n2"
        assert store._conn.execute("SELECT COUNT(*) FROM node_times").fetchone()[0] == 4
    assert "times:" in caplog.text


@pytest.mark.parametrize(
    "damage",
    [
        "DELETE FROM nodes_fts WHERE rowid = 2",
        "INSERT INTO nodes_fts (rowid, body) VALUES (99, 'ghost cats')",
        "DELETE FROM nodes_fts_data WHERE id > 10",
        "DROP TABLE nodes_fts",
    ],
)
def test_damaged_fts_is_detected_and_repaired(tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    path = tmp_path / "m.db"
    with SQLiteStore(path, dim=DIM) as store:
        _fill(store)
        expected = store.text_search("cats item2", 3)
    _damage(path, damage)
    with caplog.at_level(logging.WARNING), SQLiteStore(path, dim=DIM) as store:
        assert store.check() == []
        assert store.text_search("cats item2", 3) == expected
        assert store.text_search("ghost", 3) == []
    assert "repairing" in caplog.text


@pytest.mark.parametrize("drop_vector_file", [False, True])
def test_bad_embedding_blob_cannot_be_repaired(tmp_path: Path, drop_vector_file: bool) -> None:
    path = tmp_path / "m.db"
    with SQLiteStore(path, dim=DIM) as store:
        _fill(store)
    if drop_vector_file:
        (tmp_path / "m.db.faiss").unlink()
    _damage(path, "UPDATE nodes SET embedding = x'0000' WHERE seq = 1")
    with pytest.raises(StoreCorruptionError) as info:
        SQLiteStore(path, dim=DIM)
    assert any(p.startswith("embeddings:") for p in info.value.problems)


def test_a_store_indexed_with_plain_tokens_is_reindexed_once_on_open(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from controller.lexical import ANALYZER, tokenize
    path = tmp_path / "m.db"
    with SQLiteStore(path, dim=DIM) as store:
        store.add_node(make_node("camp", 0, "we went camping at the beach"), unit(0))
        store.add_node(make_node("other", 1, "a pottery class"), unit(1))
    conn = sqlite3.connect(path)  # what a store written before the index terms were stemmed holds
    with conn:
        conn.execute("DELETE FROM meta WHERE key = 'analyzer'")
        conn.execute("DELETE FROM nodes_fts")
        conn.executemany("INSERT INTO nodes_fts (rowid, body) VALUES (?, ?)",
                         [(0, " ".join(tokenize("we went camping at the beach"))), (1, " ".join(tokenize("a pottery class")))])
    conn.close()
    with caplog.at_level(logging.INFO, logger="memory.store.sqlite"), SQLiteStore(path, dim=DIM) as store:
        assert [i for i, _ in store.text_search("camped", 5)] == ["camp"]
        assert [i for i, _ in store.text_search("classes", 5)] == ["other"]
        assert store._conn.execute("SELECT value FROM meta WHERE key = 'analyzer'").fetchone()[0] == ANALYZER
        assert store.check() == []
    assert any("re-indexing" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="memory.store.sqlite"), SQLiteStore(path, dim=DIM) as store:
        assert [i for i, _ in store.text_search("camped", 5)] == ["camp"]
    assert not any("re-indexing" in r.getMessage() for r in caplog.records)  # once


def test_fts_query_quotes_every_token() -> None:
    assert fts_query('"a" OR b* NEAR( Cats cats') == '"b" OR "near" OR "cat"'  # stemmed, as the index holds it
    assert fts_query("") == ""
    assert fts_query("the of") == ""


def test_kill_9_loses_at_most_the_write_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with SQLiteStore(path, dim=DIM) as store:  # seed, so the saved vector file goes stale during the run
        store.add_node(make_node("w0", 0, "seed"), unit(0))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests/memory/_store_writer.py"), str(path), "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    acked: list[str] = []
    deadline = time.monotonic() + 60  # generous: a loaded CI machine starts Python + faiss slowly; the loop ends at 60 acks
    assert proc.stdout is not None
    while len(acked) < 60 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        acked.append(line.strip())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)
    # read the rest through the same buffered reader: `readline` may already hold acks read ahead of the
    # loop's last line, which `communicate` (reading the raw pipe) would drop
    assert proc.stderr is not None
    with proc.stdout, proc.stderr:
        acked += proc.stdout.read().split()
        err = proc.stderr.read()
    assert proc.returncode == -signal.SIGKILL, err
    assert len(acked) >= 60, err

    with SQLiteStore(path, dim=DIM) as store:
        assert store.check() == []
        present = {n.id for n in store.iter_nodes()} - {"w0"}
        assert set(acked) <= present
        assert len(present - set(acked)) <= 1
        for node_id in present:
            node = store.get_node(node_id)
            assert node is not None and node.link_status is LinkStatus.ASSESSED
            assert {e.relation for e in store.edges_from(node_id)} == {"semantic", "temporal_next"}
        last = max(present, key=lambda i: int(i[1:]))
        assert store.vector_search(store.embedding(last), 1)[0][0] == last  # type: ignore[arg-type]
        assert store.text_search(f"item {last[1:]}", 1)
        assert store.count_edges() == {"semantic": len(present), "temporal_next": len(present)}


def test_a_reader_closing_after_the_writer_never_saves_an_older_vector_index(tmp_path: Path) -> None:
    """A second store object on the file (a `jevmem query` next to the server) keeps the vectors it loaded; on
    close it must not stamp them with the database's newer generation, or the next open trusts stale vectors."""
    path = tmp_path / "m.db"
    with SQLiteStore(path, dim=DIM) as store:
        _fill(store)
    reader = SQLiteStore(path, dim=DIM)
    with SQLiteStore(path, dim=DIM) as writer:  # re-embeds a node: same ids, same count, a newer generation
        writer.update_node(writer.get_node("n0"), unit(7))  # type: ignore[arg-type]
    reader.close()
    with SQLiteStore(path, dim=DIM) as store:
        (best, score), *_ = store.vector_search(unit(7), 1)
        assert best == "n0" and score == pytest.approx(1.0)


def test_the_writer_still_saves_its_index_for_the_next_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.db"
    with SQLiteStore(path, dim=DIM) as store:
        _fill(store)
        store.update_node(store.get_node("n1"), unit(6))  # type: ignore[arg-type]
        store.delete_node("n5")
        with pytest.raises(RuntimeError), store.transaction():  # a rolled-back write leaves the generation alone
            store.update_node(store.get_node("n2"), unit(7))  # type: ignore[arg-type]
            raise RuntimeError("abort")
    assert (tmp_path / "m.db.faiss").exists()

    def no_rebuild(self: SQLiteStore) -> None:
        raise AssertionError("the saved index should have been loaded")

    monkeypatch.setattr(SQLiteStore, "rebuild_vectors", no_rebuild)
    with SQLiteStore(path, dim=DIM) as store:
        assert store.vector_search(unit(6), 1)[0][0] == "n1" and store.check() == []


@pytest.mark.parametrize("damage", ["null", "[1, 2]", '"header"', "flat index"])
def test_a_vector_file_of_the_wrong_shape_is_rebuilt_not_fatal(tmp_path: Path, damage: str) -> None:
    import faiss
    import numpy as np

    path = tmp_path / "m.db"
    with SQLiteStore(path, dim=DIM) as store:
        _fill(store)
    if damage == "flat index":  # a readable index of another kind under a header that matches the database
        flat = faiss.IndexFlatIP(DIM)
        flat.add(np.ones((6, DIM), dtype=np.float32))
        faiss.write_index(flat, str(tmp_path / "m.db.faiss"))
    else:  # valid JSON that is not a header object
        (tmp_path / "m.db.faiss.json").write_text(damage, encoding="utf-8")
    with SQLiteStore(path, dim=DIM) as store:
        assert store.check() == []
        assert store.vector_search(unit(3), 1)[0][0] == "n3"
