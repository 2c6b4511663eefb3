"""Store errors. Their root, `StoreError`, sits under the engine's root `memory.errors.MemoryEngineError`, so
one `except MemoryEngineError` covers every engine and store failure; every error carries the offending value.

    StoreError
    ├── NodeNotFoundError      (node_id); also the engine's NodeNotFoundError and a LookupError
    ├── DuplicateNodeError     (node_id or seq already stored)
    ├── EmbeddingError         (wrong shape / non-finite values)
    ├── StoreConfigError       (dimension or embedder differs from the one the store was built with)
    ├── StoreCorruptionError   (problems, path): `check()` found damage that cannot be derived again,
    │                      or the store's settings cannot be read
    └── StoreDatabaseError     (operation, path, reason): the database failed an operation (the sqlite3 error is
        │                      chained); a damaged file or a misuse such as a closed store
        └── StoreUnavailableError  an operational failure (locked or busy past the timeout, disk full, I/O error,
                                   read-only file): the operation was rolled back; `transient` when a retry soon
                                   may succeed (locked / busy)
"""

from __future__ import annotations

from memory import errors as engine_errors


class StoreError(engine_errors.MemoryEngineError):
    """Root of the store errors."""


class NodeNotFoundError(StoreError, engine_errors.NodeNotFoundError):
    """A store lookup of an unknown id: catchable as the engine's `NodeNotFoundError` too."""


class DuplicateNodeError(StoreError):
    def __init__(self, value: str | int, what: str = "id") -> None:
        super().__init__(f"a node with {what} {value!r} is already stored")
        self.value = value


class EmbeddingError(StoreError):
    def __init__(self, message: str, shape: tuple[int, ...] | None = None) -> None:
        super().__init__(message)
        self.shape = shape


class StoreConfigError(StoreError):
    def __init__(self, message: str, expected: object = None, found: object = None) -> None:
        super().__init__(message)
        self.expected = expected
        self.found = found


class StoreCorruptionError(StoreError):
    def __init__(self, problems: list[str], path: str | None = None) -> None:
        where = "store" if path is None else f"store {path}"
        super().__init__(f"{where} is inconsistent and cannot be repaired: " + "; ".join(problems[:5]))
        self.problems = problems
        self.path = path


class StoreDatabaseError(StoreError):
    """The database failed `operation` on the store at `path`; `reason` is the database's own message."""

    transient = False

    def __init__(self, message: str, *, operation: str, path: str, reason: str) -> None:
        super().__init__(message)
        self.operation = operation
        self.path = path
        self.reason = reason


class StoreUnavailableError(StoreDatabaseError):
    """An operational failure: nothing of the failed operation was kept, and the store is consistent."""

    def __init__(self, message: str, *, operation: str, path: str, reason: str, transient: bool) -> None:
        super().__init__(message, operation=operation, path=path, reason=reason)
        self.transient = transient
