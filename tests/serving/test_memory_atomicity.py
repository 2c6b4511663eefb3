"""A refused request leaves the store as it was: a batch the engine refuses writes none of its observations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from serving import Settings, create_app
from tests.serving.conftest import serving

M = "/v1/memory"


@pytest.fixture
async def real_memory(heuristic: Any) -> AsyncIterator[httpx2.AsyncClient]:
    async with serving(create_app(Settings(memory_db=":memory:", embedder="hashing"), backend=heuristic)) as client:
        yield client


@pytest.mark.parametrize("reserved", ["links_refused", "entities_given", "summary_of"])
async def test_a_batch_with_an_engine_refused_observation_writes_nothing(real_memory: httpx2.AsyncClient, reserved: str) -> None:
    """The reserved-key check is the engine's, after the schema passed: it used to run per observation, so the
    head of the batch was stored and the client, told 422, duplicated it when it sent the corrected batch."""
    client = real_memory
    batch = [{"content": "Mira: My old bicycle broke."}, {"content": "Mira: I bought a new one.", "metadata": {reserved: []}}]
    r = await client.post(f"{M}/observations/batch", json={"observations": batch})
    assert r.status_code == 422, r.text
    assert "observation 1" in r.json()["detail"][0]["msg"] and reserved in r.json()["detail"][0]["msg"]
    assert (await client.get(f"{M}/stats")).json()["nodes"] == 0
    batch[1]["metadata"] = {}
    r = await client.post(f"{M}/observations/batch", json={"observations": batch})
    assert r.status_code == 201 and len(r.json()["results"]) == 2
    assert (await client.get(f"{M}/stats")).json()["nodes"] == 2
