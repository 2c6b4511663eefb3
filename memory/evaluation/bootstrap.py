"""Conversation-cluster bootstrap: questions of one conversation are not independent, so resample whole
conversations with replacement and recompute the question-weighted mean on each draw.

Draw i uses the same resampled conversations for every system and metric (one generator, fixed seed), so
paired differences (system minus reference, question by question) share their draws.

With few conversations that interval says little: with two, every draw is conversation A twice, B twice or
both, so its 2.5 / 97.5 percentiles are about the two conversations' own means, a range rather than a 95 %
interval. `unit="question"` resamples questions within each conversation
instead (each conversation keeps its question count): an interval for these conversations' questions, which
is what a run on the dev pair can support; it does not cover the spread between conversations. Reports give
both, and say which one a run with fewer than `MIN_CLUSTERS` conversations should be read by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memory.evaluation.metrics import QuestionScore, group_of, percentile

# (group, metric) pairs that get confidence intervals
HEADLINE: tuple[tuple[str, str], ...] = (
    ("1-5", "R_any@10"),
    ("1-5", "R_frac@10"),
    ("1-5", "R_all@10"),
    ("1", "R_all@10"),
    ("1", "R_frac@10"),
    ("1-5", "nDCG@10"),
    ("1-5", "MRR"),
    ("1-4", "R_frac@10"),
)


MIN_CLUSTERS = 5  # fewer conversations: the conversation-cluster interval is about their range, not a 95 % CI
UNITS = ("conversation", "question")


@dataclass(frozen=True)
class Interval:
    mean: float  # on the original sample
    low: float  # 2.5th percentile of the draws
    high: float  # 97.5th percentile of the draws
    draws: int


def draw_indices(n_clusters: int, draws: int, seed: int) -> np.ndarray:
    """(draws, n_clusters) cluster indices; identical for identical arguments."""
    if n_clusters < 1 or draws < 1:
        raise ValueError(f"need at least one cluster and one draw (got {n_clusters}, {draws})")
    return np.random.default_rng(seed).integers(0, n_clusters, size=(draws, n_clusters))


def _cluster_sums(values: dict[str, list[float]], clusters: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    sums = np.array([sum(values.get(c, ())) for c in clusters], dtype=np.float64)
    counts = np.array([len(values.get(c, ())) for c in clusters], dtype=np.float64)
    return sums, counts


def _interval(values: dict[str, list[float]], clusters: Sequence[str], idx: np.ndarray) -> Interval | None:
    sums, counts = _cluster_sums(values, clusters)
    if counts.sum() == 0:
        return None
    drawn_counts = counts[idx].sum(axis=1)  # (draws,)
    ok = drawn_counts > 0  # a draw holding no question of the group says nothing about it
    means = (sums[idx].sum(axis=1)[ok] / drawn_counts[ok]).tolist()
    return Interval(
        mean=float(sums.sum() / counts.sum()),
        low=percentile(means, 2.5) if means else float("nan"),
        high=percentile(means, 97.5) if means else float("nan"),
        draws=len(means),
    )


def _per_cluster(scores: Sequence[QuestionScore], group: str, metric: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for s in scores:
        if group in group_of(s.category) and metric in s.values:
            out.setdefault(s.conversation, []).append(s.values[metric])
    return out


def bootstrap_intervals(
    scores: Sequence[QuestionScore],
    clusters: Sequence[str],
    *,
    targets: Sequence[tuple[str, str]] = HEADLINE,
    draws: int = 1000,
    seed: int = 0,
    unit: str = "conversation",
) -> dict[str, Interval]:
    """CI per target, keyed `"<metric> [<group>]"`, resampling whole conversations (`unit="conversation"`) or
    questions within each conversation (`unit="question"`)."""
    if unit not in UNITS:
        raise ValueError(f"unknown bootstrap unit {unit!r}; choose from {', '.join(UNITS)}")
    clusters = list(dict.fromkeys(clusters))  # a conversation named twice is still one conversation
    idx = draw_indices(len(clusters), draws, seed)
    out = {}
    for group, metric in targets:
        per = _per_cluster(scores, group, metric)
        if unit == "question":
            interval = _question_interval(per, clusters, draws, seed)
        else:
            interval = _interval(per, clusters, idx)
        if interval is not None:
            out[f"{metric} [{group}]"] = interval
    return out


def paired_differences(
    system: Sequence[QuestionScore],
    reference: Sequence[QuestionScore],
    clusters: Sequence[str],
    *,
    targets: Sequence[tuple[str, str]] = HEADLINE,
    draws: int = 1000,
    seed: int = 0,
    unit: str = "conversation",
) -> dict[str, Interval]:
    """CI of the mean per-question difference system - reference (questions matched by conversation and id)."""
    return bootstrap_intervals(_differences(system, reference), clusters, targets=targets, draws=draws, seed=seed, unit=unit)


def _differences(system: Sequence[QuestionScore], reference: Sequence[QuestionScore]) -> list[QuestionScore]:
    ref = {(s.conversation, s.qid): s for s in reference}
    diffs = []
    for s in system:
        r = ref.get((s.conversation, s.qid))
        if r is None:
            continue
        shared = {m: s.values[m] - r.values[m] for m in s.values if m in r.values}
        diffs.append(QuestionScore(s.conversation, s.qid, s.category, s.n_gold, shared))
    return diffs


def _question_interval(values: dict[str, list[float]], clusters: Sequence[str], draws: int, seed: int) -> Interval | None:
    """Resample each conversation's questions with replacement (its count kept); the question-weighted mean."""
    rng = np.random.default_rng(seed)
    totals = np.zeros(draws)
    n, total = 0, 0.0
    for cluster in clusters:  # one generator, conversations in a fixed order: the same draws for every system
        vals = np.asarray(values.get(cluster, ()), dtype=np.float64)
        if not len(vals):
            continue
        totals += vals[rng.integers(0, len(vals), size=(draws, len(vals)))].sum(axis=1)
        n, total = n + len(vals), total + float(vals.sum())
    if n == 0:
        return None
    means = (totals / n).tolist()
    mean = total / n  # over the conversations asked for, as the draws are
    return Interval(mean=float(mean), low=percentile(means, 2.5), high=percentile(means, 97.5), draws=draws)
