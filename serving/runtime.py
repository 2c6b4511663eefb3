"""What the app holds while it runs: the backend, the batcher, the memory engine and the metrics.

`Runtime.start` / `Runtime.stop` are called from the app's lifespan. Backend and engine are created there
(never at import), warmed with one tiny request, and closed on shutdown (only what the runtime created).
Route handlers get the runtime and the memory service through dependencies (`get_runtime`, `get_memory`),
which tests replace with `app.dependency_overrides`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import Depends, Request

from controller.backend import Backend, BackendRequest, BackendResult, ModelInfo, create_backend
from controller.client import PlannedRequest, plan_body, plan_request
from controller.errors import BackendUnavailableError, InputTooLongError
from serving.batching import Batcher
from serving.errors import HTTPFacingError, MemoryUnavailableError, NotReadyError, OverloadedError, RequestTimeoutError, SettingsError
from serving.metrics import ServerMetrics
from serving.settings import Settings, controller_options_error

log = logging.getLogger(__name__)
T = TypeVar("T")

WARMUP_STATE = "warm-up"
WARMUP_QUESTIONS = {"ready": {"type": "noul", "instructions": "Is this a warm-up request?"}}
READY_PROBE_WAIT_S = 0.5  # how long /readyz waits for a warm-up retry before it answers (probes time out at ~1 s)


MEMORY_RETRY_MS = 1000  # retry-after of a memory call refused because the engine is busy


def warmup_request() -> BackendRequest:
    """The request `Runtime.warm_up` sends, as `plan_request` builds it, without a backend: the model name is all
    planning takes from one, and the token budget does not count it."""
    return plan_body(WARMUP_STATE, WARMUP_QUESTIONS)[0]


def check_token_budget(settings: Settings) -> None:
    """With a warm-up, `settings.token_budget` must admit the server's own warm-up request, or /readyz could never
    report ready: a smaller one is a SettingsError naming JEVMEM_TOKEN_BUDGET and the minimum. The budget is counted
    with the base model's tokenizer whatever the controller (as `Runtime.plan` counts it), so this needs no backend
    and loads no weights: `preflight` runs it before the server listens."""
    budget = settings.token_budget
    if budget is None or not settings.warmup:
        return
    from controller.template import count_input_tokens

    try:
        count_input_tokens(warmup_request(), max_request_tokens=budget)
    except InputTooLongError as error:
        raise SettingsError(
            f"JEVMEM_TOKEN_BUDGET={budget} is below the {error.tokens} tokens of the server's own warm-up request, "
            f"so /readyz could never report ready; set it to at least {error.tokens} (or unset it: no budget)",
            field="token_budget", value=budget,
        ) from error


class MemoryService:
    """The memory engine behind one dedicated thread: SQLite connections stay on the thread that made
    them, and engine calls are serialised without blocking the event loop.

    The line in front of that thread is bounded, so a busy engine (a long relink, a slow controller) is a fast
    429 / 503 with retry-after instead of requests piling up without end: at most `max_pending` calls may be
    queued or running (then `OverloadedError`), and a call that has not started `start_timeout_s` after its
    request arrived (body reading included, as the batcher counts it; after it was queued when the arrival is not
    known) is dropped unrun (`RequestTimeoutError`: nothing was changed, so a retry cannot duplicate a write).
    A call whose caller goes away before it starts never runs either. A call that has started always runs to
    the end and its caller waits for it: a write is never reported failed and then committed."""

    def __init__(self, engine: Any, executor: ThreadPoolExecutor | None = None, *, owns_engine: bool = False,
                 max_pending: int | None = None, start_timeout_s: float | None = None) -> None:
        self.engine = engine
        self.owns_engine = owns_engine
        self.max_pending = max_pending
        self.start_timeout_s = start_timeout_s
        self._executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="jevmem-memory")
        self._pending = 0  # calls queued or running; changed from the memory thread too, hence the lock
        self._pending_lock = threading.Lock()

    @property
    def pending(self) -> int:
        return self._pending

    def deadline(self, arrived: float | None = None) -> float | None:
        """The `time.monotonic()` reading by which a call for a request that arrived at `arrived` (a monotonic
        reading; None: now) must have started, or None when calls wait without a bound."""
        if self.start_timeout_s is None:
            return None
        now = time.monotonic()
        return (now if arrived is None else min(arrived, now)) + self.start_timeout_s

    async def call(self, fn: Callable[..., T], *args: Any, arrived: float | None = None, **kwargs: Any) -> T:
        """Run `fn(engine, *args, **kwargs)` on the memory thread, within the bounds above; `arrived` is when the
        request reached the server (`request.state.arrived`), the start of its deadline."""
        deadline = self.deadline(arrived)
        with self._pending_lock:
            if self.max_pending is not None and self._pending >= self.max_pending:
                raise OverloadedError(f"the memory engine is busy ({self._pending} calls queued or running); retry later",
                                      retry_after_ms=MEMORY_RETRY_MS)
            self._pending += 1
        try:
            job = self._executor.submit(functools.partial(fn, self.engine, *args, **kwargs))
        except RuntimeError as error:  # the executor is shut down: the server is stopping
            self._release(None)
            raise MemoryUnavailableError("the memory engine is shutting down", retry_after_ms=MEMORY_RETRY_MS) from error
        except BaseException:
            self._release(None)
            raise
        job.add_done_callback(self._release)
        return await self._wait(job, deadline)

    async def _wait(self, job: concurrent.futures.Future[T], deadline: float | None) -> T:
        result = asyncio.wrap_future(job)
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, _ = await asyncio.wait({result}, timeout=timeout)
            if not done and job.cancel():  # cancel() refuses a call that has started: that one is waited for
                raise RequestTimeoutError(f"the memory engine did not take up the request within {self.start_timeout_s:g}s "
                                          "of its arrival (nothing was changed); retry later", retry_after_ms=MEMORY_RETRY_MS)
            return await result
        except asyncio.CancelledError:
            if not job.cancel():  # the caller went away: a call still queued is never run, a started one ends unread
                result.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise

    def _release(self, _: object) -> None:
        with self._pending_lock:
            self._pending -= 1

    @classmethod
    async def open(cls, settings: Settings, backend: Backend, batcher: Batcher) -> MemoryService:
        """Open the engine at `settings.memory_db` (`:memory:` for an in-memory store) on the memory thread, and
        embed one text there so the embedder's model is loaded before the server reports ready."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jevmem-memory")
        queued = QueuedBackend(backend, batcher, asyncio.get_running_loop(), timeout_s=max(60.0, settings.request_timeout_s))
        path = None if settings.memory_db == ":memory:" else settings.memory_db

        def _open() -> Any:
            from memory.engine import Engine
            from memory.store.sqlite_schema import resolve_embedder

            engine = Engine.open(path, controller=queued, embedder=resolve_embedder(path, settings.embedder))
            try:  # load the embedder now: /readyz waits for it, and a broken one stops the start, not the first write
                engine.embedder.embed([WARMUP_STATE])
            except BaseException:
                engine.close()
                raise
            return engine

        try:
            engine = await asyncio.get_running_loop().run_in_executor(executor, _open)
        except BaseException:
            executor.shutdown(wait=False)  # a failed open leaves no idle memory thread behind
            raise
        return cls(engine, executor, owns_engine=True, **memory_bounds(settings))

    async def close(self) -> None:
        """Finish queued engine calls, close the engine if this service opened it, stop the thread."""
        close = getattr(self.engine, "close", None) if self.owns_engine else None
        loop = asyncio.get_running_loop()
        if close is not None:
            try:  # past the bounds of `call`: closing must run however busy the engine is
                await loop.run_in_executor(self._executor, close)
            except Exception:  # noqa: BLE001 - shutdown goes on
                log.exception("closing the memory engine failed")
        await asyncio.to_thread(self._executor.shutdown, wait=True)


def memory_bounds(settings: Settings) -> dict[str, Any]:
    """The memory engine's line is bounded as the batcher's is: the queue size, and the request deadline to start."""
    return {"max_pending": settings.queue_size, "start_timeout_s": settings.request_timeout_s}


_QUEUE_GRACE_S = 5.0  # past the batcher's own deadline, how long the memory thread waits for the event loop


class QueuedBackend:
    """The memory engine's view of the served backend: its requests join the HTTP traffic in the batcher, so
    one forward thread does all inference. Queue errors become `BackendUnavailableError`, which the engine
    records as `relations_pending` instead of failing the write. Closing it leaves the backend open."""

    def __init__(self, backend: Backend, batcher: Batcher, loop: asyncio.AbstractEventLoop, *, timeout_s: float) -> None:
        self._backend = backend
        self._batcher = batcher
        self._loop = loop
        self._timeout_s = timeout_s

    @property
    def info(self) -> ModelInfo:
        return self._backend.info

    def answer(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        if not requests:
            return []
        future = asyncio.run_coroutine_threadsafe(self._batcher.submit_many(requests, self._timeout_s), self._loop)
        try:
            return future.result(self._timeout_s + _QUEUE_GRACE_S)  # bounded: a loop that stopped must not hang the memory thread
        except HTTPFacingError as error:
            raise BackendUnavailableError(f"the server's controller queue refused the request: {error}") from error
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError) as error:
            # A BaseException here would fail the engine's write instead of leaving its relations pending.
            future.cancel()
            raise BackendUnavailableError("the server's controller queue stopped before it answered") from error

    def close(self) -> None:
        """The runtime owns the backend."""


@dataclass
class Runtime:
    settings: Settings
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    backend: Backend | None = None
    batcher: Batcher | None = None
    memory: MemoryService | None = None
    ready: bool = False
    stopping: bool = False
    _owns_backend: bool = False
    _memory_engine: Any = None  # an engine handed in by the caller (not closed by the runtime)
    _last_warmup: float = 0.0
    _warming: asyncio.Task[bool] | None = None  # the warm-up retry /readyz started, while it runs

    async def start(self) -> None:
        settings = self.settings
        self.stopping = False
        if self.backend is None:
            try:
                self.backend = await asyncio.to_thread(create_backend, settings.controller, **settings.controller_options)
            except TypeError as error:  # a factory called with an option it does not take: a setting, not a bug
                setting = controller_options_error(settings, error)
                if setting is None:
                    raise
                raise setting from error
            self._owns_backend = True
        if settings.warmup:  # `preflight` checked it already; this catches an app started without it
            check_token_budget(settings)
        self.batcher = Batcher(
            self.backend,
            max_batch_size=settings.effective_batch_size,
            max_wait_s=settings.effective_max_wait_s,
            queue_size=settings.queue_size,
            metrics=self.metrics,
        )
        await self.batcher.start()
        if self._memory_engine is not None:
            self.memory = MemoryService(self._memory_engine, **memory_bounds(settings))
        elif settings.memory_db is not None:
            self.memory = await MemoryService.open(settings, self.backend, self.batcher)
        if settings.warmup:
            await self.warm_up()
        else:
            self.ready = True
        log.info("serving %s (batching %s)", self.backend.info.name, "on" if settings.batching else "off")

    async def warm_up(self) -> bool:
        """One tiny request end to end; `/readyz` reports ready once this has succeeded."""
        self._last_warmup = time.monotonic()
        try:
            planned = await self.plan(WARMUP_STATE, WARMUP_QUESTIONS, model=None)
            assert self.batcher is not None
            await self.batcher.submit(planned.request, self.settings.request_timeout_s)
        except Exception:  # noqa: BLE001 - not ready is a state, reported by /readyz
            log.exception("warm-up request failed; /readyz stays 503")
            self.ready = False
        else:
            self.ready = True
        return self.ready

    async def maybe_warm_up(self) -> bool:
        """Readiness for /readyz: while not ready, retry the warm-up (at most once a second, one at a time) and
        wait for it briefly; a slow backend leaves it running and the probe gets its 503 now, not a timeout."""
        if not self.ready and not self.stopping:
            if self._warming is None and time.monotonic() - self._last_warmup > 1.0:
                task = asyncio.create_task(self.warm_up(), name="jevmem-warm-up")
                task.add_done_callback(self._warmed)
                self._warming = task
            if self._warming is not None:
                await asyncio.wait({self._warming}, timeout=READY_PROBE_WAIT_S)
        return self.ready and not self.stopping

    def _warmed(self, task: asyncio.Task[bool]) -> None:
        if self._warming is task:
            self._warming = None

    async def plan(
        self, state: Any, questions: Any, *, model: str | None, assets: Any = None, in_thread: bool = False
    ) -> PlannedRequest:
        """The plan stage: validate, deduplicate and (with a token budget) count tokens. `in_thread` for big
        bodies: planning megabytes takes seconds, which the event loop should spend serving others."""
        backend = self.backend
        if backend is None:
            raise NotReadyError("the model is not loaded yet", retry_after_ms=1000)
        budget = self.settings.token_budget

        def plan() -> PlannedRequest:
            planned = plan_request(backend, state, questions, model=model, assets=assets)
            if budget is not None:
                from controller.template import count_input_tokens

                count_input_tokens(planned.request, max_request_tokens=budget)
            return planned

        return await asyncio.to_thread(plan) if in_thread else plan()

    async def stop(self) -> None:
        self.stopping = True
        self.ready = False
        if self._warming is not None:
            self._warming.cancel()
            await asyncio.wait({self._warming})
        if self.memory is not None:  # first: in-flight engine work may still need the batcher
            await self.memory.close()
            self.memory = None
        if self.batcher is not None:
            await self.batcher.close(self.settings.drain_timeout_s)
        if self.backend is not None and self._owns_backend:
            self.backend.close()
            self.backend = None


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    if runtime.batcher is None or runtime.backend is None:
        raise NotReadyError("the server is starting", retry_after_ms=1000)
    return runtime


def get_memory(request: Request) -> MemoryService:
    memory: MemoryService | None = request.app.state.runtime.memory
    if memory is None:
        raise MemoryUnavailableError("the memory engine is not open", retry_after_ms=1000)
    return memory


@dataclass(frozen=True)
class RequestMemory:
    """The memory service as one request sees it: its calls' start deadline counts from the request's arrival."""

    service: MemoryService
    arrived: float | None

    async def call(self, fn: Callable[[Any], T]) -> T:
        return await self.service.call(fn, arrived=self.arrived)

    @property
    def deadline(self) -> float | None:
        """This request's deadline as a `time.monotonic()` reading (None: unbounded)."""
        return self.service.deadline(self.arrived)


def get_request_memory(request: Request, memory: MemoryService = Depends(get_memory)) -> RequestMemory:
    return RequestMemory(memory, getattr(request.state, "arrived", None))
