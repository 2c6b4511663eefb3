"""Paired comparisons from saved runs (`jevmem eval compare`): the run's own intervals, reproduced from its files."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memory.evaluation import EvalConfig, EvalReport, SystemResult, aggregate, write_report
from memory.evaluation.bootstrap import paired_differences
from memory.evaluation.compare import CompareError, compare, label_runs, read_scores, run_names
from memory.evaluation.metrics import QuestionScore
from serving.cli import main

CONVERSATIONS = ("conv-a", "conv-b", "conv-c")


def _scores(seed: int, shift: float = 0.0) -> list[QuestionScore]:
    rng = random.Random(seed)
    out = []
    for conv in CONVERSATIONS:
        for i in range(12):
            frac = min(1.0, max(0.0, rng.random() + shift))
            values = {"R_any@10": float(frac > 0), "R_frac@10": frac, "R_all@10": float(frac == 1.0), "nDCG@10": frac / 2,
                      "MRR": rng.random()}
            out.append(QuestionScore(conv, f"{conv}-q{i}", 1 + i % 5, 2, values, {"D1:1": None if frac < 0.5 else 3}))
    return out


def _save(directory: Path, systems: dict[str, list[QuestionScore]]) -> Path:
    results = {name: SystemResult(name, scores=s, table=aggregate(s)) for name, s in systems.items()}
    report = EvalReport(EvalConfig(systems=tuple(systems)), CONVERSATIONS, 36, results)
    write_report(report, directory)
    return directory


def test_a_saved_run_gives_back_the_paired_intervals_of_the_run(tmp_path: Path) -> None:
    a, b = _scores(0), _scores(1, shift=0.2)
    run = _save(tmp_path / "run", {"bm25": a, "rrf": b})
    result = compare(read_scores(run), "bm25")
    assert result.question["rrf"] == paired_differences(b, a, CONVERSATIONS, unit="question")
    assert result.cluster["rrf"] == paired_differences(b, a, CONVERSATIONS)
    assert result.shared == {"rrf": 36} and "bm25" not in result.question
    mean = sum(s.values["R_frac@10"] for s in b) / 36 - sum(s.values["R_frac@10"] for s in a) / 36
    assert result.question["rrf"]["R_frac@10 [1-5]"].mean == pytest.approx(mean)
    assert result.means["bm25"]["R_frac@10 [1-5]"] == pytest.approx(sum(s.values["R_frac@10"] for s in a) / 36)


def test_systems_of_two_runs_on_the_same_questions(tmp_path: Path) -> None:
    old = _save(tmp_path / "old", {"rrf": _scores(0), "jevmem-local": _scores(1)})
    new = _save(tmp_path / "new", {"jevmem-local": _scores(2, shift=0.3)})
    systems = label_runs([read_scores(old), read_scores(new)], ["old", "new"])
    assert sorted(systems) == ["jevmem-local@new", "jevmem-local@old", "rrf"]
    with pytest.raises(CompareError, match="each run needs a name of its own"):
        label_runs([read_scores(old), read_scores(new)], ["x", "x"])
    result = compare(systems, "jevmem-local@old")
    assert result.question["jevmem-local@new"]["R_frac@10 [1-5]"].mean > 0 and result.shared["rrf"] == 36


def test_run_names_are_the_directory_names_with_as_many_parents_as_tell_them_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for folder in ("x/a/run", "y/a/run", "b/run", "old"):
        (tmp_path / folder).mkdir(parents=True)
    assert run_names([tmp_path / "old", tmp_path / "b/run"]) == ["old", "run"]
    assert run_names([tmp_path / "b/run", tmp_path / "x/a/run", tmp_path / "old"]) == ["b/run", "a/run", "old"]
    assert run_names([tmp_path / "x/a/run", tmp_path / "y/a/run", tmp_path / "b/run"]) == ["x/a/run", "y/a/run", "b/run"]
    monkeypatch.chdir(tmp_path / "b/run")
    assert run_names([".", "../../old"]) == ["run", "old"]  # the resolved directory's name, never "" or ".."
    assert run_names(["questions.jsonl", "../../x/a/run/questions.jsonl"]) == ["b/run", "a/run"]  # a rows file: its directory
    for twice, message in (([".", "."], "RUN . given twice; "), (["../run", "."], r"RUN \. given twice \(also as \.\./run\)"),
                           ([".", "questions.jsonl"], r"RUN questions.jsonl given twice \(also as \.\)")):
        with pytest.raises(CompareError, match=message):
            run_names(twice)


def test_unusable_runs_are_clear_errors(tmp_path: Path) -> None:
    run = _save(tmp_path / "run", {"bm25": _scores(0)})
    with pytest.raises(CompareError, match="no system 'rrf'.*found: bm25"):
        compare(read_scores(run), "rrf")
    other = [QuestionScore("conv-z", "z1", 1, 1, {"R_frac@10": 1.0})]
    with pytest.raises(CompareError, match="share no question"):
        compare({"bm25": _scores(0), "rrf": other}, "bm25")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"system": "a", "conversation": "c", "qid": "q", "category": 1, "n_gold": 1}\n{"system": "a"}\n')
    with pytest.raises(CompareError, match=r"bad.jsonl:2: not a question row"):
        read_scores(bad)
    with pytest.raises(CompareError, match="cannot read"):
        read_scores(tmp_path / "missing")


def test_the_command_prints_the_table_or_fails_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _save(tmp_path / "run", {"bm25": _scores(0), "rrf": _scores(1)})
    assert main(["eval", "compare", str(run), "--reference", "bm25", "--draws", "200"]) == 0
    out = capsys.readouterr().out
    assert "# Paired differences: system minus bm25" in out and "| rrf | 36 |" in out
    assert main(["eval", "compare", str(run), "--reference", "nope"]) == 2
    assert "no system 'nope'" in capsys.readouterr().err
