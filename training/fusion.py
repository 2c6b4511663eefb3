"""How much a zero-shot bi-encoder adds to a trained relevance judge: the judge's logit and the embedder's
cosine of (query, memory), combined by a logistic regression fitted on the calibration split and scored on
held-out LoCoMo pairs.

    fused = cosine_fusion(calibration_predictions, calibration_examples, dev_predictions, dev_examples, embedder)

`python -m training ensemble ... --cosine` prints it for each model. A large gain would say that the judge
throws away matching the base model already had; a small one, that its errors and the bi-encoder's coincide.
The dense negatives were mined with that same embedder, so the cosine alone is weak against them by
construction; the fit weighs that in, since the calibration split is mined the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from controller.embedding import Embedder
from data.schema import DecisionExample
from training.evaluate import auroc
from training.predict import Prediction
from training.relevance_report import pair_cosines, relevance_rows

KINDS = ("all", "locomo:bm25", "locomo:dense", "locomo:random", "locomo:bridge")


def fit_logistic(features: np.ndarray, labels: np.ndarray, *, l2: float = 1e-3, iterations: int = 50) -> np.ndarray:
    """Weights (one per column, then the intercept) of an L2-regularised logistic regression, by Newton steps.
    Columns are standardised inside and the weights returned on the original scale."""
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(y) or len(x) == 0:
        raise ValueError("fit_logistic needs a non-empty (n, d) feature array and n labels")
    if not 0 < y.sum() < len(y):
        raise ValueError("fit_logistic needs both classes")
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.c_[(x - mean) / scale, np.ones(len(x))]
    w = np.zeros(z.shape[1])
    penalty = l2 * len(x) * np.diag([1.0] * (z.shape[1] - 1) + [0.0])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        gradient = z.T @ (p - y) + penalty @ w
        hessian = (z * (p * (1 - p))[:, None]).T @ z + penalty + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    coef = w[:-1] / scale
    return np.r_[coef, w[-1] - float(coef @ mean)]


def cosine_fusion(
    calibration: Sequence[Prediction],
    calibration_examples: Sequence[DecisionExample],
    heldout: Sequence[Prediction],
    heldout_examples: Sequence[DecisionExample],
    embedder: Embedder | None = None,
    *,
    cosines: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """{"weights": {"logit", "cosine", "intercept"}, "pairs": {"calibration", "heldout"},
    kind: {"model", "cosine", "fused"} AUROC on the held-out pairs for each negative kind of `KINDS`}.
    The cosines come from `embedder`, or from `cosines` (example id -> cosine, `example_cosines`) when several
    models are scored on the same examples."""
    fit_rows, test_rows = relevance_rows(calibration, calibration_examples), relevance_rows(heldout, heldout_examples)
    if not fit_rows or not test_rows:
        raise ValueError("cosine fusion needs LoCoMo relevance predictions on both the calibration and the held-out split")
    if cosines is None:
        if embedder is None:
            raise ValueError("cosine fusion needs an embedder or precomputed cosines")
        cosines = example_cosines([e for _, e in fit_rows + test_rows], embedder)

    def columns(rows: list[tuple[Prediction, DecisionExample]]) -> tuple[np.ndarray, np.ndarray]:
        x = np.c_[[float(p.logits[0]) for p, _ in rows], [cosines[e.id] for _, e in rows]]
        return x, np.array([float(e.target) >= 0.5 for _, e in rows])  # type: ignore[arg-type]

    x_fit, y_fit = columns(fit_rows)
    w = fit_logistic(x_fit, y_fit)
    x, y = columns(test_rows)
    scores = {"model": x[:, 0], "cosine": x[:, 1], "fused": x @ w[:2]}
    notes = np.array([e.notes or "" for _, e in test_rows])
    out: dict[str, Any] = {"weights": {"logit": round(float(w[0]), 4), "cosine": round(float(w[1]), 4), "intercept": round(float(w[2]), 4)},
                           "pairs": {"calibration": len(fit_rows), "heldout": len(test_rows)}}
    for kind in KINDS:
        keep = y | (np.ones(len(y), dtype=bool) if kind == "all" else notes == kind)
        labels = y[keep].astype(int).tolist()
        out[kind] = {name: _rounded(auroc(s[keep].tolist(), labels)) for name, s in scores.items()}
    return out


def example_cosines(examples: Sequence[DecisionExample], embedder: Embedder) -> dict[str, float]:
    """Example id -> the embedder's (query, memory) cosine, each distinct example embedded once."""
    unique = list({e.id: e for e in examples}.values())
    return {e.id: float(c) for e, c in zip(unique, pair_cosines(unique, embedder))} if unique else {}


def fusion_table(named: dict[str, dict[str, Any]]) -> str:
    """Markdown: per model, the held-out AUROC of its logit, of the cosine and of the fitted combination."""
    lines = ["| model | score | " + " | ".join(KINDS) + " | weights (logit, cosine) |", "|---" * (len(KINDS) + 3) + "|"]
    for name, result in named.items():
        for score in ("model", "cosine", "fused"):
            cells = ["-" if result[k][score] is None else f"{result[k][score]:.3f}" for k in KINDS]
            weights = f"{result['weights']['logit']:.2f}, {result['weights']['cosine']:.2f}" if score == "fused" else ""
            lines.append(f"| {name} | {score} | " + " | ".join(cells) + f" | {weights} |")
    return "\n".join(lines)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


__all__ = ["KINDS", "cosine_fusion", "example_cosines", "fit_logistic", "fusion_table"]
