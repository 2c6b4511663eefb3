"""Retrieval evaluation on LoCoMo (EVALUATION.md section 1): metrics, flat baselines, the Jev-Mem harness,
conversation-cluster and question bootstraps, reports.

    from data.locomo import load_locomo
    from memory.evaluation import EvalConfig, run_locomo, write_report
    report = run_locomo(load_locomo(path), EvalConfig(systems=("bm25", "dense", "rrf", "jevmem-heuristic")))
    write_report(report, "eval-out/")

Importing this package loads neither torch nor the engine; they are imported when a run needs them.
"""

from memory.evaluation.bootstrap import Interval, bootstrap_intervals, paired_differences
from memory.evaluation.harness import EvalConfig, EvalReport, SystemResult, run_locomo
from memory.evaluation.metrics import Item, QuestionScore, aggregate, auroc, count_tokens, score_items
from memory.evaluation.report import to_markdown, write_report

__all__ = [
    "EvalConfig",
    "EvalReport",
    "Interval",
    "Item",
    "QuestionScore",
    "SystemResult",
    "aggregate",
    "auroc",
    "bootstrap_intervals",
    "count_tokens",
    "paired_differences",
    "run_locomo",
    "score_items",
    "to_markdown",
    "write_report",
]
