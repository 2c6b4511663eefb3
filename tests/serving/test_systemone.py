"""`POST /v1/systemone` and `GET /v1/models` on the wire: answers, names, errors, bodies and limits."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from typing import Any

import httpx2
import pytest
from backports.zstd import compress

from tests.serving.conftest import CHOICE, NOUL, SCORE, body, raw_post, serving
from tests.serving.fakes import FakeBackend

RID = "x-typesafe-request-id"


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


async def test_answers_every_type_with_the_concrete_model(client: httpx2.AsyncClient) -> None:
    r = await client.post("/v1/systemone", json=body({"refund": NOUL, "team": CHOICE, "anger": SCORE}))
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["model"] == "fake-1.0.0"
    assert set(data["answers"]) == {"refund", "team", "anger"}
    assert 0 <= data["answers"]["refund"]["noul"] <= 1 and "confidence" not in data["answers"]["refund"]
    team = data["answers"]["team"]
    assert list(team["probabilities"]) == ["Billing", "Technical", "Sales"]
    assert team["choice"] == max(team["probabilities"], key=team["probabilities"].get)
    assert math.isclose(sum(team["probabilities"].values()), 1.0)
    anger = data["answers"]["anger"]
    assert anger["legend"] == {"0": "Calm", "1": "Frustrated", "2": "Very angry"}
    assert math.isclose(anger["score"], sum(int(k) * p for k, p in anger["probabilities"].items()))
    assert isinstance(data["usage"]["input_tokens"], int) and data["usage"]["output_tokens"] == 0
    assert r.headers[RID].startswith("req_")


@pytest.mark.parametrize("model", ["jev-latest", "jev-preview", "fake-1.0.0"])
async def test_aliases_resolve_and_a_pinned_name_is_echoed(client: httpx2.AsyncClient, model: str) -> None:
    r = await client.post("/v1/systemone", json=body(model=model))
    assert r.status_code == 200 and r.json()["model"] == "fake-1.0.0"


async def test_unknown_model_is_400_api_usage_error(client: httpx2.AsyncClient) -> None:
    r = await client.post("/v1/systemone", json=body(model="jev-9000"))
    assert r.status_code == 400
    assert r.json()["detail"]["error_type"] == "api_usage_error" and "jev-9000" in r.json()["detail"]["message"]


async def test_models_lists_the_model_and_its_aliases(client: httpx2.AsyncClient) -> None:
    r = await client.get("/v1/models")
    assert r.status_code == 200 and RID in r.headers
    assert [m["name"] for m in r.json()["models"]] == ["fake-1.0.0", "jev-latest", "jev-preview"]
    assert all(set(m) == {"name", "description", "release_date"} for m in r.json()["models"])


async def test_keys_are_echoed_byte_exactly_and_do_not_change_answers(client: httpx2.AsyncClient) -> None:
    keys = ["🎯", "with space", "질문", "x.y-z", "é"]  # "é" precomposed
    r = await client.post("/v1/systemone", json=body({k: NOUL for k in keys}))
    answers = r.json()["answers"]
    assert list(answers) == keys
    assert len({a["noul"] for a in answers.values()}) == 1


async def test_unknown_top_level_fields_are_ignored(client: httpx2.AsyncClient) -> None:
    r = await client.post("/v1/systemone", json=body(x_trace="t", seed=7, stream=True))
    assert r.status_code == 200


@pytest.mark.parametrize("state", ["text", {"a": [1, {"b": None}]}, ["x", 2, None]])
async def test_state_may_be_text_object_or_array(client: httpx2.AsyncClient, state: Any) -> None:
    assert (await client.post("/v1/systemone", json=body(state=state))).status_code == 200


@pytest.mark.parametrize("state", [3, 2.5, True, None])
async def test_state_number_bool_null_is_422(client: httpx2.AsyncClient, state: Any) -> None:
    r = await client.post("/v1/systemone", json=body(state=state))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "state"]


@pytest.mark.parametrize(
    ("payload", "loc_prefix"),
    [
        ({"model": "jev-latest", "questions": {"q": NOUL}}, ["body", "state"]),
        ({"model": "jev-latest", "state": "s"}, ["body", "questions"]),
        ({"state": "s", "questions": {"q": NOUL}}, ["body", "model"]),
        (body({}), ["body", "questions"]),
        (body({"q": {"instructions": "no type"}}), ["body", "questions"]),
        (body({"q": {"type": "boolean", "instructions": "?"}}), ["body", "questions", "q"]),
        (body({"q": {"type": "choice", "criteria": {}}}), ["body", "questions"]),
        (body({"q": {"type": "noul"}}), ["body", "questions"]),
        (body({"q": {"type": "score", "criteria": {"0": "a", "1": "b"}}}), ["body", "questions", "q"]),
        (body({"q": {"type": "score", "criteria": ["only one"]}}), ["body", "questions", "q"]),
        (body({"q": {"type": "score", "criteria": [f"l{i}" for i in range(11)]}}), ["body", "questions", "q"]),
        (body({"q": {"type": "score", "criteria": ["a", None]}}), ["body", "questions", "q"]),
        (body({"q": {"type": "choice", "criteria": {f"o{i}": None for i in range(256)}}}), ["body", "questions", "q"]),
        (body({"q": {"type": "box", "instructions": "find the cat"}}), ["body", "questions", "q"]),
        (body({"q": {**NOUL, "surprise": 1}}), ["body", "questions", "q"]),
        (body({"": NOUL}), ["body", "questions"]),
    ],
)
async def test_invalid_requests_are_422_in_fastapi_shape(client: httpx2.AsyncClient, payload: dict[str, Any], loc_prefix: list[Any]) -> None:
    r = await client.post("/v1/systemone", json=payload)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, list) and detail
    assert all(set(d) == {"loc", "msg", "type"} and isinstance(d["msg"], str) and isinstance(d["type"], str) for d in detail)
    assert detail[0]["loc"][: len(loc_prefix)] == loc_prefix
    assert RID in r.headers


async def test_limits_at_the_edges_are_accepted(client: httpx2.AsyncClient) -> None:
    many = {"q": {"type": "choice", "instructions": "Queue?", "criteria": {f"Queue {i:03d}": f"queue {i}" for i in range(255)}}}
    r = await client.post("/v1/systemone", json=body(many))
    assert r.status_code == 200 and len(r.json()["answers"]["q"]["probabilities"]) == 255
    for n in (2, 10):
        r = await client.post("/v1/systemone", json=body({"q": {"type": "score", "criteria": [f"l{i}" for i in range(n)]}}))
        assert r.status_code == 200 and len(r.json()["answers"]["q"]["legend"]) == n


async def test_over_the_token_budget_is_413_with_a_clear_message(make_app: Any) -> None:
    async with serving(make_app(backend=FakeBackend(max_state_chars=100))) as client:
        r = await client.post("/v1/systemone", json=body(state="x" * 500))
        assert r.status_code == 413
        assert r.json()["detail"]["error_type"] == "input_too_long" and "over 100" in r.json()["detail"]["message"]
        assert (await client.post("/v1/systemone", json=body(state="short"))).status_code == 200


async def test_a_truncating_backend_reports_the_cut_in_a_header(make_app: Any) -> None:
    from serving.systemone import TRUNCATED_HEADER

    async with serving(make_app(backend=FakeBackend(truncate_over=100))) as client:
        r = await client.post("/v1/systemone", json=body(state="x" * 500))
        assert r.status_code == 200 and int(r.headers[TRUNCATED_HEADER]) > 0
        r = await client.post("/v1/systemone", json=body(state="short"))
        assert r.status_code == 200 and TRUNCATED_HEADER not in r.headers


async def test_the_serving_token_budget_counts_tokens_before_queueing(make_app: Any) -> None:
    backend = FakeBackend()
    async with serving(make_app(backend=backend, token_budget=64)) as client:
        backend.calls.clear()
        r = await client.post("/v1/systemone", json=body(state="word " * 200))
        assert r.status_code == 413 and "limit is 64" in r.json()["detail"]["message"]
        assert backend.calls == []  # refused before the forward pass
        assert (await client.post("/v1/systemone", json=body(state="short"))).status_code == 200


class _Stall:
    """Wraps a step of request handling: on a huge input it signals and lingers (standing in for the seconds
    a body of megabytes really takes, whatever the machine), so a test can look at the server meanwhile."""

    def __init__(self, real: Any, size: Any) -> None:
        self.real, self.size = real, size
        self.started, self.done = threading.Event(), threading.Event()

    async def wait_started(self) -> None:
        for _ in range(2000):
            if self.started.is_set():
                return
            await asyncio.sleep(0.005)
        raise AssertionError("the huge request never reached the step")

    def __call__(self, *args: Any, **kw: Any) -> Any:
        huge = self.size(*args) > 100_000
        if huge:
            self.started.set()
            time.sleep(1.0)
        try:
            return self.real(*args, **kw)
        finally:
            if huge:
                self.done.set()


@pytest.mark.parametrize("step", ["parse", "plan", "count"])
async def test_a_huge_body_leaves_the_server_responsive(make_app: Any, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Parsing, validating and (with a token budget) tokenizing a body of megabytes takes seconds; all three
    ran on the event loop, which served nobody else (health checks, small requests) meanwhile."""
    from controller import template
    from serving import runtime, wire

    module, name, size = {
        "parse": (wire, "check_tree", lambda value: len(str(value))),
        "plan": (runtime, "plan_request", lambda backend, state, *_: len(str(state))),
        "count": (template, "count_input_tokens", lambda request: len(str(request.state))),
    }[step]
    stall = _Stall(getattr(module, name), size)
    monkeypatch.setattr(module, name, stall)
    async with serving(make_app(token_budget=100_000)) as client:
        huge = asyncio.create_task(client.post("/v1/systemone", json=body(state="word " * 50_000)))
        await stall.wait_started()
        small = await client.post("/v1/systemone", json=body(state="short"))
        health = await client.get("/healthz")
        assert not stall.done.is_set(), f"the event loop waited for the {step} step of a huge request"
        assert small.status_code == 200 and health.status_code == 200
        assert (await huge).status_code == 413  # the model reads at most 512 positions


async def test_a_huge_memory_body_is_parsed_off_the_event_loop(make_app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from serving import wire
    from tests.serving.fakes import FakeEngine

    stall = _Stall(wire.check_tree, lambda value: len(str(value)))
    monkeypatch.setattr(wire, "check_tree", stall)
    async with serving(make_app(engine=FakeEngine())) as client:
        huge = asyncio.create_task(client.post("/v1/memory/observations", json={"content": "big", "metadata": {"blob": "x" * 200_000}}))
        await stall.wait_started()
        assert (await client.get("/healthz")).status_code == 200
        assert not stall.done.is_set(), "the event loop waited for a huge memory body to be parsed"
        assert (await huge).status_code == 201


@pytest.mark.parametrize(
    ("raw", "content_type"),
    [
        (b'{"model": "jev-latest", "state": "x", "questions": {', "application/json"),
        (b"\xff\xfe not utf-8", "application/json"),
        (b'{"model": "jev-latest", "state": NaN, "questions": {}}', "application/json"),
        (b'{"model": "jev-latest", "state": Infinity, "questions": {}}', "application/json"),
        (b'{"model":"jev-latest","state":"\\ud800","questions":{"q":{"type":"noul","instructions":"?"}}}', "application/json"),
        (b"[" * 5000 + b"]" * 5000, "application/json"),
        (b'{"model":"jev-latest","state":' + b"[" * 70 + b"]" * 70 + b',"questions":{"q":{"type":"noul","instructions":"?"}}}', "application/json"),
        (b"", "application/json"),
        (b"42", None),
    ],
)
async def test_malformed_bodies_are_422_never_5xx(client: httpx2.AsyncClient, raw: bytes, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    r = await client.post("/v1/systemone", content=raw, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["type"] in ("json_invalid", "model_attributes_type")
    assert RID in r.headers


async def test_wrong_content_type_is_415(client: httpx2.AsyncClient) -> None:
    r = await client.post("/v1/systemone", content=json.dumps(body()).encode(), headers={"content-type": "text/plain"})
    assert r.status_code == 415 and r.json()["detail"]["error_type"] == "unsupported_media_type"


async def test_zstd_bodies_are_decoded(client: httpx2.AsyncClient) -> None:
    payload = json.dumps(body(state="long ticket " * 300)).encode()
    r = await client.post("/v1/systemone", content=compress(payload), headers={"content-type": "application/json", "content-encoding": "zstd"})
    plain = await client.post("/v1/systemone", content=payload, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json() == plain.json()


@pytest.mark.parametrize(
    ("raw", "encoding", "status"),
    [
        (b"definitely not zstd", "zstd", 400),
        (compress(json.dumps(body()).encode())[:-4], "zstd", 400),
        (compress(b"{}"), "gzip", 415),
        (compress(b" " * (1 << 20)), "zstd", 413),  # a small bomb: 1 MiB of output from a few bytes
    ],
)
async def test_bad_encodings_are_4xx(make_app: Any, raw: bytes, encoding: str, status: int) -> None:
    async with serving(make_app(max_body_bytes=512 * 1024)) as client:
        r = await client.post("/v1/systemone", content=raw, headers={"content-type": "application/json", "content-encoding": encoding})
        assert r.status_code == status, r.text
        assert set(r.json()["detail"]) == {"error_type", "message"} and RID in r.headers


@pytest.mark.parametrize("declared", [b"\xb2", b"-1", b"12_0"])  # b"\xb2" is "²" in latin-1, a digit to str.isdigit
async def test_a_bad_content_length_is_400_not_500(make_app: Any, declared: bytes) -> None:
    """Servers in front (h11, httptools) refuse these already; the app must not 500 when one does get through."""
    sent = await raw_post(make_app(), "/v1/systemone", [(b"content-type", b"application/json"), (b"content-length", declared)])
    assert sent[0]["status"] == 400


async def test_bodies_over_the_limit_are_413_declared_or_streamed(make_app: Any) -> None:
    async with serving(make_app(max_body_bytes=2048)) as client:
        big = json.dumps(body(state="x" * 4096)).encode()
        r = await client.post("/v1/systemone", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["detail"]["error_type"] == "request_too_large"

        async def chunks():  # no Content-Length: counted while reading
            for i in range(0, len(big), 512):
                yield big[i : i + 512]

        r = await client.post("/v1/systemone", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and RID in r.headers


def _multipart(request_json: bytes, assets: dict[str, bytes]) -> tuple[str, bytes]:
    from typesafe_sdk._core.multipart import Part, encode_multipart

    parts = [Part("request", "application/json", request_json)] + [Part(n, "image/png", d, n) for n, d in assets.items()]
    return encode_multipart(parts)


async def test_multipart_request_part_is_parsed_and_images_are_refused(client: httpx2.AsyncClient) -> None:
    content_type, raw = _multipart(json.dumps(body()).encode(), {})
    r = await client.post("/v1/systemone", content=raw, headers={"content-type": content_type})
    assert r.status_code == 200, r.text
    with_image = body(assets={"img-1": {"type": "image", "part": "asset-0"}})
    content_type, raw = _multipart(json.dumps(with_image).encode(), {"asset-0": b"\x89PNG\r\n\x1a\nfake"})
    r = await client.post("/v1/systemone", content=raw, headers={"content-type": content_type})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "assets"]
    assert "text model" in r.json()["detail"][0]["msg"]
    content_type, raw = _multipart(json.dumps(body()).encode(), {"asset-0": b"\x89PNG"})  # a part, no entry
    assert (await client.post("/v1/systemone", content=raw, headers={"content-type": content_type})).status_code == 422
    r = await client.post("/v1/systemone", content=b"--x\r\nbroken", headers={"content-type": "multipart/form-data; boundary=x"})
    assert 400 <= r.status_code < 500


async def test_multipart_request_part_is_strict_utf8(client: httpx2.AsyncClient) -> None:
    # Starlette would decode an invalid UTF-8 field as latin-1 and the request would pass as mojibake.
    good = json.dumps(body(note="café ✓"), ensure_ascii=False).encode()
    bad = good.replace("é".encode(), b"\xe9")  # latin-1 bytes: not UTF-8
    content_type, raw = _multipart(bad, {})
    r = await client.post("/v1/systemone", content=raw, headers={"content-type": content_type})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid", r.text
    content_type, raw = _multipart(good, {})
    assert (await client.post("/v1/systemone", content=raw, headers={"content-type": content_type})).status_code == 200
    from typesafe_sdk._core.multipart import Part, encode_multipart

    content_type, raw = encode_multipart([Part("request", "application/json", good, "request.json")])  # a file part
    assert (await client.post("/v1/systemone", content=raw, headers={"content-type": content_type})).status_code == 200


async def test_inline_image_assets_are_refused(client: httpx2.AsyncClient) -> None:
    r = await client.post("/v1/systemone", json=body(assets={"a": {"type": "image", "format": "png", "data_base64": "iVBORw0KGgo="}}))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "assets"]


async def test_every_response_carries_a_request_id(client: httpx2.AsyncClient) -> None:
    responses = [
        await client.get("/healthz"),
        await client.get("/metrics"),
        await client.get("/no-such-route"),
        await client.put("/v1/systemone", json=body()),
        await client.post("/v1/systemone", json=body(model="nope")),
        await client.post("/v1/systemone", content=b"{"),
    ]
    assert {r.status_code for r in responses} == {200, 404, 405, 400, 422}
    ids = [r.headers[RID] for r in responses]
    assert len(set(ids)) == len(ids)
    assert responses[3].json()["detail"]["error_type"] == "method_not_allowed"


async def test_unexpected_failures_are_500_without_a_stack_trace(make_app: Any, caplog: pytest.LogCaptureFixture) -> None:
    class Broken(FakeBackend):
        def answer(self, requests: Any) -> Any:
            if requests and requests[0].state == "boom":
                raise RuntimeError("secret internal detail")
            return super().answer(requests)

    async with serving(make_app(backend=Broken())) as client:
        r = await client.post("/v1/systemone", json=body(state="boom"))
    assert r.status_code == 500 and RID in r.headers
    assert r.json()["detail"]["error_type"] == "internal_error"
    assert "secret" not in r.text and "Traceback" not in r.text
    assert "secret internal detail" in caplog.text  # logged on the server instead


async def test_answers_are_finite_and_strict_json(client: httpx2.AsyncClient) -> None:
    r = await client.post("/v1/systemone", json=body({"refund": NOUL, "team": CHOICE, "anger": SCORE}, state={"n": 1e308}))
    assert r.status_code == 200
    assert "NaN" not in r.text and "Infinity" not in r.text and _finite(r.json())


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"model": "a", "model": "b"}', "the key 'model' appears twice in one object"),
        (b'{"state": {"n": ' + b"9" * 5000 + b"}}", "more than 4,300 digits"),
        (b'{"state": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    ],
)
async def test_bodies_json_would_read_lossily_or_not_at_all_are_422_in_plain_words(
    client: httpx2.AsyncClient, raw: bytes, message: str
) -> None:
    r = await client.post("/v1/systemone", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid", r.text
    assert message in r.json()["detail"][0]["msg"] and "set_int_max_str_digits" not in r.text
