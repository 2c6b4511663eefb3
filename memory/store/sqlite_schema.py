"""Schema of the SQLite store and the row <-> value conversions.

`nodes.seq` is the rowid: the FTS5 rowid and the faiss id are the same number. The FTS5 table holds each node's
stemmed `index_tokens` terms (not its raw text), so FTS5 sees exactly the terms `controller.lexical` produces and
a query built from those terms matches the same way in both stores. `meta.analyzer` names those terms; opening a
store indexed otherwise (or before it was recorded) rebuilds the FTS rows.

`node_times` is derived too: one row per node with a time (`_common.time_key`, which sorts like the time even
when the stored texts carry different UTC offsets), indexed by (kind, time, seq) for `nearest_in_time`. A store
written before the table existed has it empty; `check()` reports that ("times:") and opening fills it.

`meta` holds the settings (schema version, dim, embedder, analyzer), the vector generation, the digest of the
stored vectors (`sqlite_digest`) and `store_id`, a random id given to the store when it is created: a saved faiss
index records it, so an index copied from another store is never loaded. A database that holds tables but no
`meta.schema_version` is not a store, and is refused before anything is written to it. A row that cannot be decoded
raises `UnreadableRowError` (the store raises it as a `StoreDatabaseError`).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from memory.store.errors import StoreConfigError, StoreCorruptionError
from memory.types import Edge, EdgeOrigin, LinkStatus, Node

SCHEMA_VERSION = 1

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    content TEXT NOT NULL,
    observed_at TEXT,
    event_time TEXT,
    speaker TEXT,
    source_ids TEXT NOT NULL,
    entities TEXT NOT NULL,
    types TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    link_status TEXT NOT NULL,
    metadata TEXT NOT NULL,
    superseded_by TEXT,
    kind TEXT NOT NULL,
    embedding BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS nodes_link_status ON nodes (link_status, seq);
CREATE TABLE IF NOT EXISTS edges (
    src TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    dst TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    relation TEXT NOT NULL,
    origin TEXT NOT NULL,
    weight REAL NOT NULL,
    src_fingerprint TEXT,
    dst_fingerprint TEXT,
    attrs TEXT NOT NULL,
    PRIMARY KEY (src, dst, relation)
);
CREATE INDEX IF NOT EXISTS edges_dst ON edges (dst, src, relation);
CREATE TABLE IF NOT EXISTS node_entities (
    entity TEXT NOT NULL,
    node_id TEXT NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    PRIMARY KEY (entity, node_id)
);
CREATE INDEX IF NOT EXISTS node_entities_recent ON node_entities (entity, seq);
CREATE INDEX IF NOT EXISTS node_entities_node ON node_entities (node_id);
CREATE TABLE IF NOT EXISTS node_times (
    seq INTEGER PRIMARY KEY REFERENCES nodes (seq) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    time TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS node_times_order ON node_times (kind, time, seq);
"""

FTS_DDL = "CREATE VIRTUAL TABLE IF NOT EXISTS nodes_fts USING fts5(body, tokenize = 'unicode61')"

NODE_COLUMNS = (
    "seq, id, content, observed_at, event_time, speaker, source_ids, entities, types, fingerprint, "
    "link_status, metadata, superseded_by, kind"
)
EDGE_COLUMNS = "src, dst, relation, origin, weight, src_fingerprint, dst_fingerprint, attrs"


def create(conn: sqlite3.Connection) -> None:
    """Create the tables that do not exist yet (call inside a transaction)."""
    for statement in DDL.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(FTS_DDL)


def _meta(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def _set_meta(conn: sqlite3.Connection, key: str, value: object) -> None:
    sql = "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    conn.execute(sql, (key, str(value)))


# What the CLI and the server open a new store with when no embedder is named: the shipped adapted MiniLM, the
# embedder the LoCoMo figures were measured with. `hashing` (weight-free, no model load) must be asked for.
DEFAULT_EMBEDDER = "minilm-tuned"


def resolve_embedder(path: str | Path | None, requested: str | None = None) -> str:
    """The embedder to open the store at `path` with: `requested`, else the one the store was built with, else
    `DEFAULT_EMBEDDER` (a new store, or `path` None for an in-memory one)."""
    if requested:
        return requested
    return (stored_embedder(path) if path is not None else None) or DEFAULT_EMBEDDER


def stored_embedder(path: str | Path) -> str | None:
    """The embedder an existing store file was built with (read-only), else None (no file, no store, no name)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return _meta(conn, "embedder") or None
        finally:
            conn.close()
    except sqlite3.Error:
        return None


def is_empty_database(path: str | Path) -> bool:
    """Whether the file at `path` is an SQLite database without a table (a zero-byte file is one), read-only: what
    opening it as a store would turn into a new, empty store. False for a store, another database, a file that is
    not SQLite, or no file."""
    path = Path(path)
    if not path.is_file():
        return False
    if path.stat().st_size == 0:
        return True
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0] == 0
        finally:
            conn.close()
    except sqlite3.Error:
        return False


class UnreadableRowError(ValueError):
    """A stored row whose values cannot be decoded (written by another tool, or damaged)."""


def refuse_foreign(conn: sqlite3.Connection, path: Path) -> None:
    """Raise `StoreConfigError` when `path` is an SQLite database of something else (tables, but no store
    settings), before the store writes anything into it. An empty database (a new or zero-byte file) is fine."""
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    if not tables:
        return
    try:
        if "meta" in tables and _meta(conn, "schema_version") is not None:
            return
    except sqlite3.OperationalError:  # a `meta` table of another shape
        pass
    shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
    raise StoreConfigError(f"{path} is an SQLite database but not a Jev-Mem memory store (it holds the tables "
                           f"{shown}); nothing was changed: name another --db file", "a Jev-Mem store", tables)


def _whole(conn: sqlite3.Connection, path: Path, key: str) -> int | None:
    value = _meta(conn, key)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise StoreCorruptionError([f"meta: {key} is {value!r}, not a whole number"], path=str(path)) from None


def check_meta(conn: sqlite3.Connection, path: Path, dim: int, embedder: str | None) -> str | None:
    """Record the settings of a new store, or check them against an existing one. Returns the embedder name."""
    version = _whole(conn, path, "schema_version")
    if version is None:
        _set_meta(conn, "schema_version", SCHEMA_VERSION)
        _set_meta(conn, "dim", dim)
        _set_meta(conn, "vector_generation", 0)
    elif version != SCHEMA_VERSION:
        raise StoreConfigError(f"unsupported schema version {version} in {path}", SCHEMA_VERSION, version)
    stored_dim = _whole(conn, path, "dim") or dim
    _whole(conn, path, "vector_generation")
    if stored_dim != dim:
        raise StoreConfigError(f"store {path} holds {stored_dim}-d vectors, not {dim}", dim, stored_dim)
    stored = _meta(conn, "embedder")
    if embedder is not None and stored is not None and stored != embedder:
        raise StoreConfigError(f"store {path} was embedded with {stored!r}, not {embedder!r}; open it with its own "
                               f"embedder, or convert it: jevmem reembed --db {path} --embedder NAME", embedder, stored)
    if embedder is not None and stored is None:
        _set_meta(conn, "embedder", embedder)
    if _meta(conn, "store_id") is None:  # a new store, or one made before stores had an id
        _set_meta(conn, "store_id", uuid.uuid4().hex)
    return embedder if stored is None else stored


def store_id(conn: sqlite3.Connection) -> str:
    """The store's random id (`check_meta` gives every store one), recorded in its saved vector index."""
    return _meta(conn, "store_id") or ""


def recorded_embedder(conn: sqlite3.Connection) -> str | None:
    """The embedder the store records now (another connection may have changed it: `jevmem reembed`)."""
    return _meta(conn, "embedder")


def set_embedder(conn: sqlite3.Connection, embedder: str) -> None:
    """Record `embedder` as the model of every stored vector (`SQLiteStore.replace_embeddings` only)."""
    _set_meta(conn, "embedder", embedder)


def analyzer(conn: sqlite3.Connection) -> str | None:
    """The index terms the FTS rows were built with (`controller.lexical.ANALYZER`); None before it was recorded."""
    return _meta(conn, "analyzer")


def set_analyzer(conn: sqlite3.Connection, value: str) -> None:
    _set_meta(conn, "analyzer", value)


def vector_generation(conn: sqlite3.Connection) -> int:
    """A counter bumped by every write that changes a vector; a saved faiss index remembers the value."""
    return int(_meta(conn, "vector_generation") or 0)


def bump_vector_generation(conn: sqlite3.Connection) -> None:
    conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'vector_generation'")


def vector_digest(conn: sqlite3.Connection) -> str | None:
    """The recorded digest of the stored vectors, tagged with its generation (`sqlite_digest`); None before one was."""
    return _meta(conn, "vector_digest")


def set_vector_digest(conn: sqlite3.Connection, value: str) -> None:
    _set_meta(conn, "vector_digest", value)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def parse_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def node_row(node: Node, embedding: np.ndarray) -> tuple[Any, ...]:
    """Values for `INSERT INTO nodes (NODE_COLUMNS, embedding)`."""
    return (
        node.seq,
        node.id,
        node.content,
        _time(node.observed_at),
        _time(node.event_time),
        node.speaker,
        _json(list(node.source_ids)),
        _json(list(node.entities)),
        _json(node.types),
        node.fingerprint,
        LinkStatus(node.link_status).value,
        _json(node.metadata),
        node.superseded_by,
        node.kind,
        np.ascontiguousarray(embedding, dtype=np.float32).tobytes(),
    )


def row_node(row: sqlite3.Row | tuple[Any, ...]) -> Node:
    """Inverse of `node_row` for a row selected with NODE_COLUMNS (`UnreadableRowError` when it cannot be)."""
    (seq, node_id, content, observed_at, event_time, speaker, source_ids, entities, types, fingerprint,
     link_status, metadata, superseded_by, kind) = tuple(row)  # fmt: skip
    try:
        return Node(
            id=node_id,
            content=content,
            observed_at=parse_time(observed_at),
            event_time=parse_time(event_time),
            speaker=speaker,
            source_ids=tuple(json.loads(source_ids)),
            entities=tuple(json.loads(entities)),
            types=json.loads(types),
            fingerprint=fingerprint,
            seq=seq,
            link_status=LinkStatus(link_status),
            metadata=json.loads(metadata),
            superseded_by=superseded_by,
            kind=kind,
        )
    except (TypeError, ValueError) as error:  # not JSON, not a time, not a status
        raise UnreadableRowError(f"nodes row {seq} ({node_id!r}) cannot be read: {error}") from error


def edge_row(edge: Edge) -> tuple[Any, ...]:
    return (
        edge.src,
        edge.dst,
        edge.relation,
        EdgeOrigin(edge.origin).value,
        float(edge.weight),
        edge.src_fingerprint,
        edge.dst_fingerprint,
        _json(edge.attrs),
    )


def row_edge(row: sqlite3.Row | tuple[Any, ...]) -> Edge:
    src, dst, relation, origin, weight, src_fp, dst_fp, attrs = tuple(row)
    try:
        return Edge(src, dst, relation, EdgeOrigin(origin), weight, src_fp, dst_fp, json.loads(attrs))
    except (TypeError, ValueError) as error:
        raise UnreadableRowError(f"edges row ({src!r}, {dst!r}, {relation!r}) cannot be read: {error}") from error


def blob_vector(blob: bytes, dim: int) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32, count=dim).copy()
