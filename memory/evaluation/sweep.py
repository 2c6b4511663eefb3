"""Read-path sweeps: write each conversation once, then query it under several read-path configurations.

    results = sweep_read_configs(convs, client, embedder, preset("default"),
                                 {"as is": {}, "weight 2": {"relevance_weight": 2.0}})
    print(sweep_table(results))

The store is written under the base configuration, so a variant may change read-path fields only (others are
refused). The controller's answers are memoised per request for the whole sweep: a variant pays only for the
requests it adds, which makes a ten-variant sweep cost little more than one run, and makes its timings
meaningless (none are reported). Scores use `memory.evaluation.metrics.score_items`, as the harness does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from controller.client import SystemOneClient
from controller.embedding import Embedder
from data.locomo import Conversation
from memory.config import EngineConfig
from memory.control import Controller, Usage
from memory.errors import ConfigError
from memory.evaluation.bootstrap import paired_differences
from memory.evaluation.harness import _embedder, _engine_config, scored_questions
from memory.evaluation.metrics import Item, QuestionScore, auroc, score_items
from memory.evaluation.oracle import Level

log = logging.getLogger(__name__)
JUDGE_SEP = " | "  # between a variant's name and its relevance judge in an oracle sweep's run names (`sweep_table` splits them)

# The fields a query reads; every other EngineConfig field shapes what a write stores.
READ_PATH_FIELDS: frozenset[str] = frozenset({
    "tau_route", "expansion_budget", "min_view_budget", "gamma", "max_depth", "n_seeds", "seed_pool", "seed_depth",
    "seed_rrf_k", "dense_weight", "context_weight", "context_depth", "named_speaker_weight", "named_speaker_depth",
    "expand_per_node", "tau_frontier", "tau_stop", "tau_continue", "stop_evidence_k",
    "ask_stop", "ask_bridge", "relevance_context", "relevance_dated", "max_evidence_chars", "seed_weight", "relevance_weight",
    "center_relevance", "relevance_logit", "center_on_pool", "order_edges_view",
    "feedback_k", "feedback_docs", "tau_admit", "expand_decay", "recency_weight", "superseded_penalty", "answer_evidence_k",
})


class MemoController(Controller):
    """A `Controller` that answers a request it has seen before from memory (same state, same questions).
    `usage()` counts what was sent; `asked()` counts every request made of it, answered from memory or not,
    which is what an engine without the memo would have sent."""

    def __init__(self, client: SystemOneClient) -> None:
        super().__init__(client)
        self._memo: dict[str, Any] = {}
        self._asked = Usage(0, 0, 0)

    def asked(self) -> Usage:
        with self._lock:
            return self._asked

    def _note(self, requests: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            a = self._asked
            self._asked = Usage(a.calls + 1, a.requests + len(requests), a.questions + sum(len(q) for q in requests))

    @staticmethod
    def _key(state: Mapping[str, Any], questions: Mapping[str, Any]) -> str:
        return json.dumps([state, questions], sort_keys=True, default=str)

    def ask(self, state: Mapping[str, Any], questions: Mapping[str, Any]) -> Any:
        self._note([questions])
        key = self._key(state, questions)
        if key not in self._memo:
            self._memo[key] = super().ask(state, questions)
        return self._memo[key]

    def ask_batch(self, requests: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> list[Any]:
        if requests:
            self._note([q for _, q in requests])
        keys = [self._key(s, q) for s, q in requests]
        missing = [i for i, k in enumerate(keys) if k not in self._memo]
        if missing:
            for i, answers in zip(missing, super().ask_batch([requests[i] for i in missing])):
                self._memo[keys[i]] = answers
        return [self._memo[k] for k in keys]


def variant_configs(base: EngineConfig, variants: Mapping[str, Mapping[str, Any]]) -> dict[str, EngineConfig]:
    """Each variant as a validated config; a variant that changes a write-path field is refused."""
    if not variants:
        raise ConfigError("a sweep needs at least one variant", "variants", variants)
    known = {f.name for f in fields(EngineConfig)}
    out: dict[str, EngineConfig] = {}
    for name, changes in variants.items():
        if not isinstance(changes, Mapping):
            raise ConfigError(f"variant {name!r} must map config fields to values", name, changes)
        written = sorted(set(changes) & (known - READ_PATH_FIELDS))
        if written:
            raise ConfigError(f"variant {name!r} changes write-path fields ({', '.join(written)}); sweep them with "
                              "separate runs of `jevmem eval locomo --config`", written[0], changes[written[0]])
        out[name] = base.with_(**dict(changes))
    return out


@dataclass
class SweepResult:
    """Scores per variant name; with oracle levels, the AUROC of the relevance answers each level gave (and of
    the controller's own answers on the same judged pairs), pooled over the conversations."""

    scores: dict[str, list[QuestionScore]]
    relevance_auroc: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # name -> (given, own)
    # name -> controller questions each query asked (answers from the memo count too: what a fresh engine asks)
    questions: dict[str, list[int]] = field(default_factory=dict)
    stopped: dict[str, dict[str, int]] = field(default_factory=dict)  # name -> stopped_reason -> queries


def sweep_read_configs(
    conversations: Sequence[Conversation],
    client: SystemOneClient,
    embedder: Embedder,
    base: EngineConfig,
    variants: Mapping[str, Mapping[str, Any]],
    *,
    query_k: int = 20,
) -> dict[str, list[QuestionScore]]:
    """Every scored question of every conversation under every variant (in the order given)."""
    return sweep(conversations, client, embedder, base, variants, query_k=query_k).scores


def sweep(
    conversations: Sequence[Conversation],
    client: SystemOneClient,
    embedder: Embedder,
    base: EngineConfig,
    variants: Mapping[str, Mapping[str, Any]],
    *,
    query_k: int = 20,
    oracle_levels: Sequence[Level] = (),
    oracle_seed: int = 0,
) -> SweepResult:
    """`sweep_read_configs`, optionally crossed with relevance oracles (`memory.evaluation.oracle`): every variant
    is then run once per level and named `variant | level`; a level of None keeps the controller's own answers,
    "heuristic" and "mean" ask the heuristic controller too (see `memory.evaluation.oracle.parse_levels`)."""
    from memory.engine import Engine
    from memory.evaluation.oracle import GoldRelevance, level_name, make_oracle
    from memory.ingest import turn_observation
    from memory.store import open_store

    if query_k < 1:
        raise ValueError(f"query_k must be >= 1, got {query_k}")  # checked here, not by the first query after the writes
    configs = variant_configs(base, variants)
    levels = list(oracle_levels)
    runs = [(name, None, config) for name, config in configs.items()] if not levels else [
        (f"{name}{JUDGE_SEP}{level_name(level)}", level, config) for level in levels for name, config in configs.items()]
    scores: dict[str, list[QuestionScore]] = {name: [] for name, _, _ in runs}
    asked: dict[str, list[int]] = {name: [] for name, _, _ in runs}
    stopped: dict[str, dict[str, int]] = {name: {} for name, _, _ in runs}
    judged: dict[str, dict[tuple[str, str, str], tuple[bool, float, float]]] = {name: {} for name, _, _ in runs}
    for conv in conversations:
        engine = Engine(open_store(None, dim=embedder.dim, embedder=embedder.name), client, embedder, base)
        memo = MemoController(client)
        judge = MemoController(SystemOneClient("heuristic")) if any(isinstance(v, str) for v in levels) else None
        engine.controller = memo
        try:
            for turn in conv.turns:
                engine.write(turn_observation(turn))
            questions = scored_questions(conv)
            gold = GoldRelevance.from_conversation(conv, questions)
            for name, level, config in runs:
                engine.config = config
                oracle = make_oracle(memo, gold, level, seed=oracle_seed, judge=judge) if levels else None
                engine.controller = oracle or memo
                for q in questions:
                    before = memo.asked().questions
                    result = engine.query(q.question, k=query_k)
                    asked[name].append(memo.asked().questions - before)
                    stopped[name][result.stopped_reason] = stopped[name].get(result.stopped_reason, 0) + 1
                    values = score_items([Item(tuple(e.source_ids), e.content) for e in result.evidence], q.evidence)
                    scores[name].append(QuestionScore(conv.sample_id, q.qid, q.category, len(q.evidence), values))
                if oracle is not None:
                    judged[name].update({(conv.sample_id, *k): v for k, v in oracle.judged.items()})
                log.info("%s %s: %d questions", conv.sample_id, name, len(questions))
        finally:
            engine.controller = memo
            engine.store.close()
    aurocs = {}
    if levels:
        for name, rows in judged.items():
            labels = [y for y, _, _ in rows.values()]
            aurocs[name] = (auroc([g for _, _, g in rows.values()], labels), auroc([o for _, o, _ in rows.values()], labels))
    return SweepResult(scores, aurocs, asked, stopped)


def sweep_table(results: Mapping[str, Sequence[QuestionScore]],
                relevance_auroc: Mapping[str, tuple[float | None, float | None]] | None = None,
                cost: SweepResult | None = None) -> str:
    """Markdown: R_frac@10 (and its paired difference from the first variant, with a 95 % interval over questions
    resampled within their conversation: `memory.evaluation.bootstrap`, unit "question"), R_all@10, nDCG@10,
    multi-hop figures; with `relevance_auroc` (oracle sweeps) also the AUROC of the relevance answers on the pairs
    judged; with `cost` the controller questions per query (mean) and how the queries' rounds ended."""
    extra = relevance_auroc is not None
    head = ("| variant |" + (" relevance judge |" if extra else "")
            + " R_frac@10 | vs first [95 % CI] | R_all@10 | nDCG@10 | multi-hop R_frac@10 | multi-hop R_all@10 | questions |")
    lines = [head + (" relevance AUROC (given / controller's own) |" if extra else "")
             + (" controller questions / query | rounds ended by |" if cost else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|---|" if extra else "") + ("---|---|" if cost else "")]
    first: Sequence[QuestionScore] | None = None
    for name, scores in results.items():
        frac = _mean(scores, "R_frac@10")
        first = scores if first is None else first
        lines.append(f"| {_name_cells(name, extra)} | {frac:.3f} | {_versus(scores, first)} | {_mean(scores, 'R_all@10'):.3f} | "
                     f"{_mean(scores, 'nDCG@10'):.3f} | {_mean(scores, 'R_frac@10', True):.3f} | "
                     f"{_mean(scores, 'R_all@10', True):.3f} | {len(scores)} |"
                     + (f" {_fmt(relevance_auroc.get(name, (None, None)))} |" if relevance_auroc is not None else "")
                     + (f" {_cost(cost, name)} |" if cost else ""))
    return "\n".join(lines)


def _name_cells(name: str, judged: bool) -> str:
    """A run's name as table cells: the variant (a '|' of its own escaped) and, in an oracle sweep, the judge
    (`sweep` names those runs "<variant> | <judge>", `JUDGE_SEP`)."""
    variant, judge = name.rsplit(JUDGE_SEP, 1) if judged and JUDGE_SEP in name else (name, "-")
    cell = variant.replace("|", "\\|")
    return f"{cell} | {judge}" if judged else cell


def _versus(scores: Sequence[QuestionScore], first: Sequence[QuestionScore]) -> str:
    """R_frac@10 minus the first variant's, question by question, with its question-bootstrap interval."""
    if scores is first:
        return "+0.000"
    clusters = tuple(dict.fromkeys(s.conversation for s in first))
    diff = paired_differences(scores, first, clusters, targets=(("1-5", "R_frac@10"),), unit="question").get("R_frac@10 [1-5]")
    return "-" if diff is None else f"{diff.mean:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}]"


def _cost(cost: SweepResult, name: str) -> str:
    asked = cost.questions.get(name, [])
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(cost.stopped.get(name, {}).items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{np.mean(asked):.1f} | {reasons or '-'}" if asked else "- | -"


def _fmt(pair: tuple[float | None, float | None]) -> str:
    return " / ".join("-" if v is None else f"{v:.3f}" for v in pair)


def _mean(scores: Sequence[QuestionScore], metric: str, multi_hop: bool = False) -> float:
    values = [s.values[metric] for s in scores if not multi_hop or s.category == 1]
    return float(np.mean(values)) if values else float("nan")


def sweep_locomo(
    conversations: Sequence[Conversation],
    variants: Mapping[str, Mapping[str, Any]],
    *,
    controller: str = "heuristic",
    config: str | None = None,
    embedder: str = "minilm-tuned",
    adapter: str | None = None,
    threads: int = 1,
    model_dir: str | None = None,
    query_k: int = 20,
    oracle_levels: Sequence[Level] = (),
) -> SweepResult:
    """`sweep` with the harness's controller client, engine config (preset or JSON file) and process-wide
    embedder (MiniLM embeddings cached on disk)."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    options = {"threads": threads, "model_dir": model_dir} if controller == "local" else {}
    client = SystemOneClient(controller, **options)
    try:
        return sweep(conversations, client, _embedder(embedder, True, threads, adapter), _engine_config(config), variants,
                     query_k=query_k, oracle_levels=oracle_levels)
    finally:
        client.close()
