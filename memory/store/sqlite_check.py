"""Consistency checks and repairs of the SQLite store's derived data (FTS rows, entity rows).

Each problem is a string prefixed by the part it concerns ("fts:", "vectors:", "edges:", "entities:", "times:",
"embeddings:", "nodes:"), so the store knows which part to rebuild. "embeddings:" and "nodes:" (a row whose
entities cannot be read) cannot be derived again.

The vector index is compared by ids, and by content on a sample (`VECTOR_SAMPLE` vectors spread over the seqs):
a full comparison would read every BLOB on every open, which is what loading a saved index saves. A saved index is
checked whole before this runs: its file's checksum and the digest of the vectors it was built from
(`vectors.VectorIndex.load`, `sqlite_digest`) catch a changed vector the sample does not hold.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from memory.store import sqlite_errors
from memory.store import sqlite_schema as schema
from memory.store._common import entity_key, entity_keys, index_text, node_time, normalised, time_key

PAGE = 512  # rows per page when iterating or rebuilding
DERIVED = ("fts:", "vectors:", "edges:", "entities:", "times:")
VECTOR_SAMPLE = 64  # vectors compared with their BLOBs by `vector_drift`


class Vectors(Protocol):  # what the checks read of `vectors.VectorIndex`
    def ids(self) -> set[int]: ...
    def get(self, seq: int) -> np.ndarray | None: ...


def pages(conn: sqlite3.Connection, select: str) -> Iterator[list[Any]]:
    """Rows of `select` (a SELECT on `nodes` whose first column is seq) in seq order, a page at a time."""
    last = -(2**63)
    while True:
        rows = conn.execute(f"{select} WHERE seq > ? ORDER BY seq LIMIT {PAGE}", (last,)).fetchall()
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def repair_tables(conn: sqlite3.Connection, problems: list[str]) -> None:
    """Rebuild the derived tables `problems` name (FTS rows, entity and edge links, times); the vector index is
    the store's own to rebuild."""
    if any(p.startswith("fts:") for p in problems):
        rebuild_fts(conn)
    if any(p.startswith(("entities:", "edges:")) for p in problems):
        rebuild_links(conn)
    if any(p.startswith("times:") for p in problems):
        rebuild_times(conn)


def find_problems(conn: sqlite3.Connection, dim: int, vectors: Vectors | None) -> list[str]:
    """Problems in the database (and, given it, the vector index). Empty list = consistent."""
    problems: list[str] = []
    q = conn.execute
    seqs = {int(r[0]) for r in q("SELECT seq FROM nodes")}
    bad = q("SELECT COUNT(*) FROM nodes WHERE length(embedding) != ?", (4 * dim,)).fetchone()[0]
    if bad:
        problems.append(f"embeddings: {bad} nodes have a BLOB that is not {dim} float32 values")
    try:
        fts = {int(r[0]) for r in q("SELECT rowid FROM nodes_fts")}
        q("INSERT INTO nodes_fts (nodes_fts) VALUES ('integrity-check')")
    except sqlite3.DatabaseError as exc:
        if sqlite_errors.is_transient(exc):  # the integrity check writes: another connection's lock is no damage
            raise
        problems.append(f"fts: index is damaged ({exc})")
    else:
        if fts != seqs:
            problems.append(f"fts: {len(fts)} rows for {len(seqs)} nodes ({len(fts ^ seqs)} differ)")
    vector_ids = None if vectors is None else vectors.ids()
    if vector_ids is not None and vector_ids != seqs:
        differ = len(vector_ids ^ seqs)
        problems.append(f"vectors: {len(vector_ids)} vectors for {len(seqs)} nodes ({differ} differ)")
    elif vectors is not None and (drift := vector_drift(conn, dim, vectors, sorted(seqs))):
        problems.append(drift)
    dangling = q(
        "SELECT COUNT(*) FROM edges WHERE src NOT IN (SELECT id FROM nodes) OR dst NOT IN (SELECT id FROM nodes)"
    ).fetchone()[0]
    if dangling:
        problems.append(f"edges: {dangling} edges have a missing endpoint")
    orphans = q("SELECT COUNT(*) FROM node_entities WHERE node_id NOT IN (SELECT id FROM nodes)").fetchone()[0]
    if orphans:
        problems.append(f"entities: {orphans} entity rows point at missing nodes")
    problems.extend(_entity_problems(conn))
    timed = {int(r[0]) for r in q("SELECT seq FROM nodes WHERE event_time IS NOT NULL OR observed_at IS NOT NULL")}
    rows = {int(r[0]) for r in q("SELECT seq FROM node_times")}
    if rows != timed:
        problems.append(f"times: {len(rows)} time rows for {len(timed)} nodes with a time ({len(rows ^ timed)} differ)")
    return problems


def _entity_problems(conn: sqlite3.Connection) -> list[str]:
    """Nodes whose entity rows are not one per entity key (rows lost), and rows whose entities cannot be read."""
    wrong, unreadable = 0, []
    select = "SELECT seq, entities, (SELECT COUNT(*) FROM node_entities e WHERE e.node_id = nodes.id) FROM nodes"
    for rows in pages(conn, select):
        for seq, entities, count in rows:
            try:
                keys = {entity_key(e) for e in json.loads(entities)} - {""}
            except (TypeError, ValueError, AttributeError):  # not JSON, or not a list of strings
                unreadable.append(seq)
                continue
            wrong += len(keys) != count
    problems = [f"entities: {wrong} nodes lack some of their entity rows"] if wrong else []
    if unreadable:
        problems.append(f"nodes: the entities of {len(unreadable)} rows cannot be read (seq {unreadable[:5]})")
    return problems


def vector_drift(conn: sqlite3.Connection, dim: int, vectors: Vectors, seqs: list[int]) -> str | None:
    """A "vectors:" problem when any of a sample of the index's vectors differs from its node's (normalised)
    BLOB: an index saved by another store, or damaged, under a header that matches this one."""
    if not seqs:
        return None
    step = max(1, len(seqs) // VECTOR_SAMPLE)
    sample = sorted({*seqs[::step][:VECTOR_SAMPLE], seqs[-1]})
    marks = ", ".join("?" * len(sample))
    rows = conn.execute(f"SELECT seq, embedding FROM nodes WHERE seq IN ({marks})", sample).fetchall()
    rows = [(seq, blob) for seq, blob in rows if len(blob) == 4 * dim]  # "embeddings:" reports the others
    differ = 0
    for seq, blob in rows:
        held = vectors.get(int(seq))
        differ += held is None or not np.allclose(held, normalised(schema.blob_vector(blob, dim)), rtol=0, atol=1e-6)
    return f"vectors: {differ} of {len(rows)} sampled vectors differ from their stored embeddings" if differ else None


def rebuild_fts(conn: sqlite3.Connection) -> None:
    """Drop the FTS5 table (whatever state it is in) and fill it again from `nodes`."""
    conn.execute("DROP TABLE IF EXISTS nodes_fts")
    conn.execute(schema.FTS_DDL)
    for rows in pages(conn, "SELECT seq, content, event_time, observed_at FROM nodes"):
        conn.executemany(
            "INSERT INTO nodes_fts (rowid, body) VALUES (?, ?)",
            [(s, index_text(c, schema.parse_time(e or o))) for s, c, e, o in rows],
        )


def insert_entities(conn: sqlite3.Connection, node_id: str, seq: int, keys: list[str]) -> None:
    conn.executemany(
        "INSERT INTO node_entities (entity, node_id, seq) VALUES (?, ?, ?)", [(k, node_id, seq) for k in keys]
    )


def insert_time(conn: sqlite3.Connection, seq: int, kind: str, key: str | None) -> None:
    if key is not None:
        conn.execute("INSERT INTO node_times (seq, kind, time) VALUES (?, ?, ?)", (seq, kind, key))


def rebuild_times(conn: sqlite3.Connection) -> None:
    """Fill `node_times` again from `nodes` (a store written before it existed has it empty)."""
    conn.execute("DELETE FROM node_times")
    for rows in pages(conn, f"SELECT {schema.NODE_COLUMNS} FROM nodes"):
        for row in rows:
            node = schema.row_node(row)
            insert_time(conn, node.seq, node.kind, time_key(node_time(node)))


def rebuild_links(conn: sqlite3.Connection) -> None:
    """Drop edges with a missing endpoint and rebuild the entity rows from `nodes`."""
    conn.execute("DELETE FROM edges WHERE src NOT IN (SELECT id FROM nodes) OR dst NOT IN (SELECT id FROM nodes)")
    conn.execute("DELETE FROM node_entities")
    for rows in pages(conn, f"SELECT {schema.NODE_COLUMNS} FROM nodes"):
        for row in rows:
            node = schema.row_node(row)
            insert_entities(conn, node.id, node.seq, entity_keys(node))
