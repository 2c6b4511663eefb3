"""The closed-loop read path: route -> seed -> (judge -> stop? -> expand)* -> rank.

    route   one request, six ROUTING Nouls -> active views, per-view budgets, depth   (memory/routing.py)
    seed    hybrid RRF pool (BM25 + dense_weight x vector, k = seed_rrf_k, lists seed_depth deep; with
            context_weight also both lists over each memory read with the one before it, with
            named_speaker_weight the memories of speakers the query names); the top n_seeds are judged first
    judge   one batched call per round: relevant / bridge per new candidate          (memory/traversal.py)
    stop    one request per round that could be followed by another: evidence_sufficient, continue_useful,
            missing_evidence, contradiction (a round at the depth or budget limit, or with an empty frontier,
            ends without asking, and asks only `relevant` of its candidates when no expansion can follow)
    expand  from judged nodes with relevant or bridge >= tau_frontier, per active view, within its budget; with
            feedback_k, also up to feedback_k nodes from a hybrid search for the query joined with the
            feedback_docs most promising of them (pseudo-relevance feedback)
    rank    seed_weight * structure + relevance_weight * (p_relevant - centre)  [+ recency terms], the centre
            being the mean judged p_relevant of what is ranked (0.5 without center_relevance); seeds always, a node found
            by traversal only when p_relevant > tau_admit

With an uninformative controller (every probability 0.5) the relevance term vanishes (either centre) and nothing found by
traversal is admitted (0.5 does not exceed tau_admit = 0.5), so the ranking is the hybrid RRF order. An admitted
node's structure is expand_decay x its parent's x the edge weight.
If the controller fails, the query still returns the ranking built so far, with stopped_reason
"controller_unavailable" and the error in the trace (never a silent substitute assessor).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace

from controller.embedding import Embedder
from controller.errors import BackendError, InputTooLongError, InvalidRequestError
from controller.families import STOP_SIGNALS
from memory.config import EngineConfig
from memory.control import Controller, clipped, keyed, memory_state, noul
from memory.errors import ControllerOutputError
from memory.routing import VIEW_RELATIONS, Route, ask_route, plan_route
from memory.store.base import Store
from memory.traversal import Candidate, expand_view, feedback_candidates, hybrid_seeds, judge
from memory.types import Evidence, QueryResult, TraceStep

log = logging.getLogger(__name__)
_P_CLIP = 1e-4  # log-odds of p_relevant are taken within [logit(1e-4), logit(1 - 1e-4)]

_CONTROLLER_FAILURES = (BackendError, InvalidRequestError, ControllerOutputError)


class _Tracer:
    def __init__(self) -> None:
        self.steps: list[TraceStep] = []
        self._last = time.perf_counter()

    def add(self, phase: str, **detail: object) -> None:
        now = time.perf_counter()
        self.steps.append(TraceStep(phase, dict(detail), (now - self._last) * 1000.0))
        self._last = now


def relevance_value(p: float, config: EngineConfig) -> float:
    """What the relevance term weighs: p_relevant, or its log-odds with `relevance_logit`."""
    if not config.relevance_logit:
        return p
    p = min(max(p, _P_CLIP), 1.0 - _P_CLIP)
    return math.log(p / (1.0 - p))


def relevance_center(candidates: Iterable[Candidate], config: EngineConfig) -> float:
    """The relevance value that adds nothing to a score: that of p = 0.5, or with `center_relevance` the mean over
    the judged `candidates`, so that an unjudged pool node ranks as an average judged one would (a calibrated
    controller's p_relevant sits near the low base rate, and centring at 0.5 would push every judged seed below
    the unjudged tail of the pool). `rank` takes the mean over what it ranks: the final ranking, over the admitted
    candidates (a traversal find judged below tau_admit is not among them; with `center_on_pool`, over the whole
    judged pool), the stopping request's, over the pool."""
    judged = [relevance_value(c.relevant, config) for c in candidates if c.relevant is not None]
    if not config.center_relevance or not judged:
        return relevance_value(0.5, config)
    return sum(judged) / len(judged)


def score(cand: Candidate, route: Route, config: EngineConfig, newest: int, oldest: int, center: float = 0.5) -> float:
    structure = cand.structure
    if cand.reached > structure and cand.relevant is not None and cand.relevant > config.tau_admit:
        structure = cand.reached  # the graph lifts a seed only once it is judged relevant (like tau_admit)
    value = config.seed_weight * structure
    if cand.relevant is not None:
        value += config.relevance_weight * (relevance_value(cand.relevant, config) - center)
    recency = route.probabilities.get("recency", 0.0)
    if config.recency_weight and newest > oldest:
        value += config.recency_weight * recency * (cand.node.seq - oldest) / (newest - oldest)
    if cand.node.superseded_by is not None:
        value -= config.superseded_penalty * recency
    return value


def rank(candidates: Sequence[Candidate], route: Route, config: EngineConfig, *,
         center: float | None = None) -> list[tuple[Candidate, float]]:
    """`candidates` by score, best first; the relevance centre is theirs unless `center` is given."""
    seqs = [c.node.seq for c in candidates]
    newest, oldest = (max(seqs), min(seqs)) if seqs else (0, 0)
    center = relevance_center(candidates, config) if center is None else center
    scored = [(c, score(c, route, config, newest, oldest, center)) for c in candidates]
    return sorted(scored, key=lambda cs: (-cs[1], -cs[0].structure, cs[0].node.seq))


def admitted(candidates: Iterable[Candidate], seeded: Collection[str], config: EngineConfig) -> list[Candidate]:
    """What the final ranking may hold: every seed, and a traversal find only once judged more relevant than
    tau_admit (an unjudged, uninformative or weakly relevant neighbour never pushes a hybrid seed out)."""
    return [c for c in candidates
            if c.node.id in seeded or (c.relevant is not None and c.relevant > config.tau_admit)]


def ask_stop(controller: Controller, query: str, ranked: Sequence[tuple[Candidate, float]], depth: int,
             config: EngineConfig) -> dict[str, float] | None:
    """The stopping signals over the top `stop_evidence_k` evidence items. A state over the model's input limit
    (long memories) is asked again with the first half of its items, down to one; None when even one is too long
    (the round then goes on, as it would without the stopping questions)."""
    evidence = [
        memory_state(replace(c.node, content=clipped(c.node.content, config.max_evidence_chars)))
        for c, _ in ranked[: config.stop_evidence_k]
    ]
    while True:
        try:
            answers = controller.ask({"query": query, "evidence": evidence, "depth": depth}, keyed("", "stopping", STOP_SIGNALS))
        except InputTooLongError:
            if len(evidence) <= 1:
                return None
            evidence = evidence[: len(evidence) // 2]
            continue
        return {name: noul(answers, name) for name in STOP_SIGNALS}


def stop_reason(signals: dict[str, float], config: EngineConfig) -> str | None:
    if signals["evidence_sufficient"] >= config.tau_stop:
        return "sufficient"
    if signals["continue_useful"] < config.tau_continue:
        return "not_useful"
    return None


def run_query(
    store: Store,
    controller: Controller,
    embedder: Embedder,
    query: str,
    config: EngineConfig,
    *,
    k: int = 10,
    budget: int | None = None,
) -> QueryResult:
    tracer = _Tracer()
    before = controller.usage()
    route = Route({}, ("semantic",), {"semantic": 0}, 0)
    stopped = "depth"
    pool: dict[str, Candidate] = {}
    seeded: set[str] = set()
    try:
        route = plan_route(ask_route(controller, query), config, budget)
        tracer.add("route", probabilities=route.probabilities, active=list(route.active), budgets=route.budgets, depth=route.depth)
        seeds = hybrid_seeds(store, embedder.embed([query])[0], query, config)
        pool = {c.node.id: c for c in seeds}
        seeded.update(pool)
        round_nodes = seeds[: config.n_seeds]
        tracer.add("seed", pool=len(seeds), seeds=[c.node.id for c in round_nodes])
        left = dict(route.budgets)
        judged: set[str] = set()
        depth = 0
        stopped = "exhausted"  # kept when the store has nothing to seed from
        while round_nodes:
            # A round after which no expansion can follow asks neither `bridge` (it only picks the frontier)
            # nor the stopping questions (they could only end a loop that ends anyway).
            last = depth >= route.depth or sum(left.values()) <= 0
            judge(controller, query, round_nodes, config, bridge=config.ask_bridge and not last, store=store)
            judged.update(c.node.id for c in round_nodes)
            tracer.add("judge", depth=depth, judged=len(round_nodes))
            frontier = sorted((c for c in round_nodes if c.promise >= config.tau_frontier), key=lambda c: (-c.promise, c.node.seq))
            if last or not frontier:
                stopped = "depth" if depth >= route.depth else "budget" if last else "exhausted"
                break
            if config.ask_stop:
                signals = ask_stop(controller, query, rank(list(pool.values()), route, config), depth, config)
                reason = None if signals is None else stop_reason(signals, config)
                tracer.add("stop", depth=depth, signals=signals, reason=reason)
                if reason is not None:
                    stopped = reason
                    break
            depth += 1
            claimed = set(judged)
            found: list[Candidate] = []
            spent: dict[str, int] = {}
            for view in route.active:
                relations = VIEW_RELATIONS[view] + (("temporal",) if view == config.order_edges_view else ())
                new = expand_view(store, frontier, view, relations, left.get(view, 0), claimed, depth, config)
                left[view] = left.get(view, 0) - len(new)
                spent[view] = len(new)
                found.extend(new)
            if config.feedback_k:
                new = feedback_candidates(store, embedder, query, frontier[: config.feedback_docs], config.feedback_k, claimed,
                                          depth, config)
                spent["feedback"] = len(new)
                found.extend(new)
            round_nodes = []
            for cand in found:
                known = pool.get(cand.node.id)
                if known is not None:  # a pool node reached through the graph: remember the path's structure
                    known.reached = max(known.reached, cand.structure)
                    known.via, known.depth = cand.via, cand.depth
                    cand = known
                pool[cand.node.id] = cand
                round_nodes.append(cand)
            tracer.add("expand", depth=depth, frontier=len(frontier), found=spent)
            if not round_nodes:
                stopped = "exhausted" if sum(left.values()) > 0 else "budget"
                break
    except _CONTROLLER_FAILURES as error:
        log.warning("query continued without the controller: %s", error)
        stopped = "controller_unavailable"
        tracer.add("error", error=f"{type(error).__name__}: {error}")
        if not pool:
            seeds = hybrid_seeds(store, embedder.embed([query])[0], query, config)
            pool = {c.node.id: c for c in seeds}
            seeded.update(pool)
    center = relevance_center(pool.values(), config) if config.center_on_pool else None
    ranked = rank(admitted(pool.values(), seeded, config), route, config, center=center)[:k]
    evidence = tuple(
        Evidence(c.node.id, c.node.content, s, c.node.source_ids, c.node.observed_at, c.node.speaker, c.via, c.depth)
        for c, s in ranked
    )
    used = controller.usage() - before
    return QueryResult(query, evidence, route.probabilities, route.active, stopped, tuple(tracer.steps),
                       used.requests, used.questions)
