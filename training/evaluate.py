"""Decision metrics per family, baselines and reliability diagrams.

Every question gives one *reliability pair* (confidence, outcome) and its scores:

- Noul: p = P(true). Accuracy: (p >= 0.5) == (target >= 0.5); NLL: binary cross-entropy against the target;
  Brier: (p - target)^2; reliability pair (p, target), i.e. the calibration of P(true) itself; AUROC over
  p with target >= 0.5 as the positive class.
- Choice / Score: p over the options. Accuracy: the argmax of p has the largest target mass (ties allowed); NLL: -sum t log p; Brier:
  sum (p - t)^2 over the options; reliability pair (max p, target mass on the argmax), i.e. top-label
  confidence.

ECE = sum_b n_b / N |mean confidence_b - mean outcome_b| over 15 equal-width bins of [0, 1]; MCE = the
largest bin gap among non-empty bins. Baselines: `base_rate` (the training split's mean target per family
and question; per option for a Choice) and `uniform` (0.5, 1/n).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from controller.calibration import Calibration
from training.predict import Prediction, probabilities
from training.sampling import Label, LabeledRequest

N_BINS = 15
_EPS = 1e-12


@dataclass(frozen=True)
class Metrics:
    n: int
    accuracy: float
    nll: float
    brier: float
    ece: float
    mce: float
    auroc: float | None = None  # Nouls with both classes present only

    def to_json(self) -> dict[str, Any]:
        return {k: (None if v is None else round(v, 5) if isinstance(v, float) else v) for k, v in asdict(self).items()}


# ------------------------------------------------------------------------------------------ primitives
def auroc(scores: Sequence[float], labels: Sequence[int]) -> float | None:
    """Area under the ROC curve (Mann-Whitney, ties count half); None without both classes."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return None
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[y].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def reliability(confidence: Sequence[float], outcome: Sequence[float], n_bins: int = N_BINS) -> tuple[float, float, list[dict[str, float]]]:
    """(ECE, MCE, bins): equal-width bins over [0, 1]; bins hold count, mean confidence and mean outcome."""
    c = np.asarray(confidence, dtype=np.float64)
    o = np.asarray(outcome, dtype=np.float64)
    if len(c) == 0:
        return math.nan, math.nan, []
    idx = np.minimum((c * n_bins).astype(int), n_bins - 1)
    ece, mce, bins = 0.0, 0.0, []
    for b in range(n_bins):
        sel = idx == b
        n = int(sel.sum())
        if not n:
            continue
        conf, acc = float(c[sel].mean()), float(o[sel].mean())
        gap = abs(conf - acc)
        ece += n / len(c) * gap
        mce = max(mce, gap)
        bins.append({"bin": b, "n": n, "confidence": conf, "outcome": acc})
    return float(ece), float(mce), bins


def question_scores(kind: str, p: np.ndarray, target: Sequence[float]) -> tuple[float, float, float, float, float]:
    """(correct, nll, brier, confidence, outcome) of one question."""
    t = np.asarray(target, dtype=np.float64)
    if kind == "noul":
        q, y = float(p[0]), float(t[0])
        qc = min(max(q, _EPS), 1 - _EPS)
        nll = -(y * math.log(qc) + (1 - y) * math.log(1 - qc))
        return float((q >= 0.5) == (y >= 0.5)), nll, (q - y) ** 2, q, y
    top = int(np.argmax(p))
    nll = -float(np.sum(t * np.log(np.clip(p, _EPS, 1.0))))
    correct = float(t[top] >= t.max() - 1e-9)  # tied targets (0.5 / 0.5): either top option is right
    return correct, nll, float(np.sum((p - t) ** 2)), float(p[top]), float(t[top])


def compute_metrics(kinds: Sequence[str], probs: Sequence[np.ndarray], targets: Sequence[Sequence[float]]) -> Metrics:
    rows = [question_scores(k, p, t) for k, p, t in zip(kinds, probs, targets)]
    if not rows:
        return Metrics(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    correct, nll, brier, conf, outcome = (np.array(col) for col in zip(*rows))
    ece, mce, _ = reliability(conf, outcome)
    nouls = [(float(p[0]), int(float(t[0]) >= 0.5)) for k, p, t in zip(kinds, probs, targets) if k == "noul"]
    auc = auroc(*zip(*nouls)) if nouls else None
    return Metrics(len(rows), float(correct.mean()), float(nll.mean()), float(brier.mean()), ece, mce, auc)


# -------------------------------------------------------------------------------------------- baselines
@dataclass(frozen=True)
class BaseRates:
    """Mean training target per (family, question): P(true) for a Noul, per option name for a Choice."""

    noul: dict[tuple[str, str], float]
    options: dict[tuple[str, str], dict[str, float]]

    def probabilities(self, label: Label) -> np.ndarray:
        key = (label.family, label.question_name)
        if label.kind == "noul":
            return np.array([self.noul.get(key, 0.5)])
        n = len(label.target)
        rates = self.options.get(key)
        if label.kind == "choice" and rates and label.options:
            p = np.array([rates.get(o, 0.0) for o in label.options]) + 1e-3  # unseen options keep some mass
            return p / p.sum()
        return np.full(n, 1.0 / n)


def base_rates(requests: Sequence[LabeledRequest]) -> BaseRates:
    nouls: dict[tuple[str, str], list[float]] = defaultdict(list)
    opts: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for request in requests:
        for label in request.labels:
            key = (label.family, label.question_name)
            if label.variant:
                continue
            if label.kind == "noul":
                nouls[key].append(label.target[0])
            elif label.kind == "choice":
                counts[key] += 1
                for name, p in zip(label.options, label.target):
                    opts[key][name] += p
    return BaseRates(
        {k: float(np.mean(v)) for k, v in nouls.items()},
        {k: {o: v / counts[k] for o, v in d.items()} for k, d in opts.items()},
    )


def uniform_probabilities(label: Label) -> np.ndarray:
    return np.array([0.5]) if label.kind == "noul" else np.full(len(label.target), 1.0 / len(label.target))


# ------------------------------------------------------------------------------------------- reports
def by(predictions: Sequence[Prediction], key: Callable[[Prediction], str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(predictions):
        out[key(p)].append(i)
    return dict(sorted(out.items()))


def metric_table(
    predictions: Sequence[Prediction],
    calibration: Calibration,
    rates: BaseRates,
    key: Callable[[Prediction], str] = lambda p: p.family,
) -> dict[str, dict[str, Any]]:
    """Per key (family by default) and `all`: metrics raw, calibrated, base rate and uniform."""
    raw = probabilities(predictions)
    cal = probabilities(predictions, calibration)
    base = [rates.probabilities(p.label) for p in predictions]
    uni = [uniform_probabilities(p.label) for p in predictions]
    groups = by(predictions, key)
    groups["all"] = list(range(len(predictions)))
    table = {}
    for name, idx in groups.items():
        kinds = [predictions[i].kind for i in idx]
        targets = [predictions[i].label.target for i in idx]
        table[name] = {
            variant: compute_metrics(kinds, [probs[i] for i in idx], targets).to_json()
            for variant, probs in (("raw", raw), ("calibrated", cal), ("base_rate", base), ("uniform", uni))
        }
    return table


def reliability_points(predictions: Sequence[Prediction], calibration: Calibration | None) -> tuple[list[float], list[float]]:
    probs = probabilities(predictions, calibration)
    pairs = [question_scores(p.kind, q, p.label.target)[3:] for p, q in zip(predictions, probs)]
    return [c for c, _ in pairs], [o for _, o in pairs]


def plot_reliability(predictions: Sequence[Prediction], calibration: Calibration, path: str | Path, *, title: str = "") -> str | None:
    """One panel per family: mean outcome vs mean confidence per bin, before and after calibration."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    families = by(predictions, lambda p: p.family)
    cols = min(4, max(1, len(families)))
    rows = math.ceil(len(families) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.1 * rows), squeeze=False)
    for ax in axes.flat[len(families):]:
        ax.axis("off")
    for ax, (family, idx) in zip(axes.flat, families.items()):
        subset = [predictions[i] for i in idx]
        ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle="--")
        for cal, label, color in ((None, "raw", "tab:red"), (calibration, "calibrated", "tab:blue")):
            conf, outcome = reliability_points(subset, cal)
            ece, _, bins = reliability(conf, outcome)
            ax.plot([b["confidence"] for b in bins], [b["outcome"] for b in bins], marker="o", markersize=3,
                    color=color, label=f"{label} ECE {ece:.3f}")
        ax.set_title(f"{family} (n={len(idx)})", fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title or "reliability (Noul: P(true); Choice: top-label confidence)", fontsize=10)
    fig.tight_layout()
    from data.paths import replacing

    try:
        with replacing(path) as tmp:  # beside it, same suffix (the format): the old diagram or the new one, whole
            fig.savefig(str(tmp), dpi=80)
    finally:
        plt.close(fig)
    return str(path)


def format_table(table: dict[str, dict[str, Any]], title: str = "") -> str:
    """Markdown: one row per family, raw vs calibrated vs baselines."""
    head = "| family | n | acc | AUROC | NLL raw | NLL cal | Brier cal | ECE raw | ECE cal | MCE cal | NLL base | ECE base | acc base | NLL unif |"
    lines = ([f"**{title}**", ""] if title else []) + [head, "|" + "---|" * (head.count("|") - 1)]
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for name, row in table.items():
        r, c, b, u = row["raw"], row["calibrated"], row["base_rate"], row["uniform"]
        lines.append(
            f"| {name} | {c['n']} | {fmt(c['accuracy'])} | {fmt(c['auroc'])} | {fmt(r['nll'])} | {fmt(c['nll'])} | {fmt(c['brier'])} | "
            f"{fmt(r['ece'])} | {fmt(c['ece'])} | {fmt(c['mce'])} | {fmt(b['nll'])} | {fmt(b['ece'])} | {fmt(b['accuracy'])} | {fmt(u['nll'])} |"
        )
    return "\n".join(lines)
