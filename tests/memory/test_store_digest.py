"""Damage to any one vector is seen on open: the saved faiss file carries the SHA-256 of its bytes, and its header
the digest of the database's vectors it was built from (`sqlite_digest`, kept in `meta` by every vector write).
The sampled comparison (`sqlite_check.vector_drift`, 64 vectors) alone misses a vector outside its sample."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from memory.store import SQLiteStore
from memory.store import sqlite_digest as digests
from memory.store._common import normalised
from memory.store.sqlite_check import VECTOR_SAMPLE, vector_drift
from memory.store.vectors import VectorIndex
from tests.memory.store_contract import DIM, make_node

N = 3 * VECTOR_SAMPLE + 8  # the sample takes every third seq: seq 1 is never compared
HIDDEN = 1


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def _fill(path: Path) -> np.ndarray:
    vectors = _vectors(N)
    with SQLiteStore(path, dim=DIM) as store:
        with store.transaction():
            for i, vector in enumerate(vectors):
                store.add_node(make_node(f"n{i}", i, f"note {i}"), vector)
    return vectors


def _faiss_files(path: Path) -> tuple[Path, Path]:
    return path.with_name(path.name + ".faiss"), path.with_name(path.name + ".faiss.json")


def _held(path: Path, seq: int) -> np.ndarray:
    with SQLiteStore(path, dim=DIM) as store:
        held = store._vectors.get(seq)
    assert held is not None
    return held


def _sampled_check_misses(path: Path) -> bool:
    """What the open-time sample makes of the saved index, read without the new checks."""
    import faiss

    index = VectorIndex(DIM)
    index._index = faiss.read_index(str(_faiss_files(path)[0]))
    conn = sqlite3.connect(path)
    try:
        return vector_drift(conn, DIM, index, list(range(N))) is None
    finally:
        conn.close()


def test_one_flipped_vector_in_the_saved_index_is_rebuilt_on_open(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "m.db"
    vectors = _fill(path)
    index_file, _ = _faiss_files(path)
    right = normalised(vectors[HIDDEN]).astype(np.float32)
    data = index_file.read_bytes()
    at = data.find(right.tobytes())
    assert at > 0 and data.find(right.tobytes(), at + 1) == -1
    index_file.write_bytes(data[:at] + (-right).tobytes() + data[at + right.nbytes:])  # same length, header untouched
    assert _sampled_check_misses(path)  # the damage is outside the sample: before, the index was loaded as it was
    with caplog.at_level(logging.WARNING, logger="memory.store"):
        held = _held(path, HIDDEN)
    assert np.allclose(held, right, atol=1e-6)
    assert "do not match the checksum" in caplog.text and "rebuilding" in caplog.text


def test_an_index_of_a_diverged_copy_of_the_store_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two copies of one store (same store id) each change node 1 once: same generation, count and ids. The index
    saved by one copy is consistent with itself but not with the other copy's database."""
    mine, theirs = tmp_path / "mine.db", tmp_path / "theirs.db"
    _fill(mine)
    shutil.copyfile(mine, theirs)
    ours, other = _vectors(2, seed=1)
    with SQLiteStore(theirs, dim=DIM) as store:
        store.update_node(store.get_node(f"n{HIDDEN}"), other)  # type: ignore[arg-type]
    with SQLiteStore(mine, dim=DIM, persist_vectors=False) as store:  # the database moves on; its index file does not
        store.update_node(store.get_node(f"n{HIDDEN}"), ours)  # type: ignore[arg-type]
    for src, dst in zip(_faiss_files(theirs), _faiss_files(mine), strict=True):
        shutil.copyfile(src, dst)
    header = json.loads(_faiss_files(mine)[1].read_text(encoding="utf-8"))
    conn = sqlite3.connect(mine)
    generation, = conn.execute("SELECT value FROM meta WHERE key = 'vector_generation'").fetchone()
    conn.close()
    assert header["generation"] == int(generation) and header["count"] == N  # everything but the vectors matches
    assert _sampled_check_misses(mine)
    with caplog.at_level(logging.WARNING, logger="memory.store"):
        held = _held(mine, HIDDEN)
    assert np.allclose(held, normalised(ours), atol=1e-6)
    assert "built from other vectors" in caplog.text


def test_every_vector_write_keeps_the_digest_equal_to_one_computed_from_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    vectors = _vectors(12, seed=2)
    with SQLiteStore(path, dim=DIM) as store:
        for i in range(10):
            store.add_node(make_node(f"n{i}", i, f"note {i}"), vectors[i])
        store.update_node(store.get_node("n3"), vectors[10])  # type: ignore[arg-type]
        store.update_node(store.get_node("n4"))  # type: ignore[arg-type]  # text only: the vector stays
        store.delete_node("n5")
        with pytest.raises(RuntimeError), store.transaction():  # rolled back with the rows it wrote
            store.update_node(store.get_node("n6"), vectors[11])  # type: ignore[arg-type]
            raise RuntimeError("abort")
        seqs = [n.seq for n in store.iter_nodes()]
        assert digests.current(store._conn) == digests.computed(store._conn) != digests.VectorDigest()
        store.replace_embeddings(seqs, _vectors(len(seqs), seed=3), "other")
        assert digests.current(store._conn) == digests.computed(store._conn)
        assert digests.current(store._conn).count == 9  # type: ignore[union-attr]


def _forget_digests(path: Path) -> None:
    """What a store saved by an earlier version looks like: no digest in meta, an index header without checksums."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM meta WHERE key = 'vector_digest'")
    conn.close()
    header_file = _faiss_files(path)[1]
    header = json.loads(header_file.read_text(encoding="utf-8"))
    header_file.write_text(json.dumps({k: v for k, v in header.items() if k not in ("sha256", "vectors")}), encoding="utf-8")


def test_a_store_saved_before_the_digests_opens_and_records_them_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "m.db"
    vectors = _fill(path)
    _forget_digests(path)
    with caplog.at_level(logging.INFO, logger="memory.store"), SQLiteStore(path, dim=DIM) as store:
        assert digests.current(store._conn) == digests.computed(store._conn)
        assert store.vector_search(vectors[7], 1)[0][0] == "n7" and store.check() == []
    assert "computing the digest" in caplog.text and "before index checksums" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # an upgrade, not damage

    def no_rebuild(self: SQLiteStore) -> None:
        raise AssertionError("the index saved with its checksums should have been loaded")

    monkeypatch.setattr(SQLiteStore, "rebuild_vectors", no_rebuild)
    with SQLiteStore(path, dim=DIM) as store:
        assert store.vector_search(vectors[7], 1)[0][0] == "n7"


def test_a_digest_left_behind_by_a_writer_that_did_not_keep_it_is_computed_again(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    vectors = _fill(path)
    conn = sqlite3.connect(path)  # an older version's write: a new vector and the generation, not the digest
    with conn:
        conn.execute("UPDATE nodes SET embedding = ? WHERE seq = ?", (vectors[0].tobytes(), HIDDEN))
        conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'vector_generation'")
    conn.close()
    with SQLiteStore(path, dim=DIM) as store:
        assert digests.current(store._conn) == digests.computed(store._conn)
        assert np.allclose(store._vectors.get(HIDDEN), normalised(vectors[0]), atol=1e-6)  # type: ignore[arg-type]


def test_a_session_that_changes_no_vector_leaves_the_saved_index_file_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing after reads only (a `jevmem query`) must not rewrite and re-hash the index; after a write it must."""
    path = tmp_path / "m.db"
    vectors = _fill(path)
    index_file = _faiss_files(path)[0]
    before = index_file.stat().st_mtime_ns, index_file.read_bytes()
    saves: list[int] = []
    real_save = VectorIndex.save
    monkeypatch.setattr(VectorIndex, "save", lambda self, *a, **k: (saves.append(1), real_save(self, *a, **k))[1])
    with SQLiteStore(path, dim=DIM) as store:
        assert store.vector_search(normalised(vectors[3]), 5)[0][0] == "n3"
        assert store.get_node("n3") is not None
    assert saves == [] and (index_file.stat().st_mtime_ns, index_file.read_bytes()) == before
    with SQLiteStore(path, dim=DIM) as store:
        with store.transaction():
            store.add_node(make_node("extra", N, "one more"), _vectors(1, seed=9)[0])
    assert saves == [1] and index_file.read_bytes() != before[1]
    with SQLiteStore(path, dim=DIM) as store:  # the file it saved loads without a rebuild
        assert store._file_generation == store._indexed_generation


def test_a_rebuilt_index_is_saved_on_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The skip-unchanged-file rule must not discard a rebuild: the next open would repeat the repair."""
    path = tmp_path / "m.db"
    _fill(path)
    saves: list[int] = []
    real_save = VectorIndex.save
    monkeypatch.setattr(VectorIndex, "save", lambda self, *a, **k: (saves.append(1), real_save(self, *a, **k))[1])
    with SQLiteStore(path, dim=DIM) as store:
        store.rebuild_vectors()
    assert saves == [1]
