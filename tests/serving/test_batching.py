"""Cross-request micro-batching: same answers on or off, real batches under load, and overload, timeouts,
request-level errors and shutdown that never hang."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import httpx2
import pytest
from typesafe_sdk import AsyncTypeSafeClient, RetryPolicy, TypeSafeRateLimitError

from controller.backend import Backend, BackendRequest
from controller.client import plan_request
from controller.errors import InputTooLongError
from serving.batching import Batcher
from serving.errors import NotReadyError, OverloadedError, RequestTimeoutError
from tests.serving.conftest import CHOICE, NOUL, SCORE, body, serving
from tests.serving.fakes import FakeBackend


def _request(backend: Backend, state: Any) -> BackendRequest:
    return plan_request(backend, state, {"q": NOUL, "c": CHOICE}, model=None).request


async def _burst(client: httpx2.AsyncClient, n: int, **kw: Any) -> list[httpx2.Response]:
    payloads = [body({"refund": NOUL, "team": CHOICE, "anger": SCORE}, state=f"ticket {i} {'x' * (i % 7)}", **kw) for i in range(n)]
    return list(await asyncio.gather(*(client.post("/v1/systemone", json=p) for p in payloads)))


async def test_answers_are_identical_with_batching_on_and_off(make_app: Any, heuristic: Backend) -> None:
    results = {}
    for batching in (True, False):
        async with serving(make_app(backend=heuristic, batching=batching, max_wait_ms=5)) as client:
            responses = await _burst(client, 24)
            assert all(r.status_code == 200 for r in responses)
            results[batching] = [r.json() for r in responses]
    assert results[True] == results[False]


async def test_concurrent_requests_share_backend_calls(make_app: Any) -> None:
    backend = FakeBackend(delay_s=0.05)
    async with serving(make_app(backend=backend, max_batch_size=8, max_wait_ms=5)) as client:
        backend.calls.clear()
        responses = await _burst(client, 24)
    assert all(r.status_code == 200 for r in responses)
    assert sum(backend.calls) == 24 and max(backend.calls) > 1 and max(backend.calls) <= 8
    assert len(backend.calls) < 24


async def test_batching_off_sends_one_request_per_call(make_app: Any) -> None:
    backend = FakeBackend(delay_s=0.01)
    async with serving(make_app(backend=backend, batching=False)) as client:
        backend.calls.clear()
        responses = await _burst(client, 8)
    assert all(r.status_code == 200 for r in responses) and backend.calls == [1] * 8


async def test_a_full_queue_is_429_with_retry_after_and_never_hangs(make_app: Any) -> None:
    backend = FakeBackend(delay_s=0.2)
    async with serving(make_app(backend=backend, queue_size=2, max_batch_size=1)) as client:
        started = time.monotonic()
        responses = await _burst(client, 10)
        elapsed = time.monotonic() - started
    statuses = [r.status_code for r in responses]
    assert statuses.count(429) >= 5 and statuses.count(200) >= 2 and set(statuses) <= {200, 429}
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.json()["detail"]["error_type"] == "overloaded_error"
    assert int(refused.headers["retry-after"]) >= 1 and int(refused.headers["retry-after-ms"]) >= 100
    assert elapsed < 5.0


async def test_sdk_sees_rate_limit_with_retry_after(make_app: Any) -> None:
    backend = FakeBackend(delay_s=0.3)
    app = make_app(backend=backend, queue_size=1, max_batch_size=1)
    async with app.router.lifespan_context(app):
        transport = httpx2.ASGITransport(app=app)
        async with AsyncTypeSafeClient(api_key="k", base_url="http://local", transport=transport, retry=RetryPolicy(max_retries=0)) as sdk:
            outcomes = await asyncio.gather(*(sdk.system_one(f"s{i}", {"q": NOUL}) for i in range(6)), return_exceptions=True)
    limited = [o for o in outcomes if isinstance(o, TypeSafeRateLimitError)]
    assert limited and all(e.retry_after_ms and e.retry_after_ms >= 100 for e in limited)


async def test_server_deadline_is_503_with_retry_after(make_app: Any) -> None:
    backend = FakeBackend(delay_s=0.5)
    async with serving(make_app(backend=backend, request_timeout_s=0.1, warmup=False)) as client:
        r = await client.post("/v1/systemone", json=body())
        assert r.status_code == 503 and r.json()["detail"]["error_type"] == "timeout_error"
        assert "retry-after" in r.headers and "retry-after-ms" in r.headers


async def test_one_bad_request_does_not_fail_its_batch(make_app: Any) -> None:
    backend = FakeBackend(delay_s=0.05, max_state_chars=40)
    async with serving(make_app(backend=backend, max_wait_ms=20)) as client:
        backend.calls.clear()
        payloads = [body(state="short one"), body(state="y" * 200), body(state="short two"), body(state="short three")]
        responses = await asyncio.gather(*(client.post("/v1/systemone", json=p) for p in payloads))
    assert [r.status_code for r in responses] == [200, 413, 200, 200]
    assert max(backend.calls) > 1  # they did share a batch, which was then answered one by one


async def test_batcher_survives_backend_failures(fake: FakeBackend) -> None:
    class Flaky(FakeBackend):
        fail = True

        def answer(self, requests: Any) -> Any:
            if self.fail:
                self.fail = False
                raise RuntimeError("transient")
            return super().answer(requests)

    backend = Flaky()
    batcher = Batcher(backend, max_batch_size=4, max_wait_s=0)
    await batcher.start()
    try:
        with pytest.raises(RuntimeError):
            await batcher.submit(_request(backend, "a"), 2.0)
        result = await batcher.submit(_request(backend, "b"), 2.0)
        assert len(result.probabilities) == 2
    finally:
        await batcher.close(1.0)


async def test_timed_out_jobs_leave_the_queue(fake: FakeBackend) -> None:
    backend = FakeBackend(delay_s=0.3)
    batcher = Batcher(backend, max_batch_size=1, max_wait_s=0, queue_size=8)
    await batcher.start()
    try:
        first = asyncio.create_task(batcher.submit(_request(backend, "first"), 5.0))
        await asyncio.sleep(0.05)  # the first is in the forward pass
        with pytest.raises(RequestTimeoutError):
            await batcher.submit(_request(backend, "late"), 0.05)
        assert batcher.depth == 0
        await first
        assert backend.calls == [1]  # the timed-out request never reached the backend
    finally:
        await batcher.close(1.0)


async def test_shutdown_drains_the_queue_then_refuses(fake: FakeBackend) -> None:
    backend = FakeBackend(delay_s=0.05)
    batcher = Batcher(backend, max_batch_size=2, max_wait_s=0, queue_size=64)
    await batcher.start()
    tasks = [asyncio.create_task(batcher.submit(_request(backend, f"s{i}"), 10.0)) for i in range(8)]
    await asyncio.sleep(0.01)
    await batcher.close(drain_timeout_s=5.0)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert not [r for r in results if isinstance(r, BaseException)]
    with pytest.raises(NotReadyError):
        await batcher.submit(_request(backend, "after"), 1.0)


async def test_shutdown_fails_what_cannot_drain_in_time(fake: FakeBackend) -> None:
    backend = FakeBackend(delay_s=0.2)
    batcher = Batcher(backend, max_batch_size=1, max_wait_s=0, queue_size=64)
    await batcher.start()
    tasks = [asyncio.create_task(batcher.submit(_request(backend, f"s{i}"), 10.0)) for i in range(5)]
    await asyncio.sleep(0.01)
    started = time.monotonic()
    await batcher.close(drain_timeout_s=0.1)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert time.monotonic() - started < 2.0
    assert any(isinstance(r, NotReadyError) for r in results)


async def test_overload_error_carries_a_retry_estimate(fake: FakeBackend) -> None:
    backend = FakeBackend(delay_s=0.2)
    batcher = Batcher(backend, max_batch_size=1, max_wait_s=0, queue_size=1)
    await batcher.start()
    try:
        running = asyncio.create_task(batcher.submit(_request(backend, "a"), 5.0))
        await asyncio.sleep(0.02)
        queued = asyncio.create_task(batcher.submit(_request(backend, "b"), 5.0))
        await asyncio.sleep(0)
        with pytest.raises(OverloadedError) as refused:
            await batcher.submit(_request(backend, "c"), 5.0)
        assert refused.value.retry_after_ms is not None and refused.value.retry_after_ms >= 100
        await asyncio.gather(running, queued)
    finally:
        await batcher.close(1.0)


async def test_request_level_errors_are_isolated_in_the_batcher() -> None:
    backend = FakeBackend(max_state_chars=30)
    batcher = Batcher(backend, max_batch_size=8, max_wait_s=0.05)
    await batcher.start()
    try:
        outcomes = await asyncio.gather(
            batcher.submit(_request(backend, "ok"), 2.0), batcher.submit(_request(backend, "z" * 100), 2.0), return_exceptions=True
        )
    finally:
        await batcher.close(1.0)
    assert not isinstance(outcomes[0], BaseException) and isinstance(outcomes[1], InputTooLongError)


async def test_batches_are_sized_to_meet_the_deadline() -> None:
    """A slow backend must not collapse: batches stay small enough that someone still gets an answer."""
    backend = FakeBackend(per_request_s=0.05)
    batcher = Batcher(backend, max_batch_size=32, max_wait_s=0)
    await batcher.start()
    try:
        await batcher.submit(_request(backend, "warm"), 5.0)  # measures the per-request cost
        backend.calls.clear()
        outcomes = await asyncio.gather(*(batcher.submit(_request(backend, f"s{i}"), 0.5) for i in range(24)), return_exceptions=True)
    finally:
        await batcher.close(2.0)
    answered = [o for o in outcomes if not isinstance(o, BaseException)]
    assert all(isinstance(o, RequestTimeoutError) for o in outcomes if isinstance(o, BaseException))
    assert max(backend.calls) <= 8  # 0.8 * 0.5 s / 0.05 s per request
    assert len(answered) >= 6  # an uncapped batch of 24 (1.2 s) would have answered none


async def test_hopeless_requests_fail_fast_without_a_forward_pass() -> None:
    backend = FakeBackend()
    batcher = Batcher(backend, max_batch_size=4, max_wait_s=0)
    await batcher.start()
    try:
        batcher.per_request_s = 2.0  # as if the backend had been measured this slow
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            await batcher.submit(_request(backend, "x"), 0.5)
        assert time.monotonic() - started < 0.3 and backend.calls == []
    finally:
        await batcher.close(1.0)


def test_tuner_backs_off_when_batches_cost_more_and_reprobes() -> None:
    from serving.batching import BatchTuner

    tuner = BatchTuner(32, min_samples=2, reprobe=5)
    assert tuner.cap == 2  # slow start
    tuner.observe(1, 0.10, 100)
    for _ in range(3):
        tuner.observe(2, 0.30, 200)  # 1.5x dearer per token in a batch
    assert tuner.cap == 1
    for _ in range(5):
        tuner.observe(1, 0.10, 100)
    assert tuner.cap == 2  # re-probe


def test_tuner_grows_the_cap_while_full_batches_pay() -> None:
    from serving.batching import BatchTuner

    tuner = BatchTuner(32, min_samples=2)
    tuner.observe(1, 0.10, 100)
    for _ in range(20):
        tuner.observe(tuner.cap, 0.02 * tuner.cap, 100 * tuner.cap)
    assert tuner.cap == 32
    tuner.observe(1, 0.01, 100)  # a short request alone: cheap per call, the same per token
    assert tuner.cap == 32
    for _ in range(10):
        tuner.observe(3, 0.5, 300)  # batches dearer per token than single calls: back off
    assert tuner.cap < 32


async def test_one_slow_call_does_not_refuse_every_later_request() -> None:
    """The cost estimate must be re-measured: one very slow forward pass (a huge request, a stall) once made
    every later request 'hopeless', failed without a forward pass, so the estimate never recovered (503s forever)."""

    class OnceSlow(FakeBackend):
        def answer(self, requests: Any) -> Any:
            if any(r.state == "huge" for r in requests):
                time.sleep(0.6)
            return super().answer(requests)

    backend = OnceSlow()
    batcher = Batcher(backend, max_batch_size=4, max_wait_s=0)
    await batcher.start()
    try:
        with pytest.raises(RequestTimeoutError):
            await batcher.submit(_request(backend, "huge"), 0.2)  # its forward pass still measures 0.6 s
        give_up, in_a_row = time.monotonic() + 3.0, 0
        while in_a_row < 3:  # small requests, as a client that keeps retrying sends them: served again soon
            try:
                await batcher.submit(_request(backend, "small"), 0.2)
                in_a_row += 1
            except RequestTimeoutError:
                assert time.monotonic() < give_up, "every request after one slow call is refused"
                in_a_row = 0
                await asyncio.sleep(0.05)
    finally:
        await batcher.close(1.0)


@pytest.mark.parametrize("fault", ["stop_iteration", "bad_result"])
async def test_a_backend_fault_never_kills_the_worker(fault: str) -> None:
    """A StopIteration escaping the backend (it cannot be set on a future) or a malformed result used to end
    the worker task: that request and every later one waited for their deadline (503s forever), and close()
    raised."""

    class Buggy(FakeBackend):
        broken = True

        def answer(self, requests: Any) -> Any:
            if self.broken:
                self.broken = False
                if fault == "stop_iteration":
                    next(iter(()))  # the classic escaping StopIteration
                return [replace(r, input_tokens=None) for r in super().answer(requests)]  # a count the backend did not know
            return super().answer(requests)

    backend = Buggy()
    batcher = Batcher(backend, max_batch_size=4, max_wait_s=0)
    await batcher.start()
    try:
        started = time.monotonic()
        failed = await asyncio.gather(batcher.submit(_request(backend, "a"), 5.0), return_exceptions=True)
        assert time.monotonic() - started < 2.0 and isinstance(failed[0], Exception) and not isinstance(failed[0], RequestTimeoutError)
        result = await batcher.submit(_request(backend, "b"), 2.0)
        assert len(result.probabilities) == 2
    finally:
        await batcher.close(1.0)


async def test_the_deadline_counts_from_arrival_not_from_queueing(fake: FakeBackend) -> None:
    backend = FakeBackend(delay_s=0.3)
    batcher = Batcher(backend, max_batch_size=1, max_wait_s=0, queue_size=8)
    await batcher.start()
    try:
        with pytest.raises(RequestTimeoutError, match="while the request was read"):  # spent before it was queued
            await batcher.submit(_request(backend, "late"), 1.0, arrived=time.monotonic() - 1.5)
        assert batcher.depth == 0 and backend.calls == []
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):  # 0.1 s of a 1 s budget left: not the whole second again
            await batcher.submit(_request(backend, "slow"), 1.0, arrived=time.monotonic() - 0.9)
        assert time.monotonic() - started < 0.6
        assert len((await batcher.submit(_request(backend, "fresh"), 1.0, arrived=time.monotonic())).probabilities) == 2
    finally:
        await batcher.close(1.0)


async def test_a_slow_upload_spends_the_request_deadline(make_app: Any) -> None:
    import json

    payload = json.dumps(body()).encode()

    async def slow_body() -> Any:
        for i in range(0, len(payload), max(1, len(payload) // 4)):
            await asyncio.sleep(0.15)
            yield payload[i : i + max(1, len(payload) // 4)]

    async with serving(make_app(backend=FakeBackend(delay_s=0.0), request_timeout_s=0.4, warmup=False)) as client:
        assert (await client.post("/v1/systemone", json=body())).status_code == 200
        r = await client.post("/v1/systemone", content=slow_body(), headers={"content-type": "application/json"})
        assert r.status_code == 503 and r.json()["detail"]["error_type"] == "timeout_error"
        assert "while the request was read" in r.json()["detail"]["message"]
