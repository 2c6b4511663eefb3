"""The heuristic backend: deterministic, weight-free rules that answer any request.

    HeuristicBackend(embedder="hashing")   # default: feature hashing, no weights, no torch
    HeuristicBackend(embedder="minilm")    # MiniLM mean-pooled embeddings from the installed base model

A question whose instructions are one of the built-in Jev-Mem families (`controller.families.lookup`) and
whose state has that family's shape is answered by that family's documented rule (`heuristic_write`,
`heuristic_read`). Every other question gets the generic rule:

- Noul: similarity s(x) = 0.5 * cosine(state, x) + 0.5 * coverage of x's content words by the state;
  logit = 4 (s(instructions) - 0.3) + 6 (s(true) - s(false)), through a logistic, clipped to [0.02, 0.98].
- Choice / Score: softmax over 6 s(option label + description) (levels: their description).

Each answer is a function of (state, that question's content) only: no keys, order, other questions or batch
(texts are embedded one at a time, so not even padding differs). It is the baseline of the evaluation and the
test double of the rest of the repo; it is not a trained model and its probabilities are only roughly calibrated.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from controller import families
from controller import heuristic_text as ht
from controller.backend import BackendRequest, BackendResult, ModelInfo
from controller.embedding import Embedder, HashingEmbedder, MiniLMEmbedder, is_minilm
from controller.errors import BackendUnavailableError, InputTooLongError
from controller.heuristic_read import relevance_logit, routing_logit, stopping_logit
from controller.heuristic_write import (
    Similarity,
    consolidation_logit,
    pair_logit,
    representation_logits,
    temporal_logits,
    typing_logit,
)
from controller.questions import ChoiceQuestion, NoulQuestion, Question, ScoreQuestion

log = logging.getLogger(__name__)

P_MIN, P_MAX = 0.02, 0.98
CHOICE_SLOPE = 6.0
INFO = ModelInfo(
    name="jevmem-heuristic-1.0.0",
    description="Deterministic rule-based System One controller for Jev-Mem decisions (no weights); "
    "lexical overlap, embedding similarity and cue words, with a generic fallback for any question.",
    release_date="2026-11-29",
)

NoulRule = Callable[[str, Mapping[str, object], Similarity], "float | None"]
ChoiceRule = Callable[[Mapping[str, object], Similarity], dict[str, float]]

# family -> (state fields that must be present, Noul rule, Choice rules by question name)
_RULES: dict[str, tuple[tuple[str, ...], NoulRule, dict[str, ChoiceRule]]] = {
    "typing": (("observation",), typing_logit, {}),
    "pair": (("memory_a", "memory_b"), pair_logit, {"temporal": temporal_logits}),
    "consolidation": (("memory_a", "memory_b"), consolidation_logit, {"representation": representation_logits}),
    "routing": (("query",), routing_logit, {}),
    "relevance": (("query", "memory"), relevance_logit, {}),
    "stopping": (("query", "evidence"), stopping_logit, {}),
}
# Cosine of two unrelated texts is about 0 for the hashing embedder and about this for MiniLM (base or adapted).
_COSINE_FLOOR = {"hashing": 0.0, "minilm": 0.1}


class HeuristicBackend:
    """Rule-based backend. `embedder`: "hashing" (default), "minilm", or any `Embedder` instance."""

    def __init__(
        self,
        embedder: str | Embedder = "hashing",
        *,
        model_path: str | None = None,
        cosine_floor: float | None = None,
        cache_size: int = 4096,
    ) -> None:
        if isinstance(embedder, str):
            if embedder == "hashing":
                embedder = HashingEmbedder()
            elif embedder == "minilm":
                embedder = MiniLMEmbedder(model_path, batch_size=1)
            else:
                raise ValueError(f"unknown embedder {embedder!r}; choose 'hashing', 'minilm' or pass an Embedder")
        self._embedder: Embedder = embedder
        name = getattr(embedder, "name", "")
        self._floor = cosine_floor if cosine_floor is not None else _COSINE_FLOOR["minilm" if is_minilm(name) else "hashing"]
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.info = ModelInfo(INFO.name, f"{INFO.description} Embedder: {name or type(embedder).__name__}.", INFO.release_date)

    # ------------------------------------------------------------ Backend protocol

    def answer(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return [self._answer_request(r) for r in requests]

    def close(self) -> None:
        with self._lock:
            self._cache.clear()

    # ------------------------------------------------------------ internals

    def _answer_request(self, request: BackendRequest) -> BackendResult:
        probs = tuple(self.probabilities(request.state, q) for q in request.questions)
        return BackendResult(probs, count_input_tokens(request))

    def probabilities(self, state: object, question: Question) -> tuple[float, ...]:
        """The answer to one question about one state (a Noul gives (p_true,))."""
        ruled = self._family_answer(state, question)
        if ruled is not None:
            return ruled
        return self._generic(state, question)

    def _family_answer(self, state: object, question: Question) -> tuple[float, ...] | None:
        found = families.lookup(question.instructions)
        if found is None or not isinstance(state, Mapping):
            return None
        family, name = found
        if family not in _RULES:
            return None
        fields, noul_rule, choice_rules = _RULES[family]
        if any(f not in state for f in fields):
            return None
        if isinstance(question, NoulQuestion):
            logit = noul_rule(name, state, self.similarity)
            return None if logit is None else (_clip(ht.logistic(logit)),)
        if isinstance(question, ChoiceQuestion) and name in choice_rules:
            logits = choice_rules[name](state, self.similarity)
            known = [logits[label] for label in question.labels if label in logits]
            if not known:
                return None
            floor = min(known) - 1.0  # options the rule does not know rank below all it knows
            return _softmax([logits.get(label, floor) for label in question.labels])
        return None

    def _generic(self, state: object, question: Question) -> tuple[float, ...]:
        state_text = ht.flatten(state)
        state_terms = ht.terms(state_text)

        def s(value: object) -> float:
            text = ht.flatten(value)
            if not text.strip():
                return 0.0
            return 0.5 * self.similarity(state_text, text) + 0.5 * ht.coverage(ht.terms(text), state_terms)

        if isinstance(question, NoulQuestion):
            logit = 4.0 * (s(question.instructions) - 0.3)
            if question.true is not None or question.false is not None:
                logit += 6.0 * (s(question.true) - s(question.false))
            return (_clip(ht.logistic(logit)),)
        if isinstance(question, ChoiceQuestion):
            return _softmax([CHOICE_SLOPE * s([label, desc]) for label, desc in question.options])
        assert isinstance(question, ScoreQuestion)
        return _softmax([CHOICE_SLOPE * s(level) for level in question.levels])

    def similarity(self, a: str, b: str) -> float:
        """Embedding cosine rescaled so unrelated texts sit near 0: max(0, (cos - floor) / (1 - floor))."""
        if not a.strip() or not b.strip():
            return 0.0
        cos = float(np.dot(self._embed(a), self._embed(b)))
        return max(0.0, min(1.0, (cos - self._floor) / (1.0 - self._floor)))

    def _embed(self, text: str) -> np.ndarray:
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        vec = np.asarray(self._embedder.embed([text])[0], dtype=np.float64)  # one text per call: no batch effects
        with self._lock:
            self._cache[text] = vec
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return vec


def _clip(p: float) -> float:
    return min(P_MAX, max(P_MIN, p if math.isfinite(p) else 0.5))


def _softmax(logits: Sequence[float]) -> tuple[float, ...]:
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = math.fsum(exps)
    return tuple(e / total for e in exps)


# ---------------------------------------------------------------- usage

_NO_LIMIT = 1 << 40
_counter_lock = threading.Lock()
_counter: Callable[[BackendRequest], int] | None = None


def count_input_tokens(request: BackendRequest) -> int:
    """Input tokens of a request as the packed template encodes it (`controller.template`), without the
    local model's length limits (this backend reads any length). Without the template module: an estimate
    with the base model's tokenizer (state JSON + every question / option text + markers)."""
    global _counter
    with _counter_lock:
        if _counter is None:
            _counter = _resolve_counter()
        counter = _counter
    return int(counter(request))


def _resolve_counter() -> Callable[[BackendRequest], int]:
    try:
        template = importlib.import_module("controller.template")
    except ImportError:
        log.debug("controller.template is not available; counting tokens with the base tokenizer")
    else:
        return partial(_count_with_template, template)
    encode = _tokenizer_encoder()

    def estimate(request: BackendRequest) -> int:
        total = 2 + encode(_text(request.state))  # [CLS] state [SEP]
        for q in request.questions:
            total += 1 + encode(_text(q.instructions))
            if isinstance(q, NoulQuestion):
                total += encode(_text(q.true)) + encode(_text(q.false))
            elif isinstance(q, ChoiceQuestion):
                total += sum(1 + encode(f"{label}: {_text(desc)}") for label, desc in q.options)
            else:
                total += sum(1 + encode(f"{i}: {_text(level)}") for i, level in enumerate(q.levels))
        return total

    return estimate


def _count_with_template(template: Any, request: BackendRequest) -> int:
    try:
        return int(template.count_input_tokens(request))
    except InputTooLongError:
        # Over the local model's limits, which do not apply here: count the packed tokens all the same.
        return int(template.tokenize_request(request, max_positions=_NO_LIMIT, max_request_tokens=_NO_LIMIT).packed_tokens)
    except BackendUnavailableError as error:  # the base model's tokenizer is missing
        log.warning("template tokenizer unavailable (%s); input_tokens is a word-count estimate", error)
        return _word_count(_text(request.state)) + sum(_word_count(_text(q.to_wire())) for q in request.questions)


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _word_count(text: str) -> int:
    return len(text.split()) + text.count(",") + text.count(".")


def _tokenizer_encoder() -> Callable[[str], int]:
    try:
        from tokenizers import Tokenizer

        from controller.embedding import base_model_path

        tokenizer = Tokenizer.from_file(str(base_model_path() / "tokenizer.json"))
        tokenizer.no_truncation()  # count everything; the file ships with max_length truncation on
        tokenizer.no_padding()
    except Exception as error:  # tokenizer package or base model files missing: count words instead
        log.warning("base tokenizer unavailable (%s); input_tokens is a word-count estimate", error)
        return _word_count
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids) if text else 0
