"""In-process clients with the SDK's `system_one` surface, over any registered backend.

Shared, I/O-free logic lives in `plan_request` / `finish_request`; `SystemOneClient` and
`AsyncSystemOneClient` only differ in how they call the backend (directly, or in a worker thread).
Question keys are bookkeeping: questions are deduplicated by content before the backend sees them, so
renaming, reordering or duplicating keys cannot change an answer.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from controller.answers import build_answer
from controller.backend import (
    BACKEND_MEMBERS,
    Backend,
    BackendRequest,
    BackendResult,
    available_backends,
    create_backend,
    missing_backend_members,
)
from controller.errors import BackendError, BackendOptionError, InvalidRequestError, UnknownBackendError, UnsupportedQuestionError
from controller.models import listed_models, resolve_model
from controller.questions import Question, normalize_questions, signature, validate_state

if TYPE_CHECKING:
    from pydantic import BaseModel
    from typesafe_sdk import ListModelsResponse, SystemOneResponse

ResponseT = TypeVar("ResponseT", bound="BaseModel")


@dataclass(frozen=True)
class PlannedRequest:
    """A validated request: the key-free backend request and, per key, the index of its question."""

    model: str
    request: BackendRequest
    index_of_key: dict[str, int]


def plan_request(
    backend: Backend,
    state: object,
    questions: Mapping[str, Any],
    *,
    model: str | None,
    assets: Mapping[str, Any] | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> PlannedRequest:
    """Validate and deduplicate one request (raises `InvalidRequestError` with the SDK's messages)."""
    if extra_body is not None and not isinstance(extra_body, Mapping):
        raise InvalidRequestError(f"extra_body must be a mapping of body fields, not {type(extra_body).__name__}",
                                  loc=("extra_body",))
    if extra_body:
        # The SDK shallow-merges extra_body over the body; only these fields have meaning here.
        state = extra_body.get("state", state)
        questions = extra_body.get("questions", questions)
        model = extra_body.get("model", model)
    request, index_of_key = plan_body(state, questions)
    if assets:
        raise UnsupportedQuestionError("assets are not supported: this is a text model", loc=("assets",))
    return PlannedRequest(resolve_model(model, backend.info), request, index_of_key)


def plan_body(state: object, questions: Mapping[str, Any]) -> tuple[BackendRequest, dict[str, int]]:
    """What `plan_request` takes from the body, needing no backend: the validated state and the deduplicated
    questions, with each question key's index among them (raises `InvalidRequestError`)."""
    if state is None:
        validate_state(state)
    parsed = normalize_questions(questions)
    clean_state = validate_state(state)
    unique: list[Question] = []
    seen: dict[str, int] = {}
    index_of_key: dict[str, int] = {}
    for key, question in parsed.items():
        sig = signature(question)
        if sig not in seen:
            seen[sig] = len(unique)
            unique.append(question)
        index_of_key[key] = seen[sig]
    return BackendRequest(clean_state, tuple(unique)), index_of_key


def finish_request(
    planned: PlannedRequest, result: BackendResult, response_model: type[ResponseT] | None = None
) -> SystemOneResponse | ResponseT:
    """Turn backend probabilities into the SDK's response object (or a caller's pydantic model)."""
    from typesafe_sdk import SystemOneResponse, Usage

    if len(result.probabilities) != len(planned.request.questions):
        raise BackendError(
            f"backend answered {len(result.probabilities)} questions, expected {len(planned.request.questions)}"
        )
    built = [build_answer(q, p) for q, p in zip(planned.request.questions, result.probabilities)]
    answers = {key: built[i] for key, i in planned.index_of_key.items()}
    usage = Usage(input_tokens=int(result.input_tokens), output_tokens=0)
    if response_model is not None:
        payload = wire_payload(planned.model, answers, usage)
        return response_model.model_validate(payload)
    return SystemOneResponse.model_construct(model=planned.model, usage=usage, answers=answers)


def wire_payload(model: str, answers: Mapping[str, Any], usage: Any) -> dict[str, Any]:
    """The JSON body of a `/v1/systemone` response (score maps keyed by strings, as on the wire)."""
    return {
        "model": model,
        "answers": {key: answer.model_dump(mode="json") for key, answer in answers.items()},
        "usage": usage.model_dump(mode="json"),
    }


def _aligned(planned: Sequence[PlannedRequest], results: Sequence[BackendResult]) -> zip[tuple[PlannedRequest, BackendResult]]:
    if len(results) != len(planned):
        raise BackendError(f"backend answered {len(results)} requests, expected {len(planned)}")
    return zip(planned, results)


def _resolve_backend(backend: str | Backend, options: Mapping[str, Any]) -> Backend:
    """A backend built from a registered name, or the `Backend` passed in (which takes no factory options)."""
    if isinstance(backend, str):
        return create_backend(backend, **options)
    missing = missing_backend_members(backend)
    if missing or isinstance(backend, type):
        problem = f"which lacks {', '.join(missing)}" if missing else "a class, not an instance"
        raise UnknownBackendError(
            f"backend must be a registered name ({', '.join(available_backends())}) or a Backend with "
            f"{', '.join(BACKEND_MEMBERS)}; got {_describe(backend)}, {problem}"
        )
    if options:
        option = next(iter(options))
        raise BackendOptionError(
            f"a Backend instance ({type(backend).__name__}) cannot take the keyword argument {option!r}: "
            "options go to the factory of a backend named by a str",
            backend=type(backend).__name__, option=option,
        )
    return backend


def _short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(value: object) -> str:
    """`int` for a class, `list [1]` for an instance: what a misuse message shows of the value."""
    return value.__qualname__ if isinstance(value, type) else f"{type(value).__name__} {_short_repr(value)}"


def _check_response_model(response_model: object) -> None:
    """Refuse a `response_model` that is not a pydantic model class (before any backend work)."""
    if response_model is None:
        return
    from pydantic import BaseModel  # lazily: importing the controller stays light

    if not (isinstance(response_model, type) and issubclass(response_model, BaseModel)):
        raise InvalidRequestError(
            f"response_model must be a pydantic BaseModel subclass, not {_describe(response_model)}",
            loc=("response_model",),
        )


def _batch_pairs(requests: object) -> list[tuple[Any, Any]]:
    """`requests` as a list of (state, questions) pairs; a malformed entry is refused by its index."""
    if isinstance(requests, (str, bytes, Mapping)) or not isinstance(requests, Iterable):
        raise InvalidRequestError(f"requests must be a sequence of (state, questions) pairs, not {type(requests).__name__}")
    pairs: list[tuple[Any, Any]] = []
    for index, entry in enumerate(requests):
        if isinstance(entry, (str, bytes, Mapping)) or not isinstance(entry, Sequence) or len(entry) != 2:
            raise InvalidRequestError(
                f"requests[{index}] must be a (state, questions) pair, not {_describe(entry)}",
                loc=(index,),
            )
        pairs.append((entry[0], entry[1]))
    return pairs


class _ModelsBase:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def _list(self) -> ListModelsResponse:
        from typesafe_sdk import ListModelsResponse, ModelMetadata

        return ListModelsResponse.model_construct(
            models=tuple(
                ModelMetadata(name=m.name, description=m.description, release_date=m.release_date)
                for m in listed_models(self._backend.info)
            )
        )


class Models(_ModelsBase):
    def list(self) -> ListModelsResponse:
        return self._list()


class AsyncModels(_ModelsBase):
    async def list(self) -> ListModelsResponse:
        return self._list()


class SystemOneClient:
    """Synchronous in-process client: `client.system_one(state, questions, model=...)` as in the SDK.

    `backend` is a registered name (`heuristic`, `local`, `remote`) or a `Backend` instance; extra keyword
    options go to the backend factory. `retry`, `timeout` and `extra_headers` are accepted for signature
    compatibility and have no effect in process. `close()` closes a backend the client created from a name;
    a `Backend` instance passed in stays open (whoever created it closes it).

    Misuse is refused at construction: a name that is not registered, or an object without `info`, `answer`
    and `close`, raises `UnknownBackendError`; an option the factory does not take (or any option next to a
    `Backend` instance) raises `BackendOptionError`.
    """

    def __init__(self, backend: str | Backend = "heuristic", *, model: str | None = None, **backend_options: Any) -> None:
        self._backend = _resolve_backend(backend, backend_options)
        self._owns_backend = isinstance(backend, str)
        self._model = model or os.environ.get("TYPESAFE_DEFAULT_MODEL") or None
        self.models = Models(self._backend)

    @property
    def backend(self) -> Backend:
        return self._backend

    def system_one(
        self,
        state: Any,
        questions: Mapping[str, Any],
        *,
        model: str | None = None,
        assets: Mapping[str, Any] | None = None,
        retry: Any = None,
        timeout: Any = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        response_model: type[ResponseT] | None = None,
    ) -> SystemOneResponse | ResponseT:
        _check_response_model(response_model)
        planned = plan_request(
            self._backend, state, questions, model=model or self._model, assets=assets, extra_body=extra_body
        )
        ((_, result),) = _aligned([planned], self._backend.answer([planned.request]))
        return finish_request(planned, result, response_model)

    def system_one_batch(
        self, requests: Sequence[tuple[Any, Mapping[str, Any]]], *, model: str | None = None
    ) -> list[SystemOneResponse]:
        """Answer many (state, questions) pairs in one backend call; each answer is as if sent alone."""
        planned = [plan_request(self._backend, s, q, model=model or self._model) for s, q in _batch_pairs(requests)]
        results = self._backend.answer([p.request for p in planned]) if planned else []
        return [finish_request(p, r) for p, r in _aligned(planned, results)]  # type: ignore[misc]

    def close(self) -> None:
        if self._owns_backend:
            self._backend.close()

    def __enter__(self) -> SystemOneClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class AsyncSystemOneClient:
    """Asynchronous twin of `SystemOneClient`; the backend runs in a worker thread (closing as there)."""

    def __init__(self, backend: str | Backend = "heuristic", *, model: str | None = None, **backend_options: Any) -> None:
        self._backend = _resolve_backend(backend, backend_options)
        self._owns_backend = isinstance(backend, str)
        self._model = model or os.environ.get("TYPESAFE_DEFAULT_MODEL") or None
        self.models = AsyncModels(self._backend)

    @property
    def backend(self) -> Backend:
        return self._backend

    async def system_one(
        self,
        state: Any,
        questions: Mapping[str, Any],
        *,
        model: str | None = None,
        assets: Mapping[str, Any] | None = None,
        retry: Any = None,
        timeout: Any = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        response_model: type[ResponseT] | None = None,
    ) -> SystemOneResponse | ResponseT:
        _check_response_model(response_model)
        planned = plan_request(
            self._backend, state, questions, model=model or self._model, assets=assets, extra_body=extra_body
        )
        ((_, result),) = _aligned([planned], await asyncio.to_thread(self._backend.answer, [planned.request]))
        return finish_request(planned, result, response_model)

    async def system_one_batch(
        self, requests: Sequence[tuple[Any, Mapping[str, Any]]], *, model: str | None = None
    ) -> list[SystemOneResponse]:
        planned = [plan_request(self._backend, s, q, model=model or self._model) for s, q in _batch_pairs(requests)]
        results = await asyncio.to_thread(self._backend.answer, [p.request for p in planned]) if planned else []
        return [finish_request(p, r) for p, r in _aligned(planned, results)]  # type: ignore[misc]

    async def aclose(self) -> None:
        if self._owns_backend:
            self._backend.close()

    async def __aenter__(self) -> AsyncSystemOneClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()
