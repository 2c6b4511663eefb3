"""The numerics of calibration fitting: NLL, a temperature by golden-section search, Platt scaling by Newton's
method, and `Fitter`, which fits and scores them on subsets of one calibration set (with cross-validation over
folds). `controller.calibration.fit_temperatures` builds a `Calibration` with them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MIN_T, MAX_T = 0.05, 20.0


class Fitter:
    """Fits and scores (temperature, bias) on subsets of one calibration set."""

    def __init__(self, logits: Sequence[Sequence[float]], targets: Sequence[float], groups: Sequence[str]) -> None:
        self.rows = [np.asarray(z, dtype=np.float64) for z in logits]
        self.y = [float(t) for t in targets]
        self.groups = groups

    def _noul(self, idx: Sequence[int]) -> bool:
        return self.groups[idx[0]] == "noul"  # every subset lies within one group

    def informative(self, idx: Sequence[int], minimum: int) -> bool:
        """At least `minimum` examples and both classes (Noul labels on either side of 0.5; for a Choice or a
        Score, at least two different answers)."""
        if len(idx) < max(minimum, 1):
            return False
        labels = [self.y[i] for i in idx]
        if self._noul(idx):
            return min(labels) < 0.5 < max(labels)
        return len(set(labels)) > 1

    def temperature(self, idx: Sequence[int]) -> float:
        return fit_temperature([self.rows[i] for i in idx], [self.y[i] for i in idx], noul=self._noul(idx))

    def params(self, idx: Sequence[int], with_bias: bool) -> tuple[float, float]:
        if with_bias:
            return fit_platt([float(self.rows[i][0]) for i in idx], [self.y[i] for i in idx])
        return self.temperature(idx), 0.0

    def score(self, idx: Sequence[int], params: tuple[float, float]) -> float:
        return len(idx) * nll([self.rows[i] for i in idx], [self.y[i] for i in idx], params[0], noul=self._noul(idx), bias=params[1])

    def best(self, child: Sequence[int], candidates: dict[str, tuple[Sequence[int], bool] | None], folds: Sequence[str],
             *, min_fold: int = 30) -> str:
        """The candidate that scores best on the held-out folds of `child`, each fitted on the other folds of its
        own examples (`(indices, with_bias)`; None: the raw logits, T = 1). Folds with fewer than `min_fold`
        examples on either side are skipped; with no usable fold the first candidate wins."""
        scores = dict.fromkeys(candidates, 0.0)
        for key in sorted({folds[i] for i in child}):
            test = [i for i in child if folds[i] == key]
            trains = {n: [i for i in c[0] if folds[i] != key] for n, c in candidates.items() if c is not None}
            if len(test) < min_fold or any(len(t) < min_fold for t in trains.values()):
                continue
            for n, c in candidates.items():
                scores[n] += self.score(test, (1.0, 0.0) if c is None else self.params(trains[n], c[1]))
        return min(candidates, key=lambda n: scores[n])  # ties (no usable fold): the first

    def beats(self, child: Sequence[int], parent: Sequence[int], child_bias: bool, parent_bias: bool,
              folds: Sequence[str], *, min_fold: int = 30) -> bool:
        """Does the fit on `child` (with a bias or not) score better on each held-out fold of `child` than the
        fit on `parent`, both fitted on the other folds? Folds with fewer than `min_fold` examples on either
        side are skipped; with no usable fold the finer fit is kept (nothing to check it against)."""
        mine = theirs = 0.0
        checked = 0
        for key in sorted({folds[i] for i in child}):
            test = [i for i in child if folds[i] == key]
            train = [i for i in child if folds[i] != key]
            parent_train = [i for i in parent if folds[i] != key]
            if len(test) < min_fold or len(train) < min_fold or len(parent_train) < min_fold:
                continue
            mine += self.score(test, self.params(train, child_bias))
            theirs += self.score(test, self.params(parent_train, parent_bias))
            checked += 1
        return checked == 0 or mine < theirs


def fit_platt(z: Sequence[float], y: Sequence[float], *, iterations: int = 50) -> tuple[float, float]:
    """(T, b) minimising the mean BCE of sigmoid(z / T + b) against soft targets y (Newton's method on
    a = 1 / T and b; the loss is convex in them). a is kept within [1 / MAX_T, 1 / MIN_T]."""
    x = np.asarray(z, dtype=np.float64)
    t = np.asarray(y, dtype=np.float64)
    a, b = 1.0, 0.0
    for _ in range(iterations):
        p = 0.5 * (1.0 + np.tanh(0.5 * (a * x + b)))  # sigmoid without overflow
        g = np.array([np.mean((p - t) * x), np.mean(p - t)])
        w = p * (1.0 - p)
        h = np.array([[np.mean(w * x * x), np.mean(w * x)], [np.mean(w * x), np.mean(w)]]) + 1e-9 * np.eye(2)
        step = np.linalg.solve(h, g)
        a, b = a - float(step[0]), b - float(step[1])
        a = min(max(a, 1.0 / MAX_T), 1.0 / MIN_T)
        if float(np.abs(step).max()) < 1e-10:
            break
    return 1.0 / a, b


def bias_carries_over(z: Sequence[float], y: Sequence[float], folds: Sequence[str], *, min_fold: int = 30) -> bool:
    """Does a bias beside the temperature lower the out-of-fold NLL? Folds with fewer than `min_fold`
    examples on either side are skipped; with no usable fold the bias is kept (nothing to check it against)."""
    idx = list(range(len(z)))
    return Fitter([[v] for v in z], y, ["noul"] * len(idx)).beats(idx, idx, True, False, folds, min_fold=min_fold)


def noul_nll(z: Sequence[float], y: Sequence[float], temperature: float, bias: float = 0.0) -> float:
    """Mean BCE of sigmoid(z / temperature + bias) against (soft) targets y, computed from logits."""
    s = np.asarray(z, dtype=np.float64) / temperature + bias
    return float(np.mean(np.logaddexp(0.0, s) - np.asarray(y, dtype=np.float64) * s))


def nll(rows: Sequence[np.ndarray], ys: Sequence[float], temperature: float, *, noul: bool, bias: float = 0.0) -> float:
    """Mean negative log-likelihood at `temperature` (and, for Nouls, `bias`)."""
    if noul:
        return noul_nll([r[0] for r in rows], ys, temperature, bias)
    beta = 1.0 / temperature
    total = 0.0
    for n in sorted({len(r) for r in rows}):  # stack questions with the same option count
        sel = [i for i, r in enumerate(rows) if len(r) == n]
        z = beta * np.stack([rows[i] for i in sel])  # (N, n)
        t = np.array([int(ys[i]) for i in sel])
        top = z.max(axis=1, keepdims=True)
        lse = top[:, 0] + np.log(np.exp(z - top).sum(axis=1))
        total += float(np.sum(lse - z[np.arange(len(sel)), t]))
    return total / len(rows)


def fit_temperature(rows: list[np.ndarray], ys: list[float], *, noul: bool) -> float:
    """The NLL-optimal temperature in [MIN_T, MAX_T] (golden-section search over 1 / T)."""
    lo, hi = 1.0 / MAX_T, 1.0 / MIN_T  # search over beta = 1 / T, where the NLL is convex
    ratio = (math.sqrt(5.0) - 1.0) / 2.0

    def f(beta: float) -> float:
        return nll(rows, ys, 1.0 / beta, noul=noul)

    a, b = lo + (1 - ratio) * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(80):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = lo + (1 - ratio) * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = f(b)
    return float(1.0 / ((lo + hi) / 2.0))
