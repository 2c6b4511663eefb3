"""HTTP edges: memory-call deadlines counted from the request's arrival, relink bounded by the deadline, metric
labels of requests answered before routing, HEAD and Allow, the 401 challenge, and JSON media types."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx2
import pytest

from controller.backend import BackendRequest, BackendResult
from memory.errors import ConfigError
from serving.runtime import MemoryService
from tests.memory.engine_fakes import RuleBackend, make_engine, obs
from tests.serving.conftest import serving
from tests.serving.fakes import FakeEngine
from tests.serving.test_operations import _sample

M = "/v1/memory"


# ------------------------------------------------------------------------------------ deadline from arrival
def test_the_deadline_of_an_arrival_in_the_future_counts_from_now() -> None:
    service = MemoryService(FakeEngine(), start_timeout_s=2.0)
    now = time.monotonic()
    deadline = service.deadline(now + 100.0)
    assert deadline is not None and now + 1.9 < deadline < now + 3.0
    assert MemoryService(FakeEngine()).deadline(now) is None  # no start timeout: no deadline


# ------------------------------------------------------------------------------------ relink under a deadline
class SlowBackend(RuleBackend):
    def __init__(self, delay_s: float) -> None:
        super().__init__({("pair", "semantic"): lambda s: 0.9})
        self.delay_s = delay_s

    def answer(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        if not self.fail:
            time.sleep(self.delay_s)
        return super().answer(requests)


BIKES = ["Mira: My old bicycle broke.", "Mira: I bought a new bicycle.", "Mira: The new bicycle is red.",
         "Mira: I ride my bicycle to work."]


def _pending_engine(backend: RuleBackend) -> tuple[Any, list[str]]:
    engine = make_engine(backend, consolidation_every=0)
    backend.fail = True
    ids = [r.node_id for r in engine.write_many([obs(t, i) for i, t in enumerate(BIKES)])]
    backend.fail = False
    return engine, ids


def test_relink_starts_no_node_after_its_deadline_and_lists_the_rest_untouched() -> None:
    engine, ids = _pending_engine(RuleBackend({("pair", "semantic"): lambda s: 0.9}))
    report = engine.relink(deadline=time.monotonic() - 1.0)  # already passed: the first node only
    assert list(report.statuses) == ids[:1] and report.remaining == tuple(ids[1:])
    assert [engine.get(i).node.link_status.value for i in ids[1:]] == ["relations_pending"] * 3
    report = engine.relink(report.remaining, deadline=time.monotonic() + 60.0)
    assert list(report.statuses) == ids[1:] and report.remaining == () and report.pending == ()
    assert engine.stats().link_status["relations_pending"] == 0


@pytest.mark.parametrize("deadline", ["soon", float("nan"), True])
def test_relink_refuses_a_deadline_that_is_not_a_clock_reading(deadline: Any) -> None:
    engine, ids = _pending_engine(RuleBackend())
    with pytest.raises(ConfigError, match="deadline"):
        engine.relink(deadline=deadline)
    assert engine.stats().link_status["relations_pending"] == len(ids)


@pytest.fixture
async def slow_relink(make_app: Any) -> AsyncIterator[tuple[httpx2.AsyncClient, list[str]]]:
    engine, ids = _pending_engine(SlowBackend(delay_s=0.5))
    async with serving(make_app(engine=engine, request_timeout_s=0.3)) as client:
        yield client, ids


async def test_relink_over_http_stops_at_the_request_deadline_and_says_what_is_left(
    slow_relink: tuple[httpx2.AsyncClient, list[str]],
) -> None:
    """Every node's judgments take 0.5 s and the deadline is 0.3 s: each call relinks one node and answers in
    time for the client, instead of holding the memory thread for the whole list."""
    client, ids = slow_relink
    todo, seen = ids, []
    for _ in range(2 * len(ids)):  # bounded: a relink that stops making progress fails below
        r = await client.post(f"{M}/relink", json={"node_ids": todo})
        assert r.status_code == 200, r.text
        done, remaining = list(r.json()["statuses"]), r.json()["remaining"]
        assert len(done) == 1 and done + remaining == todo
        seen, todo = seen + done, remaining
        if not todo:
            break
    assert seen == ids
    assert (await client.get(f"{M}/stats")).json()["link_status"]["relations_pending"] == 0


# ------------------------------------------------------------------------------------ metrics, HEAD, Allow
async def test_a_request_refused_before_routing_is_counted_under_its_route(make_app: Any) -> None:
    async with serving(make_app(engine=FakeEngine(), max_body_bytes=64)) as client:
        assert (await client.post(f"{M}/observations", json={"content": "x" * 200})).status_code == 413
        assert (await client.post(f"{M}/observations", content=b"{}", headers={"content-encoding": "br"})).status_code == 415
        assert (await client.get("/no/such/path")).status_code == 404
        text = (await client.get("/metrics")).text
    assert _sample(text, "jevmem_http_requests_total", route=f"{M}/observations", method="POST", status="413") == 1
    assert _sample(text, "jevmem_http_requests_total", route=f"{M}/observations", method="POST", status="415") == 1
    assert _sample(text, "jevmem_http_requests_total", route="unmatched", status="404") == 1


async def test_head_export_gives_the_headers_without_the_lines(make_app: Any) -> None:
    engine = FakeEngine()
    engine.export = lambda out: _written(out)  # type: ignore[attr-defined]
    async with serving(make_app(engine=engine)) as client:
        get, head = await client.get(f"{M}/export"), await client.head(f"{M}/export")
    assert get.status_code == head.status_code == 200 and get.content and head.content == b""
    assert head.headers["x-jevmem-export"] == get.headers["x-jevmem-export"]
    assert head.headers["content-type"].startswith("application/x-ndjson")


def _written(out: Any) -> Any:
    from memory.export import ExportReport

    out.write('{"content": "Mira: hello"}\n')
    return ExportReport(observations=1, summaries=0, authored_edges=0, refused_links=0)


@pytest.mark.parametrize(("path", "allow"), [(f"{M}/nodes/abc", "DELETE, GET, HEAD, PATCH"), (f"{M}/export", "GET, HEAD"),
                                             (f"{M}/stats", "GET, HEAD"), ("/v1/systemone", "POST")])
async def test_a_405_allows_every_method_of_the_path_head_included(make_app: Any, path: str, allow: str) -> None:
    async with serving(make_app(engine=FakeEngine())) as client:
        r = await client.request("PUT", path, json={})
    assert r.status_code == 405 and r.headers["allow"] == allow


# ------------------------------------------------------------------------------------ auth and media types
async def test_a_401_names_the_bearer_scheme_and_a_403_does_not_challenge(make_app: Any) -> None:
    async with serving(make_app(api_key="k3y", engine=FakeEngine())) as client:
        wrong = await client.get(f"{M}/stats", headers={"authorization": "Bearer nope"})
        missing = await client.get(f"{M}/stats")
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"].startswith("Bearer")
    assert missing.status_code == 403 and "www-authenticate" not in missing.headers


async def test_text_json_is_json_on_the_memory_api_as_on_systemone(make_app: Any) -> None:
    engine = FakeEngine()
    async with serving(make_app(engine=engine)) as client:
        r = await client.post(f"{M}/observations", content=b'{"content": "Mira: hello"}',
                              headers={"content-type": "text/json; charset=utf-8"})
        assert r.status_code == 201, r.text
        r = await client.post(f"{M}/observations", content=b'{"content": ', headers={"content-type": "text/json"})
    assert r.status_code == 422 and len(engine.nodes) == 1


@pytest.mark.parametrize("path", [f"{M}/observations", "/v1/systemone"])
async def test_a_content_type_that_does_not_parse_is_named_as_sent(make_app: Any, path: str) -> None:
    async with serving(make_app(engine=FakeEngine())) as client:
        r = await client.post(path, content=b'{"content": "x"}', headers={"content-type": "garbage"})
    assert r.status_code == 415 and "'garbage'" in r.json()["detail"]["message"]
