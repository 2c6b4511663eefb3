"""Losses per question kind. Each checks its hyper-parameters when built and its tensors when called.

    NoulLoss    binary cross-entropy against a (soft) target probability            logits (N,)
    ChoiceLoss  cross-entropy against a (soft) target distribution (= KL + const)   logits (N, K) + mask
    ScoreLoss   the same cross-entropy plus `rps_weight` x ranked probability score logits (N, K) + mask
    DecisionLoss  the three above over one step's labels, weighted mean over all labels; plus, with
                  `listwise_weight`, that times ListwiseLoss over the step's ranking lists

Choice and Score rows are padded to the widest question of the step: `mask[i, k]` says whether option k
exists for row i; padded options get no probability mass and must carry target 0. Every per-example loss is
multiplied by the example weight (noisy rule labels carry lower weights) and the result is the weighted
mean, so a step's loss does not depend on how its labels were split across micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from training.errors import LossInputError

if TYPE_CHECKING:
    from controller.torch_model import PackedCrossEncoder

_TOL = 1e-3


def _check_weights(weights: torch.Tensor | None, n: int, name: str) -> torch.Tensor | None:
    if weights is None:
        return None
    if weights.shape != (n,):
        raise LossInputError(f"{name} expects weights of shape ({n},), got {tuple(weights.shape)}")
    if bool((weights < 0).any()) or not bool(torch.isfinite(weights).all()):
        raise LossInputError(f"{name} expects finite weights >= 0")
    return weights


def weighted_mean(values: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    if weights is None:
        return values.mean()
    total = weights.sum()
    if float(total) <= 0:
        raise LossInputError("the weights of a loss sum to zero")
    return (values * weights).sum() / total


class NoulLoss(nn.Module):
    """Binary cross-entropy with logits against target probabilities in [0, 1]."""

    def __init__(self, *, label_smoothing: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= label_smoothing < 0.5:
            raise LossInputError(f"NoulLoss expects label_smoothing in [0, 0.5), got {label_smoothing}")
        self.label_smoothing = label_smoothing

    def per_example(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if logits.dim() != 1:
            raise LossInputError(f"NoulLoss expects 1 logit per question (shape (N,)), got shape {tuple(logits.shape)}")
        if targets.shape != logits.shape:
            raise LossInputError(f"NoulLoss expects targets of shape {tuple(logits.shape)}, got {tuple(targets.shape)}")
        if bool(((targets < 0) | (targets > 1)).any()):
            raise LossInputError("NoulLoss expects target probabilities in [0, 1]")
        t = targets.to(logits.dtype)
        if self.label_smoothing:
            t = t * (1 - 2 * self.label_smoothing) + self.label_smoothing
        return F.binary_cross_entropy_with_logits(logits, t, reduction="none")

    def forward(self, logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        return weighted_mean(self.per_example(logits, targets), _check_weights(weights, logits.shape[0], "NoulLoss"))


def _check_options(name: str, logits: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor, min_options: int) -> None:
    if logits.dim() != 2:
        raise LossInputError(f"{name} expects logits of shape (N, K), got {tuple(logits.shape)}")
    if mask.shape != logits.shape or targets.shape != logits.shape:
        raise LossInputError(f"{name} expects mask and targets of shape {tuple(logits.shape)}, got {tuple(mask.shape)} and {tuple(targets.shape)}")
    if mask.dtype != torch.bool:
        raise LossInputError(f"{name} expects a boolean mask, got {mask.dtype}")
    counts = mask.sum(dim=1)
    if bool((counts < min_options).any()):
        raise LossInputError(f"{name} expects at least {min_options} options per question, got {int(counts.min())}")
    if bool(((targets < 0) | (targets > 1)).any()):
        raise LossInputError(f"{name} expects target probabilities in [0, 1]")
    if bool((targets[~mask] != 0).any()):
        raise LossInputError(f"{name}: padded options carry target probability")
    sums = targets.sum(dim=1)
    if bool(((sums - 1).abs() > _TOL).any()):
        raise LossInputError(f"{name} expects each target distribution to sum to 1, got {float(sums[(sums - 1).abs().argmax()]):.4f}")


def masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log softmax over the existing options; padded options get log p = -inf (stored as a large negative)."""
    low = torch.finfo(logits.dtype).min
    return torch.log_softmax(logits.masked_fill(~mask, low), dim=1).masked_fill(~mask, 0.0)


class ChoiceLoss(nn.Module):
    """Cross-entropy against a soft target distribution over the options (its gradient is KL's)."""

    min_options = 1

    def per_example(self, logits: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        _check_options(type(self).__name__, logits, mask, targets, self.min_options)
        return -(targets.to(logits.dtype) * masked_log_softmax(logits, mask)).sum(dim=1)

    def kl(self, logits: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """KL(target || model) per example (logging: 0 for a perfect fit even with soft targets)."""
        t = targets.to(logits.dtype)
        entropy = -(t * torch.log(t.clamp_min(1e-12))).sum(dim=1)
        return self.per_example(logits, mask, targets) - entropy

    def forward(self, logits: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        return weighted_mean(self.per_example(logits, mask, targets), _check_weights(weights, logits.shape[0], type(self).__name__))


class ScoreLoss(ChoiceLoss):
    """Cross-entropy plus `rps_weight` x the ranked probability score of the level distribution.

    RPS_i = sum_{k < n_i - 1} (P_ik - T_ik)^2 / (n_i - 1), with P, T the cumulative distributions: it grows
    with the distance between the predicted and the true level, which plain cross-entropy ignores.
    """

    min_options = 2

    def __init__(self, *, rps_weight: float = 1.0) -> None:
        super().__init__()
        if not rps_weight >= 0:
            raise LossInputError(f"ScoreLoss expects rps_weight >= 0, got {rps_weight}")
        self.rps_weight = float(rps_weight)

    @staticmethod
    def rps(probs: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Ranked probability score per row (N,); padded levels (mass 0 in both) add nothing."""
        gap = (torch.cumsum(probs, dim=1) - torch.cumsum(targets.to(probs.dtype), dim=1)) ** 2  # (N, K)
        levels = mask.sum(dim=1)  # (N,)
        last = torch.arange(mask.shape[1], device=mask.device)[None, :] < (levels - 1)[:, None]  # drop the final CDF = 1
        return (gap * last).sum(dim=1) / (levels - 1).to(probs.dtype)

    def per_example(self, logits: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        ce = super().per_example(logits, mask, targets)
        if not self.rps_weight:
            return ce
        probs = masked_log_softmax(logits, mask).exp() * mask
        return ce + self.rps_weight * self.rps(probs, mask, targets)


class ListwiseLoss(nn.Module):
    """Softmax cross-entropy of each positive against the negatives of its ranking list (localised contrastive
    estimation): for a list with positives P and negatives N, the mean over p in P of
    -log(exp(s_p) / (exp(s_p) + sum_n exp(s_n))). Lists without both a positive (target >= 0.5) and a negative
    add nothing. It trains the order of a query's candidates, which the read path ranks by; the pointwise
    BCE beside it keeps the probabilities calibrated."""

    def forward(self, logits: torch.Tensor, targets: torch.Tensor, lists: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(sum over positives of their loss, number of positives that had negatives)."""
        if not (logits.dim() == 1 and targets.shape == logits.shape and lists.shape == logits.shape):
            raise LossInputError(f"ListwiseLoss expects logits, targets and lists of one shape (N,), got "
                                 f"{tuple(logits.shape)}, {tuple(targets.shape)}, {tuple(lists.shape)}")
        total, count = logits.new_zeros(()), 0
        for key in torch.unique(lists[lists >= 0]).tolist():
            member = lists == key
            positive, negative = member & (targets >= 0.5), member & (targets < 0.5)
            if not bool(positive.any()) or not bool(negative.any()):
                continue
            neg = logits[negative]
            pos = logits[positive]
            # per positive: logsumexp over itself and every negative, minus itself
            rows = torch.cat([pos[:, None], neg[None, :].expand(pos.shape[0], -1)], dim=1)
            total = total + (torch.logsumexp(rows, dim=1) - pos).sum()
            count += int(pos.shape[0])
        return total, count


@dataclass(frozen=True)
class LabelTensors:
    """One step's labels, already pointing into the flattened logits of its micro-batches."""

    noul_index: torch.Tensor  # (Nn,) int64 into the flat logits
    noul_target: torch.Tensor  # (Nn,)
    noul_weight: torch.Tensor  # (Nn,)
    choice_index: torch.Tensor  # (Nc, Kc) int64, 0 where masked
    choice_mask: torch.Tensor  # (Nc, Kc) bool
    choice_target: torch.Tensor  # (Nc, Kc)
    choice_weight: torch.Tensor  # (Nc,)
    score_index: torch.Tensor  # (Ns, Ks)
    score_mask: torch.Tensor
    score_target: torch.Tensor
    score_weight: torch.Tensor
    noul_list: torch.Tensor | None = None  # (Nn,) int64 ranking list of each Noul label, -1 for none (ListwiseLoss)

    def to(self, device: torch.device | str) -> LabelTensors:
        """The same labels on `device`."""
        return LabelTensors(*(None if getattr(self, f.name) is None else getattr(self, f.name).to(device) for f in fields(self)))

    @property
    def count(self) -> int:
        return int(self.noul_index.shape[0] + self.choice_index.shape[0] + self.score_index.shape[0])


@dataclass(frozen=True)
class LossValue:
    total: torch.Tensor  # scalar, weighted mean over every label of the step
    parts: dict[str, float]  # per kind (weighted mean of that kind) for logging


class DecisionLoss(nn.Module):
    """All three kinds over one step. Built against a model: its heads must score the three kinds."""

    def __init__(self, model: PackedCrossEncoder | None = None, *, rps_weight: float = 1.0, label_smoothing: float = 0.0,
                 listwise_weight: float = 0.0) -> None:
        super().__init__()
        if model is not None:
            from controller.torch_model import N_KINDS

            out = getattr(getattr(model, "heads", None), "out_features", None)
            if out != N_KINDS:
                raise LossInputError(f"DecisionLoss expects a model whose heads give {N_KINDS} outputs (noul, choice, score), got {out}")
        self.noul = NoulLoss(label_smoothing=label_smoothing)
        self.choice = ChoiceLoss()
        self.score = ScoreLoss(rps_weight=rps_weight)
        if listwise_weight < 0:
            raise LossInputError(f"DecisionLoss expects listwise_weight >= 0, got {listwise_weight}")
        self.listwise_weight = listwise_weight
        self.listwise = ListwiseLoss()

    def forward(self, flat_logits: torch.Tensor, labels: LabelTensors) -> LossValue:
        if flat_logits.dim() != 1:
            raise LossInputError(f"DecisionLoss expects flat logits (shape (T,)), got {tuple(flat_logits.shape)}")
        if labels.count == 0:
            raise LossInputError("DecisionLoss got a step without labels")
        sums, weights, parts = [], [], {}
        if labels.noul_index.numel():
            per = self.noul.per_example(flat_logits[labels.noul_index], labels.noul_target)
            self._add("noul", per, labels.noul_weight, sums, weights, parts)
        for name, loss, index, mask, target, weight in (
            ("choice", self.choice, labels.choice_index, labels.choice_mask, labels.choice_target, labels.choice_weight),
            ("score", self.score, labels.score_index, labels.score_mask, labels.score_target, labels.score_weight),
        ):
            if index.shape[0]:
                per = loss.per_example(flat_logits[index], mask, target)
                self._add(name, per, weight, sums, weights, parts)
        weight_total = torch.stack(weights).sum()
        if float(weight_total) <= 0:
            raise LossInputError("the label weights of a step sum to zero")
        total = torch.stack(sums).sum() / weight_total
        if self.listwise_weight and labels.noul_list is not None and labels.noul_index.numel():
            summed, count = self.listwise(flat_logits[labels.noul_index], labels.noul_target, labels.noul_list)
            if count:
                listwise = summed / count
                parts["list"] = float(listwise.detach())
                total = total + self.listwise_weight * listwise
        return LossValue(total, parts)

    @staticmethod
    def _add(name: str, per: torch.Tensor, w: torch.Tensor, sums: list, weights: list, parts: dict) -> None:
        w = _check_weights(w.to(per.dtype), per.shape[0], name)  # type: ignore[assignment]
        sums.append((per * w).sum())
        weights.append(w.sum())
        if float(w.sum()) > 0:
            parts[name] = float((per * w).sum().detach() / w.sum())
