"""An order-independent digest of the SQLite store's vectors, kept in `meta` next to the vector generation.

The digest is the number of vector rows and the XOR of one 128-bit hash per row (of its seq and embedding BLOB):
a write changes it in O(1) (XOR the old row out, the new one in) inside the same transaction as the row, and a
saved faiss index records the digest of the vectors it was built from. On open, an index whose recorded digest is
not the database's is rebuilt: it was built from other vectors (a copy of the store that diverged, a database put
back from a backup) even when its generation, count, ids and store id all match.

`meta.vector_digest` is "<generation> <count>:<xor>". The generation tag says which vector generation the digest
describes: a store written by a version that did not keep the digest moved the generation without it, so a tag that
is not the current generation means "unknown", and opening computes the digest again from the rows (once, O(rows)).
A change made to the database with other tools (plain SQL) is not seen by the digest.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from memory.store import sqlite_check as maintenance
from memory.store import sqlite_schema as schema

logger = logging.getLogger(__name__)

_MASK = (1 << 128) - 1


def row_hash(seq: int, blob: bytes) -> int:
    """128 bits of BLAKE2b over (seq, BLOB): a seq is unique, so no two rows cancel in the XOR."""
    digest = hashlib.blake2b(int(seq).to_bytes(8, "little", signed=True), digest_size=16)
    digest.update(blob)
    return int.from_bytes(digest.digest(), "little")


@dataclass(frozen=True)
class VectorDigest:
    count: int = 0  # vector rows
    xor: int = 0  # XOR of `row_hash` over them

    def changed(self, seq: int, old: bytes | None, new: bytes | None) -> VectorDigest:
        """The digest after row `seq` went from `old` to `new` (None: no row)."""
        count, xor = self.count, self.xor
        if old is not None:
            count, xor = count - 1, xor ^ row_hash(seq, old)
        if new is not None:
            count, xor = count + 1, xor ^ row_hash(seq, new)
        return VectorDigest(count, xor & _MASK)

    def __str__(self) -> str:
        return f"{self.count}:{self.xor:032x}"

    @classmethod
    def parse(cls, text: str) -> VectorDigest | None:
        count, _, xor = text.partition(":")
        try:
            return cls(int(count), int(xor, 16))
        except ValueError:
            return None


def of_rows(rows: Iterable[tuple[int, bytes]]) -> VectorDigest:
    """The digest of (seq, BLOB) pairs."""
    digest = VectorDigest()
    for seq, blob in rows:
        digest = digest.changed(int(seq), None, bytes(blob))
    return digest


def computed(conn: sqlite3.Connection) -> VectorDigest:
    """The digest of every stored vector, read a page at a time."""
    return of_rows(row for page in maintenance.pages(conn, "SELECT seq, embedding FROM nodes") for row in page)


def current(conn: sqlite3.Connection) -> VectorDigest | None:
    """The recorded digest when it describes the current vector generation, else None (missing, unreadable, or
    left behind by a writer that did not keep it)."""
    value = schema.vector_digest(conn)
    if value is None:
        return None
    tag, _, text = value.partition(" ")
    if tag != str(schema.vector_generation(conn)):
        return None
    return VectorDigest.parse(text)


def record(conn: sqlite3.Connection, digest: VectorDigest) -> None:
    """Record `digest` as that of the current generation (inside the transaction that wrote the rows)."""
    schema.set_vector_digest(conn, f"{schema.vector_generation(conn)} {digest}")


def ensure(conn: sqlite3.Connection, path: Path) -> VectorDigest:
    """The current digest, computed from the rows and recorded first when there is none (inside a transaction)."""
    digest = current(conn)
    if digest is None:
        if conn.execute("SELECT 1 FROM nodes LIMIT 1").fetchone() is not None:
            logger.info("store %s: computing the digest of its vectors (once)", path)
        digest = computed(conn)
        record(conn, digest)
    return digest
