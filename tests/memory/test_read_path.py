"""The closed-loop read path: routing, budget, seeds, batched judging, expansion, stopping, ranking."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from controller.families import PREVIOUS_MAX_CHARS, ROUTES, lookup, split_memory_text
from controller.states import StateConventions
from memory.config import EngineConfig
from memory.errors import InvalidQueryError
from memory.routing import active_views, allocate_budget, depth_for, plan_route
from memory.traversal import current, hybrid_seeds
from memory.types import Edge, EdgeOrigin, Observation
from memory.write_path import fingerprint
from tests.memory.engine_fakes import T0, RuleBackend, make_engine, obs

FILLER = [f"Caroline: chat line {i} about painting and music and the weather" for i in range(12)]


def constant(p: float) -> RuleBackend:
    """Every Noul answers p; every Choice is uniform."""
    rules: dict[tuple[str, str], Any] = {}
    for family, names in {
        "typing": ("episodic", "semantic", "procedural", "preference"),
        "pair": ("semantic", "causal", "same_episode", "update", "entity_equivalence"),
        "routing": ROUTES,
        "relevance": ("relevant", "bridge"),
        "stopping": ("evidence_sufficient", "continue_useful", "missing_evidence", "contradiction"),
        "consolidation": ("redundant", "contradiction", "obsolete", "link_useful"),
    }.items():
        for name in names:
            rules[(family, name)] = lambda s, p=p: p
    rules[("pair", "temporal")] = lambda s: {}
    rules[("consolidation", "representation")] = lambda s: {}
    return RuleBackend(rules)


# ---------------------------------------------------------------- routing and budget (pure)
def test_budget_floor_then_proportional_to_p_gamma() -> None:
    probs = {"semantic": 0.9, "temporal": 0.6, "causal": 0.1, "entity": 0.3}
    budgets = allocate_budget(("semantic", "temporal"), probs, 40, 4, 2.0)
    assert sum(budgets.values()) == 40
    rest = 32
    assert budgets["semantic"] == 4 + round(rest * 0.81 / (0.81 + 0.36))
    assert budgets["temporal"] == 40 - budgets["semantic"]


def test_budget_smaller_than_the_floors_is_shared_evenly() -> None:
    budgets = allocate_budget(("semantic", "temporal", "entity"), {"semantic": 1.0, "temporal": 0.5, "entity": 0.5}, 7, 4, 2.0)
    assert sum(budgets.values()) == 7 and min(budgets.values()) >= 2
    assert allocate_budget(("semantic",), {}, 0, 4, 2.0) == {"semantic": 0}


def test_active_views_keep_semantic_as_fallback_and_sort_by_p() -> None:
    assert active_views({"semantic": 0.1, "temporal": 0.2, "causal": 0.4, "entity": 0.45}, 0.5) == ("semantic",)
    assert active_views({"semantic": 0.6, "temporal": 0.9, "causal": 0.7, "entity": 0.1}, 0.5) == ("temporal", "causal", "semantic")


def test_depth_grows_with_multi_hop_need() -> None:
    assert [depth_for(p, 3) for p in (0.0, 0.24, 0.25, 0.74, 1.0)] == [1, 1, 2, 2, 3]
    route = plan_route({"semantic": 0.9, "multi_hop": 1.0}, EngineConfig(max_depth=4), budget=10)
    assert route.depth == 4 and route.budgets == {"semantic": 10}


# ---------------------------------------------------------------- the loop
def test_request_shapes_and_one_batched_call_per_round() -> None:
    backend = RuleBackend()
    engine = make_engine(backend, consolidation_every=0)
    for i, text in enumerate(FILLER[:5]):
        engine.write(obs(text, i))
    backend.requests.clear()
    calls = backend.calls
    result = engine.query("What did Caroline say about painting?", k=3)
    families = backend.families_seen()
    route_req = backend.requests[0]
    assert route_req.state == {"query": "What did Caroline say about painting?"} and len(route_req.questions) == 6
    relevance = [r for r in backend.requests if "memory" in r.state]
    assert relevance and all(set(r.state) == {"query", "memory"} for r in relevance)
    stops = [r for r in backend.requests if "evidence" in r.state]
    assert stops and all(set(s.state) == {"query", "evidence", "depth"} for s in stops)
    rounds = sum(1 for s in result.trace if s.phase == "judge")
    assert backend.calls - calls == 1 + 2 * rounds  # route + (judge batch + stop) per round
    assert result.controller_requests == len(backend.requests) and result.controller_questions == sum(
        len(r.questions) for r in backend.requests)
    assert families.count("routing") == 6


def test_stops_when_evidence_is_sufficient() -> None:
    engine = make_engine(RuleBackend({("stopping", "evidence_sufficient"): lambda s: 0.95}))
    for i, text in enumerate(FILLER[:4]):
        engine.write(obs(text, i))
    result = engine.query("painting", k=2)
    assert result.stopped_reason == "sufficient" and len(result.evidence) == 2
    assert [s.phase for s in result.trace] == ["route", "seed", "judge", "stop"]


def test_stops_when_another_round_is_not_useful() -> None:
    engine = make_engine(RuleBackend({("stopping", "continue_useful"): lambda s: 0.05}))
    for i, text in enumerate(FILLER[:4]):
        engine.write(obs(text, i))
    assert engine.query("painting", k=2).stopped_reason == "not_useful"


def test_uninformative_controller_keeps_the_hybrid_rrf_order_at_the_top() -> None:
    engine = make_engine(constant(0.5), consolidation_every=0, n_seeds=5, seed_pool=8, context_weight=0.0)
    for i, text in enumerate([*FILLER, "Melanie: painting a sunset by the lake", "Melanie: the lake was cold"]):
        engine.write(obs(text, i))
    query = "painting the lake"
    result = engine.query(query, k=5)
    store, cfg = engine.store, engine.config
    depth = max(cfg.seed_depth, cfg.seed_pool)  # each list is fused seed_depth deep, the pool cut after
    lexical = [i for i, _ in store.text_search(query, depth)]
    dense = [i for i, _ in store.vector_search(engine.embedder.embed([query])[0], depth)]
    rrf: dict[str, float] = {}
    for ids, w in ((lexical, 1.0), (dense, cfg.dense_weight)):
        for r, node_id in enumerate(ids):
            rrf[node_id] = rrf.get(node_id, 0.0) + w / (cfg.seed_rrf_k + r + 1)
    expected = sorted(rrf, key=lambda i: -rrf[i])[:5]
    assert [e.node_id for e in result.evidence] == expected
    assert result.stopped_reason in ("depth", "budget", "exhausted")
    engine.config = engine.config.with_(context_weight=1.0)  # with the context lists: the order of their fusion
    with_context = [c.node.id for c in hybrid_seeds(store, engine.embedder.embed([query])[0], query, engine.config)]
    assert [e.node_id for e in engine.query(query, k=5).evidence] == with_context[:5]


def _buried_target(engine: Any, target_text: str) -> tuple[str, str]:
    """(target, seed): `target_text` written between two runs of filler, then a bicycle memory retrieval finds."""
    for i, text in enumerate(FILLER):
        engine.write(obs(text, i))
    target = engine.write(obs(target_text, 100)).node_id
    for i, text in enumerate(FILLER):
        engine.write(obs(text.replace("chat", "talk"), 200 + i))
    return target, engine.write(obs("Mira: I bought a new bicycle", 300)).node_id


def test_graph_expansion_reaches_evidence_that_retrieval_misses() -> None:
    target_text = "Mira: the repair shop quoted three hundred euros"
    rules = {("relevance", "relevant"): lambda s: 0.95 if "repair" in s["memory"] or "bicycle" in s["memory"] else 0.05,
             ("routing", "causal"): lambda s: 0.9, ("routing", "multi_hop"): lambda s: 1.0}
    engine = make_engine(RuleBackend(rules), consolidation_every=0, n_seeds=2, seed_pool=3)
    target, seed = _buried_target(engine, target_text)
    engine.link(target, seed, "causal")
    query = "Why buy a new bicycle?"
    pool = hybrid_seeds(engine.store, engine.embedder.embed([query])[0], query, engine.config)
    assert target not in {c.node.id for c in pool}
    result = engine.query(query, k=3)
    got = {e.node_id: e for e in result.evidence}
    assert seed in got and target in got
    assert got[target].via == "expand:causal" and got[target].depth == 1
    assert "causal" in result.active_views


def test_the_last_possible_round_asks_only_relevance() -> None:
    # Depth 1: round 0 may be followed by an expansion round, round 1 may not. Round 1 must not ask `bridge`
    # (it only chooses a frontier) and no stopping request may follow it (the loop ends anyway).
    rules = {("relevance", "relevant"): lambda s: 0.9, ("relevance", "bridge"): lambda s: 0.9,
             ("stopping", "evidence_sufficient"): lambda s: 0.1, ("stopping", "continue_useful"): lambda s: 0.9,
             ("routing", "multi_hop"): lambda s: 0.0}
    backend = RuleBackend(rules)
    engine = make_engine(backend, consolidation_every=0, n_seeds=2, seed_pool=3, max_depth=1)
    ids = [engine.write(obs(text, i)).node_id for i, text in enumerate(FILLER[:6])]
    for a, b in zip(ids, ids[1:]):
        engine.link(a, b, "semantic")
    backend.requests.clear()
    result = engine.query("chat about painting", k=5)
    assert [s.phase for s in result.trace] == ["route", "seed", "judge", "stop", "expand", "judge"]
    assert result.stopped_reason == "depth"
    relevance = [r for r in backend.requests if "memory" in r.state]
    stops = [r for r in backend.requests if "evidence" in r.state]
    assert len(stops) == 1
    first, last = relevance[:2], relevance[2:]
    assert last and all(len(r.questions) == 2 for r in first) and all(len(r.questions) == 1 for r in last)
    assert any(e.via.startswith("expand:") for e in result.evidence)


def test_ask_stop_off_sends_no_stopping_request_and_still_expands() -> None:
    rules = {("relevance", "relevant"): lambda s: 0.9, ("relevance", "bridge"): lambda s: 0.9,
             ("stopping", "evidence_sufficient"): lambda s: 0.99, ("routing", "multi_hop"): lambda s: 1.0}
    backend = RuleBackend(rules)
    engine = make_engine(backend, consolidation_every=0, n_seeds=2, seed_pool=3, max_depth=2, ask_stop=False)
    ids = [engine.write(obs(text, i)).node_id for i, text in enumerate(FILLER[:8])]
    for a, b in zip(ids, ids[1:]):
        engine.link(a, b, "semantic")
    backend.requests.clear()
    result = engine.query("chat about painting", k=5)
    assert not [r for r in backend.requests if "evidence" in r.state]  # with ask_stop this would stop at once (0.99)
    assert "stop" not in [s.phase for s in result.trace] and [s.phase for s in result.trace].count("expand") >= 1
    assert result.stopped_reason in ("depth", "budget", "exhausted")


def test_stale_inferred_edges_are_not_walked() -> None:
    a = replace_fp("a", "old text")
    b = replace_fp("b", "other")
    edge = Edge("a", "b", "semantic", EdgeOrigin.INFERRED, 0.9, fingerprint("old text"), fingerprint("other"))
    assert current(edge, a, b)
    assert not current(edge, replace(a, fingerprint=fingerprint("new text")), b)
    assert current(replace(edge, origin=EdgeOrigin.EXPLICIT), replace(a, fingerprint="x"), b)


def replace_fp(node_id: str, text: str) -> Any:
    from memory.types import LinkStatus, Node

    return Node(node_id, text, None, None, None, (), (), {}, fingerprint(text), 0, LinkStatus.ASSESSED)


def test_zero_budget_means_no_expansion() -> None:
    engine = make_engine()
    for i, text in enumerate(FILLER[:4]):
        engine.write(obs(text, i))
    result = engine.query("painting", k=4, budget=0)
    assert result.stopped_reason == "budget"
    assert all(e.via.startswith("seed:") for e in result.evidence)


def test_controller_unavailable_returns_the_hybrid_ranking_and_says_so() -> None:
    backend = RuleBackend()
    engine = make_engine(backend)
    for i, text in enumerate(FILLER[:4]):
        engine.write(obs(text, i, source=f"D1:{i}"))
    backend.fail = True
    result = engine.query("painting and music", k=3)
    assert result.stopped_reason == "controller_unavailable" and len(result.evidence) == 3
    assert any(s.phase == "error" for s in result.trace)
    assert all(e.source_ids and e.via.startswith("seed:") for e in result.evidence)


def test_evidence_carries_provenance_and_extractive_answer() -> None:
    engine = make_engine()
    engine.write(obs("Mira: My old bicycle broke.", 0, source="D1:3"))
    result = engine.query("What happened to the bicycle?", k=5, answer=True)
    assert result.evidence[0].source_ids == ("D1:3",) and result.evidence[0].speaker == "Mira"
    assert result.answer_source == "extractive" and "bicycle broke" in result.answer


def test_empty_store_and_bad_queries() -> None:
    engine = make_engine()
    result = engine.query("anything?")
    assert result.evidence == () and result.stopped_reason == "exhausted"
    for bad in ("", "   "):
        with pytest.raises(InvalidQueryError):
            engine.query(bad)
    with pytest.raises(InvalidQueryError):
        engine.query("x", k=0)


@pytest.mark.parametrize("limits", [{"k": 2.5}, {"k": "3"}, {"k": None}, {"k": True}, {"budget": 1.5}, {"budget": "8"}])
def test_limits_that_are_not_whole_numbers_are_invalid_queries(limits: dict[str, Any]) -> None:
    # a bare TypeError escaped before (from `k < 1`, or from slicing the evidence by a float deep in the read path)
    engine = make_engine()
    engine.write(obs("Mira: my bike is red", 0))
    with pytest.raises(InvalidQueryError):
        engine.query("bike", **limits)


def test_superseded_nodes_drop_when_recency_matters() -> None:
    rules = {("routing", "recency"): lambda s: 1.0, ("relevance", "relevant"): lambda s: 0.5}
    engine = make_engine(RuleBackend(rules), consolidation_every=0, superseded_penalty=0.5)
    old = engine.write(obs("Mira: I live in Lyon now", 0)).node_id
    new = engine.write(obs("Mira: I live in Paris now", 1)).node_id
    node = engine.store.get_node(old)
    engine.store.update_node(replace(node, superseded_by=new))
    ranked = [e.node_id for e in engine.query("where does Mira live now", k=2).evidence]
    assert ranked == [new, old]


def test_traversal_finds_are_ranked_only_when_judged_relevant() -> None:
    target_text = "Mira: the repair shop quoted three hundred euros"
    p_target = {"p": 0.3}
    rules = {("relevance", "relevant"): lambda s: p_target["p"] if "repair" in s["memory"] else 0.6,
             ("relevance", "bridge"): lambda s: 0.9,
             ("routing", "causal"): lambda s: 0.9, ("routing", "multi_hop"): lambda s: 1.0}
    # the weight is pinned: this test is about admission (tau_admit), not about how far relevance moves a rank
    engine = make_engine(RuleBackend(rules), consolidation_every=0, n_seeds=2, seed_pool=3, relevance_weight=1.0)
    for i, text in enumerate(FILLER):
        engine.write(obs(text, i))
    target = engine.write(obs(target_text, 100)).node_id
    seed = engine.write(obs("Mira: I bought a new bicycle", 300)).node_id
    engine.link(target, seed, "causal")
    query = "Why buy a new bicycle?"
    seeds = [c.node.id for c in hybrid_seeds(engine.store, engine.embedder.embed([query])[0], query, engine.config)]
    assert target not in seeds
    result = engine.query(query, k=10)
    assert any(s.phase == "expand" and s.detail["found"].get("causal") for s in result.trace)  # it was reached
    got = [e.node_id for e in result.evidence]
    assert target not in got and set(seeds) <= set(got)  # judged 0.3 < tau_admit: left out, every seed kept
    p_target["p"] = 0.95
    assert target in [e.node_id for e in engine.query(query, k=10).evidence]
    engine.config = engine.config.with_(tau_admit=0.2)
    p_target["p"] = 0.3
    assert target in [e.node_id for e in engine.query(query, k=10).evidence]


def test_centred_relevance_keeps_uniformly_low_judged_seeds_above_the_unjudged_pool() -> None:
    # A calibrated controller answers near its low base rate. Centred at 0.5, a heavy relevance term pushes the
    # two judged seeds below the unjudged rest of the pool; centred at the query's mean judgment it does not.
    rules = {("relevance", "relevant"): lambda s: 0.1, ("relevance", "bridge"): lambda s: 0.0}
    engine = make_engine(RuleBackend(rules), consolidation_every=0, n_seeds=2, seed_pool=4, relevance_weight=2.0,
                         center_relevance=False)
    for i, text in enumerate(FILLER):
        engine.write(obs(text, i))
    query = "chat line about painting"
    hybrid = [c.node.id for c in hybrid_seeds(engine.store, engine.embedder.embed([query])[0], query, engine.config)]
    fixed = [e.node_id for e in engine.query(query, k=4).evidence]
    assert fixed[:2] == hybrid[2:4] and set(fixed[2:]) == set(hybrid[:2])
    engine.config = engine.config.with_(center_relevance=True)
    assert [e.node_id for e in engine.query(query, k=4).evidence] == hybrid


def test_relevance_context_adds_the_same_day_predecessor_as_data() -> None:
    backend = RuleBackend()
    engine = make_engine(backend, consolidation_every=0, relevance_context=True)
    engine.write(obs("Melanie: Did you go to the pride parade last week?", 0))
    engine.write(obs("Caroline: Yes, twice! It was wonderful.", 1))
    engine.write(Observation("Caroline: A new day, a new painting.", observed_at=T0 + timedelta(days=1), speaker="Caroline"))
    backend.requests.clear()
    engine.query("Did Caroline go to the pride parade?", k=3)
    states = {r.state["memory"]: r.state for r in backend.requests if "memory" in r.state}
    assert states["Caroline: Yes, twice! It was wonderful."]["previous"] == "Melanie: Did you go to the pride parade last week?"
    assert "previous" not in states["Melanie: Did you go to the pride parade last week?"]  # nothing before it
    assert "previous" not in states["Caroline: A new day, a new painting."]  # its predecessor is another day's
    assert all(tuple(s) in (("query", "memory"), ("query", "memory", "previous")) for s in states.values())


def test_relevance_context_is_off_by_default_and_cut_visibly() -> None:
    backend = RuleBackend()
    engine = make_engine(backend, consolidation_every=0)
    engine.write(obs("Melanie: " + "long question about the parade " * 20, 0))
    engine.write(obs("Caroline: Yes, twice!", 1))
    engine.query("parade", k=2)
    assert all("previous" not in r.state for r in backend.requests)
    backend.requests.clear()
    engine = make_engine(backend, consolidation_every=0, relevance_context=True)
    engine.write(obs("Melanie: " + "long question about the parade " * 20, 0))
    engine.write(obs("Caroline: Yes, twice!", 1))
    engine.query("parade", k=2)
    previous = [r.state["previous"] for r in backend.requests if "previous" in r.state]
    assert previous and all(len(p) <= PREVIOUS_MAX_CHARS and p.endswith(" [truncated]") for p in previous)


def test_relevance_dated_renders_candidates_with_their_date() -> None:
    backend = RuleBackend()
    engine = make_engine(backend, consolidation_every=0)
    engine.write(obs("Caroline: I went to the pride parade.", 0))
    engine.query("pride parade", k=1)
    assert [r.state["memory"] for r in backend.requests if "memory" in r.state] == ["Caroline: I went to the pride parade."]
    backend.requests.clear()
    engine = make_engine(backend, consolidation_every=0, relevance_dated=True)
    engine.write(obs("Caroline: I went to the pride parade.", 0))
    engine.query("pride parade", k=1)
    memories = [r.state["memory"] for r in backend.requests if "memory" in r.state]
    assert memories and all(split_memory_text(m) == (T0.replace(hour=0, minute=0, second=0, microsecond=0),
                                                    "Caroline: I went to the pride parade.") for m in memories)


class DeclaringBackend(RuleBackend):
    """A backend trained on dated relevance states with context, as a model directory's states.json says."""

    state_conventions = StateConventions(relevance_dated=True, relevance_context=True)


def test_relevance_states_follow_the_controllers_declaration_unless_configured() -> None:
    def memories(**config: Any) -> list[tuple[str, bool]]:
        backend = DeclaringBackend()
        engine = make_engine(backend, consolidation_every=0, **config)
        engine.write(obs("Melanie: Did you go to the pride parade?", 0))
        engine.write(obs("Caroline: I went to the pride parade.", 1))
        engine.query("pride parade", k=2)
        return sorted((r.state["memory"], "previous" in r.state) for r in backend.requests if "memory" in r.state)

    declared = memories()
    assert declared and all(split_memory_text(m)[0] is not None for m, _ in declared)
    assert any(has_previous for _, has_previous in declared)
    overridden = memories(relevance_dated=False, relevance_context=False)
    assert overridden and all(split_memory_text(m)[0] is None and not has_previous for m, has_previous in overridden)
    assert not any(split_memory_text(m)[0] for m, _ in memories(relevance_dated=False))


def test_ask_bridge_off_asks_relevant_alone() -> None:
    backend = RuleBackend()
    engine = make_engine(backend, consolidation_every=0, ask_bridge=False)
    for i, text in enumerate(FILLER[:5]):
        engine.write(obs(text, i))
    backend.requests.clear()
    engine.query("What did Caroline say about painting?", k=3)
    relevance = [r for r in backend.requests if "memory" in r.state]
    assert relevance and all([lookup(q.instructions) for q in r.questions] == [("relevance", "relevant")] for r in relevance)
    engine = make_engine(backend, consolidation_every=0)
    for i, text in enumerate(FILLER[:5]):
        engine.write(obs(text, i))
    engine.query("What did Caroline say about painting?", k=3)
    asked = {lookup(q.instructions) for r in backend.requests if "memory" in r.state for q in r.questions}
    assert ("relevance", "bridge") in asked


def _judged(name: str, structure: float, p: float, seq: int) -> Any:
    from memory.traversal import Candidate
    from memory.types import Node

    node = Node(name, name, None, None, None, (), (), {}, name, seq)
    return Candidate(node, "seed:bm25", 0, structure, relevant=p)


def test_the_relevance_term_in_log_odds_separates_confident_judgments() -> None:
    from memory.read_path import rank, relevance_center, relevance_value
    from memory.routing import Route

    route = Route({}, (), {}, 0)
    # the hybrid top is judged likely (0.90), the runner-up near certain (0.99): 0.09 apart in probability,
    # 2.4 in log-odds
    pool = [_judged("top", 1.0, 0.90, 0), _judged("second", 0.8, 0.99, 1), _judged("third", 0.6, 0.02, 2)]
    plain = EngineConfig(relevance_weight=1.0)
    logit = plain.with_(relevance_logit=True, relevance_weight=0.2)
    assert relevance_value(0.9, plain) == 0.9 and relevance_value(0.9, logit) == pytest.approx(2.1972, abs=1e-4)
    assert relevance_value(0.0, logit) == pytest.approx(-9.2102, abs=1e-4)  # clipped, finite
    assert relevance_center(pool, logit) == pytest.approx((2.1972 + 4.5951 - 3.8918) / 3, abs=1e-4)
    assert relevance_center(pool, logit.with_(center_relevance=False)) == 0.0
    assert relevance_center([], logit) == 0.0 and relevance_center([], plain) == 0.5
    assert [c.node.id for c, _ in rank(pool, route, plain)] == ["top", "second", "third"]
    assert [c.node.id for c, _ in rank(pool, route, logit)] == ["second", "top", "third"]
    assert EngineConfig.from_dict({**plain.to_dict(), "relevance_logit": True}).relevance_logit


def test_the_centre_can_include_traversal_finds_the_ranking_leaves_out() -> None:
    from memory.read_path import rank
    from memory.routing import Route

    route = Route({}, (), {}, 0)
    judged_seed, unjudged_seed = _judged("A", 0.5, 0.3, 0), _judged("B", 0.6, 0.3, 1)
    unjudged_seed.relevant = None
    config = EngineConfig(relevance_weight=1.5)
    admitted_only = rank([judged_seed, unjudged_seed], route, config)  # centre 0.3: A gains nothing
    with_rejected = rank([judged_seed, unjudged_seed], route, config, center=(0.3 + 0.05) / 2)  # a find judged 0.05
    assert [c.node.id for c, _ in admitted_only] == ["B", "A"] and [c.node.id for c, _ in with_rejected] == ["A", "B"]
    # wired through the engine: a traversal find judged below tau_admit moves the seeds' scores only with the flag
    rules = {("relevance", "relevant"): lambda s: 0.05 if "repair" in s["memory"] else 0.6,
             ("relevance", "bridge"): lambda s: 0.9, ("routing", "causal"): lambda s: 0.9, ("routing", "multi_hop"): lambda s: 1.0}
    engine = make_engine(RuleBackend(rules), consolidation_every=0, n_seeds=2, seed_pool=3, relevance_weight=1.0)
    for i, text in enumerate(FILLER):
        engine.write(obs(text, i))
    target = engine.write(obs("Mira: the repair shop quoted three hundred euros", 100)).node_id
    seed = engine.write(obs("Mira: I bought a new bicycle", 300)).node_id
    engine.link(target, seed, "causal")
    default = engine.query("Why buy a new bicycle?", k=10).evidence
    engine.config = engine.config.with_(center_on_pool=True)
    pooled = engine.query("Why buy a new bicycle?", k=10).evidence
    assert target not in [e.node_id for e in default] and target not in [e.node_id for e in pooled]
    before = {e.node_id: e.score for e in default}
    rises = {e.node_id: e.score - before[e.node_id] for e in pooled}
    assert rises[seed] > 0.02 and max(rises.values()) - min(rises.values()) < 1e-9  # one lower centre lifts all alike


def test_a_candidate_over_the_input_limit_stays_unjudged_and_the_others_are_judged() -> None:
    # One state the model cannot take (a long CJK memory) used to refuse the whole judging batch, so the query
    # fell back to the hybrid ranking and reported the controller unavailable.
    backend = RuleBackend()
    engine = make_engine(backend)
    for i, text in enumerate(FILLER[:4]):
        engine.write(obs(text, i, source=f"D1:{i}"))
    engine.write(obs("Caroline: painting " + "绘画" * 200, 4, source="D1:4"))
    backend.max_state_chars = 420  # the relevance states of the short memories fit, the long one's does not
    result = engine.query("painting and music", k=5)
    assert result.stopped_reason != "controller_unavailable"
    assert not any(s.phase == "error" for s in result.trace)
    judged = [r for r in backend.requests if "query" in r.state and "memory" in r.state]
    assert judged and all("绘画" not in str(r.state["memory"]) for r in judged)
    assert {e.source_ids for e in result.evidence} >= {("D1:0",), ("D1:1",), ("D1:2",), ("D1:3",)}
    # the stopping request, whose five evidence items are over the limit too, was asked with fewer
    stops = [r for r in backend.requests if "evidence" in r.state]
    assert stops and all(0 < len(r.state["evidence"]) < 5 for r in stops)
    assert any(s.phase == "stop" and s.detail["signals"] is not None for s in result.trace)


def test_a_stopping_state_over_the_limit_even_with_one_item_lets_the_round_go_on() -> None:
    backend = RuleBackend(rules={("stopping", "evidence_sufficient"): lambda s: 0.99})
    engine = make_engine(backend)
    for i, text in enumerate(FILLER[:6]):
        engine.write(obs(text, i, source=f"D1:{i}"))
    engine.query("painting", k=5)
    sizes = {len(json.dumps(r.state, ensure_ascii=False)) for r in backend.requests if "memory" in r.state}
    backend.max_state_chars = max(sizes)  # every relevance state fits, no stopping state does, even with one item
    backend.requests.clear()
    result = engine.query("painting", k=5)
    assert result.stopped_reason != "sufficient" and result.stopped_reason != "controller_unavailable"
    assert not [r for r in backend.requests if "evidence" in r.state]
    assert any(s.phase == "stop" and s.detail["signals"] is None for s in result.trace)


@pytest.mark.parametrize("view", ["", "semantic", "temporal"])
def test_order_edges_are_walked_only_by_the_configured_view(view: str) -> None:
    target_text = "Mira: the repair shop quoted three hundred euros"
    rules = {("relevance", "relevant"): lambda s: 0.95 if "repair" in s["memory"] or "bicycle" in s["memory"] else 0.05,
             ("routing", "temporal"): lambda s: 0.9, ("routing", "multi_hop"): lambda s: 1.0}
    engine = make_engine(RuleBackend(rules), consolidation_every=0, n_seeds=2, seed_pool=3, order_edges_view=view)
    target, seed = _buried_target(engine, target_text)
    with engine.store.transaction():  # only what a write stores for a timestamped member of its shortlist
        for edge in [*engine.store.edges_from(seed), *engine.store.edges_to(seed)]:
            if target in (edge.src, edge.dst):
                engine.store.remove_edge(edge.src, edge.dst, edge.relation)
        engine.store.add_edge(Edge(seed, target, "temporal", EdgeOrigin.DETERMINISTIC, attrs={"order": "after"}))
    result = engine.query("Why buy a new bicycle?", k=3)
    got = {e.node_id: e for e in result.evidence}
    assert seed in got
    if view:
        assert target in got and got[target].via == f"expand:{view}"
    else:
        assert target not in got  # stored, never walked


def _second_hop(engine: Any) -> tuple[str, str]:
    """(target, seed): the target shares words with the seed ("Kestrel Forge") but none with the bicycle query,
    and has no edge at all, so only a search with what the first round found can reach it."""
    for i, text in enumerate(FILLER):
        engine.write(obs(text, i))
    target = engine.write(obs("Tomas: Kestrel Forge belongs to my cousin", 100)).node_id
    for i, text in enumerate(FILLER):
        engine.write(obs(text.replace("chat", "talk"), 200 + i))
    seed = engine.write(obs("Mira: I bought a new bicycle at Kestrel Forge", 300)).node_id
    for origin in EdgeOrigin:
        engine.store.remove_edges(target, origin)
    return target, seed


def test_feedback_search_reaches_a_second_hop_without_an_edge() -> None:
    rules = {("relevance", "relevant"): lambda s: 0.95 if "Kestrel" in s["memory"] else 0.05,
             ("relevance", "bridge"): lambda s: 0.0, ("routing", "multi_hop"): lambda s: 1.0}
    engine = make_engine(RuleBackend(rules), consolidation_every=0, n_seeds=2, seed_pool=3)
    target, seed = _second_hop(engine)
    query = "Why buy a new bicycle?"
    assert target not in {c.node.id for c in hybrid_seeds(engine.store, engine.embedder.embed([query])[0], query, engine.config)}
    assert not engine.store.edges_from(target) and not engine.store.edges_to(target)
    assert target not in [e.node_id for e in engine.query(query, k=5).evidence]  # off by default
    engine.config = engine.config.with_(feedback_k=2, feedback_docs=1)
    result = engine.query(query, k=5)
    got = {e.node_id: e for e in result.evidence}
    assert seed in got and target in got
    assert got[target].via == "expand:feedback" and got[target].depth == 1
    assert [s.detail["found"]["feedback"] for s in result.trace if s.phase == "expand"][0] >= 1


def test_feedback_finds_are_judged_and_admitted_like_traversal_finds() -> None:
    p_target = {"p": 0.3}
    rules = {("relevance", "relevant"): lambda s: p_target["p"] if "Tomas" in s["memory"] else 0.9 if "bicycle" in s["memory"] else 0.2,
             ("relevance", "bridge"): lambda s: 0.0, ("routing", "multi_hop"): lambda s: 1.0}
    engine = make_engine(RuleBackend(rules), consolidation_every=0, n_seeds=2, seed_pool=3, feedback_k=2, feedback_docs=1)
    target, _ = _second_hop(engine)
    query = "Why buy a new bicycle?"
    assert target not in [e.node_id for e in engine.query(query, k=10).evidence]  # judged 0.3 <= tau_admit
    p_target["p"] = 0.95
    assert target in [e.node_id for e in engine.query(query, k=10).evidence]


def test_feedback_text_joins_the_query_and_the_parents() -> None:
    from memory.traversal import Candidate, feedback_candidates, feedback_text
    engine = make_engine(RuleBackend(), consolidation_every=0)
    ids = [engine.write(obs(text, i)).node_id for i, text in enumerate(FILLER[:4])]
    parents = [Candidate(n, "seed:bm25", 0, 0.5) for n in engine.store.get_nodes(ids[:1])]
    text = feedback_text("q?", parents)
    assert text == "q?\n" + parents[0].node.content
    claimed = set(ids[:2])
    found = feedback_candidates(engine.store, engine.embedder, "q?", parents, 5, claimed, 1, engine.config)
    assert {c.node.id for c in found} == set(ids[2:]) and claimed == set(ids)  # claimed ones are never taken again
    assert all(0 < c.structure <= engine.config.expand_decay * 0.5 for c in found)
    assert feedback_candidates(engine.store, engine.embedder, "q?", [], 5, set(), 1, engine.config) == []


# ---------------------------------------------------------------- context seeds
def _reply_after_question(engine: Any, *, reply_day: int = 0) -> tuple[str, str]:
    """(question turn, reply): the reply shares no word with a query about what it answers; the turn before it does."""
    for i, text in enumerate(FILLER):
        engine.write(obs(text, i))
    asked = engine.write(obs("Jon: Where did you go on the anniversary trip with your husband?", 50)).node_id
    reply = engine.write(obs("Gina: Lisbon, and it rained twice!", 51 + reply_day * 24 * 60)).node_id
    for i, text in enumerate(FILLER):
        engine.write(obs(text.replace("chat", "talk"), 60 + reply_day * 24 * 60 + i))
    return asked, reply


def test_context_seeds_reach_a_reply_through_the_turn_it_answers() -> None:
    engine = make_engine(RuleBackend(), consolidation_every=0, n_seeds=2, seed_pool=2, context_weight=0.0)
    asked, reply = _reply_after_question(engine)
    query = "Where was the anniversary trip with her husband?"
    vector = engine.embedder.embed([query])[0]
    plain = [c.node.id for c in hybrid_seeds(engine.store, vector, query, engine.config)]
    assert plain[0] == asked and reply not in plain
    config = engine.config.with_(context_weight=1.0)
    seeds = hybrid_seeds(engine.store, vector, query, config)
    assert [c.node.id for c in seeds] == [asked, reply]
    assert seeds[1].via in ("seed:bm25_context", "seed:vector_context") and 0 < seeds[1].structure <= 1
    assert reply not in [e.node_id for e in engine.query(query, k=2).evidence]  # context off
    engine.config = config
    assert reply in [e.node_id for e in engine.query(query, k=2).evidence]


def test_context_scores_sum_bm25_and_average_cosines_within_a_day_only() -> None:
    from memory.traversal import context_lists, context_scores, previous_memory
    engine = make_engine(RuleBackend(), consolidation_every=0)
    asked, reply = _reply_after_question(engine)
    nodes = {n.id: n for n in engine.store.get_nodes([asked, reply])}
    assert previous_memory(engine.store, nodes[reply]).id == asked
    after_reply = [e.dst for e in engine.store.edges_from(reply, ["temporal_next"])][0]  # the next filler line
    by_bm25, by_cosine = context_scores(engine.store, [(asked, 4.0), (reply, 1.0)], [(reply, 0.9), (asked, 0.1)], depth=1)
    # the heads (asked from BM25, reply from the vector list), the turn before asked and the turns after both
    assert by_bm25[reply] == 5.0 and by_bm25[asked] == 4.0  # asked's own predecessor (a filler line) scored 0
    assert by_cosine[reply] == pytest.approx(0.5) and by_cosine[asked] == pytest.approx(0.1)  # unseen: the floor 0.1
    assert by_bm25[after_reply] == 1.0 and by_cosine[after_reply] == pytest.approx(0.5)
    lists = context_lists(engine.store, [(asked, 4.0), (reply, 1.0)], [], depth=2)
    assert lists["bm25_context"][:2] == [reply, asked] and "vector_context" not in lists

    other = make_engine(RuleBackend(), consolidation_every=0)
    asked, reply = _reply_after_question(other, reply_day=1)  # the reply a day later: no context
    node = other.store.get_nodes([reply])[0]
    assert previous_memory(other.store, node) is None
    by_bm25, _ = context_scores(other.store, [(asked, 4.0)], [], depth=5)
    assert reply not in by_bm25


# ---------------------------------------------------------------- named-speaker seeds
def test_named_speakers_match_whole_words_of_the_name() -> None:
    from memory.traversal import named_speakers
    speakers = ["Jon", "Gina", "Jo", "Mary Ann"]
    assert named_speakers("What did Jon's sister tell gina?", speakers) == {"Jon", "Gina"}  # not "Jo"
    assert named_speakers("Where does Mary Ann work?", speakers) == {"Mary Ann"}
    assert named_speakers("Where does Ann work?", speakers) == set()
    assert named_speakers("Where did Jonathan go?", speakers) == set()


def _two_speakers(engine: Any, *, filler: bool = True) -> tuple[list[str], list[str]]:
    """Ids of Jon's and Gina's memories about a trail: Gina's share more of the query's words, so they lead the
    plain fusion."""
    gina = [engine.write(obs(f"Gina: Jon, which hiking trail did you take? Trail {i} is a long hiking trail", i)).node_id
            for i in range(4)]
    jon = [engine.write(obs(f"Jon: I went up the ridge path number {i}, a hiking day", 10 + i)).node_id for i in range(4)]
    for i, text in enumerate(FILLER if filler else []):
        engine.write(obs(text, 20 + i))
    return jon, gina


def test_named_speaker_seeds_lift_the_named_speakers_memories() -> None:
    engine = make_engine(constant(0.5), consolidation_every=0, n_seeds=4, seed_pool=8, named_speaker_weight=0.0)
    jon, gina = _two_speakers(engine)
    query = "Which hiking trail did Jon take?"
    vector = engine.embedder.embed([query])[0]
    plain = [c.node.id for c in hybrid_seeds(engine.store, vector, query, engine.config)]
    assert set(plain[:4]) == set(gina)  # Gina's lines about Jon's hike crowd out his own
    lifted = hybrid_seeds(engine.store, vector, query, engine.config.with_(named_speaker_weight=1.0))
    order = [c.node.id for c in lifted]
    assert all(order.index(i) < plain.index(i) for i in jon)
    assert all(0 < c.structure <= 1 for c in lifted) and any(c.via == "seed:speaker" for c in lifted)
    engine.config = engine.config.with_(named_speaker_weight=4.0)
    assert {c.node.id for c in hybrid_seeds(engine.store, vector, query, engine.config)[:4]} == set(jon)
    assert {e.node_id for e in engine.query(query, k=4).evidence} == set(jon)  # an uninformative judge keeps that order


def test_named_speaker_seeds_leave_the_fusion_when_no_single_side_is_named() -> None:
    from memory.traversal import hybrid_ranking, speaker_list
    engine = make_engine(RuleBackend(), consolidation_every=0)
    jon, gina = _two_speakers(engine, filler=False)
    for query in ("Which hiking trail was long?", "Which trail did Jon and Gina hike?"):
        vector = engine.embedder.embed([query])[0]
        head = hybrid_ranking(engine.store, vector, query, 100, engine.config)[0]
        assert speaker_list(engine.store, query, head) == []
        on = hybrid_ranking(engine.store, vector, query, 100, engine.config.with_(named_speaker_weight=1.0))
        off = hybrid_ranking(engine.store, vector, query, 100, engine.config.with_(named_speaker_weight=0.0))
        assert on == off
    query = "Which trail did Jon hike?"
    head = hybrid_ranking(engine.store, engine.embedder.embed([query])[0], query, 100, engine.config)[0]
    assert speaker_list(engine.store, query, head) == [i for i in head if i in jon] and len(head) == 8
