"""Mean-logit ensembles of relevance predictions: alignment, averaging, the table."""

from __future__ import annotations

import numpy as np
import pytest

from data.schema import DecisionExample
from training.ensemble import ensemble_table, format_table, mean_predictions
from training.predict import Prediction
from training.sampling import Label


def _case(i: int, query: str, target: float, notes: str) -> DecisionExample:
    return DecisionExample(id=f"x{i}", family="relevance", question_name="relevant", state={"query": query, "memory": f"turn {i}"},
                           question={"type": "noul", "instructions": "Does state.memory help answer state.query?"},
                           target=target, source="locomo", group="locomo:c", split="dev", notes=notes)


def _run(examples: list[DecisionExample], logits: list[float]) -> list[Prediction]:
    return [Prediction(Label("noul", (float(e.target),), 1.0, "relevance", "relevant", e.id), np.array([z]), "dev", e.group)
            for e, z in zip(examples, logits)]


def test_the_mean_logit_can_beat_every_member() -> None:
    examples = [_case(0, "q", 1.0, "locomo:gold"), _case(1, "q", 0.0, "locomo:bm25"), _case(2, "q", 1.0, "locomo:gold"), _case(3, "q", 0.0, "locomo:bm25")]
    # each member misorders one pair, in a different place; their errors cancel in the mean
    a = _run(examples, [2.0, 1.5, 1.0, -1.0])
    b = _run(examples, [1.0, -1.0, 2.0, 1.5])
    table = ensemble_table({"a": a, "b": b}, examples)
    assert table["a"]["all"] == pytest.approx(0.75) and table["b"]["all"] == pytest.approx(0.75)
    assert table["mean logit"]["all"] == pytest.approx(1.0)
    assert [float(p.logits[0]) for p in mean_predictions([a, b])] == [1.5, 0.25, 1.5, 0.25]
    assert table["a"]["locomo:random"] is None
    assert "| mean logit | 1.000 | 1.000 | - |" in format_table(table)
    assert set(ensemble_table({"a": a}, examples)) == {"a"}  # one model: no ensemble row


def test_the_table_says_how_much_the_logit_depends_on_the_query() -> None:
    from dataclasses import replace

    # two memories, each under two queries (gold under one, a negative under the other)
    examples = [replace(_case(i, q, y, n), state={"query": q, "memory": m}) for i, (q, m, y, n) in enumerate(
        [("q1", "A", 1.0, "locomo:gold"), ("q2", "A", 0.0, "locomo:bm25"), ("q1", "B", 0.0, "locomo:bm25"), ("q2", "B", 1.0, "locomo:gold")])]
    blind = _run(examples, [1.0, 1.0, -1.0, -1.0])  # each memory scores alike under both queries
    reads = _run(examples, [2.0, -2.0, -2.0, 2.0])
    table = ensemble_table({"blind": blind, "reads": reads}, examples)
    assert table["blind"]["same_memory"] == 0.0 and table["reads"]["same_memory"] == pytest.approx(1.0)
    assert format_table(table).splitlines()[0].endswith("| per_query | same_memory |")
    assert "| blind |" in format_table(table) and format_table(table).splitlines()[2].endswith("| 0.000 |")


def test_runs_that_do_not_line_up_are_refused() -> None:
    examples = [_case(0, "q", 1.0, "locomo:gold"), _case(1, "q", 0.0, "locomo:bm25")]
    with pytest.raises(ValueError, match="same labels"):
        mean_predictions([_run(examples, [1.0, 0.0]), _run(examples[::-1], [1.0, 0.0])])
    with pytest.raises(ValueError, match="same labels"):
        mean_predictions([_run(examples, [1.0, 0.0]), _run(examples[:1], [1.0])])
    with pytest.raises(ValueError, match="at least one"):
        mean_predictions([])


def _ensemble(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from training.__main__ import main

    code = main(["ensemble", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture()
def dirs(tmp_path):  # type: ignore[no-untyped-def]
    """A data directory whose dev split holds no LoCoMo relevance example, and a directory shaped like a model."""
    data, model = tmp_path / "data", tmp_path / "model"
    data.mkdir()
    (data / "dev.jsonl").write_text("", encoding="utf-8")
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    return data, model


def test_inputs_it_cannot_use_are_errors_on_stderr(tmp_path, dirs, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    data, model = dirs
    (tmp_path / "no-data").mkdir()
    (tmp_path / "empty-model").mkdir()
    for argv, message in (
        (["--data-dir", str(tmp_path / "zzz"), "--model-dirs", str(model)], f"--data-dir {tmp_path / 'zzz'} does not exist"),
        (["--data-dir", str(tmp_path / "no-data"), "--model-dirs", str(model)],
         f"--data-dir {tmp_path / 'no-data'} has no dev.jsonl: build the data there first (build-data --out)"),
        (["--data-dir", str(data), "--model-dirs", str(model), "--cosine"],
         f"--data-dir {data} has no calibration.jsonl: build the data there first (build-data --out)"),
        (["--data-dir", str(data), "--model-dirs", str(model), str(tmp_path / "nomodel")], f"--model-dirs {tmp_path / 'nomodel'} does not exist"),
        (["--data-dir", str(data), "--model-dirs", str(tmp_path / "empty-model")],
         f"--model-dirs {tmp_path / 'empty-model'} is not a model directory (no config.json): give one the fit stage wrote"),
        (["--data-dir", str(data), "--model-dirs", str(model)],
         f"no LoCoMo relevance examples in {data / 'dev.jsonl'}: build the data with a LoCoMo file (build-data --locomo)"),
        (["--data-dir", str(data), "--model-dirs", str(model), "--memory-prior", "-1"], "--memory-prior takes K >= 1 probes per memory (0: off), got -1"),
    ):
        assert _ensemble(capsys, *argv) == (2, "", f"error: {message}\n")


def test_the_same_directory_named_twice_is_refused_however_it_is_spelled(tmp_path, dirs, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    data, model = dirs
    (tmp_path / "link").symlink_to(model)
    for spelling in (str(tmp_path / "." / "model"), str(tmp_path / "link"), str(model) + "/"):
        code, printed, err = _ensemble(capsys, "--data-dir", str(data), "--model-dirs", str(model), spelling)
        assert (code, printed) == (2, "") and err.startswith(f"error: --model-dirs names {model.resolve()} twice")


def test_an_out_it_cannot_write_is_refused_before_any_work(tmp_path, dirs, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    data, model = dirs
    a_file = tmp_path / "a-file"
    a_file.write_text("kept", encoding="utf-8")
    out = a_file / "table.json"
    # the dev split has no LoCoMo example: a check at the end would report that instead
    assert _ensemble(capsys, "--data-dir", str(data), "--model-dirs", str(model), "--out", str(out)) == (
        2, "", f"error: cannot write --out {out}: {a_file} is a file, so {out} cannot be created\n")
    assert _ensemble(capsys, "--data-dir", str(data), "--model-dirs", str(model), "--out", str(tmp_path)) == (
        2, "", f"error: cannot write --out {tmp_path}: {tmp_path} is a directory, not a file\n")
    assert a_file.read_text(encoding="utf-8") == "kept"
