"""Report rendering: JSON safety and the reference check against EVALUATION.md."""

from __future__ import annotations

import json
from pathlib import Path

from memory.evaluation import EvalConfig, EvalReport, SystemResult, aggregate, to_markdown, write_report
from memory.evaluation.metrics import QuestionScore
from memory.evaluation.report import DEV_CONVERSATIONS, report_dict


def _report(conversations: tuple[str, ...]) -> EvalReport:
    scores = [QuestionScore(c, f"{c}-q", 1, 1, {"R_any@10": 1.0, "R_frac@10": 0.5, "R_all@10": 0.0, "nDCG@10": 0.25,
                                                "MRR": float("nan")}) for c in conversations]
    bm25 = SystemResult("bm25", scores=scores, table=aggregate(scores))
    return EvalReport(EvalConfig(systems=("bm25",)), conversations, len(scores), {"bm25": bm25})


def test_reference_check_only_on_the_dev_conversations() -> None:
    text = to_markdown(_report(DEV_CONVERSATIONS))
    assert "minus the EVALUATION.md reference" in text
    assert "| bm25 | 1.000 (+0.339) | 0.500 (-0.114) | 0.000 (-0.577) | 0.000 (-0.093) | 0.250 (-0.231) |" in text
    assert "EVALUATION.md reference" not in to_markdown(_report(("conv-26",)))


def test_json_has_no_nan(tmp_path: Path) -> None:
    report = _report(("conv-26", "conv-30"))
    data = report_dict(report)
    assert data["systems"]["bm25"]["groups"]["1-5"]["MRR"] is None
    paths = write_report(report, tmp_path)
    json.loads(paths["json"].read_text())  # strict JSON (no NaN tokens)
    row = json.loads(paths["questions"].read_text().splitlines()[0])
    assert row["system"] == "bm25" and row["MRR"] is None
