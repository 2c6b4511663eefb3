"""Calibration variants judged on held-out predictions: levels, biases, the ECE target column."""

from __future__ import annotations

import numpy as np

import pytest

from data.schema import DecisionExample
from training.calibration_compare import VARIANTS, at_level, compare, compare_table
from training.predict import Prediction
from training.sampling import Label


def _predictions(seed: int, n: int, source: str) -> list[Prediction]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        z = rng.normal(0, 2)
        y = float(rng.random() < 1 / (1 + np.exp(-z)))
        question = "semantic" if i % 2 else "causal"
        seen = z * (3.0 if question == "semantic" else 1.0)  # one question over-confident, the other calibrated
        label = Label("noul", (y,), 1.0, "pair", question, f"{source}{i}", catalogue=f"pair.{question}")
        out.append(Prediction(label, np.array([seen]), "dev", f"{source}:g{i % 7}"))
    return out


def test_question_level_variants_fit_each_question_and_family_variants_do_not() -> None:
    calibration = _predictions(0, 1200, "locomo") + _predictions(1, 1200, "synthetic")
    held = _predictions(2, 1600, "locomo")
    with pytest.raises(ValueError, match="needs the training and calibration examples"):
        compare(calibration, calibration[::3], held)
    reference = [DecisionExample(id=p.label.example_id, family="pair", question_name=p.label.question_name,
                                 state={"a": "x", "b": p.label.example_id}, question={"type": "noul", "instructions": "Related?"},
                                 target=1.0 if p.label.question_name == "semantic" else p.label.target[0],
                                 source=p.group.partition(":")[0], group=p.group, split="train") for p in calibration]
    result = compare(calibration, calibration[::3], held, reference=reference)
    assert list(result) == list(VARIANTS)
    pooled, plain = result["question T+b, kept where it beats raw, pooled prior"], result["question T+b, kept where it beats raw"]
    assert pooled["levels"] == plain["levels"] and pooled["heldout"]["pair"]["nll"] != plain["heldout"]["pair"]["nll"]
    at_fitted = result["question T+b, kept where it beats raw, pooled prior at fitted levels"]
    assert at_fitted["levels"] == plain["levels"] and at_fitted["spec"]["prior"] == "fitted"
    assert "pair.semantic:noul" in result["question T"]["levels"] and "pair.semantic:noul" not in result["family T"]["levels"]
    assert result["question T"]["heldout"]["pair"]["nll"] < result["family T"]["heldout"]["pair"]["nll"]
    row = result["question T"]["heldout"]["pair"]
    assert row["n"] == 1600 and row["meets"] == (row["ece"] <= 0.05 and row["ece"] <= row["ece_raw"])
    assert "| question T+b |" in compare_table(result) and "families meeting ECE target" in compare_table(result)
    assert {p.label.catalogue for p in at_level(held, "family")} == {"pair"}


def _compare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from training.__main__ import main

    code = main(["compare-calibration", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_inputs_it_cannot_use_are_errors_on_stderr(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    model, data, empty = tmp_path / "model", tmp_path / "data", tmp_path / "empty"
    for directory in (model, data, empty):
        directory.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")  # no specialists.json: a model without specialists
    run = ["--run-dir", str(tmp_path / "run")]
    for argv, message in (
        (["--model-dir", str(tmp_path / "nomodel"), "--specialist", "nosuch"], f"--model-dir {tmp_path / 'nomodel'} does not exist"),
        (["--model-dir", str(empty), "--data-dir", str(data)], f"no model directory at {empty}: run the fit stage first"),
        (["--model-dir", str(model), "--data-dir", str(tmp_path / "zzz")], f"--data-dir {tmp_path / 'zzz'} does not exist"),
        (["--model-dir", str(model)], f"--data-dir (default) {tmp_path / 'run' / 'data'} does not exist"),
        (["--model-dir", str(model), "--data-dir", str(data), "--specialist", "nosuch"],
         f"--model-dir {model} has no 'nosuch' specialist (it has: none)"),
        (["--model-dir", str(model), "--data-dir", str(data), "--out", str(tmp_path)], f"cannot write --out {tmp_path}: {tmp_path} is a directory, not a file"),
    ):
        assert _compare(capsys, *run, *argv) == (2, "", f"error: {message}\n")
    assert not (tmp_path / "run").exists()
