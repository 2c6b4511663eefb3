"""A faiss exact inner-product index over unit vectors, keyed by node seq, with an undo log.

SQLite's embedding BLOBs are the source of truth; this index is derived state. It can be saved next to the
database together with a small JSON header (count, dim, the store's vector generation and id, the digest of the
database's vectors it was built from (`sqlite_digest`), a checksum of the ids and the SHA-256 of the index file's
bytes) and is rebuilt whenever the header does not match the database or the file, or the index is not an
inner-product flat index. The file's checksum makes damage to any one vector visible for the cost of reading the
file once (it is read into memory, checked, then parsed: the bytes checked are the bytes loaded). A header saved
before the checksums were recorded does not match, so such an index is rebuilt once and saved with them. (The
store also compares a sample of the loaded vectors with its BLOBs: `sqlite_check.vector_drift`.)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from memory.store._common import normalised, normalised_rows
from memory.store.errors import StoreError

logger = logging.getLogger(__name__)


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - faiss-cpu is a dependency
        raise StoreError("the SQLite store needs faiss: pip install faiss-cpu") from exc
    return faiss


def ids_checksum(ids: Iterable[int]) -> str:
    digest = hashlib.sha256()
    for i in sorted(ids):
        digest.update(int(i).to_bytes(8, "little", signed=True))
    return digest.hexdigest()


class VectorIndex:
    """IndexIDMap2(IndexFlatIP) over normalised float32 vectors; ids are node seqs.

    `threads` is the OpenMP thread count of a search (set per calling thread). One is the default: the server
    gets its parallelism from concurrent requests, and on a small shared machine OpenMP fan-out made a single
    5k x 384 query 15x slower (12 ms vs 0.8 ms measured); raise it for very large indexes.
    """

    def __init__(self, dim: int, *, threads: int = 1) -> None:
        faiss = _faiss()
        self.dim = dim
        self.threads = threads
        self._index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self._undo: list[tuple[str, int, np.ndarray | None]] | None = None
        self.refusal = ""  # why the last `load` returned False

    # ---------------------------------------------------------------- undo log (one open transaction)
    def begin(self) -> None:
        self._undo = []

    def commit(self) -> None:
        self._undo = None

    def rollback(self) -> None:
        log, self._undo = self._undo or [], None
        for op, seq, vec in reversed(log):
            if op == "added":
                self._remove(seq)
            else:
                assert vec is not None
                self._add(seq, vec)

    # ---------------------------------------------------------------- changes
    def add(self, seq: int, vector: np.ndarray) -> None:
        """Add (or replace) the vector of `seq`."""
        self.remove(seq)
        self._add(seq, normalised(vector))
        if self._undo is not None:
            self._undo.append(("added", seq, None))

    def remove(self, seq: int) -> bool:
        old = self.get(seq)
        if old is None:
            return False
        self._remove(seq)
        if self._undo is not None:
            self._undo.append(("removed", seq, old))
        return True

    def _add(self, seq: int, unit_vector: np.ndarray) -> None:
        self._index.add_with_ids(unit_vector.reshape(1, -1).astype(np.float32), np.array([seq], dtype=np.int64))

    def _remove(self, seq: int) -> None:
        self._index.remove_ids(np.array([seq], dtype=np.int64))

    def reset(self, seqs: np.ndarray, matrix: np.ndarray) -> None:
        """Replace everything by `matrix` (n, dim) of raw vectors with ids `seqs` (n,)."""
        self._index.reset()
        if len(seqs):
            unit = np.ascontiguousarray(normalised_rows(matrix))
            self._index.add_with_ids(unit, np.asarray(seqs, dtype=np.int64))

    # ---------------------------------------------------------------- reads
    def __len__(self) -> int:
        return int(self._index.ntotal)

    def ids(self) -> set[int]:
        return set(_faiss().vector_to_array(self._index.id_map).tolist())

    def get(self, seq: int) -> np.ndarray | None:
        try:
            return np.asarray(self._index.reconstruct(int(seq)), dtype=np.float32)
        except RuntimeError:  # faiss raises when the id is absent
            return None

    def search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(seq, cosine) best first; ties broken by seq.

        faiss cuts a tie at the k-th score in storage order (a re-added vector moves to the end), so the search
        widens until the k-th score is strictly above the last one fetched: every tied seq competes on seq."""
        if k <= 0 or not len(self):
            return []
        n = len(self)
        unit = normalised(query).reshape(1, -1)
        _faiss().omp_set_num_threads(self.threads)
        fetch = min(k + 1, n)
        while True:
            scores, ids = self._index.search(unit, fetch)
            hits = [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]
            if fetch >= n or len(hits) <= k or hits[-1][1] < hits[k - 1][1]:
                break
            fetch = min(2 * fetch, n)
        return sorted(hits, key=lambda h: (-h[1], h[0]))[:k]

    # ---------------------------------------------------------------- persistence
    def save(self, path: Path, generation: int, store_id: str = "", vectors_digest: str = "") -> None:
        """Write the index and its header atomically (temp file + rename). `vectors_digest` is the digest of the
        database's vectors this index holds."""
        faiss = _faiss()
        tmp = path.with_name(path.name + ".tmp")
        header_tmp = _header_path(path).with_name(_header_path(path).name + ".tmp")
        try:
            faiss.write_index(self._index, str(tmp))
            header = {"count": len(self), "dim": self.dim, "generation": generation, "store": store_id,
                      "vectors": vectors_digest, "ids": ids_checksum(self.ids()), "sha256": _file_sha256(tmp)}
            header_tmp.write_text(json.dumps(header), encoding="utf-8")
            os.replace(tmp, path)
            os.replace(header_tmp, _header_path(path))
        finally:  # a failed save leaves no partial temp file behind
            for leftover in (tmp, header_tmp):
                leftover.unlink(missing_ok=True)

    def load(self, path: Path, *, generation: int, count: int, store_id: str = "", vectors_digest: str = "") -> bool:
        """Load a saved index if its header matches the database (and `store_id`, the store that saved it, and
        `vectors_digest`, the digest of the database's vectors) and the file's bytes match the header's checksum;
        False (and nothing loaded, `refusal` saying why) otherwise."""
        self.refusal = ""
        header_path = _header_path(path)
        if not path.exists() or not header_path.exists():
            self.refusal = "no saved index"
            return False
        faiss = _faiss()
        try:
            header = json.loads(header_path.read_text(encoding="utf-8"))
            if not isinstance(header, dict):
                raise ValueError(f"its header is a JSON {type(header).__name__}, not an object")
            expected = (self.dim, generation, count, store_id)
            if (header.get("dim"), header.get("generation"), header.get("count"), header.get("store")) != expected:
                self.refusal = "its header does not match the database or is another store's"
                return False
            if "sha256" not in header or "vectors" not in header:
                self.refusal = "it was saved before index checksums were recorded"
                return False
            if header["vectors"] != vectors_digest:
                self.refusal = "it was built from other vectors than the database holds"
                return False
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != header["sha256"]:
                self.refusal = "its bytes do not match the checksum in its header (the file is damaged)"
                return False
            index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
            if not isinstance(index, faiss.IndexIDMap2):
                raise ValueError(f"it holds a {type(index).__name__}, not an IndexIDMap2")
            inner = faiss.downcast_index(index.index)
            if type(inner) is not faiss.IndexFlatIP or index.metric_type != faiss.METRIC_INNER_PRODUCT:
                raise ValueError(f"it maps ids to a {type(inner).__name__}, not an inner-product IndexFlatIP")
        except (OSError, ValueError, RuntimeError) as exc:
            logger.warning("ignoring unreadable vector index %s: %s", path, exc)
            self.refusal = f"it cannot be read ({exc})"
            return False
        previous, self._index = self._index, index
        if index.ntotal != count or index.d != self.dim or ids_checksum(self.ids()) != header.get("ids"):
            self._index = previous
            self.refusal = "its vectors do not match its header"
            return False
        return True


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _header_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")
