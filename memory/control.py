"""The engine's side of the System One controller: counted calls and validated answers.

Every decision step is one `system_one` / `system_one_batch` call. Answers are read back by the keys the
engine chose and checked (a Noul must be a finite number in [0, 1], a Choice one of the offered labels);
anything else raises `ControllerOutputError`, so a model can never name an id or a relation type.
Stored text only ever travels inside states, as data (`memory_state`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.client import SystemOneClient
from controller.errors import InputTooLongError
from controller.families import family_questions, memory_text
from memory.errors import ControllerOutputError
from memory.types import Node

Answers = Mapping[str, Any]


@dataclass(frozen=True)
class Usage:
    """Controller work so far: requests (one state each) and questions."""

    calls: int
    requests: int
    questions: int

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.calls - other.calls, self.requests - other.requests, self.questions - other.questions)


class Controller:
    """A `SystemOneClient` with call / request / question counters (thread-safe)."""

    def __init__(self, client: SystemOneClient) -> None:
        self.client = client
        # how the model expects its states rendered (`controller.states`); None when the backend declares nothing
        self._states = getattr(getattr(client, "backend", None), "state_conventions", None)
        self._lock = threading.Lock()
        self._calls = 0
        self._requests = 0
        self._questions = 0

    def usage(self) -> Usage:
        with self._lock:
            return Usage(self._calls, self._requests, self._questions)

    def _count(self, requests: int, questions: int) -> None:
        with self._lock:
            self._calls += 1
            self._requests += requests
            self._questions += questions

    def state_option(self, name: str, configured: bool | None) -> bool:
        """A state-rendering switch of `EngineConfig` (`relevance_dated`, `relevance_context`): the configured value
        when set, else the controller's own declaration, else off."""
        if configured is not None:
            return configured
        return bool(getattr(self._states, name, False))

    def ask(self, state: Mapping[str, Any], questions: Mapping[str, Any]) -> Answers:
        """One request; raises the controller's own errors (BackendError, InvalidRequestError)."""
        response = self.client.system_one(dict(state), questions)
        self._count(1, len(questions))
        return response.answers

    def ask_batch(self, requests: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[Answers]:
        """Many requests in one backend call (nothing is sent for an empty batch)."""
        if not requests:
            return []
        responses = self.client.system_one_batch([(dict(s), q) for s, q in requests])
        if len(responses) != len(requests):
            raise ControllerOutputError("batch", f"{len(responses)} responses for {len(requests)} requests")
        self._count(len(requests), sum(len(q) for _, q in requests))
        return [r.answers for r in responses]


def ask_batch_within_limit(
    controller: Controller, requests: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]
) -> list[Answers | None]:
    """`controller.ask_batch`, except that a state over the model's input limit costs only its own request: one
    such state refuses the whole batch, which is then asked request by request, and each refused one is None."""
    try:
        return list(controller.ask_batch(requests))
    except InputTooLongError:
        answers: list[Answers | None] = []
        for state, questions in requests:
            try:
                answers.append(controller.ask(state, questions))
            except InputTooLongError:
                answers.append(None)
        return answers


def keyed(prefix: str, family: str, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Catalogue questions of `family` under keys `{prefix}{name}` (keys are bookkeeping only)."""
    return {f"{prefix}{name}": q for name, q in family_questions(family, tuple(names)).items()}


def noul(answers: Answers, key: str) -> float:
    answer = answers.get(key)
    value = getattr(answer, "noul", None) if answer is not None else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ControllerOutputError(key, value if answer is not None else answer)
    return float(value)


def choice(answers: Answers, key: str, labels: Sequence[str]) -> tuple[str, dict[str, float]]:
    """(label, probabilities) of a Choice; the label must be one the engine offered."""
    answer = answers.get(key)
    label = getattr(answer, "choice", None)
    probs = getattr(answer, "probabilities", None)
    if label not in labels or not isinstance(probs, Mapping):
        raise ControllerOutputError(key, label)
    clean: dict[str, float] = {}
    for name in labels:
        p = probs.get(name, 0.0)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0:
            raise ControllerOutputError(key, probs)
        clean[name] = float(p)
    return str(label), clean


def fits(node: Node, max_chars: int) -> bool:
    return len(node.content) <= max_chars


def attributed(content: str, speaker: str | None) -> str:
    """`Speaker: text` when the node has a speaker its text does not already name first (as JSONL ingest and
    LoCoMo store it): whose words they are is part of what the controller judges (another person's preference is
    not the user's). The stored content is never changed."""
    if not speaker or content.casefold().startswith(f"{speaker.casefold()}:"):
        return content
    return f"{speaker}: {content}"


def memory_state(node: Node, *, dated: bool = True) -> str:
    """A node as the controller sees it: its text as data (never instructions), attributed to its speaker and
    dated when known — `[8 May 2023] Speaker: text`, the form the training data uses
    (`controller.families.memory_text`)."""
    return memory_text(attributed(node.content, node.speaker), (node.event_time or node.observed_at) if dated else None)


def clipped(text: str, max_chars: int) -> str:
    """A long text in a state is cut and visibly marked, never silently."""
    return text if len(text) <= max_chars else text[: max_chars - 14].rstrip() + " [truncated]"
