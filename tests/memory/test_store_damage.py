"""A damaged or unexpected file at a store's path: opening repairs derived data (with a log line) or refuses with a
store error naming the file; it never raises a raw exception, writes into a database that is not a store, or
trusts a vector index that is not this database's (which would give silently wrong vector search results)."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from memory.store import SQLiteStore, StoreConfigError, StoreCorruptionError, StoreDatabaseError, StoreError, open_store
from memory.store.vectors import VectorIndex
from memory.types import Edge, EdgeOrigin
from tests.memory.store_contract import DIM, make_node, unit


def _fill(path: Path, n: int = 6, *, shift: int = 0, text: str = "note") -> None:
    """n nodes n0..n{n-1}; `shift` rotates which unit vector each gets, so two stores differ only in vectors."""
    with SQLiteStore(path, dim=DIM) as store:
        for i in range(n):
            node = make_node(f"n{i}", i, f"{text} {i} about cats and item{i}", entities=(f"E{i % 2}", "Mira"))
            store.add_node(node, unit((i + shift) % DIM) + 0.1)


def _sql(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()


def _tables(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------------- the database file
@pytest.mark.parametrize("damage", ["truncated", "not sqlite"])
def test_a_damaged_database_file_is_a_store_error_naming_it(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "m.db"
    if damage == "truncated":
        _fill(path, 300)
        size = path.stat().st_size
        with path.open("r+b") as f:
            f.truncate(size - 4096)
    else:
        path.write_text("my shopping list\n" * 200, encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(StoreError, match="cannot open store") as caught:
        SQLiteStore(path, dim=DIM)
    assert str(path) in str(caught.value) and caught.value.__cause__ is not None
    assert path.read_bytes() == before


def test_an_sqlite_database_that_is_not_a_store_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    # before: the store's tables were created inside the other application's database, and it opened as an empty store
    path = tmp_path / "contacts.db"
    _sql(path, "CREATE TABLE customers (id INTEGER, name TEXT)", "INSERT INTO customers VALUES (1, 'Ada')")
    before = path.read_bytes()
    with pytest.raises(StoreConfigError, match="not a Jev-Mem memory store") as caught:
        open_store(path, dim=DIM)
    assert str(path) in str(caught.value) and "customers" in str(caught.value)
    assert _tables(path) == ["customers"] and path.read_bytes() == before
    assert not (tmp_path / "contacts.db.faiss").exists()


def test_an_empty_file_becomes_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    path.touch()
    with SQLiteStore(path, dim=DIM) as store:
        assert store.count_nodes() == 0 and store.check() == []


@pytest.mark.parametrize(("key", "value"), [("schema_version", "abc"), ("schema_version", "2.0"), ("dim", "x"),
                                            ("vector_generation", "lots")])
def test_damaged_settings_are_a_store_error_naming_the_file(tmp_path: Path, key: str, value: str) -> None:
    # before: a raw ValueError ("invalid literal for int()") escaped from the open
    path = tmp_path / "m.db"
    _fill(path)
    _sql(path, f"UPDATE meta SET value = '{value}' WHERE key = '{key}'")
    with pytest.raises(StoreCorruptionError, match=key) as caught:
        SQLiteStore(path, dim=DIM)
    assert str(path) in str(caught.value)


def test_a_store_from_a_newer_version_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    _fill(path)
    _sql(path, "UPDATE meta SET value = '2' WHERE key = 'schema_version'", "DROP TABLE node_times")
    with pytest.raises(StoreConfigError, match="unsupported schema version 2") as caught:
        SQLiteStore(path, dim=DIM)
    assert caught.value.found == 2
    assert "node_times" not in _tables(path)  # nothing was created in it


def test_a_row_the_store_cannot_read_is_a_store_error_naming_the_file(tmp_path: Path) -> None:
    # before: get_node raised a raw ValueError ("'bogus' is not a valid LinkStatus"), iter_nodes a JSONDecodeError
    path = tmp_path / "m.db"
    _fill(path)
    with SQLiteStore(path, dim=DIM) as store:
        store.add_edge(Edge("n0", "n3", "semantic", EdgeOrigin.INFERRED, 0.9))
    _sql(path, "UPDATE nodes SET link_status = 'bogus' WHERE seq = 1",
         "UPDATE nodes SET metadata = '{oops' WHERE seq = 2", "UPDATE edges SET attrs = '['")
    with SQLiteStore(path, dim=DIM) as store:
        calls = {"nodes row": (lambda: store.get_node("n1"), lambda: list(store.iter_nodes()),
                               lambda: store.get_nodes(["n2"])),
                 "edges row": (lambda: store.edges_from("n0"), lambda: store.edges_to("n3"))}
        for row, failing in calls.items():
            for call in failing:
                with pytest.raises(StoreDatabaseError) as caught:
                    call()
                assert str(path) in str(caught.value) and row in caught.value.reason
        assert store.get_node("n0") is not None  # the readable rows still read


def test_an_unreadable_row_met_while_repairing_on_open_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    _fill(path)
    _sql(path, "UPDATE nodes SET observed_at = 'last Tuesday' WHERE seq = 1")  # check() asks for its time row
    with pytest.raises(StoreError) as caught:
        SQLiteStore(path, dim=DIM)
    assert str(path) in str(caught.value)


def test_missing_entity_rows_are_found_and_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # before: check() said [] and the entity channel silently lost n1 (and n3 lost one of its two entities)
    path = tmp_path / "m.db"
    _fill(path)
    _sql(path, "DELETE FROM node_entities WHERE node_id = 'n1'",
         "DELETE FROM node_entities WHERE node_id = 'n3' AND entity = 'mira'")
    with caplog.at_level(logging.WARNING), SQLiteStore(path, dim=DIM) as store:
        assert store.check() == []
        assert store.nodes_with_entity("e1", 10) == ["n5", "n3", "n1"]
        assert store.nodes_with_entity("mira", 10) == ["n5", "n4", "n3", "n2", "n1", "n0"]
    assert "entities:" in caplog.text and "repairing" in caplog.text


def test_check_reports_missing_entity_rows(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "m.db", dim=DIM) as store:
        store.add_node(make_node("a", 0, "x", entities=("Mira", "  ", "mira")), unit(0))  # one key: "mira"
        store.add_node(make_node("b", 1, "y", entities=()), unit(1))
        assert store.check() == []
        store._conn.execute("DELETE FROM node_entities")
        assert [p for p in store.check() if p.startswith("entities:")]


# ---------------------------------------------------------------------------------------------- the vector index
def _faiss_files(path: Path) -> tuple[Path, Path]:
    return path.with_name(path.name + ".faiss"), path.with_name(path.name + ".faiss.json")


def test_a_vector_index_copied_from_another_store_is_not_trusted(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    # before: same node count, seqs and generation, so the header matched and search used the other store's vectors
    mine, other = tmp_path / "mine.db", tmp_path / "other.db"
    _fill(mine)
    _fill(other, shift=3, text="other")
    for src, dst in zip(_faiss_files(other), _faiss_files(mine), strict=True):
        shutil.copyfile(src, dst)
    with caplog.at_level(logging.WARNING), SQLiteStore(mine, dim=DIM) as store:
        assert store.vector_search(unit(3), 1)[0][0] == "n3"
        assert store.check() == []
    assert "rebuilding" in caplog.text


def _write_index(path: Path, index: object) -> None:
    import faiss

    faiss.write_index(index, str(_faiss_files(path)[0]))


def test_a_header_that_lies_about_the_vectors_is_caught(tmp_path: Path) -> None:
    """The header matches (count, dim, generation, ids) but the vectors are others: a sampled comparison with the
    database's embeddings catches it on open, and `check()` reports it."""
    import faiss

    path = tmp_path / "m.db"
    _fill(path)
    rng = np.random.default_rng(0)
    wrong = rng.standard_normal((6, DIM)).astype(np.float32)
    wrong /= np.linalg.norm(wrong, axis=1, keepdims=True)
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(DIM))
    index.add_with_ids(wrong, np.arange(6, dtype=np.int64))
    _write_index(path, index)
    with SQLiteStore(path, dim=DIM) as store:
        assert store.vector_search(unit(3), 1)[0][0] == "n3"
        store._vectors.add(4, unit(0))  # drift inside a running store
        assert [p for p in store.check() if p.startswith("vectors:") and "differ from" in p]


def test_an_index_with_another_metric_under_a_matching_header_is_rebuilt(tmp_path: Path) -> None:
    # before: an L2 index was loaded and its distances were returned as cosine scores (all ties at 1.82)
    import faiss

    path = tmp_path / "m.db"
    _fill(path)
    with SQLiteStore(path, dim=DIM) as store:
        right = np.stack([store._vectors.get(i) for i in range(6)])  # type: ignore[misc]
    index = faiss.IndexIDMap2(faiss.IndexFlatL2(DIM))
    index.add_with_ids(right, np.arange(6, dtype=np.int64))
    _write_index(path, index)
    with SQLiteStore(path, dim=DIM) as store:
        (best, score), *_ = store.vector_search(unit(3), 2)
        assert best == "n3" and score == pytest.approx(float(right[3] @ (unit(3) / np.linalg.norm(unit(3)))), abs=1e-5)


@pytest.mark.parametrize("damage", ["missing", "truncated", "other dim", "a directory", "not json"])
def test_a_damaged_vector_file_is_rebuilt_with_a_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                           damage: str) -> None:
    path = tmp_path / "m.db"
    _fill(path)
    index_file, header_file = _faiss_files(path)
    if damage == "missing":
        index_file.unlink()
    elif damage == "truncated":
        index_file.write_bytes(index_file.read_bytes()[:100])
    elif damage == "other dim":  # the right header (ids, count, generation) over an index of another dimension
        header = header_file.read_text(encoding="utf-8")
        wide = VectorIndex(DIM * 2)
        wide.reset(np.arange(6, dtype=np.int64), np.ones((6, DIM * 2), np.float32))
        wide.save(index_file, json.loads(header)["generation"])
        header_file.write_text(header, encoding="utf-8")
    elif damage == "a directory":
        index_file.unlink()
        index_file.mkdir()
    else:
        header_file.write_bytes(b"\xff\xfe not json")
    with caplog.at_level(logging.INFO, logger="memory.store"), SQLiteStore(path, dim=DIM) as store:
        assert store.vector_search(unit(2), 1)[0][0] == "n2" and store.check() == []
    assert "rebuilding" in caplog.text


def test_a_failed_rebuild_after_reembedding_never_leaves_the_old_vectors_marked_current(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # before: the commit counted the new vectors as indexed, so the failed rebuild left the old vectors in the index
    # (searched in this process) and close saved them stamped with the new generation (trusted by the next open)
    path = tmp_path / "m.db"
    _fill(path)
    new = np.stack([unit((i + 4) % DIM) for i in range(6)])
    real_reset = VectorIndex.reset
    failures = iter([MemoryError("no memory for the rebuild")])

    def reset_once(self: VectorIndex, seqs: np.ndarray, matrix: np.ndarray) -> None:
        error = next(failures, None)
        if error is not None:
            raise error
        real_reset(self, seqs, matrix)

    with SQLiteStore(path, dim=DIM) as store:
        monkeypatch.setattr(VectorIndex, "reset", reset_once)
        with pytest.raises(MemoryError):
            store.replace_embeddings(list(range(6)), new, "other")
        assert store.embedder == "other"  # committed: the database holds the new vectors
        assert store.vector_search(unit(4), 1)[0][0] == "n0"
        assert store.check() == []
    with SQLiteStore(path, dim=DIM, embedder="other") as store:
        assert store.vector_search(unit(5), 1)[0][0] == "n1"


# ---------------------------------------------------------------------------------------------- the directory
def test_a_missing_directory_is_refused_not_created(tmp_path: Path) -> None:
    # before: `--db ~/memroy/mem.db` (a typo) silently made the directory and a new empty store in it
    path = tmp_path / "no-such-dir" / "m.db"
    with pytest.raises(StoreError, match="does not exist") as caught:
        open_store(path, dim=DIM)
    assert str(path.parent) in str(caught.value)
    assert not path.parent.exists()


def test_a_missing_directory_is_created_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "m.db"
    with open_store(path, dim=DIM, create_dirs=True) as store:
        assert isinstance(store, SQLiteStore) and store.count_nodes() == 0
    assert path.is_file()
