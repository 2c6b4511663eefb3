"""Against a live uvicorn on 127.0.0.1: the official SDK over a real socket, and the jevcompat conformance
suite with and without a key (MUST 32/32, SHOULD >= 13)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from jevcompat import runner
from typesafe_sdk import AsyncTypeSafeClient, Noul, RetryPolicy, Score, TypeSafeAPIConnectionError, TypeSafeClient

from serving import Settings, create_app
from serving.server import BackgroundServer
from tests.serving.conftest import NOUL, SCORE
from tests.serving.fakes import FakeBackend

KEY = "live-test-key"


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_app(Settings(controller="heuristic", api_key=KEY))) as server:
        yield server


def test_sync_sdk_over_a_socket_with_zstd(live_server: BackgroundServer) -> None:
    state = {"notes": ["The customer was charged twice and wants a refund today."] * 30}
    with TypeSafeClient(api_key="local", base_url=live_server.url, timeout=10) as sdk:
        r = sdk.system_one(state, {"refund": Noul(instructions=NOUL["instructions"]), "anger": Score(criteria=SCORE["criteria"])})
        assert r.raw_http_response.request.headers.get("content-encoding") == "zstd"
        assert r.request_id.startswith("req_") and r.model == "jevmem-heuristic-1.0.0"
        assert set(r.scores["anger"].probabilities) == {0, 1, 2}
        assert [m.name for m in sdk.models.list().models][1:] == ["jev-latest", "jev-preview"]


async def test_async_sdk_over_a_socket(live_server: BackgroundServer) -> None:
    async with AsyncTypeSafeClient(api_key="local", base_url=live_server.url, timeout=10) as sdk:
        results = await asyncio.gather(*(sdk.system_one(f"ticket {i}", {"q": NOUL}) for i in range(16)))
    assert len({r.request_id for r in results}) == 16


@pytest.mark.parametrize("keyed", [False, True])
def test_jevcompat_conformance(live_server: BackgroundServer, keyed_server: BackgroundServer, keyed: bool) -> None:
    server = keyed_server if keyed else live_server
    report = runner.run(server.url, key=KEY if keyed else None, timeout=30)
    summary = report.summary()
    failed = [(r.id, [f.message for f in r.findings]) for r in report.results if r.status == "fail"]
    assert not failed, failed
    assert report.verdict == "conformant", (report.aborted, report.case_errors, report.inconclusive)
    assert summary["MUST"]["passed"] == 32
    assert summary["SHOULD"]["passed"] >= (15 if keyed else 13)


def test_graceful_shutdown_drains_in_flight_requests() -> None:
    app = create_app(Settings(max_batch_size=2, drain_timeout_s=5), backend=FakeBackend(delay_s=0.2))
    server = BackgroundServer(app).start()
    clients = [TypeSafeClient(api_key="k", base_url=server.url, timeout=10, retry=RetryPolicy(max_retries=0)) for _ in range(6)]
    outcomes: list[object] = []

    def call(i: int) -> None:
        try:
            outcomes.append(clients[i].system_one(f"s{i}", {"q": NOUL}).nouls["q"].noul)
        except Exception as error:  # noqa: BLE001 - recorded and asserted below
            outcomes.append(error)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while app.state.runtime.metrics.in_flight.value() < 6 and time.monotonic() < deadline:
        time.sleep(0.005)  # until all six are inside the server: one batch running, the rest queued
    assert app.state.runtime.metrics.in_flight.value() == 6
    started = time.monotonic()
    server.stop()
    for t in threads:
        t.join(10)
    for c in clients:
        c.close()
    assert time.monotonic() - started < 8
    assert len(outcomes) == 6 and all(isinstance(o, float) for o in outcomes), outcomes
    with pytest.raises(TypeSafeAPIConnectionError):
        with TypeSafeClient(api_key="k", base_url=server.url, timeout=2, retry=RetryPolicy(max_retries=0)) as sdk:
            sdk.system_one("after", {"q": NOUL})
