"""First-stage recall on LoCoMo: how many gold turns the engine's seed ranking puts in front of the judge.

    convs = load_locomo(path, audit=audit, conversations=("conv-44",))
    reports = {name: first_stage_recall(convs, create_embedder(name)) for name in ("minilm", "minilm-tuned")}
    print(format_table(reports))

A cheap way to compare retrieval embedders without running the controller's read path. Each conversation is
written turn by turn into a fresh in-memory engine (heuristic controller, consolidation off, so every node is a
turn; the turns go in as `eval locomo` writes them, `memory.ingest.turn_observation`). Then, for every answerable
question (categories `ANSWERABLE`) with gold turns and some text, two rankings of the store are scored:

- `dense`  the store's vector search for the question's embedding
- `fused`  the engine's seed ranking (`memory.traversal.hybrid_ranking`: BM25, vector, context and speaker lists
           fused, each list as deep as the read path makes it)

by R_frac@k = |gold turns covered by the top k nodes| / |gold turns| (`memory.evaluation.metrics`), over all
questions and over the multi-hop ones (category 1). Everything is deterministic for a deterministic embedder.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from controller.client import SystemOneClient
from controller.embedding import Embedder
from controller.heuristic import HeuristicBackend
from data.builders.locomo_retrieval import ANSWERABLE
from data.locomo import Conversation, Question
from memory.config import EngineConfig
from memory.engine import Engine
from memory.ingest import turn_observation
from memory.store.inmemory import InMemoryStore
from memory.traversal import hybrid_ranking

log = logging.getLogger(__name__)

RANKINGS: tuple[str, ...] = ("dense", "fused")
GROUPS: tuple[str, ...] = ("all", "multi-hop")
MULTI_HOP = 1  # the LoCoMo category of multi-hop questions
FIRST_STAGE_KS: tuple[int, ...] = (10, 30)
Progress = Callable[[str, int], Callable[[], None]]  # (label, total) -> step callback, as the harness's


@dataclass(frozen=True)
class QuestionRecall:
    """One question's R_frac@k for every (ranking, k)."""

    conversation: str
    qid: str
    category: int
    gold: int  # gold turns
    recall: Mapping[tuple[str, int], float]  # (ranking, k) -> R_frac@k

    @property
    def groups(self) -> tuple[str, ...]:
        return ("all", "multi-hop") if self.category == MULTI_HOP else ("all",)


@dataclass(frozen=True)
class FirstStageReport:
    """One embedder's first-stage recall. `means` holds (ranking, k, group) -> mean R_frac@k for every group with
    questions (no key for an empty group); `questions` the per-question values, in conversation and question
    order, so that two reports on the same data pair up question by question (`values`)."""

    embedder: str  # the embedder's name ("minilm-tuned:1a2b3c4d" for an adapted one)
    ks: tuple[int, ...]
    conversations: tuple[str, ...]
    means: Mapping[tuple[str, int, str], float]
    counts: Mapping[str, int]  # group -> questions
    questions: tuple[QuestionRecall, ...]

    def mean(self, ranking: str, k: int, group: str = "all") -> float:
        """The mean R_frac@k, NaN for a group without questions."""
        if ranking not in RANKINGS or k not in self.ks or group not in GROUPS:
            raise KeyError(f"no ({ranking!r}, {k}, {group!r}): rankings {RANKINGS}, ks {self.ks}, groups {GROUPS}")
        return self.means.get((ranking, k, group), math.nan)

    def values(self, ranking: str, k: int, group: str = "all") -> list[float]:
        """The per-question R_frac@k of a group, in question order."""
        self.mean(ranking, k, group)  # validates the key
        return [q.recall[(ranking, k)] for q in self.questions if group in q.groups]


def first_stage_questions(conversation: Conversation) -> list[Question]:
    """The questions scored: answerable categories, at least one gold turn, some text to ask."""
    return [q for q in conversation.questions if q.category in ANSWERABLE and q.evidence and q.question.strip()]


def first_stage_recall(
    conversations: Sequence[Conversation],
    embedder: Embedder,
    *,
    ks: Sequence[int] = FIRST_STAGE_KS,
    config: EngineConfig | None = None,
    progress: Progress | None = None,
) -> FirstStageReport:
    """Dense and fused first-stage R_frac@k of `embedder` on `conversations`, each in a fresh in-memory engine.

    `config` (default `EngineConfig()`) shapes the fused ranking; its consolidation is switched off, so the store
    holds turns only. `progress`, when given, is called once per conversation with (label, questions)."""
    wanted = tuple(sorted(set(ks)))
    if not wanted or wanted[0] < 1:
        raise ValueError(f"ks must be positive integers, got {tuple(ks)}")
    engine_config = (config or EngineConfig()).with_(consolidation_every=0)
    rows: list[QuestionRecall] = []
    for conv in conversations:
        questions = first_stage_questions(conv)
        step = progress(f"{embedder.name} {conv.sample_id}", len(questions)) if progress else None
        rows.extend(_conversation_recall(conv, questions, embedder, wanted, engine_config, step))
    return _report(embedder.name, wanted, tuple(c.sample_id for c in conversations), rows)


def _conversation_recall(
    conv: Conversation, questions: Sequence[Question], embedder: Embedder, ks: tuple[int, ...], config: EngineConfig,
    step: Callable[[], None] | None,
) -> list[QuestionRecall]:
    observations = [turn_observation(t) for t in conv.turns]
    batched = _Prepared(embedder, [o.content for o in observations] + [q.question for q in questions])
    # the read path fuses lists this deep (`memory.traversal.hybrid_seeds`); the fusion's head depends on it
    depth = max(config.seed_depth, config.seed_pool, max(ks))
    engine = Engine(InMemoryStore(batched.dim), SystemOneClient(HeuristicBackend()), batched, config)
    with engine:
        turns_of: dict[str, set[str]] = {}
        for obs in observations:
            turns_of.setdefault(engine.write(obs).node_id, set()).update(obs.source_ids)
        out = []
        for q in questions:
            vector = batched.embed([q.question])[0]
            orders = {
                "dense": [i for i, _ in engine.store.vector_search(vector, max(ks))],
                "fused": hybrid_ranking(engine.store, vector, q.question, depth, config)[0],
            }
            gold = set(q.evidence)
            recall = {(name, k): _covered(order[:k], turns_of, gold) / len(gold) for name, order in orders.items() for k in ks}
            out.append(QuestionRecall(conv.sample_id, q.qid, q.category, len(gold), recall))
            if step is not None:
                step()
    log.info("first stage %s on %s: %d turns, %d questions", embedder.name, conv.sample_id, len(conv.turns), len(out))
    return out


def _covered(top: Sequence[str], turns_of: Mapping[str, set[str]], gold: set[str]) -> int:
    """Gold turns held by the nodes in `top` (a node may hold several turns when the engine merged a repeat)."""
    seen: set[str] = set()
    for node_id in top:
        seen |= turns_of.get(node_id, set())
    return len(gold & seen)


def _report(name: str, ks: tuple[int, ...], conversations: tuple[str, ...], rows: list[QuestionRecall]) -> FirstStageReport:
    counts = {g: sum(g in r.groups for r in rows) for g in GROUPS}
    means = {
        (ranking, k, g): float(np.mean([r.recall[(ranking, k)] for r in rows if g in r.groups]))
        for ranking in RANKINGS for k in ks for g in GROUPS if counts[g]
    }
    return FirstStageReport(name, ks, conversations, means, counts, tuple(rows))


class _Prepared:
    """`embedder` with a conversation's texts embedded up front in batches: the engine asks for one text at a
    time, which costs a model call each on MiniLM. Texts not prepared are passed through."""

    def __init__(self, embedder: Embedder, texts: Sequence[str]) -> None:
        self.inner = embedder
        self.name = embedder.name
        unique = list(dict.fromkeys(texts))
        vectors = embedder.embed(unique)  # (n, dim)
        self.dim = int(vectors.shape[1]) if len(unique) else embedder.dim
        self._vectors = dict(zip(unique, vectors))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, self.inner.embed(missing)))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32)


def format_table(reports: Mapping[str, FirstStageReport]) -> str:
    """A markdown table, one row per report (its key names the row): dense and fused R_frac@k, fused R_frac@k on
    multi-hop questions, and the question counts. The reports must share their ks."""
    if not reports:
        raise ValueError("no reports to tabulate")
    ks_seen = {r.ks for r in reports.values()}
    if len(ks_seen) > 1:
        raise ValueError(f"reports differ in their ks: {sorted(ks_seen)}")
    ks = ks_seen.pop()
    columns = [*(f"dense@{k}" for k in ks), *(f"fused@{k}" for k in ks), *(f"multi-hop fused@{k}" for k in ks)]
    lines = [
        "| embedder | " + " | ".join(columns) + " | questions | multi-hop |",
        "|---|" + "---:|" * (len(columns) + 2),
    ]
    for label, r in reports.items():
        cells = [r.mean(ranking, k, group) for ranking, group in (("dense", "all"), ("fused", "all"), ("fused", "multi-hop"))
                 for k in ks]
        name = label if label == r.embedder else f"{label} ({r.embedder})"
        shown = " | ".join("-" if math.isnan(v) else f"{v:.3f}" for v in cells)
        lines.append(f"| {name} | {shown} | {r.counts['all']} | {r.counts['multi-hop']} |")
    return "\n".join(lines)
