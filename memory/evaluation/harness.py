"""`run_locomo`: every system of EVALUATION.md section 1 on the same questions, in one run.

    convs = load_locomo(path, conversations=("conv-26", "conv-30"))
    report = run_locomo(convs, EvalConfig(systems=("bm25", "dense", "rrf", "jevmem-heuristic")))
    write_report(report, "out/")        # memory/evaluation/report.py: JSON + markdown

Systems: `bm25`, `dense`, `rrf` (flat baselines over every turn, memory/evaluation/baselines.py) and
`jevmem-<controller>` (a fresh engine per conversation, memory/evaluation/jevmem.py). Questions are those with
at least one valid gold turn. Every system is scored on the same questions by memory/evaluation/metrics.py.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from controller.client import SystemOneClient
from controller.embedding import Embedder, MiniLMEmbedder, create_embedder, is_minilm
from controller.errors import ControllerError
from data.locomo import Conversation, Question
from memory.config import EngineConfig, named_config
from memory.engine import Engine
from memory.errors import MemoryEngineError
from memory.evaluation import baselines as flat
from memory.evaluation.bootstrap import Interval, bootstrap_intervals, paired_differences
from memory.evaluation.cache import CachedEmbedder
from memory.evaluation.costs import jevmem_costs, router_diagnostics, write_quality
from memory.evaluation.jevmem import ConversationRun, EngineFactory, run_conversation
from memory.evaluation.metrics import BUDGETS, KS, GroupTable, Item, QuestionScore, aggregate, score_items, turn_ranks
from memory.store import open_store

log = logging.getLogger(__name__)

BASELINES: tuple[str, ...] = ("bm25", "dense", "rrf", "bm25-stemmed", "rrf-stemmed")
_DENSE_BASELINES = frozenset({"dense", "rrf", "rrf-stemmed"})  # the baselines that rank with the embedder
_EMBEDDERS: dict[tuple[str, bool, str | None], Embedder] = {}  # process-wide: MiniLM loads once
ENGINE_PREFIX = "jevmem-"
Progress = Callable[[str, int], Callable[[], None]]  # (label, total) -> step callback


@dataclass(frozen=True)
class EvalConfig:
    systems: tuple[str, ...] = ("bm25", "dense", "rrf", "jevmem-heuristic")
    date_style: str = flat.REFERENCE_DATE_STYLE  # the baselines' "[date]" prefix
    baseline_embedder: str = "minilm"  # dense baseline ("hashing" for quick, weight-free runs)
    # the engine's embedder: the adapted retrieval embedder since session 28 (docs/EXPERIMENTS.md row "the retrieval embedder shipped")
    engine_embedder: str = "minilm-tuned"
    engine_adapter: str | None = None  # a LoRA retrieval adapter directory merged into the base MiniLM instead
    engine_config: str | None = None  # preset name or JSON file of an EngineConfig (None: defaults)
    store: str = "memory"  # fresh store per conversation: "memory" or "sqlite" (in a temporary directory)
    query_k: int = 20  # items asked of every system per question
    ks: tuple[int, ...] = KS
    budgets: tuple[int, ...] = BUDGETS
    rrf_k: int = 60
    dense_weight: float = 0.5  # RRF weight of the dense list (BM25 weighs 1)
    reference_system: str = "rrf"  # paired differences are taken against this system
    bootstrap_draws: int = 1000
    seed: int = 0
    write_quality: bool = True  # candidate / edge recall on multi-hop evidence pairs
    cache: bool = True  # on-disk embedding cache ($JEVMEM_CACHE) for the dense baseline
    engine_cache: bool = False  # the same cache for the engine: faster reruns, but hides embedding cost
    threads: int = 1  # torch / onnxruntime threads (MiniLM, local controller); >1 thrashes on busy shared cores
    model_dir: str | None = None  # the local controller's model directory (default: the committed model)
    spinning: bool = True  # the local controller's onnxruntime threads spin between calls (False: they sleep at once)
    max_turns: int | None = None  # quick / timing runs: the first N turns of each conversation and the
    #                               questions whose gold turns all lie among them (not the reference protocol)

    def __post_init__(self) -> None:
        for name in self.systems:
            if name not in BASELINES and not (name.startswith(ENGINE_PREFIX) and len(name) > len(ENGINE_PREFIX)):
                raise ValueError(f"unknown system {name!r}; use {', '.join(BASELINES)} or jevmem-<controller>")
        if len(set(self.systems)) != len(self.systems) or not self.systems:
            raise ValueError(f"systems must be a non-empty list without repeats, got {self.systems}")
        if self.date_style not in flat.DATE_STYLES:
            raise ValueError(f"unknown date style {self.date_style!r}; choose one of {sorted(flat.DATE_STYLES)}")
        if self.store not in ("memory", "sqlite"):
            raise ValueError(f"store must be 'memory' or 'sqlite', got {self.store!r}")
        if self.query_k < max(self.ks):
            raise ValueError(f"query_k ({self.query_k}) must cover the largest k ({max(self.ks)})")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.bootstrap_draws < 1 or self.rrf_k < 1 or self.dense_weight < 0 or self.threads < 1:
            raise ValueError("bootstrap_draws, rrf_k and threads must be >= 1 and dense_weight >= 0")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0 (a bootstrap seed), got {self.seed}")


@dataclass
class SystemResult:
    name: str
    scores: list[QuestionScore] = field(default_factory=list)
    table: GroupTable | None = None
    intervals: dict[str, Interval] = field(default_factory=dict)
    paired: dict[str, Interval] = field(default_factory=dict)  # this system minus the reference system
    # the same, resampling questions within each conversation (`memory.evaluation.bootstrap`): with a few
    # conversations, the intervals to read
    question_intervals: dict[str, Interval] = field(default_factory=dict)
    question_paired: dict[str, Interval] = field(default_factory=dict)
    costs: dict[str, Any] = field(default_factory=dict)
    write_quality: dict[str, Any] = field(default_factory=dict)
    router: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # set when the system could not run; then it has no scores


@dataclass
class EvalReport:
    config: EvalConfig
    conversations: tuple[str, ...]
    questions: int
    systems: dict[str, SystemResult]
    seconds: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)


def truncate(conversation: Conversation, max_turns: int) -> Conversation:
    """The first `max_turns` turns and the questions answerable from them alone."""
    turns = conversation.turns[:max_turns]
    kept = {t.dia_id for t in turns}
    questions = tuple(q for q in conversation.questions if q.evidence and set(q.evidence) <= kept)
    return replace(conversation, turns=turns, questions=questions)


def scored_questions(conversation: Conversation) -> list[Question]:
    """The questions with at least one valid gold turn (1,155 of 1,157 on the dev conversations) and some text to
    ask (an empty question is no query: the engine refuses it, and a flat retriever ranks nothing for it)."""
    return [q for q in conversation.questions if q.evidence and q.question.strip()]


def _score(conv: Conversation, q: Question, items: Sequence[Item], config: EvalConfig, returned: bool) -> QuestionScore:
    values = score_items(items, q.evidence, ks=config.ks, budgets=config.budgets, returned=returned)
    ranks = turn_ranks(items)
    return QuestionScore(conv.sample_id, q.qid, q.category, len(q.evidence), values, {g: ranks.get(g) for g in q.evidence})


def _turn_items(conv: Conversation, order: Sequence[int], limit: int) -> list[Item]:
    """The top `limit` turns as items. Every system is cut at `query_k` items, so token-budget figures
    compare like with like (a budget the cut leaves unfilled reads as the cut's recall)."""
    turns = conv.turns
    return [Item((turns[i].dia_id,), turns[i].memory_text()) for i in order[:limit]]


def run_baselines(
    conversations: Sequence[Conversation], config: EvalConfig, embedder: Embedder | None, progress: Progress | None = None
) -> dict[str, SystemResult]:
    wanted = [s for s in config.systems if s in BASELINES]
    need_dense = any(s in _DENSE_BASELINES for s in wanted)
    need_bm25 = any(s in ("bm25", "rrf") for s in wanted)
    need_stemmed = any(s in ("bm25-stemmed", "rrf-stemmed") for s in wanted)
    results = {s: SystemResult(s) for s in wanted}
    seconds = {"bm25": 0.0, "dense": 0.0, "bm25-stemmed": 0.0}  # index building and ranking of all questions, per retriever
    step = progress("baselines", len(conversations)) if progress else None
    n_questions = 0
    for conv in conversations:
        questions = scored_questions(conv)
        texts = [q.question for q in questions]
        n_questions += len(questions)
        lists: dict[str, list[flat.Ranking]] = {}
        for name, needed, stemmed in (("bm25", need_bm25, False), ("bm25-stemmed", need_stemmed, True)):
            if needed:
                t0 = time.perf_counter()
                lists[name] = flat.bm25_rank(conv.turns, texts, style=config.date_style, stemmed=stemmed)
                seconds[name] += time.perf_counter() - t0
        if need_dense:
            if embedder is None:
                raise ValueError("the dense baseline needs an embedder")
            t0 = time.perf_counter()
            lists["dense"] = flat.dense_rank(conv.turns, texts, embedder, style=config.date_style)
            seconds["dense"] += time.perf_counter() - t0
        for i, q in enumerate(questions):
            rankings = {name: ranked[i] for name, ranked in lists.items()}
            for fusion, lexical in (("rrf", "bm25"), ("rrf-stemmed", "bm25-stemmed")):
                if fusion in results:
                    rankings[fusion] = flat.rrf_fuse([rankings[lexical], rankings["dense"]], [1.0, config.dense_weight], k=config.rrf_k)
            for name, result in results.items():
                result.scores.append(_score(conv, q, _turn_items(conv, rankings[name].order, config.query_k), config, False))
        if step:
            step()
    for name, result in results.items():
        parts = {"rrf": ("bm25", "dense"), "rrf-stemmed": ("bm25-stemmed", "dense")}.get(name, (name,))
        total = sum(seconds[p] for p in parts)
        # index building and ranking are timed together (embeddings may come from the cache)
        result.costs = {"index_and_rank_s": total, "per_query_ms": 1000.0 * total / max(n_questions, 1)}
    return results


class _FreshEngine(Engine):
    """An engine over a store of its own (the controller client is shared); `close` releases only the store
    and its temporary directory."""

    def __init__(self, *args: Any, tmp: tempfile.TemporaryDirectory[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tmp = tmp

    def close(self) -> None:
        self.store.close()
        if self._tmp is not None:
            self._tmp.cleanup()


def check_engine_systems(config: EvalConfig, engine_factories: Mapping[str, EngineFactory]) -> None:
    """What a `jevmem-*` system needs and can be checked cheaply, before the baselines run: its engine config
    (ConfigError) and its controller backend's name (UnknownBackendError). Otherwise a typo would surface only
    after the baselines, as a failed system in an otherwise finished report."""
    from controller.backend import available_backends
    from controller.errors import UnknownBackendError

    engines = [name for name in config.systems if name.startswith(ENGINE_PREFIX) and name not in engine_factories]
    if not engines:
        return
    _engine_config(config.engine_config)
    known = available_backends()
    for name in engines:
        if name[len(ENGINE_PREFIX):] not in known:
            raise UnknownBackendError(f"system {name}: unknown backend {name[len(ENGINE_PREFIX):]!r}; available: {', '.join(known)}")


def _engine_config(value: str | None) -> EngineConfig:
    return named_config(value)


def _engine_factory(controller: str, config: EvalConfig, embedder: Embedder) -> tuple[EngineFactory, Callable[[], None]]:
    """One controller client and embedder shared by the per-conversation engines; each gets a fresh store."""
    engine_config = _engine_config(config.engine_config)
    options = {"threads": config.threads, "model_dir": config.model_dir, "spinning": config.spinning} if controller == "local" else {}
    client = SystemOneClient(controller, **options)
    embedder.embed(["warm-up"])  # load the model now, not inside the first timed write

    def make() -> _FreshEngine:
        tmp = tempfile.TemporaryDirectory(prefix="jevmem-eval-") if config.store == "sqlite" else None
        path = None if tmp is None else Path(tmp.name) / "memory.db"
        store = open_store(path, dim=embedder.dim, embedder=embedder.name)
        return _FreshEngine(store, client, embedder, engine_config, None, tmp=tmp)

    return make, client.close


def run_engine_system(
    name: str,
    conversations: Sequence[Conversation],
    config: EvalConfig,
    factory: EngineFactory,
    progress: Progress | None = None,
) -> tuple[SystemResult, list[ConversationRun]]:
    result = SystemResult(name)
    runs = []
    for conv in conversations:
        questions = scored_questions(conv)
        step = progress(f"{name} {conv.sample_id}", len(conv.turns) + len(questions)) if progress else None
        run = run_conversation(conv, questions, factory, query_k=config.query_k, write_quality=config.write_quality, on_step=step)
        runs.append(run)
        log.info("%s %s: %d writes in %.1f s, %d queries", name, conv.sample_id, len(run.write_ms), run.build_s, len(questions))
        for q in questions:
            result.scores.append(_score(conv, q, run.items[q.qid], config, True))
    categories = {(s.conversation, s.qid): s.category for s in result.scores}
    result.costs = jevmem_costs(runs)
    result.write_quality = write_quality(runs)
    result.router = router_diagnostics(runs, categories)
    return result, runs


def run_locomo(
    conversations: Sequence[Conversation],
    config: EvalConfig = EvalConfig(),
    *,
    engine_factories: Mapping[str, EngineFactory] | None = None,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
) -> EvalReport:
    """Run and score every configured system. `engine_factories` maps a `jevmem-*` system name to a callable
    building a fresh engine (default: `memory.engine.Engine` with that controller); `embedder` replaces the
    configured embedders (tests pass a hashing embedder)."""
    started = time.perf_counter()
    if not conversations:
        raise ValueError("no conversations to evaluate")
    check_engine_systems(config, engine_factories or {})
    if config.max_turns is not None:
        conversations = [truncate(c, config.max_turns) for c in conversations]
    ids = tuple(c.sample_id for c in conversations)
    base_embedder = embedder
    if base_embedder is None and any(s in _DENSE_BASELINES for s in config.systems):
        base_embedder = _embedder(config.baseline_embedder, config.cache, config.threads)
    systems = run_baselines(conversations, config, base_embedder, progress)
    notes: dict[str, Any] = {}
    for name in config.systems:
        if not name.startswith(ENGINE_PREFIX):
            continue
        controller = name[len(ENGINE_PREFIX) :]
        close: Callable[[], None] = lambda: None  # noqa: E731
        try:
            if engine_factories and name in engine_factories:
                factory = engine_factories[name]
            else:
                emb = embedder or _embedder(config.engine_embedder, config.engine_cache, config.threads, config.engine_adapter)
                factory, close = _engine_factory(controller, config, emb)
            systems[name], _ = run_engine_system(name, conversations, config, factory, progress)
        except (ControllerError, MemoryEngineError, ImportError, OSError) as error:
            # one system failing (no trained model, a broken store) must not sink the others
            log.exception("system %s failed", name)
            systems[name] = SystemResult(name, error=f"{type(error).__name__}: {error}")
        finally:
            close()
    _finish(systems, ids, config)
    for emb in [e for e in _EMBEDDERS.values() if isinstance(e, CachedEmbedder)]:
        emb.flush()
        notes[f"embedding_cache_{emb.name}"] = {"path": str(emb.path), "hits": emb.hits, "misses": emb.misses}
    n = sum(len(scored_questions(c)) for c in conversations)
    ordered = {s: systems[s] for s in config.systems if s in systems}
    return EvalReport(config, ids, n, ordered, time.perf_counter() - started, notes)




def _embedder(name: str, cache: bool, threads: int, adapter: str | None = None) -> Embedder:
    """One embedder per (name, cache, adapter) for the whole process: MiniLM loads once. `adapter`: a LoRA
    directory merged into the base MiniLM (`MiniLMEmbedder(adapter=...)`), in place of `name`."""
    key = (name, cache, adapter)
    if key not in _EMBEDDERS:
        if adapter is not None:
            inner: Embedder = MiniLMEmbedder(adapter=adapter, threads=threads)
        else:
            inner = create_embedder(name, threads=threads) if is_minilm(name) else create_embedder(name)
        _EMBEDDERS[key] = CachedEmbedder(inner) if cache and name != "hashing" else inner
    return _EMBEDDERS[key]


def _finish(systems: dict[str, SystemResult], clusters: tuple[str, ...], config: EvalConfig) -> None:
    reference = systems.get(config.reference_system)
    for result in systems.values():
        if result.error is not None:
            continue
        result.table = aggregate(result.scores)
        draws = {"draws": config.bootstrap_draws, "seed": config.seed}
        result.intervals = bootstrap_intervals(result.scores, clusters, **draws)
        result.question_intervals = bootstrap_intervals(result.scores, clusters, unit="question", **draws)
        if reference is not None and reference is not result and reference.error is None:
            result.paired = paired_differences(result.scores, reference.scores, clusters, **draws)
            result.question_paired = paired_differences(result.scores, reference.scores, clusters, unit="question", **draws)
