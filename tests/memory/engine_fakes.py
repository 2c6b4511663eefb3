"""Test doubles for the engine tests: a rule-based controller backend and small builders.

`RuleBackend` recognises every Jev-Mem question by its catalogue instructions (`families.lookup`) and answers
from word overlap between the texts in the state, so tests can predict which edges appear. `rules` overrides
any (family, question) with a function of the state returning a probability (Noul) or an option -> probability
dict (Choice). It records every request it saw and can be switched to fail like an unavailable server, or, with
`max_state_chars`, refuse long states the way a local model refuses inputs over its sequence length.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from controller.backend import BackendRequest, BackendResult, ModelInfo
from controller.client import SystemOneClient
from controller.embedding import HashingEmbedder
from controller.errors import BackendUnavailableError, InputTooLongError
from controller.families import lookup
from controller.lexical import tokenize
from controller.questions import ChoiceQuestion, NoulQuestion
from memory.config import EngineConfig
from memory.engine import Engine
from memory.store import InMemoryStore
from memory.types import Observation

Rule = Callable[[dict[str, Any]], Any]


def words(value: object) -> set[str]:
    if isinstance(value, dict):
        return words(value.get("content", ""))
    if isinstance(value, list):
        return set().union(*(words(v) for v in value)) if value else set()
    return set(tokenize(str(value)))


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def _default(family: str, name: str, state: dict[str, Any]) -> Any:
    if family == "typing":
        return 0.8 if name == "episodic" and words(state["observation"]) & {"went", "yesterday", "bought", "broke"} else 0.3
    if family in ("pair", "consolidation"):
        a, b = words(state["memory_a"]), words(state["memory_b"])
        overlap = jaccard(a, b)
        if name == "semantic":
            return min(1.0, 0.2 + 2.0 * overlap)
        if name == "causal":
            return 0.85 if "because" in str(state["memory_a"]).lower() and overlap > 0.1 else 0.1
        if name == "same_episode":
            return min(1.0, 1.5 * overlap)
        if name == "temporal":
            return {"unknown": 0.7}
        if name == "representation":
            return {"keep_separate": 0.9}
        return 0.1
    if family == "routing":
        q = str(state["query"]).lower()
        return {"semantic": 0.8, "temporal": 0.9 if "when" in q else 0.1, "causal": 0.9 if "why" in q else 0.1,
                "entity": 0.3, "multi_hop": 0.6, "recency": 0.2}[name]
    if family == "relevance":
        q, m = words(state["query"]), words(state["memory"])
        hit = len(q & m) / len(q) if q else 0.0
        return min(1.0, hit) if name == "relevant" else 0.6 if hit > 0 else 0.2
    if family == "stopping":
        return {"evidence_sufficient": 0.3, "continue_useful": 0.7}.get(name, 0.3)
    return 0.5


class RuleBackend:
    def __init__(self, rules: dict[tuple[str, str], Rule] | None = None) -> None:
        self.rules = dict(rules or {})
        self.fail = False
        self.max_state_chars: int | None = None  # longer states (JSON text) raise InputTooLongError
        self.requests: list[BackendRequest] = []
        self.calls = 0

    @property
    def info(self) -> ModelInfo:
        return ModelInfo("rule-fake", "deterministic rules for engine tests", "2024-01-01")

    def answer(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        if self.fail:
            raise BackendUnavailableError("the fake controller is switched off")
        for request in requests:
            size = len(json.dumps(request.state, ensure_ascii=False))
            if self.max_state_chars is not None and size > self.max_state_chars:
                raise InputTooLongError(f"state of {size} chars", tokens=size, limit=self.max_state_chars, loc=("state",))
        self.calls += 1
        self.requests.extend(requests)
        return [self._one(r) for r in requests]

    def _one(self, request: BackendRequest) -> BackendResult:
        state = request.state
        assert isinstance(state, dict)
        out: list[tuple[float, ...]] = []
        for question in request.questions:
            family, name = lookup(question.instructions) or ("?", "?")
            rule = self.rules.get((family, name))
            value = rule(state) if rule is not None else _default(family, name, state)
            if isinstance(question, NoulQuestion):
                out.append((float(value),))
            else:
                assert isinstance(question, ChoiceQuestion)
                dist = dict(value)
                rest = max(0.0, 1.0 - sum(dist.values()))
                others = [label for label in question.labels if label not in dist]
                out.append(tuple(dist.get(label, rest / len(others) if others else 0.0) for label in question.labels))
        return BackendResult(tuple(out), 10)

    def families_seen(self) -> list[str]:
        return [lookup(q.instructions)[0] for r in self.requests for q in r.questions if lookup(q.instructions)]

    def close(self) -> None:
        pass


def make_engine(backend: RuleBackend | None = None, config: EngineConfig | None = None, **changes: Any) -> Engine:
    cfg = (config or EngineConfig()).with_(**changes) if changes else (config or EngineConfig())
    embedder = HashingEmbedder(64)
    return Engine(InMemoryStore(64), SystemOneClient(backend or RuleBackend()), embedder, cfg)


T0 = datetime(2024, 5, 14, 10, 0)


def obs(text: str, minutes: int = 0, *, speaker: str | None = None, source: str | None = None, **kw: Any) -> Observation:
    if speaker is None and ":" in text.split(" ")[0]:
        speaker = text.split(":")[0]
    return Observation(text, observed_at=T0 + timedelta(minutes=minutes), speaker=speaker,
                       source_ids=(source,) if source else (), **kw)
