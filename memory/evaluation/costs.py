"""Summaries of the engine runs: build and query costs, write-path quality, router diagnostics.

All figures are plain dicts of numbers (they go straight into the JSON report).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memory.evaluation.jevmem import ConversationRun
from memory.evaluation.metrics import auroc, percentile

# write timings are grouped into the phases EVALUATION.md names
PHASES: dict[str, tuple[str, ...]] = {
    "embedding": ("embedding",),
    "candidates": ("candidates",),
    "judgment": ("typing", "judgment"),
    "other": ("apply", "consolidation"),
}


def _p(values: Sequence[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


# a query's trace steps (`memory.read_path`), each timed from the step before it
QUERY_PHASES: dict[str, tuple[str, ...]] = {
    "route": ("route",),
    "seed": ("seed",),
    "judge": ("judge",),
    "stop": ("stop",),
    "expand": ("expand",),
}


def phase_costs(timings: Sequence[Mapping[str, float]], groups: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    """Per phase: total seconds and p50 / p95 ms per operation (0 where an operation skipped the phase);
    timing keys no group names are summed under `unlisted:<keys>`."""
    phases: dict[str, Any] = {}
    for phase, keys in groups.items():
        per_op = [sum(t.get(k, 0.0) for k in keys) for t in timings]
        phases[phase] = {"total_s": sum(per_op) / 1000.0, "p50_ms": _p(per_op, 50), "p95_ms": _p(per_op, 95)}
    known = {k for keys in groups.values() for k in keys}
    unknown = sorted({k for t in timings for k in t} - known)
    if unknown:
        per_op = [sum(t.get(k, 0.0) for k in unknown) for t in timings]
        phases["unlisted:" + ",".join(unknown)] = {"total_s": sum(per_op) / 1000.0}
    return phases


def jevmem_costs(runs: Sequence[ConversationRun]) -> dict[str, Any]:
    write_ms = [v for r in runs for v in r.write_ms]
    query_ms = [v for r in runs for v in r.query_ms]
    phases = phase_costs([t for r in runs for t in r.write_timings], PHASES)
    edges: dict[str, int] = {}
    status: dict[str, int] = {}
    stopped: dict[str, int] = {}
    for r in runs:
        for rel, n in r.stats.get("edges", {}).items():
            edges[rel] = edges.get(rel, 0) + n
        for key, n in r.link_status.items():
            status[key] = status.get(key, 0) + n
        for key, n in r.stopped.items():
            stopped[key] = stopped.get(key, 0) + n
    return {
        "writes": len(write_ms),
        "build_s": sum(r.build_s for r in runs),
        "write_ms_p50": _p(write_ms, 50),
        "write_ms_p95": _p(write_ms, 95),
        "write_phases": phases,
        "candidates_per_write": _mean([c for r in runs for c in r.write_candidates]),
        "controller_questions_per_write": _mean([q for r in runs for q in r.write_questions]),
        "inferred_edges_per_write": _mean([e for r in runs for e in r.write_edges]),
        "queries": len(query_ms),
        "query_ms_p50": _p(query_ms, 50),
        "query_ms_p95": _p(query_ms, 95),
        "query_phases": phase_costs([t for r in runs for t in r.query_timings], QUERY_PHASES),
        "controller_questions_per_query": _mean([q for r in runs for q in r.query_questions]),
        "controller_requests_per_query": _mean([q for r in runs for q in r.query_requests]),
        "stopped_reason": stopped,
        "link_status": status,
        "edges": edges,
        "nodes": sum(r.stats.get("nodes", 0) for r in runs),
        "summaries": sum(r.stats.get("summaries", 0) for r in runs),
    }


def write_quality(runs: Sequence[ConversationRun]) -> dict[str, Any]:
    """Candidate recall per channel and after fusion / the K_w cut, and edge recall, over multi-hop pairs."""
    pairs = [p for r in runs for p in r.pairs]
    assessed = [p for p in pairs if p.found_by]
    out: dict[str, Any] = {"pairs": len(pairs), "pairs_inspected": len(assessed)}
    if assessed:
        channels = sorted({c for p in assessed for c in p.found_by})
        out["candidate_recall"] = {c: sum(p.found_by.get(c, False) for p in assessed) / len(assessed) for c in channels}
    if pairs and any(p.found_by or p.relations for p in pairs):
        n = len(pairs)
        out["edge_recall_any"] = sum(bool(p.relations) for p in pairs) / n
        out["edge_recall_inferred"] = sum(bool(p.inferred) for p in pairs) / n
        relations = sorted({rel for p in pairs for rel in p.relations})
        out["edge_recall_by_relation"] = {rel: sum(rel in p.relations for p in pairs) / n for rel in relations}
        shortlisted = [p for p in assessed if p.found_by.get("shortlist")]
        if shortlisted:
            # of the pairs that reached judgment, how many did it join
            out["inferred_given_shortlist"] = sum(bool(p.inferred) for p in shortlisted) / len(shortlisted)
    return out


def router_diagnostics(runs: Sequence[ConversationRun], categories: Mapping[tuple[str, str], int]) -> dict[str, Any]:
    """AUROC of the temporal route for category 2 vs rest, and of multi_hop for category 1 vs rest."""
    rows = [(cat, r.routes.get(qid, {})) for (conv, qid), cat in categories.items() for r in runs if r.conversation == conv]
    out: dict[str, Any] = {}
    for route, category in (("temporal", 2), ("multi_hop", 1)):
        pairs = [(probs[route], cat == category) for cat, probs in rows if route in probs]
        if pairs:
            out[f"auroc_{route}_cat{category}"] = auroc([p for p, _ in pairs], [y for _, y in pairs])
            out[f"mean_{route}_cat{category}"] = _mean([p for p, y in pairs if y])
            out[f"mean_{route}_rest"] = _mean([p for p, y in pairs if not y])
    return out
