"""The heuristic controller's relevance rule as the read path uses it (names once, the 'when' bonus)."""

from __future__ import annotations

import pytest

from controller import heuristic_text as ht
from controller.heuristic_read import relevance_logit


def no_cosine(a: str, b: str) -> float:
    return 0.0


def logit(query: str, memory: str) -> float:
    value = relevance_logit("relevant", {"query": query, "memory": memory}, no_cosine)
    assert value is not None
    return value


def test_a_named_speaker_counts_only_through_coverage() -> None:
    query = "What did Caroline think about the charity race?"
    named, other = "Caroline: the charity race was fun", "Melanie: the charity race was fun"
    q = ht.terms(query)
    cover_gap = ht.coverage(q, ht.terms(named)) - ht.coverage(q, ht.terms(other))
    assert cover_gap > 0
    assert logit(query, named) - logit(query, other) == pytest.approx(5.0 * cover_gap)


def test_a_when_question_prefers_a_memory_that_carries_a_time() -> None:
    query = "When did Mira run the race?"
    assert logit(query, "Mira: I ran the race on Monday.") - logit(query, "Mira: I ran the race.") == pytest.approx(1.0)
    plain = "What did Mira run?"
    assert logit(plain, "Mira: I ran the race on Monday.") == pytest.approx(logit(plain, "Mira: I ran the race."))
