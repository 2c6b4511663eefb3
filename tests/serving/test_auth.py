"""Optional bearer-key auth on /v1/* and the memory API; health endpoints stay open."""

from __future__ import annotations

from typing import Any

import pytest

from tests.serving.conftest import body, serving
from tests.serving.fakes import FakeEngine

KEY = "s3cret-Key_123"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 403),
        ({"authorization": ""}, 403),
        ({"authorization": f"Bearer {KEY}x"}, 401),
        ({"authorization": "Bearer "}, 401),
        ({"authorization": f"Basic {KEY}"}, 401),
        ({"authorization": f"bearer {KEY}"}, 200),
        ({"authorization": f"Bearer {KEY}"}, 200),
    ],
)
async def test_bearer_key(make_app: Any, headers: dict[str, str], status: int) -> None:
    async with serving(make_app(api_key=KEY, engine=FakeEngine())) as client:
        for method, path, payload in (("POST", "/v1/systemone", body()), ("GET", "/v1/models", None), ("GET", "/v1/memory/stats", None)):
            r = await client.request(method, path, json=payload, headers=headers)
            assert r.status_code == status, (path, r.text)
            if status != 200:
                assert r.json() == {"detail": {"error_type": "authentication_error", "message": r.json()["detail"]["message"]}}
                assert "x-typesafe-request-id" in r.headers


async def test_health_endpoints_are_open(make_app: Any) -> None:
    async with serving(make_app(api_key=KEY)) as client:
        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await client.get(path)).status_code == 200


async def test_auth_off_ignores_the_sdk_header(client: Any) -> None:
    r = await client.post("/v1/systemone", json=body(), headers={"authorization": "Bearer anything"})
    assert r.status_code == 200


async def test_openapi_declares_security_only_when_on(make_app: Any) -> None:
    async with serving(make_app(api_key=KEY)) as client:
        on = (await client.get("/openapi.json")).json()
    async with serving(make_app()) as client:
        off = (await client.get("/openapi.json")).json()
    assert "HTTPBearer" in on["components"]["securitySchemes"]
    assert "securitySchemes" not in off.get("components", {})
