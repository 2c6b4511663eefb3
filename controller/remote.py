"""The remote backend: forwards requests to any server speaking the System One wire protocol.

    RemoteBackend(base_url="http://127.0.0.1:8000", api_key="local")

The official SDK (`typesafe_sdk.TypeSafeClient`) does the HTTP work, so `TYPESAFE_BASE_URL`,
`TYPESAFE_API_KEY` and `TYPESAFE_DEFAULT_MODEL` are honoured, bodies are zstd-compressed and retries follow the
SDK's policy. Each request is sent with synthetic keys `q0, q1, ...` (the caller's keys never leave the
process) and the answers are turned back into probabilities: Noul p, Choice probabilities in option order,
Score probabilities by level.

Errors (SDK -> controller):
- no connection, timeout, 5xx, 408, 429, 401, 403, 404, a redirect (3xx, not followed) -> `BackendUnavailableError`
  (the server, its address or the credentials are the problem; no rewording of the request will help)
- any other 4xx (400, 413, 422, ...) -> `InvalidRequestError` carrying the server's message and status
- a 2xx body that does not match the protocol, or answers that do not fit the questions -> `BackendError`
  (also a probability outside [0, 1], a Choice or Score distribution that does not sum to about 1, or an
  option that was not offered; nothing is clamped or renormalised on the way in)
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from controller.backend import BackendRequest, BackendResult, ModelInfo
from controller.errors import BackendError, BackendUnavailableError, InvalidRequestError
from controller.models import ALIASES
from controller.questions import ChoiceQuestion, NoulQuestion, Question

if TYPE_CHECKING:
    import httpx2
    from typesafe_sdk import RetryPolicy, TypeSafeClient

log = logging.getLogger(__name__)

_UNAVAILABLE_STATUSES = frozenset({401, 403, 404, 408, 429})
_UNKNOWN_DATE = "1970-01-01"  # release date of a model the server does not list (ModelInfo needs a date)
_SUM_ATOL = 0.01  # a distribution's sum may be off by this much (float32 softmax, probabilities rounded by the server)


class RemoteInvalidRequestError(InvalidRequestError):
    """The remote server refused the request (4xx); `status` is its HTTP status."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class RemoteBackend:
    """A backend that asks a remote System One server. `model` pins the model sent with every request;
    without it the first non-alias model the server lists is used. `info` comes from the server's model
    list, fetched once on first need. `retry` (a `RetryPolicy`) and `compression` (`False` for servers that
    cannot read zstd bodies) go to the SDK client as they are."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float | None = None,
        transport: httpx2.BaseTransport | None = None,
        *,
        retry: RetryPolicy | None = None,
        compression: Literal["zstd", False] | None = None,
    ) -> None:
        from typesafe_sdk import TypeSafeClient, TypeSafeError

        try:
            self._client: TypeSafeClient = TypeSafeClient(
                api_key=api_key, base_url=base_url, model=model, timeout=timeout, transport=transport, retry=retry,
                compression=compression,
            )
        except TypeSafeError as error:
            raise BackendUnavailableError(f"the remote backend is not configured: {error}") from error
        self._model = model
        self._info: ModelInfo | None = None
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return self._client._config.base_url  # noqa: SLF001 - the SDK resolves env and defaults here

    @property
    def info(self) -> ModelInfo:
        with self._lock:
            if self._info is None:
                self._info = self._fetch_info()
            return self._info

    def _fetch_info(self) -> ModelInfo:
        try:
            listed = list(_call(self._client.models.list).models)
        except (BackendError, InvalidRequestError):
            if self._model is None:
                raise
            # A pinned model still works against a server without a usable model list.
            log.warning("could not list the models of %s; using the configured name %r", self.base_url, self._model)
            return ModelInfo(self._model, f"Remote model {self._model} at {self.base_url} (not listed).", _UNKNOWN_DATE)
        if self._model is not None:
            match = next((m for m in listed if m.name == self._model), None)
            if match is None:
                return ModelInfo(self._model, f"Remote model {self._model} at {self.base_url}.", _UNKNOWN_DATE)
            return ModelInfo(match.name, match.description, match.release_date)
        if not listed:
            raise BackendUnavailableError(f"the server at {self.base_url} lists no models")
        concrete = [m for m in listed if m.name not in ALIASES]
        chosen = (concrete or listed)[0]
        return ModelInfo(chosen.name, chosen.description, chosen.release_date)

    def answer(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return [self._answer_one(request) for request in requests]

    def _answer_one(self, request: BackendRequest) -> BackendResult:
        questions = {f"q{i}": q.to_wire() for i, q in enumerate(request.questions)}
        response = _call(self._client.system_one, request.state, questions, model=self.info.name)
        probabilities = tuple(
            _probabilities(q, response.answers.get(f"q{i}"), f"q{i}") for i, q in enumerate(request.questions)
        )
        tokens = response.usage.input_tokens if response.usage is not None else None
        return BackendResult(probabilities, int(tokens) if isinstance(tokens, int) and tokens >= 0 else 0)

    def close(self) -> None:
        self._client.close()


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run one SDK call, translating its errors into the controller's."""
    from typesafe_sdk import TypeSafeAPIConnectionError, TypeSafeAPIError, TypeSafeAPIResponseValidationError

    try:
        return fn(*args, **kwargs)
    except TypeSafeAPIConnectionError as error:
        raise BackendUnavailableError(f"remote System One server unreachable: {error}") from error
    except TypeSafeAPIResponseValidationError as error:
        raise BackendError(f"remote server sent an invalid response: {error}") from error
    except TypeSafeAPIError as error:
        message = _server_message(error)
        if error.status >= 500 or error.status < 400 or error.status in _UNAVAILABLE_STATUSES:
            raise BackendUnavailableError(f"remote server answered {error.status}: {message}") from error
        raise RemoteInvalidRequestError(message, status=error.status) from error


def _server_message(error: Any) -> str:
    from typesafe_sdk._core.errors import extract_message

    return extract_message(error.body) or str(error)


def _probabilities(question: Question, answer: Any, key: str) -> tuple[float, ...]:
    """The answer's probabilities in option order; `BackendError` naming the field when they are not a
    valid answer to `question` (outside [0, 1], not summing to about 1, or naming options not offered)."""
    if answer is None:
        raise BackendError(f"remote server sent no answer for {key}")
    if isinstance(question, NoulQuestion):
        if getattr(answer, "type", None) != "noul":
            raise BackendError(f"remote answer {key} is a {getattr(answer, 'type', '?')}, expected a noul")
        return (_probability(answer.noul, f"{key}.noul"),)
    expected = "choice" if isinstance(question, ChoiceQuestion) else "score"
    if getattr(answer, "type", None) != expected:
        raise BackendError(f"remote answer {key} is a {getattr(answer, 'type', '?')}, expected a {expected}")
    keys: Sequence[Any] = question.labels if isinstance(question, ChoiceQuestion) else range(question.n_options)
    if isinstance(question, ChoiceQuestion) and answer.choice not in keys:
        raise BackendError(f"remote answer {key}.choice {answer.choice!r} is not one of the offered options {list(keys)}")
    extra = [k for k in answer.probabilities if k not in keys]
    if extra:
        raise BackendError(f"remote answer {key}.probabilities.{extra[0]} is not one of the offered options {list(keys)}")
    try:
        probs = tuple(_probability(answer.probabilities[k], f"{key}.probabilities.{k}") for k in keys)
    except KeyError as error:
        raise BackendError(f"remote answer {key} lacks a probability for option {error.args[0]!r}") from error
    if abs(math.fsum(probs) - 1.0) > _SUM_ATOL:
        raise BackendError(f"remote answer {key}.probabilities sum to {math.fsum(probs):.6g}, not 1")
    return probs


def _probability(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BackendError(f"remote answer {field} carries a non-finite probability {value!r}")
    if not 0.0 <= value <= 1.0:
        raise BackendError(f"remote answer {field} = {value!r} is not a probability in [0, 1]")
    return float(value)
