"""Hostile input found by probing the server: each case was a 5xx or a misleading answer before its fix."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from tests.serving.conftest import body, raw_post, serving
from tests.serving.fakes import FakeEngine

M = "/v1/memory"
KEY = "s3cret-Key_123"


@pytest.mark.parametrize("declared", [b"9" * 5000, b"0" * 5000 + b"2"])
async def test_a_content_length_of_thousands_of_digits_is_4xx_not_500(make_app: Any, declared: bytes) -> None:
    """int() refuses more than 4300 digits (ValueError): the check that the header is a number passed, the
    conversion raised, and the request was a 500."""
    sent = await raw_post(make_app(), "/v1/systemone", [(b"content-type", b"application/json"), (b"content-length", declared)])
    expected = 422 if declared.lstrip(b"0") == b"2" else 413  # zeros in front: the 2 bytes of `{}`, read and refused
    assert sent[0]["status"] == expected, sent[1]["body"]


@pytest.mark.parametrize("charset", ["punycode", "undefined"])
async def test_a_multipart_charset_that_cannot_decode_names_is_400_not_500(client: httpx2.AsyncClient, charset: str) -> None:
    """Starlette decodes part names in the declared charset and falls back to latin-1 on UnicodeDecodeError
    only; these codecs raise a bare UnicodeError, which escaped as a 500."""
    raw = (b'--B\r\nContent-Disposition: form-data; name="request"\r\n\r\n' + json.dumps(body()).encode()
           + b'\r\n--B\r\nContent-Disposition: form-data; name="asset-0"\r\n\r\nx\r\n--B--\r\n')  # "asset-0" is no punycode
    r = await client.post("/v1/systemone", content=raw, headers={"content-type": f"multipart/form-data; boundary=B; charset={charset}"})
    assert r.status_code == 400, r.text
    assert r.json()["detail"]["error_type"] == "invalid_request_error" and charset in r.json()["detail"]["message"]


@pytest.fixture
async def guarded_memory(make_app: Any) -> AsyncIterator[tuple[httpx2.AsyncClient, FakeEngine]]:
    engine = FakeEngine()
    async with serving(make_app(api_key=KEY, engine=engine)) as client:
        yield client, engine


@pytest.mark.parametrize("raw", [b"{bad", b'{"content": NaN}', b"\xff", b"[" * 100 + b"]" * 100])
async def test_the_memory_api_checks_the_key_before_it_reports_a_malformed_body(
    guarded_memory: tuple[httpx2.AsyncClient, FakeEngine], raw: bytes
) -> None:
    """FastAPI parses JSON bodies before it runs the router's dependencies: a caller without a key was told 422
    and how the body was wrong, where one with a schema-invalid body was told 403."""
    client, engine = guarded_memory
    for method, path in (("POST", f"{M}/observations"), ("PATCH", f"{M}/nodes/abc"), ("POST", f"{M}/relink")):
        r = await client.request(method, path, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 403, (path, r.text)
        assert r.json()["detail"]["error_type"] == "authentication_error"
    r = await client.post(f"{M}/observations", content=raw, headers={"content-type": "application/json", "authorization": f"Bearer {KEY}"})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid"  # with the key: the body's error
    assert engine.nodes == {}


@pytest.fixture
async def fake_memory(make_app: Any) -> AsyncIterator[tuple[httpx2.AsyncClient, FakeEngine]]:
    engine = FakeEngine()
    async with serving(make_app(engine=engine)) as client:
        yield client, engine


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [
        ("GET", f"{M}/nodes/{'a' * 201}", None),
        ("PATCH", f"{M}/nodes/{'a' * 5000}", None),
        ("DELETE", f"{M}/nodes/{'a' * 201}", None),
        ("PUT", f"{M}/nodes/{'a' * 201}/links", None),
        ("DELETE", f"{M}/links", {"src": "a" * 201, "dst": "b", "relation": "semantic"}),
        ("DELETE", f"{M}/links", {"src": "", "dst": "b", "relation": "semantic"}),
    ],
)
async def test_node_ids_in_the_path_and_query_have_the_body_limits(
    fake_memory: tuple[httpx2.AsyncClient, FakeEngine], method: str, path: str, params: dict[str, str] | None
) -> None:
    """`NodeId` (1..200 characters) is enforced in bodies, but `Path()` / `Query()` dropped its constraints: an id
    of 5000 characters was looked up and echoed in a 404, and the schema declared no bounds."""
    client, _ = fake_memory
    payload = {"content": "x"} if method == "PATCH" else {"links": []} if method == "PUT" else None
    r = await client.request(method, path, params=params, json=payload)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][0] in ("path", "query")


async def test_the_schema_declares_the_node_id_bounds(fake_memory: tuple[httpx2.AsyncClient, FakeEngine]) -> None:
    client, _ = fake_memory
    paths = (await client.get("/openapi.json")).json()["paths"]
    schemas = [p["schema"] for p in paths[f"{M}/nodes/{{node_id}}"]["get"]["parameters"]]
    schemas += [p["schema"] for p in paths[f"{M}/links"]["delete"]["parameters"] if p["name"] in ("src", "dst")]
    assert len(schemas) == 3 and all((s.get("minLength"), s.get("maxLength")) == (1, 200) for s in schemas)


async def test_a_memory_body_without_a_content_type_is_read_as_json(fake_memory: tuple[httpx2.AsyncClient, FakeEngine]) -> None:
    """As on /v1/systemone. It was refused with 'Input should be a valid dictionary', about a valid object."""
    client, engine = fake_memory
    r = await client.post(f"{M}/observations", content=json.dumps({"content": "no header"}).encode())
    assert r.status_code == 201, r.text
    assert [n.content for n in engine.nodes.values()] == ["no header"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"])
async def test_a_memory_body_of_another_content_type_is_415(fake_memory: tuple[httpx2.AsyncClient, FakeEngine], content_type: str) -> None:
    client, engine = fake_memory
    for path, payload in (("/observations", {"content": "x"}), ("/query", {"text": "x"})):
        r = await client.post(M + path, content=json.dumps(payload).encode(), headers={"content-type": content_type})
        assert r.status_code == 415, r.text
        assert r.json()["detail"]["error_type"] == "unsupported_media_type" and "application/json" in r.json()["detail"]["message"]
    assert engine.nodes == {}
    r = await client.post(f"{M}/observations", headers={"content-type": content_type})  # no body: missing, whatever the type
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "missing"


def _zero_bomb(megabytes: int) -> bytes:
    """`megabytes` MiB of zeros as one zstd frame of a few KiB, compressed in 1 MiB steps to keep the test small."""
    from backports.zstd import ZstdCompressor

    compressor = ZstdCompressor()
    chunk = bytes(1 << 20)
    return b"".join(compressor.compress(chunk) for _ in range(megabytes)) + compressor.flush()


def test_a_zstd_bomb_is_refused_within_a_bounded_amount_of_memory() -> None:
    """Each 1 KiB of a zero bomb expands to ~32 MiB: fed piece by piece, the decoder had built ~64 MiB before
    the size check saw the first piece's output, whatever the limit."""
    import tracemalloc

    from serving.middleware import _TooLarge, _zstd_decode

    bomb = _zero_bomb(64)
    assert len(bomb) < 16 * 1024
    limit = 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(_TooLarge):
            _zstd_decode(bomb, limit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * limit, f"peak {peak / 2**20:.1f} MiB for a {limit >> 20} MiB limit"


def test_zstd_bodies_still_decode_across_frames_and_refuse_truncation() -> None:
    from backports.zstd import compress

    from serving.middleware import _zstd_decode

    two = compress(b'{"a": ') + compress(b"1}")
    assert _zstd_decode(two, 100) == b'{"a": 1}'
    assert _zstd_decode(compress(bytes(100)), 100) == bytes(100)  # exactly at the limit
    with pytest.raises(ValueError, match="truncated"):
        _zstd_decode(compress(bytes(range(256)) * 40)[:-3], 1 << 20)
