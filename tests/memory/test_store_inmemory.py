"""The store contract for the in-memory reference store, plus `open_store`."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory.store import InMemoryStore, StoreError, open_store
from memory.store.base import Store
from tests.memory.store_contract import StoreContract


class TestInMemoryStore(StoreContract):
    def make_store(self, tmp_path: Path, dim: int) -> Store:
        return InMemoryStore(dim)


def test_open_store_none_is_in_memory() -> None:
    store = open_store(None, dim=4)
    assert isinstance(store, InMemoryStore)
    assert store.dim == 4
    assert isinstance(open_store(":memory:", dim=4, embedder="e"), InMemoryStore)


def test_dim_must_be_positive() -> None:
    with pytest.raises(StoreError):
        InMemoryStore(0)


def test_public_api() -> None:
    import memory.store as api

    assert sorted(api.__all__) == [
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
    assert all(hasattr(api, name) for name in api.__all__)


def test_importing_the_store_does_not_import_faiss() -> None:
    import subprocess
    import sys

    code = "import sys, memory.store; assert 'faiss' not in sys.modules, 'faiss imported at import time'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
