from __future__ import annotations

import math

import pytest
import torch

from training.errors import LossInputError
from training.losses import ChoiceLoss, DecisionLoss, LabelTensors, NoulLoss, ScoreLoss


def test_noul_loss_matches_hand_computed_bce() -> None:
    logits = torch.tensor([0.0, 2.0])
    targets = torch.tensor([1.0, 0.0])
    expected = [math.log(2.0), math.log(1 + math.exp(2.0))]
    assert torch.allclose(NoulLoss().per_example(logits, targets), torch.tensor(expected), atol=1e-6)
    weighted = NoulLoss()(logits, targets, torch.tensor([3.0, 1.0]))
    assert float(weighted) == pytest.approx((3 * expected[0] + expected[1]) / 4, abs=1e-6)


@pytest.mark.parametrize(
    ("logits", "targets", "message"),
    [
        (torch.zeros(2, 1), torch.zeros(2, 1), "1 logit per question"),
        (torch.zeros(3), torch.zeros(2), "targets of shape"),
        (torch.zeros(2), torch.tensor([0.5, 1.5]), r"\[0, 1\]"),
    ],
)
def test_noul_loss_rejects_bad_inputs(logits: torch.Tensor, targets: torch.Tensor, message: str) -> None:
    with pytest.raises(LossInputError, match=message):
        NoulLoss()(logits, targets)


def test_losses_validate_hyper_parameters_when_built() -> None:
    with pytest.raises(LossInputError, match="rps_weight"):
        ScoreLoss(rps_weight=-1.0)
    with pytest.raises(LossInputError, match="label_smoothing"):
        NoulLoss(label_smoothing=0.7)
    with pytest.raises(LossInputError, match="weights"):
        NoulLoss()(torch.zeros(2), torch.zeros(2), torch.tensor([1.0, -1.0]))


def test_choice_loss_is_cross_entropy_over_existing_options() -> None:
    logits = torch.tensor([[1.0, 2.0, 99.0], [0.5, -0.5, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    targets = torch.tensor([[0.0, 1.0, 0.0], [0.2, 0.3, 0.5]])
    per = ChoiceLoss().per_example(logits, mask, targets)
    first = -torch.log_softmax(torch.tensor([1.0, 2.0]), 0)[1]
    second = -(targets[1] * torch.log_softmax(logits[1], 0)).sum()
    assert torch.allclose(per, torch.stack([first, second]), atol=1e-6)
    kl = ChoiceLoss().kl(torch.log(targets[1:] + 0.0), mask[1:], targets[1:])
    assert float(kl[0]) == pytest.approx(0.0, abs=1e-6)  # a perfect soft fit has zero KL


@pytest.mark.parametrize(
    ("mask", "targets", "message"),
    [
        (torch.tensor([[True, True]]), torch.tensor([[0.5, 0.4]]), "sum to 1"),
        (torch.tensor([[True, False]]), torch.tensor([[0.5, 0.5]]), "padded options"),
        (torch.tensor([[1, 1]]), torch.tensor([[0.5, 0.5]]), "boolean mask"),
        (torch.tensor([[True, True, True]]), torch.tensor([[0.5, 0.5, 0.0]]), "shape"),
    ],
)
def test_choice_loss_rejects_bad_inputs(mask: torch.Tensor, targets: torch.Tensor, message: str) -> None:
    with pytest.raises(LossInputError, match=message):
        ChoiceLoss()(torch.zeros(1, 2), mask, targets)


def test_score_loss_adds_hand_computed_rps() -> None:
    probs = torch.tensor([[0.2, 0.3, 0.5]])
    logits = torch.log(probs)
    mask = torch.ones(1, 3, dtype=torch.bool)
    targets = torch.tensor([[0.0, 0.0, 1.0]])
    # cumulative: p (0.2, 0.5), t (0, 0): ((0.2)^2 + (0.5)^2) / 2 = 0.145
    assert float(ScoreLoss.rps(probs, mask, targets)[0]) == pytest.approx(0.145, abs=1e-6)
    loss = ScoreLoss(rps_weight=2.0).per_example(logits, mask, targets)
    assert float(loss[0]) == pytest.approx(-math.log(0.5) + 2 * 0.145, abs=1e-5)
    with pytest.raises(LossInputError, match="at least 2"):
        ScoreLoss()(torch.zeros(1, 2), torch.tensor([[True, False]]), torch.tensor([[1.0, 0.0]]))


def test_rps_prefers_near_misses_over_far_misses() -> None:
    mask = torch.ones(2, 4, dtype=torch.bool)
    targets = torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0]])
    probs = torch.tensor([[0.0, 1.0, 0, 0], [0, 0, 0, 1.0]])
    near, far = ScoreLoss.rps(probs, mask, targets)
    assert float(near) < float(far)


def _labels(noul: list[tuple[int, float]], choice: list[tuple[list[int], list[float]]]) -> LabelTensors:
    width = max((len(ix) for ix, _ in choice), default=1)
    c_index = torch.zeros(len(choice), width, dtype=torch.long)
    c_mask = torch.zeros(len(choice), width, dtype=torch.bool)
    c_target = torch.zeros(len(choice), width)
    for i, (ix, t) in enumerate(choice):
        c_index[i, : len(ix)], c_mask[i, : len(ix)], c_target[i, : len(ix)] = torch.tensor(ix), True, torch.tensor(t)
    empty = (torch.zeros(0, 1, dtype=torch.long), torch.zeros(0, 1, dtype=torch.bool), torch.zeros(0, 1), torch.zeros(0))
    return LabelTensors(
        torch.tensor([i for i, _ in noul], dtype=torch.long), torch.tensor([t for _, t in noul]), torch.ones(len(noul)),
        c_index, c_mask, c_target, torch.ones(len(choice)), *empty,
    )


def test_decision_loss_is_the_weighted_mean_over_all_labels() -> None:
    flat = torch.tensor([0.0, 1.0, 2.0, -1.0])
    labels = _labels([(0, 1.0), (3, 0.0)], [([1, 2], [1.0, 0.0])])
    value = DecisionLoss()(flat, labels)
    noul = NoulLoss().per_example(flat[[0, 3]], torch.tensor([1.0, 0.0]))
    choice = -torch.log_softmax(torch.tensor([1.0, 2.0]), 0)[0]
    assert float(value.total) == pytest.approx(float((noul.sum() + choice) / 3), abs=1e-6)
    assert set(value.parts) == {"noul", "choice"}


def test_decision_loss_checks_the_model_heads() -> None:
    class Fake(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = torch.nn.Linear(4, 2)

    with pytest.raises(LossInputError, match="expects a model whose heads give 3 outputs"):
        DecisionLoss(Fake())  # type: ignore[arg-type]
    with pytest.raises(LossInputError, match="flat logits"):
        DecisionLoss()(torch.zeros(2, 2), _labels([(0, 1.0)], []))
