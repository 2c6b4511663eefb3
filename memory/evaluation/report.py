"""Renders an `EvalReport`: `report.json` (summary), `questions.jsonl` (per-question values, and `gold_ranks`: each
gold turn's 1-based rank among the items returned, null when it was not among them) and `report.md`."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from data.paths import replacing, write_text_atomic
from memory.evaluation.bootstrap import MIN_CLUSTERS, Interval
from memory.evaluation.harness import EvalReport, SystemResult
from memory.evaluation.metrics import CATEGORY_LABELS, gold_rank_shares

HEADLINE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("R_any@10", "1-5", "R_any@10"),
    ("R_frac@10", "1-5", "R_frac@10"),
    ("R_all@10", "1-5", "R_all@10"),
    ("R_all@10 multi-hop", "1", "R_all@10"),
    ("nDCG@10", "1-5", "nDCG@10"),
    ("MRR", "1-5", "MRR"),
)


# EVALUATION.md's reference figures (6 dev conversations, 1,155 questions): the five headline columns
REFERENCE: dict[str, tuple[float, ...]] = {
    "bm25": (0.661, 0.614, 0.577, 0.093, 0.481),
    "dense": (0.536, 0.482, 0.438, 0.087, 0.325),
    "rrf": (0.676, 0.627, 0.584, 0.122, 0.454),
}
DEV_CONVERSATIONS = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44")


def _clean(value: Any) -> Any:
    """JSON-safe: NaN / inf become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _interval(i: Interval) -> dict[str, float | int]:
    return {"mean": i.mean, "low": i.low, "high": i.high, "draws": i.draws}


def system_dict(result: SystemResult) -> dict[str, Any]:
    out: dict[str, Any] = {"name": result.name, "error": result.error}
    if result.table is not None:
        out["groups"] = result.table.means
        out["counts"] = result.table.counts
    out["intervals"] = {k: _interval(v) for k, v in result.intervals.items()}
    out["paired_vs_reference"] = {k: _interval(v) for k, v in result.paired.items()}
    out["question_intervals"] = {k: _interval(v) for k, v in result.question_intervals.items()}
    out["question_paired_vs_reference"] = {k: _interval(v) for k, v in result.question_paired.items()}
    out["costs"] = result.costs
    out["write_quality"] = result.write_quality
    out["router"] = result.router
    return out


def report_dict(report: EvalReport) -> dict[str, Any]:
    return _clean(
        {
            "config": asdict(report.config),
            "conversations": list(report.conversations),
            "questions": report.questions,
            "seconds": report.seconds,
            "notes": report.notes,
            "systems": {name: {**system_dict(r), "gold_rank_shares": gold_rank_shares(r.scores, report.config.query_k)}
                        for name, r in report.systems.items()},
        }
    )


def fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def _value(result: SystemResult, group: str, metric: str) -> float | None:
    if result.table is None:
        return None
    return result.table.means.get(group, {}).get(metric)


def to_markdown(report: EvalReport) -> str:
    cfg = report.config
    ok = [r for r in report.systems.values() if r.error is None]
    lines = [
        "# LoCoMo retrieval",
        "",
        f"Conversations: {', '.join(report.conversations)}; {report.questions} questions with valid evidence; "
        f"every system returns at most {cfg.query_k} items; baselines rank every turn (date style "
        f"`{cfg.date_style}`, RRF k={cfg.rrf_k}, dense weight {cfg.dense_weight}); {report.seconds:.0f} s in all."
        + (f" **Only the first {cfg.max_turns} turns of each conversation** (a quick run, not the protocol)."
           if cfg.max_turns else ""),
        "",
        "## Headline (categories 1-5)",
        "",
    ]
    rows = [[r.name, *(fmt(_value(r, g, m)) for _, g, m in HEADLINE_COLUMNS)] for r in ok]
    lines += md_table(["system", *(c for c, _, _ in HEADLINE_COLUMNS)], rows)
    for r in report.systems.values():
        if r.error is not None:
            lines.append(f"\n**{r.name} did not run:** {r.error}")
    lines += _reference_check(report)
    lines += ["", "## Recall by category (R_frac@10 / R_all@10)", ""]
    groups = ["1", "2", "3", "4", "5", "1-4", "1-5"]
    header = ["system", *(f"{g} {CATEGORY_LABELS.get(g, '')}".strip() for g in groups)]
    rows = [[r.name, *(f"{fmt(_value(r, g, 'R_frac@10'))} / {fmt(_value(r, g, 'R_all@10'))}" for g in groups)] for r in ok]
    lines += md_table(header, rows)
    if ok and ok[0].table is not None:
        lines.append("")
        lines.append("Questions per group: " + ", ".join(f"{g}: {ok[0].table.counts.get(g, 0)}" for g in groups))
    lines += _rank_bands(ok, cfg.query_k)
    lines += ["", "## Cut-offs and token budgets (R_frac / R_all, categories 1-5)", ""]
    cuts = [str(k) for k in cfg.ks] + [f"{b}t" for b in cfg.budgets] + ["ret"]
    rows = []
    for r in ok:
        cells = [f"{fmt(_value(r, '1-5', f'R_frac@{c}'))} / {fmt(_value(r, '1-5', f'R_all@{c}'))}" for c in cuts]
        rows.append([r.name, *cells, fmt(_value(r, "1-5", "tokens@ret"), 0), fmt(_value(r, "1-5", "items@ret"), 1)])
    lines += md_table(["system", *(f"@{c}" for c in cuts), "tokens@ret", "items@ret"], rows)
    n_conv = len(report.conversations)
    lines += ["", f"## Conversation-cluster bootstrap ({cfg.bootstrap_draws} draws, seed {cfg.seed}): mean [95 % CI]", ""]
    if n_conv < MIN_CLUSTERS:
        lines += [f"With {n_conv} conversation{'s' if n_conv != 1 else ''}, these intervals are about the range of the per-conversation "
                  "means, not 95 % intervals; read the question bootstrap below (it does not cover the spread between conversations).", ""]
    keys = list(ok[0].intervals) if ok else []
    rows = [[r.name, *(fmt_interval(r.intervals.get(k)) for k in keys)] for r in ok]
    lines += md_table(["system", *keys], rows)
    paired = [r for r in ok if r.paired]
    if paired:
        lines += ["", f"## Paired difference: system minus {cfg.reference_system}", ""]
        rows = [[r.name, *(fmt_interval(r.paired.get(k)) for k in keys)] for r in paired]
        lines += md_table(["system", *keys], rows)
    lines += ["", f"## Question bootstrap within conversations ({cfg.bootstrap_draws} draws, seed {cfg.seed}): mean [95 % CI]", "",
              "Questions resampled with replacement inside each conversation (each keeps its count): intervals for these "
              "conversations' questions.", ""]
    lines += md_table(["system", *keys], [[r.name, *(fmt_interval(r.question_intervals.get(k)) for k in keys)] for r in ok])
    if paired:
        lines += ["", f"Paired difference, system minus {cfg.reference_system}:", ""]
        lines += md_table(["system", *keys], [[r.name, *(fmt_interval(r.question_paired.get(k)) for k in keys)] for r in paired])
    lines += _costs(ok)
    return "\n".join(lines) + "\n"


def _rank_bands(results: list[SystemResult], query_k: int) -> list[str]:
    """Where the gold turns rank, all categories and multi-hop: just below the cut, or not returned at all."""
    shares = {r.name: gold_rank_shares(r.scores, query_k) for r in results}
    bands = next((list(v["1-5"])[:-1] for v in shares.values() if "1-5" in v), [])
    if not bands:
        return []
    lines = ["", "## Where the gold turns rank (share of gold turns; categories 1-5 / multi-hop)", ""]
    rows = [[name, *(f"{fmt(v.get('1-5', {}).get(b))} / {fmt(v.get('1', {}).get(b))}" for b in bands),
             f"{fmt(v.get('1-5', {}).get('turns'), 0)} / {fmt(v.get('1', {}).get('turns'), 0)}"] for name, v in shares.items()]
    return lines + md_table(["system", *bands, "gold turns"], rows)


def _reference_check(report: EvalReport) -> list[str]:
    """Measured minus reference for the flat baselines, when the run covers exactly the dev conversations."""
    rows = []
    if tuple(sorted(report.conversations)) == DEV_CONVERSATIONS and report.config.max_turns is None:
        for name, ref in REFERENCE.items():
            result = report.systems.get(name)
            if result is None or result.table is None:
                continue
            measured = [_value(result, g, m) for _, g, m in HEADLINE_COLUMNS[:5]]
            rows.append([name, *(f"{fmt(v)} ({(v or 0.0) - r:+.3f})" for v, r in zip(measured, ref))])
    if not rows:
        return []
    header = ["baseline", *(c for c, _, _ in HEADLINE_COLUMNS[:5])]
    return ["", "Measured (minus the EVALUATION.md reference):", "", *md_table(header, rows)]


def fmt_interval(i: Interval | None) -> str:
    if i is None:
        return "-"
    return f"{fmt(i.mean)} [{fmt(i.low)}, {fmt(i.high)}]"


def _costs(results: list[SystemResult]) -> list[str]:
    engines = [r for r in results if "writes" in r.costs]
    lines = ["", "## Costs", ""]
    flat = [r for r in results if "per_query_ms" in r.costs]
    if flat:
        lines += md_table(["baseline", "index + rank s", "ms per query"],
                        [[r.name, fmt(r.costs["index_and_rank_s"], 2), fmt(r.costs["per_query_ms"], 2)] for r in flat])
    if not engines:
        return lines
    names = ["build_s", "write_ms_p50", "write_ms_p95", "candidates_per_write", "controller_questions_per_write",
             "inferred_edges_per_write", "query_ms_p50", "query_ms_p95", "controller_questions_per_query", "nodes", "summaries"]
    lines += [""]
    lines += md_table(["engine", *names], [[r.name, *(fmt(r.costs.get(n), 2) for n in names)] for r in engines])
    for key, title in (("write_phases", "Write phases, total s (p50 / p95 ms per write):"),
                       ("query_phases", "Query phases, total s (p50 / p95 ms per query; the rest of a query is ranking):")):
        phases = sorted({p for r in engines for p in r.costs.get(key, {})})
        if not phases:
            continue
        rows = []
        for r in engines:
            cells = []
            for p in phases:
                v = r.costs.get(key, {}).get(p, {})
                cells.append(f"{fmt(v.get('total_s'), 1)} ({fmt(v.get('p50_ms'), 1)} / {fmt(v.get('p95_ms'), 1)})")
            rows.append([r.name, *cells])
        lines += ["", title, ""]
        lines += md_table(["engine", *phases], rows)
    lines += ["", "## Write-path quality (multi-hop evidence pairs) and router", ""]
    rows = []
    for r in engines:
        wq, ro = r.write_quality, r.router
        recall = wq.get("candidate_recall", {})
        rows.append([
            r.name, str(wq.get("pairs", 0)),
            ", ".join(f"{c} {fmt(v)}" for c, v in recall.items()) or "-",
            fmt(wq.get("edge_recall_any")), fmt(wq.get("edge_recall_inferred")),
            fmt(ro.get("auroc_temporal_cat2")), fmt(ro.get("auroc_multi_hop_cat1")),
        ])
    lines += md_table(["engine", "pairs", "candidate recall", "edge recall (any)", "edge recall (inferred)",
                     "AUROC temporal (cat 2)", "AUROC multi_hop (cat 1)"], rows)
    return lines


_FILES: dict[str, str] = {"json": "report.json", "questions": "questions.jsonl", "markdown": "report.md"}
REPORT_FILES: tuple[str, ...] = tuple(_FILES.values())  # what `write_report` writes


def write_report(report: EvalReport, out_dir: str | Path) -> dict[str, Path]:
    """Write report.json, questions.jsonl and report.md under `out_dir` (created); returns their paths. Each file is
    written beside its place and renamed over it: an interrupted write leaves the old file (or none), never a cut one."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {key: out / name for key, name in _FILES.items()}
    write_text_atomic(paths["json"], json.dumps(report_dict(report), indent=2) + "\n")
    with replacing(paths["questions"]) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for result in report.systems.values():
            for s in result.scores:
                row = {"system": result.name, "conversation": s.conversation, "qid": s.qid, "category": s.category,
                       "n_gold": s.n_gold, **s.values, "gold_ranks": s.gold_ranks}
                fh.write(json.dumps(_clean(row)) + "\n")
    write_text_atomic(paths["markdown"], to_markdown(report))
    return paths
