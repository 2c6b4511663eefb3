"""sqlite3 errors as store errors: `SQLiteStore` runs every public method inside `translated(operation, path)`,
so callers see a `StoreError` chained from the sqlite3 error, naming the operation and the database file.

An operational failure (busy or locked past the busy timeout, disk full, I/O error, read-only file, out of memory)
is a `StoreUnavailableError`; any other (a damaged file, a closed store) a `StoreDatabaseError`, as is a row
that cannot be decoded (`sqlite_schema.UnreadableRowError`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memory.store.errors import StoreDatabaseError, StoreUnavailableError
from memory.store.sqlite_schema import UnreadableRowError

# SQLite primary result codes (sqlite3.h); an extended code keeps its primary code in the low byte
_BUSY, _LOCKED, _NOMEM, _READONLY, _IOERR, _FULL, _CANTOPEN, _PROTOCOL = 5, 6, 7, 8, 10, 13, 14, 15
_TRANSIENT = {_BUSY, _LOCKED}
_OPERATIONAL = {*_TRANSIENT, _NOMEM, _READONLY, _IOERR, _FULL, _CANTOPEN, _PROTOCOL}


def _kind(error: sqlite3.Error) -> tuple[bool, bool]:
    """(operational, transient) for `error`."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is None:  # an error sqlite3 did not raise itself (no result code): judge by its class and text
        operational = isinstance(error, sqlite3.OperationalError)
        return operational, operational and ("locked" in str(error) or "busy" in str(error))
    return code & 0xFF in _OPERATIONAL, code & 0xFF in _TRANSIENT


def is_transient(error: sqlite3.Error) -> bool:
    """Busy or locked past the busy timeout: another connection's transaction, not damage."""
    return _kind(error)[1]


def store_error(error: sqlite3.Error, operation: str, path: Path) -> StoreDatabaseError:
    """The store error for `error`, raised while the store at `path` ran `operation`."""
    reason = str(error)
    message = f"store {path}: {operation} failed: {reason}"
    operational, transient = _kind(error)
    if operational:
        return StoreUnavailableError(message, operation=operation, path=str(path), reason=reason, transient=transient)
    return StoreDatabaseError(message, operation=operation, path=str(path), reason=reason)


@contextmanager
def translated(operation: str, path: Path) -> Iterator[None]:
    """Raise a sqlite3 error of the block as `store_error(...)`, and a stored row that cannot be decoded as a
    `StoreDatabaseError`, chained from it (store errors pass unchanged)."""
    try:
        yield
    except sqlite3.Error as error:
        raise store_error(error, operation, path) from error
    except UnreadableRowError as error:
        reason = str(error)
        raise StoreDatabaseError(f"store {path}: {operation} failed: {reason}", operation=operation, path=str(path),
                                 reason=reason) from error
