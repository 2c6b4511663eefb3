"""The one seam every backend implements, and the registry that names them.

A backend sees key-free requests (state + unique questions, in first-seen order) and returns calibrated
probabilities per question plus the real input token count. Keys, duplicates and answer formatting are
handled by the client, so a backend cannot make answers depend on question names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from controller.errors import UnknownBackendError
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

_REGISTRY: dict[str, BackendFactory] = {}
_LOCK = threading.Lock()


def register_backend(name: str, factory: BackendFactory) -> None:
    """Register a backend factory under `name`; a second registration of the same name is refused."""
    with _LOCK:
        if name in _REGISTRY and _REGISTRY[name] is not factory:
            raise ValueError(f"a backend named {name!r} is already registered")
        _REGISTRY[name] = factory


def _builtin() -> None:
    # Built-ins register lazily so importing the controller loads neither torch nor onnxruntime.
    from controller import builtin_backends  # noqa: F401


def available_backends() -> list[str]:
    _builtin()
    return sorted(_REGISTRY)


def create_backend(name: str, **options: Any) -> Backend:
    """Build a registered backend by name; options go to its factory."""
    _builtin()
    try:
        factory = _REGISTRY[name]
    except KeyError as error:
        raise UnknownBackendError(f"unknown backend {name!r}; available: {', '.join(sorted(_REGISTRY))}") from error
    return factory(**options)
