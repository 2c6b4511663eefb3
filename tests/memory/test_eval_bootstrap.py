"""Conversation-cluster and question bootstraps: determinism, degenerate cases and paired differences."""

from __future__ import annotations

import numpy as np
import pytest

from memory.evaluation.bootstrap import bootstrap_intervals, draw_indices, paired_differences
from memory.evaluation.metrics import QuestionScore

TARGETS = (("1-5", "m"), ("1", "m"))


def _scores(values: dict[str, list[tuple[int, float]]]) -> list[QuestionScore]:
    return [
        QuestionScore(conv, f"{conv}-q{i}", cat, 1, {"m": v})
        for conv, rows in values.items()
        for i, (cat, v) in enumerate(rows)
    ]


SYSTEM = _scores({"a": [(1, 1.0), (4, 1.0)], "b": [(1, 0.0), (4, 1.0), (4, 0.0)], "c": [(2, 0.0)]})
CLUSTERS = ("a", "b", "c")


def test_draws_are_deterministic_per_seed() -> None:
    assert np.array_equal(draw_indices(3, 50, 7), draw_indices(3, 50, 7))
    assert not np.array_equal(draw_indices(3, 50, 7), draw_indices(3, 50, 8))
    with pytest.raises(ValueError):
        draw_indices(0, 10, 0)


def test_intervals_are_reproducible_and_bracket_the_mean() -> None:
    first = bootstrap_intervals(SYSTEM, CLUSTERS, targets=TARGETS, draws=300, seed=3)
    again = bootstrap_intervals(SYSTEM, CLUSTERS, targets=TARGETS, draws=300, seed=3)
    assert first == again
    overall = first["m [1-5]"]
    assert overall.mean == pytest.approx(3 / 6)  # question-weighted, not conversation-weighted
    assert 0.0 <= overall.low <= overall.mean <= overall.high <= 1.0
    assert overall.low < overall.high
    multi_hop = first["m [1]"]
    assert multi_hop.mean == 0.5
    # draws holding only conversation c have no multi-hop question and are left out
    assert 0 < multi_hop.draws <= 300


def test_single_conversation_gives_a_point_interval() -> None:
    only = [s for s in SYSTEM if s.conversation == "b"]
    interval = bootstrap_intervals(only, ("b",), targets=TARGETS, draws=20, seed=0)["m [1-5]"]
    assert interval.low == interval.high == interval.mean == pytest.approx(1 / 3)


def test_paired_difference_of_a_system_with_itself_is_zero() -> None:
    diff = paired_differences(SYSTEM, SYSTEM, CLUSTERS, targets=TARGETS, draws=100, seed=1)["m [1-5]"]
    assert (diff.mean, diff.low, diff.high) == (0.0, 0.0, 0.0)


def test_paired_difference_has_the_right_sign_and_matches_questions() -> None:
    better = [QuestionScore(s.conversation, s.qid, s.category, 1, {"m": 1.0}) for s in SYSTEM]
    diff = paired_differences(better, SYSTEM, CLUSTERS, targets=TARGETS, draws=200, seed=1)["m [1-5]"]
    assert diff.mean == pytest.approx(0.5)
    assert diff.low >= 0.0
    # a question the reference lacks is left out
    extra = [*better, QuestionScore("a", "unmatched", 1, 1, {"m": 1.0})]
    assert paired_differences(extra, SYSTEM, CLUSTERS, targets=TARGETS, draws=50, seed=1)["m [1-5]"].mean == pytest.approx(0.5)


def _two_conversations(seed: int) -> list[QuestionScore]:
    rng = np.random.default_rng(seed)
    a = [(4, float(v)) for v in rng.random(200) < 0.9]  # one conversation answered well, one badly
    b = [(4, float(v)) for v in rng.random(100) < 0.3]
    return _scores({"a": a, "b": b})


def test_with_two_conversations_the_cluster_interval_is_their_range_and_the_question_one_is_not() -> None:
    scores = _two_conversations(0)
    a = np.mean([s.values["m"] for s in scores if s.conversation == "a"])
    b = np.mean([s.values["m"] for s in scores if s.conversation == "b"])
    cluster = bootstrap_intervals(scores, ("a", "b"), targets=TARGETS[:1], draws=1000, seed=0)["m [1-5]"]
    assert (cluster.low, cluster.high) == pytest.approx((b, a))  # every draw: a twice, b twice or both
    question = bootstrap_intervals(scores, ("a", "b"), targets=TARGETS[:1], draws=1000, seed=0, unit="question")["m [1-5]"]
    assert question.mean == pytest.approx(cluster.mean)
    assert b < question.low < question.mean < question.high < a
    assert question.high - question.low < 0.15  # about +-2 standard errors of a mean over 300 questions
    assert question == bootstrap_intervals(scores, ("a", "b"), targets=TARGETS[:1], draws=1000, seed=0, unit="question")["m [1-5]"]


def test_question_bootstrap_keeps_each_conversation_and_pairs_questions() -> None:
    only = [s for s in SYSTEM if s.conversation == "b"]
    single = bootstrap_intervals(only, ("b",), targets=TARGETS, draws=200, seed=0, unit="question")["m [1-5]"]
    assert single.mean == pytest.approx(1 / 3) and single.low < single.high  # questions still vary within it
    assert "m [1]" in bootstrap_intervals(SYSTEM, CLUSTERS, targets=TARGETS, draws=50, seed=0, unit="question")
    same = paired_differences(SYSTEM, SYSTEM, CLUSTERS, targets=TARGETS, draws=100, seed=1, unit="question")["m [1-5]"]
    assert (same.mean, same.low, same.high) == (0.0, 0.0, 0.0)
    better = [QuestionScore(s.conversation, s.qid, s.category, 1, {"m": 1.0}) for s in SYSTEM]
    diff = paired_differences(better, SYSTEM, CLUSTERS, targets=TARGETS, draws=200, seed=1, unit="question")["m [1-5]"]
    assert diff.mean == pytest.approx(0.5) and 0.0 <= diff.low <= diff.high <= 1.0
    with pytest.raises(ValueError, match="unknown bootstrap unit"):
        bootstrap_intervals(SYSTEM, CLUSTERS, unit="state")


def test_both_units_read_only_the_conversations_asked_for_each_once() -> None:
    scores = _two_conversations(0)
    a = np.mean([s.values["m"] for s in scores if s.conversation == "a"])
    for unit in ("conversation", "question"):
        only_a = bootstrap_intervals(scores, ("a",), targets=TARGETS[:1], draws=200, seed=0, unit=unit)["m [1-5]"]
        assert only_a.mean == pytest.approx(a) and only_a.low <= only_a.mean <= only_a.high, unit
        twice = bootstrap_intervals(scores, ("a", "a", "b"), targets=TARGETS[:1], draws=200, seed=0, unit=unit)["m [1-5]"]
        assert twice == bootstrap_intervals(scores, ("a", "b"), targets=TARGETS[:1], draws=200, seed=0, unit=unit)["m [1-5]"], unit
