"""Fault injection for the SQLite store: a connection whose chosen statements raise a sqlite3 error, the way a
full disk, an I/O error or a lock held past the busy timeout surface through `sqlite3`.

    store._conn = FailingConnection(store._conn, when=lambda sql: sql.startswith("INSERT INTO nodes ("), nth=3)

`sqlite3.Connection.execute` is read-only on the object, so the store's connection is swapped for this proxy;
`FailingConnection.restore(store)` puts the real one back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

INSERT_NODE = "INSERT INTO nodes ("  # the row of a new node (not its FTS or entity rows)


def statement_is(prefix: str) -> Callable[[str], bool]:
    return lambda sql: sql.lstrip().startswith(prefix)


class FailingConnection:
    """Delegates to `conn`; the `nth` and later statements for which `when(sql)` holds raise `error` (every one
    from then on, or only `times` of them)."""

    def __init__(self, conn: sqlite3.Connection, *, when: Callable[[str], bool], nth: int = 1,
                 error: sqlite3.Error | None = None, times: int | None = None) -> None:
        self.conn = conn
        self.when = when
        self.nth = nth
        self.error = error if error is not None else sqlite3.OperationalError("database or disk is full")
        self.times = times
        self.seen = 0
        self.raised = 0

    def _check(self, sql: str) -> None:
        if not self.when(sql):
            return
        self.seen += 1
        if self.seen >= self.nth and (self.times is None or self.raised < self.times):
            self.raised += 1
            raise self.error

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self._check(sql)
        return self.conn.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self._check(sql)
        return self.conn.executemany(sql, *args)

    def __getattr__(self, name: str) -> Any:  # in_transaction, close, ...
        return getattr(self.conn, name)

    @staticmethod
    def install(store: Any, **kwargs: Any) -> FailingConnection:
        failing = FailingConnection(store._conn, **kwargs)
        store._conn = failing
        return failing

    @staticmethod
    def restore(store: Any) -> None:
        if isinstance(getattr(store, "_conn", None), FailingConnection):
            store._conn = store._conn.conn
