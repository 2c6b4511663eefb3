"""Relevance AUROC by negative kind: counts, the model and cosine columns, per-query means."""

from __future__ import annotations

import numpy as np
import pytest

from controller.embedding import HashingEmbedder
from data.schema import DecisionExample
from training.predict import Prediction
from training.relevance_report import relevance_by_negative, relevance_table, same_memory_share
from training.sampling import Label


def _case(i: int, query: str, memory: str, target: float, notes: str, logit: float, *, source: str = "locomo") -> tuple[DecisionExample, Prediction]:
    ex = DecisionExample(id=f"x{i}", family="relevance", question_name="relevant", state={"query": query, "memory": memory},
                         question={"type": "noul", "instructions": "Does state.memory help answer state.query?"},
                         target=target, source=source, group=f"{source}:c", split="dev", notes=notes)
    label = Label("noul", (target,), 1.0, "relevance", "relevant", ex.id)
    return ex, Prediction(label, np.array([logit]), "dev", ex.group)


def test_each_negative_kind_gets_its_own_auroc_for_model_and_cosine() -> None:
    cases = [
        _case(0, "where did anna travel", "anna travelled to lisbon", 1.0, "locomo:gold", 2.0),
        _case(1, "where did anna travel", "anna talked about travel plans", 0.0, "locomo:bm25", 3.0),  # beats the positive
        _case(2, "where did anna travel", "the weather was cold", 0.0, "locomo:random", -2.0),
        _case(3, "what does bo cook", "bo cooks pasta on sundays", 1.0, "locomo:gold", 1.0),
        _case(4, "what does bo cook", "bo likes to cook", 0.0, "locomo:bm25", 0.5),
        _case(5, "what does bo cook", "a quiet afternoon", 0.0, "locomo:random", -1.0),
        _case(6, "synthetic query", "synthetic memory", 1.0, "", 9.0, source="synthetic"),  # another source: left out
    ]
    examples, preds = [c[0] for c in cases], [c[1] for c in cases]
    table = relevance_by_negative(preds, examples, HashingEmbedder())
    assert set(table) == {"all", "locomo:bm25", "locomo:random", "per_query", "same_memory"}
    assert table["locomo:random"]["model"] == 1.0 and table["locomo:random"]["negatives"] == 2
    assert table["locomo:bm25"]["model"] == pytest.approx(0.5)  # 2 of the 4 positive/negative pairs are ordered right
    assert table["all"]["positives"] == 2 and table["all"]["negatives"] == 4
    assert table["per_query"]["queries"] == 2 and table["per_query"]["model"] == pytest.approx(0.75)  # (0.5 + 1.0) / 2
    assert all(0.0 <= row["cosine"] <= 1.0 for kind, row in table.items() if kind != "same_memory")
    assert table["locomo:random"]["length"] == 1.0  # the gold memories are longer than the random ones
    assert table["same_memory"] == {"memories": 0, "pairs": 0, "within_share": None}
    assert relevance_by_negative(preds, examples)["all"]["cosine"] is None
    assert relevance_by_negative(preds[6:], examples[6:]) == {}
    md = relevance_table(table)
    assert "| locomo:bm25 | 2 | 2 | 0.500 |" in md and "per_query (2 queries)" in md and "Same memory" not in md


def test_same_memory_share_separates_query_blind_from_query_driven_scores() -> None:
    memories = ["a", "a", "b", "b", "c"]
    blind = same_memory_share(np.array([2.0, 2.0, -1.0, -1.0, 5.0]), memories)
    assert blind == {"memories": 2, "pairs": 4, "within_share": 0.0}
    driven = same_memory_share(np.array([2.0, -2.0, 1.0, -1.0, 0.0]), memories)
    assert driven["within_share"] == pytest.approx(1.0)  # each memory's mean is the pooled mean: all variance is within
    cases = [_case(0, "q1", "shared turn", 1.0, "locomo:gold", 2.0), _case(1, "q2", "shared turn", 0.0, "locomo:random", 1.0),
             _case(2, "q1", "other", 0.0, "locomo:bm25", 0.0)]
    table = relevance_by_negative([c[1] for c in cases], [c[0] for c in cases])
    assert table["same_memory"]["memories"] == 1 and table["same_memory"]["within_share"] == pytest.approx(1.0)
    assert "Same memory under different queries (1 memories, 2 pairs): 1.000" in relevance_table(table)


def test_measured_limits_name_questions_near_chance_and_query_blind_relevance() -> None:
    from training.card import measured_limits

    def row(value: float | None) -> dict:
        return {"raw": {"auroc": value}}

    metrics = {"heldout": {"per_question": {"stopping/evidence_sufficient": row(0.53), "locomo:stopping/continue_useful": row(0.4),
                                            "routing/temporal": row(0.95), "pair/temporal": row(None)}},
               "relevance_by_negative": {"same_memory": {"memories": 3, "pairs": 7, "within_share": 0.088}}}
    lines = measured_limits(metrics)
    assert len(lines) == 2
    assert "stopping/evidence_sufficient 0.530" in lines[0] and "routing" not in lines[0] and "locomo:" not in lines[0]
    assert "0.09 of the logit's variance" in lines[1]
    assert measured_limits({}) == []
