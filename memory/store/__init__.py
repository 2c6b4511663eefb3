"""Persistence of the memory engine behind the `Store` protocol.

`open_store(None, dim=...)` gives the in-memory reference store; a path gives the embedded SQLite + faiss store.
"""

from __future__ import annotations

from pathlib import Path

from memory.store.base import Store
from memory.store.errors import (
    DuplicateNodeError,
    EmbeddingError,
    NodeNotFoundError,
    StoreConfigError,
    StoreCorruptionError,
    StoreDatabaseError,
    StoreError,
    StoreUnavailableError,
)
from memory.store.inmemory import InMemoryStore
from memory.store.sqlite import SQLiteStore

__all__ = [
    "DuplicateNodeError",
    "EmbeddingError",
    "InMemoryStore",
    "NodeNotFoundError",
    "SQLiteStore",
    "Store",
    "StoreConfigError",
    "StoreCorruptionError",
    "StoreDatabaseError",
    "StoreError",
    "StoreUnavailableError",
    "open_store",
]


def open_store(path: str | Path | None, *, dim: int, embedder: str | None = None, create_dirs: bool = False) -> Store:
    """An in-memory store when `path` is None or ":memory:", else the SQLite store at `path` (the file is created
    if missing; its directory must exist unless `create_dirs`, so a mistyped directory is a `StoreError`).

    `embedder` names the model that made the embeddings; reopening a store with another name (or `dim`) fails.
    """
    if path is None or str(path) == ":memory:":
        return InMemoryStore(dim, embedder=embedder)
    return SQLiteStore(path, dim=dim, embedder=embedder, create_dirs=create_dirs)
