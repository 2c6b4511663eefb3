"""training.ood: the real sys1bench / jevbench code on tiny in-process runs (no server), the summary, the CLI wiring.

The end-to-end run that starts a server is marked slow.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from training import ood
from training.errors import PipelineError


def _no_nan(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise AssertionError(f"non-finite number {token} in JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """sys1bench with its `mock` adapter (skill 0.9) and the two references; jevbench-mini against the uniform reference."""
    import jevbench as jb
    from sys1bench.adapters import get_adapter

    out = tmp_path_factory.mktemp("ood")
    cfg = ood.OodConfig(items=12, seed=3, out_dir=str(out))
    adapters = {"mock": get_adapter("mock", model_id="mock", skill=0.9),
                ood.UNIFORM: get_adapter("majority_prior", model_id=ood.UNIFORM),
                ood.BASE_RATE: get_adapter("majority_prior", model_id=ood.BASE_RATE)}
    rag = ood.run_sys1bench(adapters, cfg, out / "sys1bench")
    coherence = ood.run_jevbench({ood.UNIFORM: jb.from_callable(ood.uniform_answers, name=ood.UNIFORM)}, "jevbench-mini", out / "jevbench")
    return {"out": out, "cfg": cfg, "rag": rag, "coherence": coherence}


def _row(rag: list[ood.QuestionScore], model: str, question: str) -> ood.QuestionScore:
    (row,) = [r for r in rag if r.model == model and r.question == question]
    return row


def test_sys1bench_scorecards_become_rows(tiny_runs: dict[str, Any]) -> None:
    rag, out = tiny_runs["rag"], tiny_runs["out"] / "sys1bench"
    assert {(r.model, r.question) for r in rag} == {(m, q) for m in ("mock", ood.UNIFORM, ood.BASE_RATE)
                                                    for q in ("best_passage", "is_relevant", "relevance")}
    assert all(r.n == 12 and set(r.metrics) == {name for name, _ in ood.SYS1_METRICS} for r in rag)
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    gold_first = sum(item["questions"]["best_passage"]["ground_truth"] == "p000" for item in manifest) / len(manifest)
    uniform = _row(rag, ood.UNIFORM, "best_passage").metrics
    # unfitted majority_prior: 1/K on every passage, the tie goes to the first one
    assert uniform["accuracy"] == pytest.approx(gold_first)
    assert uniform["nll"] == pytest.approx(math.log(5), abs=1e-6) and uniform["mean_conf"] == pytest.approx(0.2)
    assert _row(rag, "mock", "best_passage").metrics["accuracy"] > uniform["accuracy"]
    assert all(r.metrics["transport_fail"] == 0.0 and r.metrics["schema_fail"] == 0.0 for r in rag)
    cards = _no_nan((out / "scorecards.json").read_text())
    assert "mock / relevance" in cards and (out / "preds-mock.jsonl").is_file() and (out / "table.md").is_file()


def test_uniform_reference_scores_about_89_on_jevbench(tiny_runs: dict[str, Any]) -> None:
    (uniform,) = tiny_runs["coherence"]
    assert uniform.model == ood.UNIFORM and uniform.errors == 0 and uniform.requests > 1000
    assert uniform.overall is not None and 85.0 <= uniform.overall <= 92.0  # PROTOCOL.md: "about 89"
    assert set(uniform.dimensions) == {"REP", "BAT", "MEA", "LOG", "CHO"} and uniform.dimensions["BAT"] == 100.0
    assert uniform.interval is not None and uniform.interval[0] <= uniform.overall <= uniform.interval[1]  # type: ignore[operator]
    assert (tiny_runs["out"] / "jevbench" / "report-uniform.json.gz").is_file()


def test_coherence_score_keeps_missing_dimensions_as_none() -> None:
    score = ood.coherence_score("m", {"overall": None, "pillars": {"REP": 0.5, "MEA": float("nan")}, "ci": {}},
                                {"requests": 7, "errors": [{"x": 1}], "wall_seconds": 1.234})
    assert score == ood.CoherenceScore("m", None, None, {"REP": 50.0, "MEA": None}, 7, 1, 1.23)


def test_uniform_answers_are_uniform_wire_answers() -> None:
    got = ood.uniform_answers("any state", {
        "n": {"type": "noul", "instructions": "x"},
        "c": {"type": "choice", "criteria": {"a": None, "b": "B", "c": None, "d": None}},
        "s": {"type": "score", "criteria": ["low", "mid", "high"]},
    })
    assert got["n"] == {"type": "noul", "noul": 0.5}
    assert got["c"]["probabilities"] == {k: 0.25 for k in "abcd"}
    assert got["s"] == {"type": "score", "probabilities": {"0": pytest.approx(1 / 3), "1": pytest.approx(1 / 3), "2": pytest.approx(1 / 3)}}


def test_summary_json_and_markdown(tiny_runs: dict[str, Any], tmp_path: Path) -> None:
    from dataclasses import asdict

    summary = ood.OodSummary("heuristic", "mock", asdict(tiny_runs["cfg"]), tiny_runs["rag"], tiny_runs["coherence"], {"total": 1.5})
    ood.write_summary(summary, tmp_path)
    data = _no_nan((tmp_path / "summary.json").read_text())
    assert data["model"] == "mock" and len(data["sys1bench"]) == 9 and data["jevbench"][0]["model"] == ood.UNIFORM
    md = (tmp_path / "summary.md").read_text()
    assert "| mock | best_passage | 12 |" in md and "| uniform | 8" in md and "12 items, K=5, seed 3" in md


def test_cli_builds_the_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from training.__main__ import main

    seen: list[ood.OodConfig] = []

    def fake_run(cfg: ood.OodConfig) -> ood.OodSummary:
        seen.append(cfg)
        return ood.OodSummary(cfg.controller, "m", {}, [], [], {})

    monkeypatch.setattr(ood, "run_ood", fake_run)
    assert main(["ood", "--controller", "local", "--model-dir", "M", "--items", "7", "--out", str(tmp_path), "--no-jevbench"]) == 0
    assert seen == [ood.OodConfig(controller="local", model_dir="M", items=7, out_dir=str(tmp_path), jevbench_suite=None)]
    assert main(["ood"]) == 0 and seen[1].out == Path("runs/ood-heuristic") and seen[1].jevbench_suite == "jevbench-mini"
    assert "Out of domain: m" in capsys.readouterr().out
    with pytest.raises(ValueError, match="cardinality"):
        ood.OodConfig(cardinality=1)
    assert main(["ood", "--controller", "local", "--truncate-state", "--no-jevbench"]) == 0 and seen[2].overflow == "truncate_state"
    with pytest.raises(ValueError, match="overflow"):
        ood.OodConfig(controller="heuristic", overflow="truncate_state")
    assert main(["ood", "--without-focus", "--no-jevbench"]) == 0 and seen[3].without_focus and not seen[0].without_focus
    assert main(["ood", "--controller", "local", "--without-focus", "--record-run", str(tmp_path)]) != 0
    assert "--without-focus is a check beside them" in capsys.readouterr().err and len(seen) == 4


def test_an_output_path_that_cannot_be_written_is_refused_before_the_benchmarks_run(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from training.__main__ import main

    ran: list[ood.OodConfig] = []
    monkeypatch.setattr(ood, "run_ood", lambda cfg: ran.append(cfg))
    afile = tmp_path / "afile"
    afile.write_text("x\n", encoding="utf-8")
    assert main(["ood", "--out", str(afile), "--no-jevbench"]) == 2  # before: FileExistsError after both benchmarks
    assert "cannot write --out" in capsys.readouterr().err
    assert main(["ood", "--controller", "local", "--out", str(tmp_path / "o"), "--record-run", str(afile / "run")]) == 2
    assert "cannot write --record-run" in capsys.readouterr().err
    assert ran == [] and afile.read_text(encoding="utf-8") == "x\n"


def _focus_picker() -> Any:
    """A sys1bench adapter that puts 0.96 on the state's `focus` passage (1/K without one): the leak itself."""
    from sys1bench.adapters.base import finalize_answer
    from sys1bench.adapters.majority_prior import MajorityPriorAdapter

    class FocusPicker(MajorityPriorAdapter):
        def fit(self, items: Any) -> None:  # run_sys1bench fits adapters that can be: this one stays uniform
            return None

        def decide(self, request: Any) -> Any:
            response = super().decide(request)  # uniform: never fitted
            q = request.questions["best_passage"]
            focus = request.state.get("focus") if isinstance(request.state, dict) else None
            if focus in q.option_keys:
                rest = 0.04 / (len(q.option_keys) - 1)
                response.answers["best_passage"] = finalize_answer(q, [0.96 if k == focus else rest for k in q.option_keys])
            return response

    return FocusPicker(model_id="focus")


def test_without_focus_removes_the_leak(tmp_path: Path) -> None:
    picker = {"focus": _focus_picker()}
    kept = ood.run_sys1bench(picker, ood.OodConfig(items=40, seed=5, out_dir=str(tmp_path)), tmp_path / "kept")
    dropped = ood.run_sys1bench(picker, ood.OodConfig(items=40, seed=5, without_focus=True), tmp_path / "dropped")
    items = [json.loads(line) for line in (tmp_path / "kept" / "manifest.jsonl").read_text().splitlines()]
    focus_is_gold = sum(it["state"]["focus"] == it["questions"]["best_passage"]["ground_truth"] for it in items) / len(items)
    gold_first = sum(it["questions"]["best_passage"]["ground_truth"] == "p000" for it in items) / len(items)
    assert focus_is_gold > 0.4  # 0.5 + 0.5 / K by construction
    assert _row(kept, "focus", "best_passage").metrics["accuracy"] == pytest.approx(focus_is_gold)
    assert [(r.question, r.n) for r in dropped] == [("best_passage", 40)]  # the two focus questions are not asked
    assert _row(dropped, "focus", "best_passage").metrics["accuracy"] == pytest.approx(gold_first)  # uniform, first on ties
    rows = [json.loads(line) for line in (tmp_path / "dropped" / "manifest.jsonl").read_text().splitlines()]
    assert all("focus" not in r["state"] and set(r["questions"]) == {"best_passage"} for r in rows)
    assert [r["state"]["passages"] for r in rows] == [it["state"]["passages"] for it in items]  # same passages, same seed


def test_without_focus_refuses_other_items() -> None:
    from types import SimpleNamespace

    with pytest.raises(PipelineError, match="not a rag_relevance item"):
        ood.without_focus(SimpleNamespace(task_id="t1", state="text", questions={"best_passage": None}))


def test_a_server_that_cannot_start_is_a_pipeline_error(tmp_path: Path) -> None:
    cfg = ood.OodConfig(controller="no-such-backend", start_timeout_s=60)
    with pytest.raises(PipelineError, match="no-such-backend server exited"), ood.serve(cfg, tmp_path / "server.log"):
        pass
    assert (tmp_path / "server.log").stat().st_size > 0


@pytest.mark.slow
def test_end_to_end_heuristic_server(tmp_path: Path) -> None:
    summary = ood.run_ood(ood.OodConfig(controller="heuristic", items=10, out_dir=str(tmp_path)))
    assert summary.model.startswith("jevmem-heuristic")
    assert {r.model for r in summary.sys1bench} == {summary.model, ood.UNIFORM, ood.BASE_RATE}
    assert all(r.metrics["transport_fail"] == 0.0 and r.metrics["schema_fail"] == 0.0 for r in summary.sys1bench)
    assert [j.model for j in summary.jevbench] == [summary.model, ood.UNIFORM]
    assert all(j.errors == 0 and j.overall is not None for j in summary.jevbench)
    assert (tmp_path / "summary.json").is_file() and (tmp_path / "summary.md").is_file()
