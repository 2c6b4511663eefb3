"""Flat baselines over the turns of one conversation: BM25, dense MiniLM and their reciprocal-rank fusion.
BM25 also comes with the memory store's stemmed terms (`controller.lexical.index_tokens`), so a gain the
engine owes to its stemmed index alone can be told apart from the rest.

Each ranks *every* turn of the conversation (EVALUATION.md's reference protocol) and returns turn positions,
best first. Text of a turn (the reference configuration):

- BM25:  `[date] Speaker: text [shares caption]`
- dense: `[date] Speaker: text`

where `[date]` is the session date rendered by `DATE_STYLES[style]` (the reference figures are reproduced by
the style named in `REFERENCE_DATE_STYLE`; see the report of `jevmem eval locomo`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from controller.embedding import Embedder
from controller.lexical import BM25, index_tokens
from data.locomo import Turn

DATE_STYLES: dict[str, Callable[[datetime], str]] = {
    "none": lambda d: "",
    "locomo": lambda d: d.strftime("%-I:%M %p on %-d %B, %Y").replace("AM", "am").replace("PM", "pm"),
    "day": lambda d: d.strftime("%-d %B %Y"),
    "day_comma": lambda d: d.strftime("%-d %B, %Y"),
    "iso": lambda d: d.strftime("%Y-%m-%d"),
    "iso_time": lambda d: d.strftime("%Y-%m-%d %H:%M"),
}
REFERENCE_DATE_STYLE = "locomo"


def _date_prefix(turn: Turn, style: str) -> str:
    if style not in DATE_STYLES:
        raise ValueError(f"unknown date style {style!r}; choose one of {sorted(DATE_STYLES)}")
    if turn.date is None or style == "none":
        return ""
    return f"[{DATE_STYLES[style](turn.date)}] "


def bm25_text(turn: Turn, style: str = REFERENCE_DATE_STYLE) -> str:
    return _date_prefix(turn, style) + turn.memory_text()


def dense_text(turn: Turn, style: str = REFERENCE_DATE_STYLE) -> str:
    return f"{_date_prefix(turn, style)}{turn.speaker}: {turn.text}"


@dataclass(frozen=True)
class Ranking:
    """Turn positions (indices into the conversation's turns), best first, covering every turn."""

    order: tuple[int, ...]


def bm25_rank(turns: Sequence[Turn], queries: Sequence[str], *, style: str = REFERENCE_DATE_STYLE,
              stemmed: bool = False) -> list[Ranking]:
    """BM25 (k1=1.2, b=0.75) over the turns; turns sharing no term follow in conversation order. `stemmed`: over
    the memory store's stemmed terms instead of the reference's plain tokens."""
    index = BM25(analyzer=index_tokens if stemmed else None)
    index.add_many(bm25_text(t, style) for t in turns)
    out = []
    for query in queries:
        scores = index.scores(query)
        order = sorted(range(len(turns)), key=lambda d: (-scores.get(d, 0.0), d))
        out.append(Ranking(tuple(order)))
    return out


def dense_rank(
    turns: Sequence[Turn], queries: Sequence[str], embedder: Embedder, *, style: str = REFERENCE_DATE_STYLE
) -> list[Ranking]:
    """Cosine similarity of normalised embeddings; ties broken by conversation order."""
    if not queries:
        return []
    docs = embedder.embed([dense_text(t, style) for t in turns])  # (n_turns, dim)
    qs = embedder.embed(list(queries))  # (n_queries, dim)
    sims = qs @ docs.T  # (n_queries, n_turns)
    out = []
    for row in sims:
        # stable sort on -similarity keeps conversation order among equal scores
        order = np.argsort(-row, kind="stable")
        out.append(Ranking(tuple(int(i) for i in order)))
    return out


def rrf_fuse(rankings: Sequence[Ranking], weights: Sequence[float], *, k: int = 60) -> Ranking:
    """Weighted reciprocal-rank fusion: score(d) = sum_i w_i / (k + rank_i(d)), ranks 1-based."""
    if len(rankings) != len(weights):
        raise ValueError(f"{len(rankings)} rankings for {len(weights)} weights")
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights):
        for rank, doc in enumerate(ranking.order, start=1):
            scores[doc] = scores.get(doc, 0.0) + weight / (k + rank)
    return Ranking(tuple(sorted(scores, key=lambda d: (-scores[d], d))))
