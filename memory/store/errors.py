"""Store errors. One root, `StoreError`; every error carries the offending value.

    StoreError
    ├── NodeNotFoundError      (node_id); also a LookupError
    ├── DuplicateNodeError     (node_id or seq already stored)
    ├── EmbeddingError         (wrong shape / non-finite values)
    ├── StoreConfigError       (dimension or embedder differs from the one the store was built with)
    └── StoreCorruptionError   (problems `check()` found that cannot be derived again)
"""

from __future__ import annotations


class StoreError(Exception):
    """Root of the store errors."""


class NodeNotFoundError(StoreError, LookupError):
    def __init__(self, node_id: str) -> None:
        super().__init__(f"no node with id {node_id!r}")
        self.node_id = node_id


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
    def __init__(self, problems: list[str]) -> None:
        super().__init__("store is inconsistent and cannot be repaired: " + "; ".join(problems[:5]))
        self.problems = problems
