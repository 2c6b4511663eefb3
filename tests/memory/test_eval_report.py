"""Report rendering: JSON safety and the reference check against EVALUATION.md."""

from __future__ import annotations

import json
from pathlib import Path

from memory.evaluation import EvalConfig, EvalReport, SystemResult, aggregate, to_markdown, write_report
from memory.evaluation.metrics import QuestionScore, gold_rank_shares
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


def test_gold_rank_shares_split_the_missed_evidence_by_where_it_ranks() -> None:
    scores = [
        QuestionScore("c", "q1", 1, 3, {"m": 1.0}, {"D1:1": 1, "D1:2": 7, "D1:3": None}),
        QuestionScore("c", "q2", 4, 1, {"m": 1.0}, {"D2:1": 15}),
    ]
    shares = gold_rank_shares(scores, query_k=20)
    assert shares["1"] == {"1-5": 1 / 3, "6-10": 1 / 3, "11-20": 0.0, "not returned": 1 / 3, "turns": 3.0}
    assert shares["1-5"] == {"1-5": 0.25, "6-10": 0.25, "11-20": 0.25, "not returned": 0.25, "turns": 4.0}
    assert "4" in shares and "2" not in shares
    assert list(gold_rank_shares(scores, query_k=10)["1-5"]) == ["1-5", "6-10", "not returned", "turns"]
    assert gold_rank_shares(scores, query_k=10)["1-5"]["not returned"] == 0.5  # rank 15 is beyond a cut at 10
    result = SystemResult("bm25", scores=scores, table=aggregate(scores))
    text = to_markdown(EvalReport(EvalConfig(systems=("bm25",)), ("c",), 2, {"bm25": result}))
    assert "| bm25 | 0.250 / 0.333 | 0.250 / 0.333 | 0.250 / 0.000 | 0.250 / 0.333 | 4 / 3 |" in text
