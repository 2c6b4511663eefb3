"""Candidate relevance on held-out LoCoMo, broken down by how each negative was mined, beside a zero-shot
bi-encoder: where the trained controller tells evidence from other turns, and where it does not.

    table = relevance_by_negative(predictions, examples, create_embedder("minilm"))

Positives are the gold evidence turns of the `relevant` question (target 1); each negative kind (the example's
`notes`: `locomo:bm25`, `locomo:dense`, `locomo:random`, `locomo:bridge`) gets the AUROC of every positive
against its negatives, and `all` pools them. `per_query` is the mean AUROC within each query that has both
classes, which is what a ranking of one query's candidates needs. The model column uses raw logits
(calibration is monotone per question, so it cannot change an AUROC); the cosine column scores the same
(query, memory) pairs with an embedder's cosine, for the base MiniLM the retriever the controller is meant
to improve on. The dense negatives were mined with that same embedder, so its AUROC against them is low by
construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from controller.embedding import Embedder
from data.schema import DecisionExample
from training.evaluate import auroc
from training.predict import Prediction


def relevance_by_negative(
    predictions: Sequence[Prediction],
    examples: Sequence[DecisionExample],
    embedder: Embedder | None = None,
    *,
    question: str = "relevant",
    source: str = "locomo",
) -> dict[str, dict[str, Any]]:
    """{negative kind | "all" | "per_query": {"positives", "negatives", "model", "cosine"}}; {} without data."""
    by_id = {e.id: e for e in examples}
    rows = [(p, by_id[p.label.example_id]) for p in predictions
            if p.family == "relevance" and p.kind == "noul" and p.label.question_name == question
            and p.label.variant == "" and p.label.example_id in by_id and by_id[p.label.example_id].source == source]
    if not rows:
        return {}
    model = np.array([float(p.logits[0]) for p, _ in rows])
    cosine = None
    if embedder is not None:
        q = embedder.embed([str(e.state["query"]) for _, e in rows])
        m = embedder.embed([str(e.state["memory"]) for _, e in rows])
        cosine = (np.asarray(q) * np.asarray(m)).sum(axis=1)
    positive = np.array([float(e.target) >= 0.5 for _, e in rows])  # type: ignore[arg-type]
    kinds = sorted({e.notes or "unmarked" for (_, e), pos in zip(rows, positive) if not pos})
    out: dict[str, dict[str, Any]] = {}
    for kind in ("all", *kinds):
        negative = ~positive if kind == "all" else np.array([not pos and (e.notes or "unmarked") == kind for (_, e), pos in zip(rows, positive)])
        keep = positive | negative
        labels = positive[keep].astype(int).tolist()
        out[kind] = {"positives": int(positive.sum()), "negatives": int(negative.sum()), "model": _rounded(auroc(model[keep].tolist(), labels)),
                     "cosine": _rounded(auroc(cosine[keep].tolist(), labels)) if cosine is not None else None}
    queries: dict[str, list[int]] = {}
    for i, (_, e) in enumerate(rows):
        queries.setdefault(str(e.state["query"]), []).append(i)
    mixed = [ix for ix in queries.values() if 0 < positive[ix].sum() < len(ix)]
    out["per_query"] = {"positives": int(sum(positive[ix].sum() for ix in mixed)), "negatives": int(sum((~positive[ix]).sum() for ix in mixed)),
                        "queries": len(mixed), "model": _mean_auroc(model, positive, mixed),
                        "cosine": _mean_auroc(cosine, positive, mixed) if cosine is not None else None}
    return out


def relevance_table(table: dict[str, dict[str, Any]]) -> str:
    """Markdown: negative kind, counts, model and cosine AUROC."""
    lines = ["| negatives | positives | negatives n | AUROC model | AUROC cosine |", "|---|---|---|---|---|"]
    for kind, row in table.items():
        cells = [kind + (f" ({row['queries']} queries)" if "queries" in row else ""), row["positives"], row["negatives"], row["model"], row["cosine"]]
        lines.append("| " + " | ".join("-" if c is None else f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells) + " |")
    return "\n".join(lines)


def _mean_auroc(scores: np.ndarray, positive: np.ndarray, groups: list[list[int]]) -> float | None:
    values = [auroc(scores[ix].tolist(), positive[ix].astype(int).tolist()) for ix in groups]
    kept = [v for v in values if v is not None]
    return _rounded(float(np.mean(kept))) if kept else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)
