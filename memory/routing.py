"""Read-path routing and budget: which graph views to walk, how many expansions each gets, how deep.

    p_v          routing Noul of view v (semantic, temporal, causal, entity), plus multi_hop and recency
    active       views with p_v >= tau_route; the semantic view is always active (the fallback)
    budget       each active view gets min(m, B / |active|); the rest of B is shared in proportion to p_v^gamma
                 (largest remainder, ties to the higher p, then catalogue order)
    depth        1 + round(multi_hop * (max_depth - 1))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller.families import ROUTES
from memory.config import EngineConfig
from memory.control import Controller, keyed, noul

VIEWS: tuple[str, ...] = ("semantic", "temporal", "causal", "entity")

# The edge relations each view walks (both directions; explicit edges of these relations included).
VIEW_RELATIONS: dict[str, tuple[str, ...]] = {
    "semantic": ("semantic", "same_episode", "update", "summary_of", "supersedes"),
    "temporal": ("temporal_next",),
    "causal": ("causal",),
    "entity": ("entity", "entity_equivalence"),
}


@dataclass(frozen=True)
class Route:
    probabilities: dict[str, float]  # the six routing Nouls (empty when the controller was unavailable)
    active: tuple[str, ...]  # active views, most probable first
    budgets: dict[str, int]  # expansions per active view
    depth: int  # expansion rounds allowed


def ask_route(controller: Controller, query: str) -> dict[str, float]:
    """One request, state {"query": q}: the six ROUTING Nouls."""
    answers = controller.ask({"query": query}, keyed("", "routing", ROUTES))
    return {name: noul(answers, name) for name in ROUTES}


def active_views(probabilities: Mapping[str, float], tau: float) -> tuple[str, ...]:
    chosen = [v for v in VIEWS if v == "semantic" or probabilities.get(v, 0.0) >= tau]
    return tuple(sorted(chosen, key=lambda v: (-probabilities.get(v, 0.0), VIEWS.index(v))))


def allocate_budget(active: Sequence[str], probabilities: Mapping[str, float], total: int, floor: int, gamma: float) -> dict[str, int]:
    """Integer budgets summing to `total` (when there is at least one active view)."""
    if not active or total <= 0:
        return {v: 0 for v in active}
    order = sorted(active, key=lambda v: (-probabilities.get(v, 0.0), VIEWS.index(v) if v in VIEWS else len(VIEWS)))
    base = min(floor, total // len(order))
    budgets = {v: base for v in order}
    rest = total - base * len(order)
    weights = {v: max(probabilities.get(v, 0.0), 0.0) ** gamma for v in order}
    mass = math.fsum(weights.values())
    shares = {v: rest * (weights[v] / mass if mass > 0 else 1.0 / len(order)) for v in order}
    for v in order:
        budgets[v] += int(math.floor(shares[v]))
    left = total - sum(budgets.values())
    for v in sorted(order, key=lambda v: (-(shares[v] - math.floor(shares[v])), order.index(v)))[:left]:
        budgets[v] += 1
    return budgets


def depth_for(multi_hop: float, max_depth: int) -> int:
    return 1 + int(math.floor(min(max(multi_hop, 0.0), 1.0) * (max_depth - 1) + 0.5))  # half rounds up


def plan_route(probabilities: Mapping[str, float], config: EngineConfig, budget: int | None = None) -> Route:
    total = config.expansion_budget if budget is None else budget
    active = active_views(probabilities, config.tau_route)
    budgets = allocate_budget(active, probabilities, total, config.min_view_budget, config.gamma)
    depth = depth_for(probabilities.get("multi_hop", 0.0), config.max_depth)
    return Route(dict(probabilities), active, budgets, depth)
