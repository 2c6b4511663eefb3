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
construction. The length column scores each pair by the memory's character count alone, a query-blind
baseline, and `same_memory` measures how much the model's logit depends on the query at all: for memories
that appear under two or more queries, the mean within-memory variance of the logit as a share of its total
variance (near 0: the model judges the memory, not the pair).
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
    rows = relevance_rows(predictions, examples, question=question, source=source)
    if not rows:
        return {}
    model = np.array([float(p.logits[0]) for p, _ in rows])
    cosine = pair_cosines([e for _, e in rows], embedder) if embedder is not None else None
    length = np.array([float(len(str(e.state["memory"]))) for _, e in rows])
    positive = np.array([float(e.target) >= 0.5 for _, e in rows])  # type: ignore[arg-type]
    kinds = sorted({e.notes or "unmarked" for (_, e), pos in zip(rows, positive) if not pos})
    out: dict[str, dict[str, Any]] = {}
    for kind in ("all", *kinds):
        negative = ~positive if kind == "all" else np.array([not pos and (e.notes or "unmarked") == kind for (_, e), pos in zip(rows, positive)])
        keep = positive | negative
        labels = positive[keep].astype(int).tolist()
        out[kind] = {"positives": int(positive.sum()), "negatives": int(negative.sum()), "model": _rounded(auroc(model[keep].tolist(), labels)),
                     "cosine": _rounded(auroc(cosine[keep].tolist(), labels)) if cosine is not None else None,
                     "length": _rounded(auroc(length[keep].tolist(), labels))}
    queries: dict[str, list[int]] = {}
    for i, (_, e) in enumerate(rows):
        queries.setdefault(str(e.state["query"]), []).append(i)
    mixed = [ix for ix in queries.values() if 0 < positive[ix].sum() < len(ix)]
    out["per_query"] = {"positives": int(sum(positive[ix].sum() for ix in mixed)), "negatives": int(sum((~positive[ix]).sum() for ix in mixed)),
                        "queries": len(mixed), "model": _mean_auroc(model, positive, mixed),
                        "cosine": _mean_auroc(cosine, positive, mixed) if cosine is not None else None,
                        "length": _mean_auroc(length, positive, mixed)}
    out["same_memory"] = same_memory_share(model, [str(e.state["memory"]) for _, e in rows])
    return out


def relevance_rows(predictions: Sequence[Prediction], examples: Sequence[DecisionExample], *,
                   question: str = "relevant", source: str = "locomo") -> list[tuple[Prediction, DecisionExample]]:
    """(prediction, example) for the un-paraphrased Noul `question` of the relevance family from `source`."""
    by_id = {e.id: e for e in examples}
    return [(p, by_id[p.label.example_id]) for p in predictions
            if p.family == "relevance" and p.kind == "noul" and p.label.question_name == question
            and p.label.variant == "" and p.label.example_id in by_id and by_id[p.label.example_id].source == source]


def pair_cosines(examples: Sequence[DecisionExample], embedder: Embedder) -> np.ndarray:
    """The embedder's cosine of each example's (state.query, state.memory), in order."""
    q = embedder.embed([str(e.state["query"]) for e in examples])
    m = embedder.embed([str(e.state["memory"]) for e in examples])
    return (np.asarray(q) * np.asarray(m)).sum(axis=1)


def same_memory_share(logits: np.ndarray, memories: Sequence[str]) -> dict[str, Any]:
    """{"memories", "pairs", "within_share"}: the mean variance of the logit within each memory shown under
    two or more queries, over the logit's variance across those pairs (None when no memory repeats)."""
    groups: dict[str, list[int]] = {}
    for i, memory in enumerate(memories):
        groups.setdefault(memory, []).append(i)
    repeated = [ix for ix in groups.values() if len(ix) > 1]
    pooled = np.concatenate([logits[ix] for ix in repeated]) if repeated else np.array([])
    total = float(np.var(pooled)) if len(pooled) > 1 else 0.0
    within = float(np.mean([np.var(logits[ix]) for ix in repeated])) if repeated else 0.0
    return {"memories": len(repeated), "pairs": int(len(pooled)), "within_share": _rounded(within / total) if total > 0 else None}


def relevance_table(table: dict[str, dict[str, Any]]) -> str:
    """Markdown: negative kind, counts, model, cosine and memory-length AUROC; then the same-memory share."""
    lines = ["| negatives | positives | negatives n | AUROC model | AUROC cosine | AUROC length |", "|---|---|---|---|---|---|"]
    for kind, row in table.items():
        if kind == "same_memory":
            continue
        cells = [kind + (f" ({row['queries']} queries)" if "queries" in row else ""), row["positives"], row["negatives"], row["model"],
                 row["cosine"], row.get("length")]
        lines.append("| " + " | ".join("-" if c is None else f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells) + " |")
    same = table.get("same_memory")
    if same and same.get("within_share") is not None:
        lines += ["", f"Same memory under different queries ({same['memories']} memories, {same['pairs']} pairs): "
                      f"{same['within_share']:.3f} of the logit variance lies within a memory (0: the query changes nothing)."]
    return "\n".join(lines)


def _mean_auroc(scores: np.ndarray, positive: np.ndarray, groups: list[list[int]]) -> float | None:
    values = [auroc(scores[ix].tolist(), positive[ix].astype(int).tolist()) for ix in groups]
    kept = [v for v in values if v is not None]
    return _rounded(float(np.mean(kept))) if kept else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)
