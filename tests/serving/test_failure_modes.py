"""The server under concurrency and failure: callers that go away, a batch path that fails, shutdown with a
forward pass still running, a busy memory engine, and readiness probes that must answer promptly."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from controller.backend import Backend, BackendRequest
from controller.client import plan_request
from serving.batching import Batcher
from serving.errors import NotReadyError, RequestTimeoutError
from serving.runtime import MemoryService
from tests.serving.conftest import NOUL, serving
from tests.serving.fakes import FakeBackend, FakeEngine

M = "/v1/memory"


def _request(backend: Backend, state: str) -> BackendRequest:
    return plan_request(backend, state, {"q": NOUL}, model=None).request


class BatchPathBroken(FakeBackend):
    """Fails every call of more than one request (a backend whose batched path is broken); singles work."""

    def answer(self, requests: Any) -> Any:
        if len(requests) > 1:
            with self._lock:
                self.calls.append(len(requests))
            raise RuntimeError("the batched path is broken")
        return super().answer(requests)


# ------------------------------------------------------------------------------------------------- batcher
async def test_a_failed_batch_is_not_retried_for_callers_that_have_gone() -> None:
    """After a batch failed, its requests were answered one by one even when every caller had already timed
    out: the forward thread stayed busy for one call per abandoned request, and the next request waited."""
    backend = BatchPathBroken(per_request_s=0.25)
    batcher = Batcher(backend, max_batch_size=8, max_wait_s=0)
    await batcher.start()
    batcher.tuner.cap = 8
    try:
        outcomes = await asyncio.gather(*(batcher.submit(_request(backend, f"s{i}"), 0.4) for i in range(6)), return_exceptions=True)
        assert all(isinstance(o, RequestTimeoutError) for o in outcomes[2:])
        started = time.monotonic()
        await batcher.submit(_request(backend, "next"), 5.0)
        assert time.monotonic() - started < 0.9  # six single calls after the batch would hold it ~1.35 s
        assert backend.calls[0] == 6 and backend.calls.count(1) <= 3
    finally:
        await batcher.close(2.0)


async def test_a_disconnected_caller_gets_no_single_retry_either() -> None:
    backend = BatchPathBroken(per_request_s=0.2)
    batcher = Batcher(backend, max_batch_size=8, max_wait_s=0)
    await batcher.start()
    batcher.tuner.cap = 8
    try:
        tasks = [asyncio.create_task(batcher.submit(_request(backend, f"s{i}"), 10.0)) for i in range(4)]
        await asyncio.sleep(0.1)  # the batch failed; the first single retry is running
        for task in tasks[1:]:
            task.cancel()  # three clients hang up
        assert not isinstance((await asyncio.gather(*tasks, return_exceptions=True))[0], BaseException)
        await asyncio.sleep(0.3)
        assert backend.calls == [4, 1]  # the batch, then only the caller still there
    finally:
        await batcher.close(2.0)


async def test_close_answers_the_running_batch_at_once_and_keeps_the_loop_free() -> None:
    """close() waited for a running forward pass with a blocking `executor.shutdown(wait=True)` on the event
    loop: nothing else ran meanwhile, and the callers of that batch got their 503 only after the pass ended."""
    backend = FakeBackend(delay_s=1.5)
    batcher = Batcher(backend, max_batch_size=1, max_wait_s=0)
    await batcher.start()
    running = asyncio.create_task(batcher.submit(_request(backend, "in the forward pass"), 10.0))
    queued = asyncio.create_task(batcher.submit(_request(backend, "queued"), 10.0))
    await asyncio.sleep(0.05)
    closing = asyncio.create_task(batcher.close(drain_timeout_s=0.1))
    started = time.monotonic()
    outcomes = await asyncio.gather(running, queued, return_exceptions=True)
    assert time.monotonic() - started < 0.8
    assert all(isinstance(o, NotReadyError) for o in outcomes)
    await closing  # returns once the forward thread is done
    assert backend.calls == [1]


# ------------------------------------------------------------------------------------------ memory engine
class SlowEngine(FakeEngine):
    """Each write takes `delay_s` on the memory thread."""

    delay_s = 0.3

    def write(self, obs: Any) -> Any:
        time.sleep(self.delay_s)
        return super().write(obs)


async def test_a_busy_memory_engine_is_503_for_writes_that_cannot_start_and_stores_none_of_them(make_app: Any) -> None:
    """Engine calls queued without bound: with a slow engine every write waited its turn far past the request
    deadline (12 writes of 0.3 s under a 1 s deadline all answered after up to 3.6 s)."""
    engine = SlowEngine()
    async with serving(make_app(engine=engine, request_timeout_s=0.5)) as client:
        responses = await asyncio.gather(*(client.post(f"{M}/observations", json={"content": f"note {i}"}) for i in range(8)))
        statuses = [r.status_code for r in responses]
        assert set(statuses) == {201, 503} and statuses.count(201) <= 3
        refused = next(r for r in responses if r.status_code == 503)
        assert refused.json()["detail"]["error_type"] == "timeout_error" and "nothing was changed" in refused.json()["detail"]["message"]
        assert int(refused.headers["retry-after"]) >= 1
        await asyncio.sleep(0.4)  # a refused write that still ran would show up now
    assert len(engine.nodes) == statuses.count(201)


async def test_a_full_memory_queue_is_429_at_once(make_app: Any) -> None:
    engine = SlowEngine()
    async with serving(make_app(engine=engine, queue_size=2, request_timeout_s=5.0)) as client:
        started = time.monotonic()
        responses = await asyncio.gather(*(client.post(f"{M}/observations", json={"content": f"note {i}"}) for i in range(6)))
        statuses = [r.status_code for r in responses]
        assert statuses.count(201) == 2 and statuses.count(429) == 4 and time.monotonic() - started < 1.5
        refused = next(r for r in responses if r.status_code == 429)
        assert refused.json()["detail"]["error_type"] == "overloaded_error" and "retry-after-ms" in refused.headers
        assert (await client.post(f"{M}/observations", json={"content": "later"})).status_code == 201  # no slot leaked
    assert len(engine.nodes) == 3


def _blocking_calls() -> tuple[threading.Event, list[str], Callable[..., str]]:
    """A memory call that holds the memory thread until `release` is set (10 s at most), and the names of the calls
    that ran."""
    release = threading.Event()
    ran: list[str] = []

    def blocking(engine: Any, name: str) -> str:
        release.wait(10.0)
        ran.append(name)
        return name

    return release, ran, blocking


async def test_a_memory_call_whose_caller_goes_away_before_it_starts_never_runs() -> None:
    """A guard (asyncio already cancelled a queued executor call) that the bounded line keeps it, and frees the slot."""
    release, ran, blocking = _blocking_calls()
    service = MemoryService(FakeEngine(), max_pending=8)
    try:
        first = asyncio.create_task(service.call(blocking, "first"))
        queued = asyncio.create_task(service.call(blocking, "queued"))
        await asyncio.sleep(0.05)
        queued.cancel()  # the client hung up while its write waited for the memory thread
        with pytest.raises(asyncio.CancelledError):
            await queued
        release.set()
        assert await first == "first"
        await asyncio.sleep(0.05)
        assert ran == ["first"] and service.pending == 0  # and its slot is free again
    finally:
        await service.close()


async def test_a_memory_call_counts_its_start_deadline_from_the_requests_arrival() -> None:
    """A request that spent its deadline before it was queued (a slow upload) is dropped as soon as it waits,
    instead of waiting the whole deadline again on the memory thread."""
    release, ran, blocking = _blocking_calls()
    service = MemoryService(FakeEngine(), max_pending=8, start_timeout_s=5.0)
    try:
        first = asyncio.create_task(service.call(blocking, "first"))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError, match="of its arrival"):
            await service.call(blocking, "late", arrived=time.monotonic() - 4.9)  # 0.1 s of its 5 s left
        assert time.monotonic() - started < 2.0
        release.set()
        assert await first == "first"
        await asyncio.sleep(0.05)
        assert ran == ["first"] and service.pending == 0  # the late call never ran, and its slot is free
    finally:
        release.set()
        await service.close()


# ----------------------------------------------------------------------------------------------- readiness
async def test_readyz_answers_promptly_while_a_slow_warm_up_retry_runs(make_app: Any) -> None:
    """/readyz ran the warm-up retry inline: once a failed backend came back slow (here 2 s a call), each probe
    waited for the whole forward pass (up to the request deadline), so the load balancer's probe timed out."""

    class DownThenSlow(FakeBackend):
        up = False

        def answer(self, requests: Any) -> Any:
            if not self.up:
                from controller.errors import BackendUnavailableError

                raise BackendUnavailableError("still loading")
            return super().answer(requests)

    backend = DownThenSlow(delay_s=2.0)
    async with serving(make_app(backend=backend)) as client:
        backend.up = True
        await asyncio.sleep(1.05)  # past the once-a-second limit on warm-up retries
        started = time.monotonic()
        probes = await asyncio.gather(*(client.get("/readyz") for _ in range(3)))
        assert time.monotonic() - started < 1.3 and {r.status_code for r in probes} == {503}
        assert "retry-after" in probes[0].headers
        await asyncio.sleep(2.0)
        assert (await client.get("/readyz")).status_code == 200
        assert backend.calls == [1]  # one warm-up retry for all the probes
        assert (await client.get("/healthz")).status_code == 200


async def test_a_cancelled_controller_call_leaves_the_engine_a_backend_error(fake: FakeBackend) -> None:
    """The engine's view of the served backend let a cancelled queue call escape as CancelledError (a
    BaseException): the engine rolled the write back and the request got no response, where a controller that
    is unavailable should leave the write stored with its relations pending."""
    from controller.errors import BackendUnavailableError
    from serving.runtime import QueuedBackend

    class CancellingBatcher:
        async def submit_many(self, requests: Any, timeout_s: float) -> Any:
            raise asyncio.CancelledError

    queued = QueuedBackend(fake, CancellingBatcher(), asyncio.get_running_loop(), timeout_s=1.0)  # type: ignore[arg-type]
    with pytest.raises(BackendUnavailableError, match="stopped before it answered"):
        await asyncio.to_thread(queued.answer, [_request(fake, "s")])


async def test_concurrent_edits_of_one_node_are_serialised_never_merged_or_5xx(heuristic: Backend) -> None:
    """A guard: engine calls run one at a time on the memory thread, so two PUT links to one node leave one of the
    two link sets (never a mix), and a delete racing reads is a 404 for the reads after it, never a 500."""
    from serving import Settings, create_app

    app = create_app(Settings(memory_db=":memory:", embedder="hashing"), backend=heuristic)
    async with serving(app) as client:
        batch = {"observations": [{"content": f"Ana: note number {i} about the garden."} for i in range(4)]}
        a, b, c, d = [r["node_id"] for r in (await client.post(f"{M}/observations/batch", json=batch)).json()["results"]]
        sets = [[{"dst": b, "relation": "semantic"}, {"dst": d, "relation": "causal"}], [{"dst": c, "relation": "semantic"}]]
        calls = [client.put(f"{M}/nodes/{a}/links", json={"links": links}) for links in sets * 3]
        calls += [client.get(f"{M}/nodes/{d}") for _ in range(3)] + [client.delete(f"{M}/nodes/{d}")] + [client.get(f"{M}/nodes/{d}")]
        responses = await asyncio.gather(*calls)
        assert all(r.status_code < 500 for r in responses), [r.status_code for r in responses]
        assert {r.status_code for r in responses[-5:]} <= {200, 204, 404} and responses[-2].status_code == 204
        explicit = {(e["dst"], e["relation"]) for e in (await client.get(f"{M}/nodes/{a}")).json()["edges"] if e["origin"] == "explicit"}
        assert explicit in ({(b, "semantic")}, {(c, "semantic")}, {(b, "semantic"), (d, "causal")}), explicit
        assert (await client.get(f"{M}/nodes/{d}")).status_code == 404
