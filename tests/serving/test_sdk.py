"""The official `typesafe-sdk` against the app: async through `httpx2.ASGITransport`, sync through a bridge,
both compressing bodies over 1 KiB with zstd; parity with the in-process `SystemOneClient`."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from typesafe_sdk import (
    AsyncTypeSafeClient,
    Choice,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeAuthenticationError,
    TypeSafeBadRequestError,
    TypeSafeClient,
    TypeSafePermissionDeniedError,
    TypeSafeUnprocessableEntityError,
)

from controller.backend import Backend
from controller.client import SystemOneClient
from serving import Settings, create_app
from tests.serving.conftest import CHOICE, NOUL, SCORE, Recording, bridged

LONG_STATE = {"ticket": "I was charged twice for my March invoice. " * 40, "customer": {"plan": "pro", "tickets": 3}}
QUESTIONS: dict[str, Any] = {
    "refund": Noul(instructions=NOUL["instructions"]),
    "team": Choice(instructions=CHOICE["instructions"], criteria=CHOICE["criteria"]),
    "anger": Score(instructions=SCORE["instructions"], criteria=SCORE["criteria"]),
    "raw": {"type": "noul", "criteria": {"true": "They threaten a chargeback"}},
}
NO_RETRY = RetryPolicy(max_retries=0)


def _numbers(response: Any) -> dict[str, Any]:
    return {k: a.model_dump(mode="json") for k, a in response.answers.items()}


async def test_async_sdk_over_asgi_with_zstd(heuristic: Backend) -> None:
    app = create_app(Settings(), backend=heuristic)
    recording = Recording(httpx2.ASGITransport(app=app))
    async with app.router.lifespan_context(app):
        async with AsyncTypeSafeClient(api_key="local", base_url="http://local", transport=recording) as sdk:
            r = await sdk.system_one(LONG_STATE, QUESTIONS)
            models = await sdk.models.list()
    headers, size = recording.seen[0]
    assert headers.get("content-encoding") == "zstd" and size < 1024 < len(str(LONG_STATE))
    assert r.model == heuristic.info.name and r.request_id.startswith("req_")
    assert set(r.nouls) == {"refund", "raw"} and set(r.choices) == {"team"} and set(r.scores) == {"anger"}
    assert r.scores["anger"].legend == {0: "Calm", 1: "Frustrated", 2: "Very angry"}
    assert r.choices["team"].choice in CHOICE["criteria"]
    assert [m.name for m in models.models][1:] == ["jev-latest", "jev-preview"]


def test_sync_sdk_through_a_bridge_with_zstd(heuristic: Backend) -> None:
    app = create_app(Settings(), backend=heuristic)
    with bridged(app) as transport, TypeSafeClient(api_key="local", base_url="http://local", transport=transport) as sdk:
        r = sdk.system_one(LONG_STATE, QUESTIONS, model=heuristic.info.name)
        small = sdk.system_one("short", {"q": Noul(instructions="Short?")})
    assert transport.seen[0].get("content-encoding") == "zstd"
    assert transport.seen[1].get("content-encoding") is None  # under 1 KiB: sent as is
    assert r.model == heuristic.info.name and set(r.answers) == set(QUESTIONS)
    assert 0.0 <= small.nouls["q"].noul <= 1.0


async def test_parity_sdk_and_in_process_client(heuristic: Backend) -> None:
    """The same request through HTTP + the official SDK and through `SystemOneClient` gives identical numbers."""
    app = create_app(Settings(), backend=heuristic)
    local = SystemOneClient(heuristic)
    cases = [
        (LONG_STATE, QUESTIONS),
        ("Hello.", {"fav": {"type": "choice", "criteria": {c: None for c in ("Red", "Green", "Blue", "Yellow")}}}),
        (["a", "b"], {"s": {"type": "score", "instructions": {"scale": "x"}, "criteria": [{"l": 0}, ["one"], "two"]}}),
    ]
    async with app.router.lifespan_context(app):
        async with AsyncTypeSafeClient(api_key="local", base_url="http://local", transport=httpx2.ASGITransport(app=app)) as sdk:
            for state, questions in cases:
                remote = await sdk.system_one(state, questions)
                here = local.system_one(state, questions)
                assert remote.model == here.model
                assert _numbers(remote) == _numbers(here)
                assert remote.usage.input_tokens == here.usage.input_tokens


async def test_sdk_error_classes(heuristic: Backend) -> None:
    app = create_app(Settings(api_key="right-key"), backend=heuristic)
    async with app.router.lifespan_context(app):
        transport = httpx2.ASGITransport(app=app)
        async with AsyncTypeSafeClient(api_key="right-key", base_url="http://local", transport=transport, retry=NO_RETRY) as sdk:
            with pytest.raises(TypeSafeBadRequestError) as bad:
                await sdk.system_one("x", {"q": NOUL}, model="no-such-model")
            assert bad.value.request_id is not None and "no-such-model" in str(bad.value)
            with pytest.raises(TypeSafeUnprocessableEntityError) as invalid:
                await sdk.system_one("x", {"q": {"type": "score", "criteria": ["only"]}})
            assert "between 2 and 10" in str(invalid.value)
        async with AsyncTypeSafeClient(api_key="wrong-key", base_url="http://local", transport=transport, retry=NO_RETRY) as sdk:
            with pytest.raises(TypeSafeAuthenticationError):
                await sdk.system_one("x", {"q": NOUL})
        async with httpx2.AsyncClient(transport=transport, base_url="http://local") as plain:
            r = await plain.post("/v1/systemone", json={"model": "jev-latest", "state": "x", "questions": {"q": NOUL}})
        assert r.status_code == 403
        from typesafe_sdk._core.errors import api_error

        assert isinstance(api_error(r.status_code, r.json(), r.headers), TypeSafePermissionDeniedError)
