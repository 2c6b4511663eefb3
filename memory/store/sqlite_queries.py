"""The SQLite store's read queries: pure functions of a connection (the caller holds the store's lock).

Each builds its SQL from fixed column lists and `?` placeholders only; ids, relations and text are always bound
parameters. Long id lists are read a page (`sqlite_check.PAGE`) at a time, under SQLite's variable limit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from datetime import datetime

from memory.store import sqlite_schema as schema
from memory.store._common import entity_key, fts_query, time_key
from memory.store.sqlite_check import PAGE
from memory.types import Edge, Node


def _marks(n: int) -> str:
    return ", ".join("?" * n)


def _chunks(items: Sequence[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), PAGE):
        yield list(items[start : start + PAGE])


def seq_of(conn: sqlite3.Connection, node_id: str) -> int | None:
    row = conn.execute("SELECT seq FROM nodes WHERE id = ?", (node_id,)).fetchone()
    return None if row is None else int(row[0])


def node(conn: sqlite3.Connection, node_id: str) -> Node | None:
    row = conn.execute(f"SELECT {schema.NODE_COLUMNS} FROM nodes WHERE id = ?", (node_id,)).fetchone()
    return None if row is None else schema.row_node(row)


def nodes(conn: sqlite3.Connection, node_ids: Sequence[str]) -> list[Node]:
    """The stored nodes among `node_ids`, in that order (unknown ids skipped, duplicates kept)."""
    found: dict[str, Node] = {}
    for chunk in _chunks(list(dict.fromkeys(node_ids))):
        for row in conn.execute(f"SELECT {schema.NODE_COLUMNS} FROM nodes WHERE id IN ({_marks(len(chunk))})", chunk):
            n = schema.row_node(row)
            found[n.id] = n
    return [found[i] for i in node_ids if i in found]


def nodes_after(conn: sqlite3.Connection, last: int) -> list[Node]:
    """One page of nodes with seq > `last`, in seq order."""
    sql = f"SELECT {schema.NODE_COLUMNS} FROM nodes WHERE seq > ? ORDER BY seq LIMIT {PAGE}"
    return [schema.row_node(r) for r in conn.execute(sql, (last,)).fetchall()]


def with_status(conn: sqlite3.Connection, status: str) -> list[str]:
    """Ids of the nodes whose link status is `status`, in seq order."""
    return [r[0] for r in conn.execute("SELECT id FROM nodes WHERE link_status = ? ORDER BY seq", (status,)).fetchall()]


def edge_counts(conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute("SELECT relation, COUNT(*) FROM edges GROUP BY relation ORDER BY relation").fetchall()
    return {r[0]: int(r[1]) for r in rows}


def edges(conn: sqlite3.Connection, column: str, node_id: str, relations: Sequence[str] | None, order: str) -> list[Edge]:
    """Edges whose `column` ("src" or "dst") is `node_id`, of `relations` (None: all), in `order`."""
    sql = f"SELECT {schema.EDGE_COLUMNS} FROM edges WHERE {column} = ?"
    params: list[str] = [node_id]
    if relations is not None:
        wanted = list(dict.fromkeys(relations))
        if not wanted:
            return []
        sql += f" AND relation IN ({_marks(len(wanted))})"
        params += wanted
    return [schema.row_edge(r) for r in conn.execute(f"{sql} ORDER BY {order}", params).fetchall()]


def edges_touching(conn: sqlite3.Connection, node_ids: Sequence[str], relations: Sequence[str] | None) -> list[Edge]:
    """Every edge with its src or dst among `node_ids`, once, ordered by (src, dst, relation)."""
    wanted = None if relations is None else list(dict.fromkeys(relations))
    if wanted == []:
        return []
    unique = list(dict.fromkeys(node_ids))
    found: dict[tuple[str, str, str], Edge] = {}
    for column in ("src", "dst"):
        for chunk in _chunks(unique):
            sql = f"SELECT {schema.EDGE_COLUMNS} FROM edges WHERE {column} IN ({_marks(len(chunk))})"
            params = list(chunk)
            if wanted is not None:
                sql += f" AND relation IN ({_marks(len(wanted))})"
                params += wanted
            for row in conn.execute(sql, params):
                edge = schema.row_edge(row)
                found[(edge.src, edge.dst, edge.relation)] = edge
    return [found[k] for k in sorted(found)]


def ids_by_seq(conn: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, str]:
    if not seqs:
        return {}
    return {int(s): i for s, i in conn.execute(f"SELECT seq, id FROM nodes WHERE seq IN ({_marks(len(seqs))})", list(seqs))}


def text_hits(conn: sqlite3.Connection, query: str, k: int) -> list[tuple[str, float]]:
    """BM25 via FTS5 `bm25()` (k1=1.2, b=0.75), best first; the MATCH expression is built from quoted tokens only."""
    match = fts_query(query)
    if not match or k <= 0:
        return []
    rows = conn.execute(
        "SELECT rowid, bm25(nodes_fts) AS rank FROM nodes_fts WHERE nodes_fts MATCH ? ORDER BY rank, rowid LIMIT ?",
        (match, k),
    ).fetchall()
    ids = ids_by_seq(conn, [int(r[0]) for r in rows])
    return [(ids[int(s)], -float(rank)) for s, rank in rows if int(s) in ids]


def entity_nodes(conn: sqlite3.Connection, entity: str, limit: int) -> list[str]:
    """Nodes carrying `entity` (case-insensitive), most recent (highest seq) first."""
    if limit <= 0:
        return []
    sql = "SELECT node_id FROM node_entities WHERE entity = ? ORDER BY seq DESC LIMIT ?"
    return [r[0] for r in conn.execute(sql, (entity_key(entity), limit)).fetchall()]


def near_seq(conn: sqlite3.Connection, seq: int, window: int) -> list[str]:
    """Nodes whose seq differs from `seq` by 1..window, nearest first (earlier first on ties)."""
    if window <= 0:
        return []
    rows = conn.execute(
        "SELECT seq, id FROM nodes WHERE seq BETWEEN ? AND ? AND seq != ?", (seq - window, seq + window, seq)
    ).fetchall()
    return [i for s, i in sorted(rows, key=lambda r: (abs(r[0] - seq), r[0]))]


def nearest_in_time(conn: sqlite3.Connection, when: datetime, seq: int, *, after: bool, kind: str) -> str | None:
    """The node of `kind` just before / after (when, seq) in (time, seq) order: one row of the (kind, time, seq)
    index of `node_times`."""
    op, order = (">", "ASC") if after else ("<", "DESC")
    sql = (f"SELECT n.id FROM node_times t JOIN nodes n ON n.seq = t.seq "
           f"WHERE t.kind = ? AND (t.time, t.seq) {op} (?, ?) ORDER BY t.time {order}, t.seq {order} LIMIT 1")
    row = conn.execute(sql, (kind, time_key(when), seq)).fetchone()
    return None if row is None else str(row[0])
