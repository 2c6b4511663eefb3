"""Optional bearer-key authentication for `/v1/*` and the memory API (health endpoints stay open).

A missing key is 403, a wrong key (or another scheme) is 401; both say `authentication_error`. The check is
only mounted when a key is configured, so with auth off the SDK's `Authorization` header is simply ignored
and the OpenAPI schema declares no security.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPBearer

from serving.errors import AuthenticationError

_bearer = HTTPBearer(auto_error=False, description="The server's API key, as `Authorization: Bearer <key>`.")


def auth_dependencies(api_key: str | None) -> list[Any]:
    """Router dependencies enforcing `api_key` (none when auth is off)."""
    if api_key is None:
        return []
    expected = api_key.encode("utf-8")

    async def require_api_key(request: Request, _: Any = Security(_bearer)) -> None:
        header = request.headers.get("authorization")
        if not header or not header.strip():
            raise AuthenticationError("Must supply an API key as `Authorization: Bearer <key>`.", missing=True)
        scheme, _sep, given = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise AuthenticationError("Cannot authenticate: expected `Authorization: Bearer <key>`.", missing=False)
        if not hmac.compare_digest(given.strip().encode("utf-8", "replace"), expected):
            raise AuthenticationError("Cannot authenticate with the given API key.", missing=False)

    return [Depends(require_api_key)]
