"""Retrieval metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from memory.evaluation.metrics import (
    GroupTable,
    Item,
    QuestionScore,
    aggregate,
    auroc,
    budget_prefix,
    count_tokens,
    ndcg,
    percentile,
    reciprocal_rank,
    score_items,
    turn_ranks,
)

ITEMS = [Item(("a",), "A: one two"), Item(("x", "b"), "B: three"), Item(("y",), "A: four five six"), Item(("c",), "B: seven")]
GOLD = ["b", "c", "z"]


def test_count_tokens_counts_words_and_punctuation() -> None:
    assert count_tokens("Speaker: hello world.") == 5
    assert count_tokens("") == 0
    assert count_tokens("it's 9:30") == 6  # it ' s 9 : 30


def test_turn_ranks_take_the_first_item_containing_a_turn() -> None:
    items = [Item(("a",)), Item(("b", "a")), Item(("c",))]
    assert turn_ranks(items) == {"a": 1, "b": 2, "c": 3}


def test_recall_at_k_any_frac_all() -> None:
    values = score_items(ITEMS, GOLD, ks=(1, 2, 4), budgets=())
    assert (values["R_any@1"], values["R_frac@1"], values["R_all@1"]) == (0.0, 0.0, 0.0)
    assert values["R_any@2"] == 1.0 and values["R_frac@2"] == pytest.approx(1 / 3) and values["R_all@2"] == 0.0
    assert values["R_frac@4"] == pytest.approx(2 / 3) and values["R_all@4"] == 0.0
    full = score_items(ITEMS, ["b", "c"], ks=(4,), budgets=())
    assert full["R_all@4"] == 1.0 and full["R_frac@4"] == 1.0


def test_ndcg_and_mrr_by_hand() -> None:
    values = score_items(ITEMS, GOLD, ks=(4,), budgets=())
    dcg = 1 / math.log2(3) + 1 / math.log2(5)  # b at rank 2, c at rank 4
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert values["nDCG@10"] == pytest.approx(dcg / idcg)
    assert values["MRR"] == pytest.approx(0.5)


def test_ndcg_is_capped_when_one_item_holds_several_gold_turns() -> None:
    assert ndcg({"b": 1, "c": 1}, ["b", "c"]) == 1.0
    assert ndcg({"b": 11}, ["b"]) == 0.0  # beyond the cut-off


def test_mrr_is_cut_at_twenty_items() -> None:
    assert reciprocal_rank({"g": 21}, ["g"]) == 0.0
    assert reciprocal_rank({"g": 20, "h": 3}, ["g", "h"]) == pytest.approx(1 / 3)


def test_token_budget_takes_the_longest_fitting_prefix() -> None:
    # tokens per item: 4, 3, 5, 3
    assert budget_prefix(ITEMS, 3) == 0
    assert budget_prefix(ITEMS, 7) == 2
    assert budget_prefix(ITEMS, 11) == 2
    assert budget_prefix(ITEMS, 12) == 3
    assert budget_prefix(ITEMS, 100) == 4
    values = score_items(ITEMS, GOLD, ks=(1,), budgets=(7, 15))
    assert values["R_frac@7t"] == pytest.approx(1 / 3)
    assert values["R_frac@15t"] == pytest.approx(2 / 3)


def test_returned_figures_describe_everything_returned() -> None:
    values = score_items(ITEMS[:2], GOLD, ks=(1,), budgets=(), returned=True)
    assert values["items@ret"] == 2.0
    assert values["tokens@ret"] == 7.0
    assert values["R_frac@ret"] == pytest.approx(1 / 3)
    assert "R_frac@ret" not in score_items(ITEMS, GOLD, ks=(1,), budgets=())


def test_score_items_refuses_a_question_without_gold() -> None:
    with pytest.raises(ValueError, match="without gold"):
        score_items(ITEMS, [])


def test_aggregate_groups_categories() -> None:
    scores = [
        QuestionScore("c1", "q1", 1, 2, {"m": 1.0}),
        QuestionScore("c1", "q2", 1, 1, {"m": 0.0}),
        QuestionScore("c2", "q3", 5, 1, {"m": 1.0}),
    ]
    table = aggregate(scores)
    assert isinstance(table, GroupTable)
    assert table.means["1"]["m"] == 0.5
    assert table.means["1-4"]["m"] == 0.5  # adversarial questions are not in 1-4
    assert table.means["1-5"]["m"] == pytest.approx(2 / 3)
    assert table.counts == {"1": 2, "5": 1, "1-4": 2, "1-5": 3}
    assert "2" not in table.means


def test_auroc_by_hand_with_ties_and_empty_classes() -> None:
    assert auroc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == pytest.approx(0.75)
    assert auroc([0.5, 0.5], [True, False]) == pytest.approx(0.5)
    assert auroc([0.9, 0.1], [True, False]) == 1.0
    assert auroc([0.1, 0.2], [True, True]) is None
    with pytest.raises(ValueError):
        auroc([0.1], [True, False])


def test_percentile_interpolates() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 95) == 5.0
    assert percentile([0.0, 10.0], 2.5) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        percentile([], 50)
