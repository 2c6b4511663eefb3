"""Retrieval metrics of EVALUATION.md section 1, on rankings projected onto LoCoMo turns.

A system returns ranked *items* (nodes); each item carries the turn ids (`dia_id`s) it was built from and the
text it emits. A turn's rank is the rank of the first item that contains it (1-based). Per question:

- `R_any@k`  1 if some gold turn is covered by the top k items, else 0
- `R_frac@k` share of gold turns covered by the top k items (the LoCoMo paper's recall)
- `R_all@k`  1 if every gold turn is covered by the top k items (the multi-hop test)
- `nDCG@10`  binary gains at the turns' ranks, DCG = sum 1/log2(1 + rank) over gold turns ranked <= 10,
             IDCG = the same for min(|gold|, 10) gold turns at ranks 1..; capped at 1 (an item holding
             several gold turns gives each of them its rank). Equals the textbook value for one-turn items.
- `MRR`      1 / rank of the first gold turn within the top 20 items, 0 if none (cut at 20 so that flat
             baselines, which rank every turn, and the engine, which returns at most 20, are comparable)
- `..@512t`  the same recalls on the longest prefix of items whose emitted text fits in the token budget
- `..@ret`   the same recalls on everything the system returned (adaptive stopping), with `tokens@ret`
             and `items@ret`

Tokens are counted by `count_tokens`: one token per run of word characters and one per other non-space
character. It needs no tokenizer; on the 3,435 LoCoMo dev turns it gives 98 % of MiniLM's wordpiece count
(119,093 vs 121,329; 95 % of turns within 8 %: wordpieces split rare words further). Every system is counted
the same way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

KS: tuple[int, ...] = (5, 10, 20)
BUDGETS: tuple[int, ...] = (512, 1024, 2048)
MRR_CUTOFF = 20
NDCG_CUTOFF = 10
GROUPS: tuple[str, ...] = ("1", "2", "3", "4", "5", "1-4", "1-5")
CATEGORY_LABELS: dict[str, str] = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial"}
_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Word runs plus punctuation marks (see the module docstring)."""
    return len(_TOKEN.findall(text))


@dataclass(frozen=True)
class Item:
    """One ranked result: the turns it covers and the text it would put into a context window."""

    source_ids: tuple[str, ...]
    text: str = ""


@dataclass(frozen=True)
class QuestionScore:
    conversation: str
    qid: str
    category: int
    n_gold: int
    values: dict[str, float]
    gold_ranks: dict[str, int | None] = field(default_factory=dict)  # gold turn -> 1-based rank (None: not returned)


@dataclass(frozen=True)
class GroupTable:
    """Mean of every metric per question group ('1'..'5' categories, '1-4', '1-5') and group sizes."""

    means: dict[str, dict[str, float]]
    counts: dict[str, int]
    metrics: tuple[str, ...] = field(default=())


def turn_ranks(items: Sequence[Item]) -> dict[str, int]:
    """Rank (1-based) of the first item containing each turn."""
    ranks: dict[str, int] = {}
    for rank, item in enumerate(items, start=1):
        for sid in item.source_ids:
            ranks.setdefault(sid, rank)
    return ranks


def _recalls(covered: set[str], gold: Sequence[str], suffix: str, out: dict[str, float]) -> None:
    hits = sum(1 for g in gold if g in covered)
    out[f"R_any@{suffix}"] = 1.0 if hits else 0.0
    out[f"R_frac@{suffix}"] = hits / len(gold)
    out[f"R_all@{suffix}"] = 1.0 if hits == len(gold) else 0.0


def _prefix_covered(items: Sequence[Item], n: int) -> set[str]:
    return {sid for item in items[:n] for sid in item.source_ids}


def budget_prefix(items: Sequence[Item], budget: int) -> int:
    """Number of leading items whose emitted text fits in `budget` tokens together."""
    used = 0
    for n, item in enumerate(items):
        used += count_tokens(item.text)
        if used > budget:
            return n
    return len(items)


def ndcg(ranks: Mapping[str, int], gold: Sequence[str], cutoff: int = NDCG_CUTOFF) -> float:
    dcg = sum(1.0 / math.log2(1 + ranks[g]) for g in gold if g in ranks and ranks[g] <= cutoff)
    ideal = sum(1.0 / math.log2(1 + i) for i in range(1, min(len(gold), cutoff) + 1))
    return min(1.0, dcg / ideal) if ideal else 0.0


def reciprocal_rank(ranks: Mapping[str, int], gold: Sequence[str], cutoff: int = MRR_CUTOFF) -> float:
    found = [ranks[g] for g in gold if g in ranks and ranks[g] <= cutoff]
    return 1.0 / min(found) if found else 0.0


def score_items(
    items: Sequence[Item],
    gold: Sequence[str],
    *,
    ks: Sequence[int] = KS,
    budgets: Sequence[int] = BUDGETS,
    returned: bool = False,
) -> dict[str, float]:
    """All metrics of one question. `returned=True` adds the `@ret` (adaptive stopping) figures."""
    if not gold:
        raise ValueError("a question without gold turns cannot be scored")
    out: dict[str, float] = {}
    for k in ks:
        _recalls(_prefix_covered(items, k), gold, str(k), out)
    ranks = turn_ranks(items)
    out[f"nDCG@{NDCG_CUTOFF}"] = ndcg(ranks, gold)
    out["MRR"] = reciprocal_rank(ranks, gold)
    for budget in budgets:
        _recalls(_prefix_covered(items, budget_prefix(items, budget)), gold, f"{budget}t", out)
    if returned:
        _recalls(_prefix_covered(items, len(items)), gold, "ret", out)
        out["items@ret"] = float(len(items))
        out["tokens@ret"] = float(sum(count_tokens(item.text) for item in items))
    return out


def group_of(category: int) -> tuple[str, ...]:
    """The groups a question of this category counts in."""
    groups = [str(category), "1-5"]
    if category in (1, 2, 3, 4):
        groups.append("1-4")
    return tuple(groups)


def aggregate(scores: Iterable[QuestionScore]) -> GroupTable:
    """Micro-averages (every question weighs the same) per group."""
    sums: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    metrics: list[str] = []
    for s in scores:
        for name in s.values:
            if name not in metrics:
                metrics.append(name)
        for group in group_of(s.category):
            counts[group] = counts.get(group, 0) + 1
            acc = sums.setdefault(group, {})
            for name, value in s.values.items():
                acc[name] = acc.get(name, 0.0) + value
    means = {g: {m: v / counts[g] for m, v in sums[g].items()} for g in GROUPS if g in sums}
    return GroupTable(means=means, counts={g: counts[g] for g in GROUPS if g in counts}, metrics=tuple(metrics))


RANK_BANDS: tuple[int, ...] = (5, 10)


def gold_rank_shares(scores: Iterable[QuestionScore], query_k: int, bands: Sequence[int] = RANK_BANDS) -> dict[str, dict[str, float]]:
    """Per group ('1'..'5', '1-4', '1-5'): the share of gold turns (every gold turn of every question counts once)
    returned at ranks 1-5, 6-10, 11-`query_k`, or not returned at all, and `turns`, their count. It says whether
    missed evidence ranks just below the cut (a ranking problem) or never reaches the returned list (a pool problem)."""
    edges = [*sorted(b for b in bands if b < query_k), query_k]
    names = [f"{lo + 1}-{hi}" for lo, hi in zip([0, *edges[:-1]], edges)] + ["not returned"]
    counts: dict[str, dict[str, int]] = {}
    for s in scores:
        for rank in s.gold_ranks.values():
            band = names[-1] if rank is None or rank > query_k else names[next(i for i, e in enumerate(edges) if rank <= e)]
            for group in group_of(s.category):
                acc = counts.setdefault(group, dict.fromkeys(names, 0))
                acc[band] += 1
    out: dict[str, dict[str, float]] = {}
    for group in GROUPS:
        if group in counts:
            total = sum(counts[group].values())
            out[group] = {**{n: c / total for n, c in counts[group].items()}, "turns": float(total)}
    return out


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve (Mann-Whitney, ties count one half); None when a class is empty."""
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores for {len(labels)} labels")
    pairs = sorted(zip(scores, labels), key=lambda x: x[0])
    n_pos = sum(1 for _, y in pairs if y)
    n_neg = len(pairs) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    # average ranks over tie blocks
    rank_sum_pos = 0.0
    i = 0
    while i < len(pairs):
        j = i
        while j + 1 < len(pairs) and pairs[j + 1][0] == pairs[i][0]:
            j += 1
        mid = (i + j) / 2 + 1  # 1-based average rank of the block
        rank_sum_pos += mid * sum(1 for t in range(i, j + 1) if pairs[t][1])
        i = j + 1
    return (rank_sum_pos - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)
