"""A failing memory store is a clear 5xx: 503 `store_unavailable` for an operational failure (locked, disk full,
I/O), and a batch write says that nothing of the batch was stored, so the client sends the same batch again.
Before, the raw `sqlite3.OperationalError` escaped the engine and the client got an unexplained 500 after the
head of its batch had been stored."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from controller.client import SystemOneClient
from controller.embedding import HashingEmbedder
from memory.config import EngineConfig
from memory.engine import Engine
from memory.store import SQLiteStore
from tests.memory.sqlite_faults import INSERT_NODE, FailingConnection, statement_is
from tests.serving.conftest import serving

M = "/v1/memory"
BATCH = {"observations": [{"content": f"Mira: garden note {i} about tomatoes", "speaker": "Mira"} for i in range(4)]}


@pytest.fixture
async def sqlite_memory(make_app: Any, heuristic: Any, tmp_path: Path) -> AsyncIterator[tuple[httpx2.AsyncClient, Engine]]:
    store = SQLiteStore(tmp_path / "mem.db", dim=64)
    engine = Engine(store, SystemOneClient(heuristic), HashingEmbedder(64), EngineConfig())
    try:
        async with serving(make_app(backend=heuristic, engine=engine)) as client:
            yield client, engine
    finally:
        FailingConnection.restore(store)
        store.close()


async def nodes(client: httpx2.AsyncClient) -> int:
    r = await client.get(f"{M}/stats")
    assert r.status_code == 200, r.text
    return int(r.json()["nodes"])


@pytest.mark.parametrize(("error", "retry"), [(sqlite3.OperationalError("database is locked"), True),
                                              (sqlite3.OperationalError("database or disk is full"), False)])
async def test_a_store_failure_mid_batch_is_503_and_stores_nothing(
    sqlite_memory: tuple[httpx2.AsyncClient, Engine], error: sqlite3.Error, retry: bool
) -> None:
    client, engine = sqlite_memory
    FailingConnection.install(engine.store, when=statement_is(INSERT_NODE), nth=3, error=error)
    r = await client.post(f"{M}/observations/batch", json=BATCH)
    assert r.status_code == 503, r.text
    detail = r.json()["detail"]
    assert detail["error_type"] == "store_unavailable"
    assert "nothing from the batch of 4 observations was stored" in detail["message"] and str(error) in detail["message"]
    assert str(engine.store.path) not in detail["message"]  # no server paths on the wire
    assert ("retry-after" in r.headers) is retry
    FailingConnection.restore(engine.store)
    assert await nodes(client) == 0 and engine.store.check() == []
    r = await client.post(f"{M}/observations/batch", json=BATCH)
    assert r.status_code == 201 and len(r.json()["results"]) == 4
    assert await nodes(client) == 4


async def test_a_damaged_store_mid_batch_is_500_and_stores_nothing(sqlite_memory: tuple[httpx2.AsyncClient, Engine]) -> None:
    client, engine = sqlite_memory
    malformed = sqlite3.DatabaseError("database disk image is malformed")
    FailingConnection.install(engine.store, when=statement_is(INSERT_NODE), nth=2, error=malformed)
    r = await client.post(f"{M}/observations/batch", json=BATCH)
    assert r.status_code == 500, r.text
    detail = r.json()["detail"]
    assert detail["error_type"] == "internal_error" and "nothing from the batch of 4 observations was stored" in detail["message"]
    assert "malformed" not in detail["message"]  # the log has it, the client gets the request id
    FailingConnection.restore(engine.store)
    assert await nodes(client) == 0


async def test_a_locked_store_is_503_with_retry_after(sqlite_memory: tuple[httpx2.AsyncClient, Engine]) -> None:
    client, engine = sqlite_memory
    engine.store._conn.execute("PRAGMA busy_timeout = 20")
    other = sqlite3.connect(str(engine.store.path), isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process writing
    try:
        r = await client.post(f"{M}/observations", json={"content": "Mira: my bicycle broke"})
        assert r.status_code == 503, r.text
        assert r.json()["detail"]["error_type"] == "store_unavailable" and "database is locked" in r.json()["detail"]["message"]
        assert r.headers["retry-after"] == "1"
        r = await client.post(f"{M}/observations", json={"content": ""})
        assert r.status_code == 422  # invalid input stays 4xx
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert (await client.post(f"{M}/observations", json={"content": "Mira: my bicycle broke"})).status_code == 201
    assert await nodes(client) == 1


async def test_a_failing_read_is_503(sqlite_memory: tuple[httpx2.AsyncClient, Engine]) -> None:
    client, engine = sqlite_memory
    FailingConnection.install(engine.store, when=lambda sql: "COUNT(*)" in sql, error=sqlite3.OperationalError("disk I/O error"))
    r = await client.get(f"{M}/stats")
    assert r.status_code == 503 and r.json()["detail"]["error_type"] == "store_unavailable", r.text
    assert "disk I/O error" in r.json()["detail"]["message"]
