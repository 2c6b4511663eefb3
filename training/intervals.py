"""Cluster-bootstrap intervals for the held-out figures the acceptance checks read.

An ECE or AUROC on a few thousand held-out questions moves by more than the margins the checks decide on (a
family whose calibrated ECE is 0.005 above its raw ECE fails "never worse than raw"). The questions are not
independent draws: the candidates of one query share its wording, and the questions of one state share the
state. So the resampling unit is the cluster (`Prediction.cluster`: a relevance query's candidate list, else
the state), drawn with replacement; every statistic of one draw uses the same draw, so the change in ECE from
raw to calibrated probabilities is a paired difference.

    ece_change_intervals(preds, calibration)    # family -> {raw, calibrated, change, lo, hi, clusters}
    auroc_interval(preds, calibration)          # {auroc, lo, hi, clusters} over Nouls

Percentile intervals at `level` (0.95) from `n_boot` draws with a fixed `seed`: the same predictions give the
same figures on every run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from controller.calibration import Calibration
from training.evaluate import N_BINS, reliability_points
from training.predict import Prediction, probabilities


def cluster_weights(clusters: Sequence[str], n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, len(clusters)) example weights: how often each example's cluster was drawn in each resample."""
    names, index = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(len(names), np.full(len(names), 1.0 / len(names)), size=n_boot)  # (n_boot, clusters)
    return counts[:, index].astype(np.float64)


def weighted_ece(confidence: np.ndarray, outcome: np.ndarray, weights: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """ECE (equal-width bins, as `training.evaluate.reliability`) under each row of `weights` (n_boot, n)."""
    bins = np.minimum((confidence * n_bins).astype(int), n_bins - 1)
    onehot = np.zeros((len(confidence), n_bins))
    onehot[np.arange(len(confidence)), bins] = 1.0
    gap = weights @ (onehot * (confidence - outcome)[:, None])  # (n_boot, n_bins): summed confidence - outcome
    return np.abs(gap).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-12)


def weighted_auroc(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Mann-Whitney AUROC (ties count half) under each row of `weights`; NaN where a draw lacks a class."""
    values, tie = np.unique(scores, return_inverse=True)
    pos = np.zeros((weights.shape[0], len(values)))
    neg = np.zeros_like(pos)
    for row in range(weights.shape[0]):  # weight per distinct score, by class
        pos[row] = np.bincount(tie, weights=weights[row] * labels, minlength=len(values))
        neg[row] = np.bincount(tie, weights=weights[row] * (1 - labels), minlength=len(values))
    below = np.cumsum(neg, axis=1) - neg  # negative weight strictly below each score
    wins = (pos * (below + 0.5 * neg)).sum(axis=1)
    total = pos.sum(axis=1) * neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, wins / np.where(total > 0, total, 1.0), np.nan)


def _interval(values: np.ndarray, level: float) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if not len(finite):
        return float("nan"), float("nan")
    tail = (1.0 - level) / 2.0 * 100.0
    return float(np.percentile(finite, tail)), float(np.percentile(finite, 100.0 - tail))


def _reliability_pairs(predictions: Sequence[Prediction], calibration: Calibration | None) -> tuple[np.ndarray, np.ndarray]:
    confidence, outcome = reliability_points(predictions, calibration)
    return np.asarray(confidence, dtype=np.float64), np.asarray(outcome, dtype=np.float64)


def ece_change_intervals(
    predictions: Sequence[Prediction],
    calibration: Calibration,
    *,
    key: Callable[[Prediction], str] = lambda p: p.family,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """Per key (family by default): ECE of the raw and the calibrated probabilities, their difference
    (calibrated - raw; negative = calibration helped) and its interval over cluster resamples of that key's
    questions."""
    if not 0.0 < level < 1.0 or n_boot < 1:
        raise ValueError(f"need 0 < level < 1 and n_boot >= 1, got level={level}, n_boot={n_boot}")
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(predictions):
        groups.setdefault(key(p), []).append(i)
    out: dict[str, dict[str, Any]] = {}
    for name, idx in sorted(groups.items()):
        subset = [predictions[i] for i in idx]
        raw_c, raw_o = _reliability_pairs(subset, None)
        cal_c, cal_o = _reliability_pairs(subset, calibration)
        clusters = [p.cluster for p in subset]
        w = cluster_weights(clusters, n_boot, seed)
        ones = np.ones((1, len(subset)))
        raw, cal = float(weighted_ece(raw_c, raw_o, ones)[0]), float(weighted_ece(cal_c, cal_o, ones)[0])
        lo, hi = _interval(weighted_ece(cal_c, cal_o, w) - weighted_ece(raw_c, raw_o, w), level)
        out[name] = {"n": len(subset), "clusters": len(set(clusters)), "raw": round(raw, 5), "calibrated": round(cal, 5),
                     "change": round(cal - raw, 5), "lo": round(lo, 5), "hi": round(hi, 5)}
    return out


def auroc_interval(predictions: Sequence[Prediction], calibration: Calibration | None = None, *, n_boot: int = 1000,
                   seed: int = 0, level: float = 0.95) -> dict[str, Any] | None:
    """AUROC of the Nouls among `predictions` (target >= 0.5 positive) with its cluster-bootstrap interval;
    None without both classes."""
    nouls = [p for p in predictions if p.kind == "noul"]
    labels = np.array([float(p.label.target[0] >= 0.5) for p in nouls])
    if not len(nouls) or labels.min() == labels.max():
        return None
    scores = np.array([q[0] for q in probabilities(nouls, calibration)], dtype=np.float64)
    clusters = [p.cluster for p in nouls]
    point = float(weighted_auroc(scores, labels, np.ones((1, len(nouls))))[0])
    lo, hi = _interval(weighted_auroc(scores, labels, cluster_weights(clusters, n_boot, seed)), level)
    return {"auroc": round(point, 5), "lo": round(lo, 5), "hi": round(hi, 5), "n": len(nouls), "clusters": len(set(clusters))}
