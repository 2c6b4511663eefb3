"""Cross-request micro-batching: a bounded queue in front of one backend worker.

Stages: the request handler plans (validates, deduplicates; big bodies in a worker thread) and submits the key-free
`BackendRequest`; the worker forms a batch and runs ONE `backend.answer(batch)` call in its own thread; the
handler post-processes its own result (`finish_request`). While a forward pass runs, new requests queue up,
so under load batches grow by themselves (greedy batching); `max_wait_s` only adds a short wait for company
when the queue is shallow. Batching off is the same pipeline with `max_batch_size=1, max_wait_s=0`.

Batches are also sized by time: the worker keeps an estimate of the forward cost per request and never
forms a batch that would overrun the deadline of its most urgent member, and a request that could not be
answered in time even alone is failed at once (503) instead of costing a forward pass nobody will read. That
verdict needs a current estimate, and failing requests fast measures nothing: once the backend has sat idle
for longer than the estimated cost, nobody is failed fast and the next batch (sized as usual) re-measures, so
a few slow calls (a huge request and the SDK's retries of it) cannot get every later request refused.
Without this, a slow backend under load forms ever larger batches that all time out (zero goodput).
And batching must pay for itself: `BatchTuner` starts with batches of 2, grows the cap while full batches
cost no more per request than single calls, and halves it while they are clearly dearer (a backend whose
batch path pads badly), re-probing now and then; batching on is then never much worse than off.

Failure modes never hang: a full queue raises `OverloadedError` (429) at once, a request that misses its
deadline raises `RequestTimeoutError` (503) and is dropped from the queue, a closed batcher raises
`NotReadyError` (503), and a backend fault that cannot be handed to a request as is (a StopIteration, a
malformed result) fails that batch with `BackendError` (500) instead of ending the worker. A request-level error inside a batch (too long, unsupported) does not fail its
neighbours: the batch is retried one request at a time so each gets its own result or error; that retry skips
the requests whose caller has gone (timed out, disconnected), so a failing batch path cannot hold the forward
thread for one call per abandoned request. On close, the requests of a forward pass still running get their 503
at once, and the event loop is not blocked while that pass ends.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from controller.backend import Backend, BackendRequest, BackendResult
from controller.errors import BackendError, BackendUnavailableError, InvalidRequestError
from serving.errors import NotReadyError, OverloadedError, RequestTimeoutError
from serving.metrics import ServerMetrics

log = logging.getLogger(__name__)

_EWMA = 0.2  # weight of the newest forward call in the per-request cost estimate
_SAFETY = 0.8  # a batch may use this share of its most urgent member's remaining time


class BatchTuner:
    """Adapts the batch cap to what the backend's batch path actually costs (slow start, then AIMD-like).

    `observe(n, seconds, tokens)` after every forward call. Cost is seconds per input token, so a batch is
    compared with single calls fairly whatever the request mix. The cap starts at 2; after `min_samples` full
    batches that cost no more per token than single calls it doubles (up to `max_cap`); while batches cost
    clearly more (by more than `tolerance`) it halves. At cap 1 it re-probes with 2 every `reprobe` calls,
    so a backend that got faster (or a load that changed) is noticed.
    """

    def __init__(self, max_cap: int, *, tolerance: float = 1.25, min_samples: int = 3, reprobe: int = 200) -> None:
        self.max_cap = max_cap
        self.cap = min(2, max_cap)
        self.tolerance = tolerance
        self.min_samples = min_samples
        self.reprobe = reprobe
        self.single_s: float | None = None  # EWMA seconds per token of one-request calls
        self._multi_s: float | None = None  # EWMA seconds per token of calls with n >= 2, at this cap
        self._multi_n = 0
        self._full = 0  # batches at this cap that were full
        self._since_change = 0

    def observe(self, n: int, seconds: float, tokens: int) -> None:
        self._since_change += 1
        cost = seconds / max(1, tokens)
        if n == 1:
            self.single_s = cost if self.single_s is None else (1 - _EWMA) * self.single_s + _EWMA * cost
        else:
            self._multi_s = cost if self._multi_s is None else (1 - _EWMA) * self._multi_s + _EWMA * cost
            self._multi_n += 1
            self._full += n >= self.cap
        if self.cap == 1 and self.max_cap > 1 and self._since_change >= self.reprobe:
            self._set(2)
        if self.single_s is None or self._multi_s is None or self._multi_n < self.min_samples:
            return
        if self._multi_s > self.single_s * self.tolerance:
            self._set(max(1, self.cap // 2))
        elif self._full >= self.min_samples and self._multi_s <= self.single_s and self.cap < self.max_cap:
            self._set(min(self.max_cap, self.cap * 2))

    def _set(self, cap: int) -> None:
        if cap != self.cap:
            log.info("batch cap %d -> %d (%.2g s/token single, %.2g s/token batched)", self.cap, cap, self.single_s or 0, self._multi_s or 0)
        self.cap = cap
        self._multi_s = None
        self._multi_n = 0
        self._full = 0
        self._since_change = 0


@dataclass
class _Job:
    request: BackendRequest
    future: asyncio.Future[BackendResult]
    deadline: float
    enqueued: float = field(default_factory=time.monotonic)
    # Set on the event loop when the caller stops waiting; read by the forward thread (a plain bool: no lock needed).
    abandoned: bool = False

    def wanted(self) -> bool:
        """Whether an answer can still reach its caller (safe to call from the forward thread)."""
        return not self.abandoned and time.monotonic() < self.deadline


class Batcher:
    """Owns the queue and the single forward worker for one backend."""

    def __init__(
        self,
        backend: Backend,
        *,
        max_batch_size: int = 32,
        max_wait_s: float = 0.002,
        queue_size: int = 256,
        metrics: ServerMetrics | None = None,
    ) -> None:
        if max_batch_size < 1 or queue_size < 1 or max_wait_s < 0:
            raise ValueError("max_batch_size and queue_size must be >= 1 and max_wait_s >= 0")
        self.backend = backend
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.queue_size = queue_size
        self.metrics = metrics or ServerMetrics()
        self._queue: deque[_Job] = deque()
        self._arrived = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._accepting = False
        self._worker: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self.per_request_s: float | None = None  # EWMA of forward seconds per request; None until measured
        self.tuner = BatchTuner(max_batch_size)
        self.batches = 0
        self._last_batch = 0
        self._forward_done = time.monotonic()  # when the last forward call ended (or the batcher started)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._worker is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jevmem-forward")
        self._forward_done = time.monotonic()
        self._accepting = True
        self._worker = asyncio.create_task(self._run(), name="jevmem-batcher")

    async def close(self, drain_timeout_s: float = 10.0) -> None:
        """Stop accepting, let queued requests finish for up to `drain_timeout_s`, then fail the rest."""
        self._accepting = False
        deadline = time.monotonic() + drain_timeout_s
        while (self._queue or not self._idle.is_set()) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        leftover = 0
        while self._queue:
            job = self._queue.popleft()
            if not job.future.done():
                job.future.set_exception(NotReadyError("the server is shutting down", retry_after_ms=1000))
                leftover += 1
        if leftover:
            log.warning("shutdown: %d queued requests were not answered within %.1fs", leftover, drain_timeout_s)
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        if self._executor is not None:
            # A forward pass may still be running: wait for it off the loop, so its callers' 503s go out now.
            executor, self._executor = self._executor, None
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
        self.metrics.queue_depth.set(0)

    @property
    def accepting(self) -> bool:
        return self._accepting

    @property
    def depth(self) -> int:
        return len(self._queue)

    def retry_after_ms(self) -> int:
        """How long until the queue ahead of a new request has likely drained."""
        per_request = self.per_request_s if self.per_request_s is not None else 0.05
        return int(min(10_000, max(100, (len(self._queue) + 1) * per_request * 1000)))

    # ------------------------------------------------------------------ submit
    async def submit(self, request: BackendRequest, timeout_s: float, *, arrived: float | None = None) -> BackendResult:
        """Queue one request and wait for its result (or its own error). The deadline is `timeout_s` after
        `arrived` (a `time.monotonic()` reading: when the request reached the server), else after now; a request
        whose deadline has passed before it is queued (a slow body upload, a long parse) is refused at once."""
        now = time.monotonic()
        deadline = (now if arrived is None else min(arrived, now)) + timeout_s
        if deadline <= now:
            raise RequestTimeoutError.while_reading(timeout_s, self.retry_after_ms())
        if not self._accepting:
            raise NotReadyError("the server is not accepting requests (starting or shutting down)", retry_after_ms=1000)
        if len(self._queue) >= self.queue_size:
            raise OverloadedError(
                f"the server is overloaded ({len(self._queue)} requests queued); retry later",
                retry_after_ms=self.retry_after_ms(),
            )
        job = _Job(request, asyncio.get_running_loop().create_future(), deadline=deadline)
        self._queue.append(job)
        self.metrics.queue_depth.set(len(self._queue))
        self._arrived.set()
        try:
            return await asyncio.wait_for(asyncio.shield(job.future), deadline - now)
        except TimeoutError as error:
            raise RequestTimeoutError(
                f"no answer within the server's deadline of {timeout_s:g}s; retry later", retry_after_ms=self.retry_after_ms()
            ) from error
        finally:
            if not job.future.done():  # timed out or the client went away: the worker skips it
                job.abandoned = True
                job.future.cancel()
                self._discard(job)

    async def submit_many(self, requests: Sequence[BackendRequest], timeout_s: float) -> list[BackendResult]:
        """Queue several requests (they may land in different batches); the first error is raised."""
        outcomes = await asyncio.gather(*(self.submit(r, timeout_s) for r in requests), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return list(outcomes)  # type: ignore[arg-type]

    def _discard(self, job: _Job) -> None:
        try:
            self._queue.remove(job)
        except ValueError:
            pass  # already taken into a batch
        self.metrics.queue_depth.set(len(self._queue))

    # ------------------------------------------------------------------ worker
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            await self._gather_company()
            batch = self._take_batch()
            self.metrics.queue_depth.set(len(self._queue))
            if not batch:
                continue
            self._idle.clear()
            try:
                started = time.monotonic()
                outcomes = await loop.run_in_executor(self._executor, self._answer, batch)
                elapsed = time.monotonic() - started
                cost = elapsed / len(batch)
                self.per_request_s = cost if self.per_request_s is None else (1 - _EWMA) * self.per_request_s + _EWMA * cost
                tokens = sum(o.input_tokens for o in outcomes if isinstance(o, BackendResult))
                self.tuner.observe(len(batch), elapsed, tokens or len(batch))
                self.metrics.batch_cap.set(self.tuner.cap)
                self._last_batch = len(batch)
                self.metrics.forward.observe(elapsed)
                self.metrics.batch_size.observe(len(batch))
                self.batches += 1
                for job, outcome in zip(batch, outcomes):
                    if job.future.done():
                        continue
                    if isinstance(outcome, BaseException):
                        job.future.set_exception(outcome)
                    else:
                        job.future.set_result(outcome)
            except asyncio.CancelledError:
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(NotReadyError("the server is shutting down", retry_after_ms=1000))
                raise
            except Exception as error:  # noqa: BLE001 - a dead worker would leave every later request to time out
                # e.g. a StopIteration from the backend (a future refuses it) or a result that breaks the bookkeeping
                log.error("batch of %d could not be completed: %r", len(batch), error, exc_info=error)
                for job in batch:
                    if not job.future.done():
                        failure = BackendError(f"the backend's answer could not be used: {error!r}")
                        failure.__cause__ = error
                        job.future.set_exception(failure)
            finally:
                self._forward_done = time.monotonic()
                self._idle.set()

    def _take_batch(self) -> list[_Job]:
        """FIFO jobs, as many as fit the tuner's cap and the time left to the most urgent of them."""
        now = time.monotonic()
        cost = self.per_request_s
        # An idle backend is measured again before anyone is refused on the estimate's word (see the docstring).
        stale = cost is not None and now - self._forward_done > cost
        batch: list[_Job] = []
        urgent = math.inf
        while self._queue and len(batch) < self.tuner.cap:
            job = self._queue[0]
            if job.future.done():
                self._queue.popleft()
                continue
            remaining = job.deadline - now
            if cost is not None:
                if remaining < 0.5 * cost and not stale:  # hopeless even alone: answer 503 now, spend nothing on it
                    self._queue.popleft()
                    job.future.set_exception(
                        RequestTimeoutError("the server cannot answer within its deadline; retry later", retry_after_ms=self.retry_after_ms())
                    )
                    continue
                if batch and (len(batch) + 1) * cost > _SAFETY * min(urgent, remaining):
                    break
            urgent = min(urgent, remaining)
            batch.append(self._queue.popleft())
        return batch

    async def _gather_company(self) -> None:
        """Under concurrent traffic, wait (at most until the oldest job is `max_wait_s` old) for company."""
        if self.max_wait_s <= 0 or self.tuner.cap == 1 or (self._last_batch <= 1 and len(self._queue) <= 1):
            return  # a lone request under light traffic goes at once: waiting would only add latency
        oldest = self._queue[0].enqueued
        while len(self._queue) < self.tuner.cap:
            remaining = oldest + self.max_wait_s - time.monotonic()
            if remaining <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except TimeoutError:
                return
            if not self._queue:
                return

    def _answer(self, jobs: Sequence[_Job]) -> list[BackendResult | BaseException]:
        """Runs in the forward thread. Request-level errors are isolated by answering one at a time."""
        requests = [job.request for job in jobs]
        try:
            return _checked(self.backend.answer(requests), len(requests))
        except InvalidRequestError as error:
            if len(requests) == 1:
                return [error]
        except BackendUnavailableError as error:
            return [error] * len(requests)  # retrying one by one would only hammer a backend that is down
        except Exception as error:  # noqa: BLE001 - every job must get an outcome, the worker must survive
            if len(requests) == 1:
                return [error]
            log.warning("batch of %d failed (%s); answering its requests one by one", len(requests), type(error).__name__)
        outcomes: list[BackendResult | BaseException] = []
        for job in jobs:
            if not job.wanted():  # nobody waits for it: no forward pass for it either
                outcomes.append(RequestTimeoutError("the server cannot answer within its deadline; retry later", retry_after_ms=1000))
                continue
            try:
                outcomes.extend(_checked(self.backend.answer([job.request]), 1))
            except Exception as error:  # noqa: BLE001
                outcomes.append(error)
        return outcomes


def _checked(results: Sequence[BackendResult], expected: int) -> list[BackendResult | BaseException]:
    if len(results) != expected:
        raise BackendError(f"backend returned {len(results)} results for {expected} requests")
    return list(results)
