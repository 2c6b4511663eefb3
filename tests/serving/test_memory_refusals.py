"""Over HTTP, on the real engine: links that contradict themselves or the stored links, and text with no visible
character, are 422 (never 500) and change nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from serving import Settings, create_app
from tests.serving.conftest import raw_post, serving

M = "/v1/memory"
INVISIBLE = ["\u200b\u200b", "\u2060", "\ufeff", "\u00ad", " \u200b\t\u2060\n", "\x00", "\U000e0020"]


@pytest.fixture
async def real_memory(heuristic: Any) -> AsyncIterator[httpx2.AsyncClient]:
    async with serving(create_app(Settings(memory_db=":memory:", embedder="hashing"), backend=heuristic)) as client:
        yield client


async def write(client: httpx2.AsyncClient, *texts: str) -> list[str]:
    r = await client.post(f"{M}/observations/batch", json={"observations": [{"content": t} for t in texts]})
    assert r.status_code == 201, r.text
    return [x["node_id"] for x in r.json()["results"]]


async def views(client: httpx2.AsyncClient, ids: list[str]) -> list[Any]:
    return [(await client.get(f"{M}/nodes/{i}")).json() for i in ids]


def message(r: httpx2.Response) -> str:
    assert r.status_code == 422, r.text
    return str(r.json()["detail"][0]["msg"])


async def test_a_self_link_is_422(real_memory: httpx2.AsyncClient) -> None:
    client = real_memory
    (a,) = await write(client, "Mira: my old bicycle broke.")
    before = await views(client, [a])
    assert "itself" in message(await client.post(f"{M}/links", json={"src": a, "dst": a, "relation": "semantic"}))
    assert "itself" in message(await client.put(f"{M}/nodes/{a}/links", json={"links": [{"dst": a, "relation": "supersedes"}]}))
    assert await views(client, [a]) == before


async def test_supersedes_both_ways_and_a_cycle_are_422(real_memory: httpx2.AsyncClient) -> None:
    client = real_memory
    a, b, c = await write(client, "Mira: my old bicycle broke.", "Tom: the weather is lovely.", "Ana: I adopted a cat.")
    for src, dst in ((b, a), (c, b)):
        assert (await client.post(f"{M}/links", json={"src": src, "dst": dst, "relation": "supersedes"})).status_code == 201
    before = await views(client, [a, b, c])
    assert "contradicts" in message(await client.post(f"{M}/links", json={"src": a, "dst": b, "relation": "supersedes"}))
    assert "cycle" in message(await client.post(f"{M}/links", json={"src": a, "dst": c, "relation": "supersedes"}))
    assert "cycle" in message(await client.put(f"{M}/nodes/{a}/links", json={"links": [{"dst": c, "relation": "supersedes"}]}))
    assert await views(client, [a, b, c]) == before


async def test_a_duplicate_entry_in_put_links_is_422_and_keeps_the_old_links(real_memory: httpx2.AsyncClient) -> None:
    client = real_memory
    a, b = await write(client, "Mira: my old bicycle broke.", "Tom: the weather is lovely.")
    r = await client.put(f"{M}/nodes/{a}/links", json={"links": [{"dst": b, "relation": "causal"}]})
    assert r.status_code == 200, r.text
    before = await views(client, [a, b])
    twice = {"links": [{"dst": b, "relation": "semantic"}, {"dst": b, "relation": "semantic"}]}
    assert "twice" in message(await client.put(f"{M}/nodes/{a}/links", json=twice))
    assert await views(client, [a, b]) == before
    schema = (await client.get("/openapi.json")).json()
    assert schema["components"]["schemas"]["SetLinksIn"]["properties"]["links"]["uniqueItems"] is True


@pytest.mark.parametrize("text", INVISIBLE)
async def test_text_of_invisible_characters_is_422_everywhere(real_memory: httpx2.AsyncClient, text: str) -> None:
    client = real_memory
    (a,) = await write(client, "Mira: my old bicycle broke.")
    message(await client.post(f"{M}/observations", json={"content": text}))
    message(await client.post(f"{M}/observations/batch", json={"observations": [{"content": "fine"}, {"content": text}]}))
    message(await client.patch(f"{M}/nodes/{a}", json={"content": text}))
    message(await client.post(f"{M}/query", json={"text": text}))
    speaker = {"content": "hi", "speaker": text.strip() or text}  # ShortText has no pattern: the engine refuses it
    assert "speaker must not be blank" in message(await client.post(f"{M}/observations", json=speaker))
    assert (await client.get(f"{M}/stats")).json()["nodes"] == 1
    assert (await client.get(f"{M}/nodes/{a}")).json()["node"]["content"] == "Mira: my old bicycle broke."


async def test_invisible_text_sent_as_json_escapes_is_422_not_500(heuristic: Any) -> None:
    app = create_app(Settings(memory_db=":memory:", embedder="hashing"), backend=heuristic)
    body = b'{"content": "\\u200b\\u2060\\ufeff\\u00ad"}'
    sent = await raw_post(app, f"{M}/observations", [(b"content-type", b"application/json")], body)
    assert sent[0]["status"] == 422
    assert json.loads(sent[1]["body"])["detail"][0]["loc"] == ["body", "content"]  # the schema's refusal


async def test_visible_text_with_invisible_characters_is_kept_byte_for_byte(real_memory: httpx2.AsyncClient) -> None:
    client = real_memory
    text = "\ufeffMira:\u200b my bicycle\u00ad broke\u2060"
    (a,) = await write(client, text)
    assert (await client.get(f"{M}/nodes/{a}")).json()["node"]["content"] == text
    assert (await client.post(f"{M}/query", json={"text": "\u200bbicycle"})).status_code == 200


def test_the_schema_pattern_is_has_visible_text_on_the_basic_multilingual_plane() -> None:
    """The OpenAPI pattern (what schema-driven clients generate from) and the engine's rule agree on every BMP
    character; astral format characters are left to the schema's validator (checked above)."""
    import re

    from pydantic import TypeAdapter, ValidationError

    from memory.types import has_visible_text
    from serving.memory_schemas import NOT_BLANK, Content

    pattern = re.compile(NOT_BLANK)
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF]
    assert [c for c in chars if bool(pattern.search(c)) != has_visible_text(c)] == []
    content = TypeAdapter(Content)  # pydantic-core's own regex engine, on the characters it must refuse
    for char in (c for c in chars if not has_visible_text(c)):
        with pytest.raises(ValidationError):
            content.validate_python(char)
