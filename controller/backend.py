"""The one seam every backend implements, and the registry that names them.

A backend sees key-free requests (state + unique questions, in first-seen order) and returns calibrated
probabilities per question plus the real input token count. Keys, duplicates and answer formatting are
handled by the client, so a backend cannot make answers depend on question names.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from controller.errors import BackendError, BackendOptionError, UnknownBackendError
from controller.questions import Content, Question


@dataclass(frozen=True)
class BackendRequest:
    """One (state, questions) pair as a backend sees it: no keys, no duplicates."""

    state: Content
    questions: tuple[Question, ...]


@dataclass(frozen=True)
class BackendResult:
    """Per question, aligned with `BackendRequest.questions`: a Noul gets (p_true,), a Choice / Score one
    probability per option / level. `input_tokens` counts the tokens the model actually read;
    `truncated_tokens` the state tokens an opt-in overflow policy dropped (0: the whole state was read)."""

    probabilities: tuple[tuple[float, ...], ...]
    input_tokens: int
    truncated_tokens: int = 0


@dataclass(frozen=True)
class ModelInfo:
    name: str
    description: str
    release_date: str  # YYYY-MM-DD


@runtime_checkable
class Backend(Protocol):
    """What a controller backend must provide."""

    @property
    def info(self) -> ModelInfo: ...

    def answer(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        """Answer a batch of requests; results are aligned with `requests` and independent of batching."""
        ...

    def close(self) -> None: ...


BackendFactory = Callable[..., Backend]

BACKEND_MEMBERS = ("info", "answer", "close")
_CALLABLE_MEMBERS = ("answer", "close")


# The TypeErrors Python raises when a call's keywords do not bind; group 1 is the keyword's name.
_KEYWORD_MISUSE = (
    re.compile(r"got an unexpected keyword argument '([^']+)'"),
    re.compile(r"got multiple values for (?:keyword )?argument '([^']+)'"),
)


def missing_backend_members(candidate: object) -> list[str]:
    """The `Backend` members `candidate` lacks (`answer` / `close` must be callable). Looked up statically,
    so a lazy `info` property (the remote backend fetches it from the server) is not evaluated."""
    missing: list[str] = []
    for member in BACKEND_MEMBERS:
        try:
            value = inspect.getattr_static(candidate, member)
        except AttributeError:
            missing.append(member)
            continue
        if member in _CALLABLE_MEMBERS and not callable(value) and not isinstance(value, (staticmethod, classmethod)):
            missing.append(member)
    return missing


def _option_error(name: str, error: TypeError, options: Mapping[str, Any]) -> BackendOptionError | None:
    """`error` as a `BackendOptionError` when it is about one of the caller's keywords, else None (a bug)."""
    detail = str(error)
    for pattern in _KEYWORD_MISUSE:
        match = pattern.search(detail)
        if match and match.group(1) in options:
            option = match.group(1)
            return BackendOptionError(f"backend {name!r} cannot take the keyword argument {option!r}: {detail}",
                                      backend=name, option=option, detail=detail)
    return None


_REGISTRY: dict[str, BackendFactory] = {}
_CHECKS: dict[str, Callable[..., None]] = {}
_LOCK = threading.Lock()


def register_backend(name: str, factory: BackendFactory, *, check: Callable[..., None] | None = None) -> None:
    """Register a backend factory under `name`; a second registration of the same name is refused. `check(**options)`,
    when given, refuses options the factory cannot use without building anything (`check_backend_options`)."""
    with _LOCK:
        if name in _REGISTRY and _REGISTRY[name] is not factory:
            raise ValueError(f"a backend named {name!r} is already registered")
        _REGISTRY[name] = factory
        if check is not None:
            _CHECKS[name] = check


def check_backend_options(name: str, options: Mapping[str, Any]) -> None:
    """What `create_backend(name, **options)` would refuse about its arguments, found without loading anything
    (a server checks its settings before it listens): `UnknownBackendError` for the name, `BackendOptionError` for
    an option the backend does not take or (`BackendOptionValueError`) cannot use. A backend registered without a
    `check` is only checked when it is created."""
    _builtin()
    if not isinstance(name, str) or name not in _REGISTRY:
        shown = repr(name) if isinstance(name, str) else f"of type {type(name).__name__}"
        raise UnknownBackendError(f"unknown backend {shown}; available: {', '.join(sorted(_REGISTRY))}")
    check = _CHECKS.get(name)
    if check is None:
        return
    try:
        check(**options)
    except BackendOptionError:
        raise
    except TypeError as error:
        wrapped = _option_error(name, error, options)
        if wrapped is None:
            raise
        raise wrapped from error


def _builtin() -> None:
    # Built-ins register lazily so importing the controller loads neither torch nor onnxruntime.
    from controller import builtin_backends  # noqa: F401


def available_backends() -> list[str]:
    _builtin()
    return sorted(_REGISTRY)


def create_backend(name: str, **options: Any) -> Backend:
    """Build a registered backend by name; options go to its factory.

    Raises `UnknownBackendError` for a name that is not registered (or not a str), `BackendOptionError` for
    an option the factory does not take (any other TypeError inside a factory is a bug and propagates), and
    `BackendError` when the factory returns something that is not a `Backend`."""
    _builtin()
    if not isinstance(name, str):
        raise UnknownBackendError(f"a backend name must be a str, not {type(name).__name__}; available: {', '.join(sorted(_REGISTRY))}")
    try:
        factory = _REGISTRY[name]
    except KeyError as error:
        raise UnknownBackendError(f"unknown backend {name!r}; available: {', '.join(sorted(_REGISTRY))}") from error
    try:
        backend = factory(**options)
    except TypeError as error:
        wrapped = _option_error(name, error, options)
        if wrapped is None:
            raise
        raise wrapped from error
    missing = missing_backend_members(backend)
    if missing:
        raise BackendError(f"the factory of backend {name!r} returned a {type(backend).__name__}, which lacks {', '.join(missing)}")
    return backend
