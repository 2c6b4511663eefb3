"""answers.py: the protocol's formulas, checked numerically and against jevcompat's reference."""

from __future__ import annotations

import math

import pytest
from jevcompat.validate import choice_confidence as ref_choice_confidence
from jevcompat.validate import score_confidence as ref_score_confidence
from typesafe_sdk import ChoiceAnswer, NoulAnswer, ScoreAnswer

from controller.answers import (
    build_answer,
    choice_confidence,
    clean_distribution,
    expected_level,
    score_confidence,
    uniform_mad,
)
from controller.errors import BackendError
from controller.questions import ChoiceQuestion, NoulQuestion, ScoreQuestion


def test_choice_confidence_by_hand() -> None:
    # (p_max - 1/n) / (1 - 1/n)
    assert choice_confidence([0.1, 0.8, 0.1]) == pytest.approx((0.8 - 1 / 3) / (1 - 1 / 3))
    assert choice_confidence([0.5, 0.5]) == pytest.approx(0.0)
    assert choice_confidence([1.0, 0.0, 0.0, 0.0]) == pytest.approx(1.0)
    assert choice_confidence([1.0]) == 1.0


def test_uniform_mad_by_hand() -> None:
    assert uniform_mad(2) == pytest.approx(0.5)  # |0-.5|, |1-.5|
    assert uniform_mad(3) == pytest.approx(2 / 3)  # 1, 0, 1
    assert uniform_mad(4) == pytest.approx(1.0)  # 1.5, .5, .5, 1.5
    assert uniform_mad(10) == pytest.approx(2.5)


def test_score_confidence_by_hand() -> None:
    probs = [0.1, 0.1, 0.8]  # mode 2; spread = .1*2 + .1*1 = .3; D = 2/3
    assert score_confidence(probs) == pytest.approx(1 - 0.3 / (2 / 3))
    assert score_confidence([0.0, 1.0, 0.0]) == pytest.approx(1.0)
    assert score_confidence([0.5, 0.0, 0.5]) == pytest.approx(0.0)  # 1 - 1/(2/3) < 0 -> 0
    assert score_confidence([0.25, 0.25, 0.25, 0.25]) == pytest.approx(0.0)


@pytest.mark.parametrize(
    "probs",
    [[0.1, 0.1, 0.8], [0.2, 0.3, 0.5], [0.05, 0.9, 0.05], [0.4, 0.35, 0.25], [0.0, 0.0, 0.1, 0.9], [0.3, 0.7],
     [0.1] * 10, [0.55, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05]],
)
def test_confidences_match_jevcompat_reference(probs: list[float]) -> None:
    assert choice_confidence(probs) == pytest.approx(ref_choice_confidence(probs), abs=1e-12)
    assert score_confidence(probs) == pytest.approx(ref_score_confidence(probs), abs=1e-12)


def test_expected_level() -> None:
    assert expected_level([0.1, 0.1, 0.8]) == pytest.approx(1.7)


def test_clean_distribution_handles_junk() -> None:
    assert clean_distribution([float("nan"), -1.0, 2.0]) == [0.0, 0.0, 1.0]
    assert clean_distribution([0.0, 0.0]) == [0.5, 0.5]
    assert clean_distribution([float("inf"), 1.0]) == [0.0, 1.0]
    assert math.fsum(clean_distribution([3.0, 1.0])) == pytest.approx(1.0)


def test_build_noul_answer() -> None:
    answer = build_answer(NoulQuestion("x"), (0.73,))
    assert isinstance(answer, NoulAnswer)
    assert answer.noul == pytest.approx(0.73)
    assert build_answer(NoulQuestion("x"), (float("nan"),)).noul == 0.5
    assert build_answer(NoulQuestion("x"), (1.7,)).noul == 1.0
    with pytest.raises(BackendError):
        build_answer(NoulQuestion("x"), (0.1, 0.9))


def test_build_choice_answer() -> None:
    q = ChoiceQuestion("tone?", (("calm", None), ("angry", "upset"), ("excited", None)))
    answer = build_answer(q, (1.0, 8.0, 1.0))  # unnormalised input is renormalised
    assert isinstance(answer, ChoiceAnswer)
    assert answer.choice == "angry"
    assert list(answer.probabilities) == ["calm", "angry", "excited"]
    assert answer.probabilities["angry"] == pytest.approx(0.8)
    assert answer.confidence == pytest.approx(ref_choice_confidence([0.1, 0.8, 0.1]))
    tie = build_answer(q, (0.4, 0.4, 0.2))
    assert tie.choice == "calm"  # ties go to the first option
    with pytest.raises(BackendError):
        build_answer(q, (0.5, 0.5))


def test_build_score_answer() -> None:
    q = ScoreQuestion(None, ("Can wait", "This week", {"when": "today"}))
    answer = build_answer(q, (0.1, 0.1, 0.8))
    assert isinstance(answer, ScoreAnswer)
    assert answer.score == pytest.approx(1.7)
    assert answer.legend == {0: "Can wait", 1: "This week", 2: {"when": "today"}}
    assert set(answer.probabilities) == {0, 1, 2}
    assert answer.confidence == pytest.approx(ref_score_confidence([0.1, 0.1, 0.8]))
    wire = answer.model_dump(mode="json")
    assert set(wire["legend"]) == {"0", "1", "2"}
    assert all(math.isfinite(v) for v in wire["probabilities"].values())
