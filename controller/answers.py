"""The one place where probabilities become wire answers (SDK answer objects).

Backends hand over calibrated probabilities per question; this module applies the protocol's formulas:
Choice confidence `(p_max - 1/n) / (1 - 1/n)`; Score `score = sum_i i p_i` and confidence
`max(0, 1 - sum_i p_i |i - mode| / D)` with D the mean absolute deviation of the uniform distribution
over the levels. Noul has no confidence. Nothing here can emit NaN or Infinity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from controller.errors import BackendError
from controller.questions import ChoiceQuestion, NoulQuestion, Question, ScoreQuestion

if TYPE_CHECKING:
    from typesafe_sdk import ChoiceAnswer, NoulAnswer, ScoreAnswer

_EPS = 1e-12


def clean_distribution(probs: Sequence[float]) -> list[float]:
    """Clip to [0, 1], replace non-finite values, renormalise to sum 1 (uniform if nothing is left)."""
    vals = [p if math.isfinite(p) and p > 0.0 else 0.0 for p in map(float, probs)]
    total = math.fsum(vals)
    if total <= _EPS:
        return [1.0 / len(vals)] * len(vals)
    return [v / total for v in vals]


def choice_confidence(probs: Sequence[float]) -> float:
    n = len(probs)
    if n <= 1:
        return 1.0
    return _unit((max(probs) - 1.0 / n) / (1.0 - 1.0 / n))


def uniform_mad(n_levels: int) -> float:
    """Mean absolute deviation of the uniform distribution over levels 0..n-1 (about its mean)."""
    mean = (n_levels - 1) / 2.0
    return sum(abs(i - mean) for i in range(n_levels)) / n_levels


def score_confidence(probs: Sequence[float]) -> float:
    n = len(probs)
    mode = max(range(n), key=lambda i: (probs[i], -i))
    spread = sum(p * abs(i - mode) for i, p in enumerate(probs))
    return _unit(1.0 - spread / uniform_mad(n))


def expected_level(probs: Sequence[float]) -> float:
    return math.fsum(i * p for i, p in enumerate(probs))


def build_answer(question: Question, probs: Sequence[float]) -> NoulAnswer | ChoiceAnswer | ScoreAnswer:
    """Map one question's probabilities to its SDK answer object."""
    from typesafe_sdk import ChoiceAnswer, NoulAnswer, ScoreAnswer

    if isinstance(question, NoulQuestion):
        if len(probs) != 1:
            raise BackendError(f"a Noul needs 1 probability, got {len(probs)}")
        p = float(probs[0])
        return NoulAnswer(type="noul", noul=_unit(p if math.isfinite(p) else 0.5))
    if len(probs) != question.n_options:
        raise BackendError(f"{question.kind} with {question.n_options} options got {len(probs)} probabilities")
    dist = clean_distribution(probs)
    if isinstance(question, ChoiceQuestion):
        best = max(range(len(dist)), key=lambda i: (dist[i], -i))  # ties -> first option
        return ChoiceAnswer(
            type="choice",
            choice=question.labels[best],
            confidence=choice_confidence(dist),
            probabilities={name: dist[i] for i, name in enumerate(question.labels)},
        )
    assert isinstance(question, ScoreQuestion)
    return ScoreAnswer(
        type="score",
        score=min(float(len(dist) - 1), max(0.0, expected_level(dist))),
        confidence=score_confidence(dist),
        legend={i: level for i, level in enumerate(question.levels)},
        probabilities={i: p for i, p in enumerate(dist)},
    )


def _unit(x: float) -> float:
    return min(1.0, max(0.0, float(x)))
