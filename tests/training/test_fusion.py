"""Logit + bi-encoder cosine fusion: the logistic fit, the held-out table, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from controller.embedding import HashingEmbedder
from data.schema import DecisionExample
from training.fusion import cosine_fusion, fit_logistic, fusion_table
from training.predict import Prediction
from training.sampling import Label


def test_fit_logistic_recovers_known_weights() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, 2)) * [1.0, 3.0] + [0.5, -2.0]
    logit = 1.5 * x[:, 0] - 0.5 * x[:, 1] - 1.0
    y = rng.random(4000) < 1 / (1 + np.exp(-logit))
    w = fit_logistic(x, y, l2=0.0)
    assert w == pytest.approx([1.5, -0.5, -1.0], abs=0.15)
    assert fit_logistic(np.c_[x[:, 0], np.zeros(4000)], y)[1] == 0.0  # a constant column gets no weight


def test_fit_logistic_refuses_one_class_and_bad_shapes() -> None:
    with pytest.raises(ValueError, match="both classes"):
        fit_logistic(np.ones((3, 1)), np.zeros(3))
    with pytest.raises(ValueError, match="non-empty"):
        fit_logistic(np.ones(3), np.array([0, 1, 1]))


def _case(i: int, query: str, memory: str, target: float, notes: str, split: str) -> DecisionExample:
    return DecisionExample(id=f"{split}{i}", family="relevance", question_name="relevant", state={"query": query, "memory": memory},
                           question={"type": "noul", "instructions": "Does state.memory help answer state.query?"},
                           target=target, source="locomo", group="locomo:c", split=split, notes=notes)


def _split(split: str, seed: int) -> tuple[list[DecisionExample], list[Prediction]]:
    """Positives repeat the query's words; random negatives do not; the 'model' sees only memory length,
    which is blind to the query, so the cosine carries what the logit lacks."""
    rng = np.random.default_rng(seed)
    words = ["garden", "violin", "marathon", "pottery", "camping", "adoption", "painting", "kayak"]
    examples, logits = [], []
    for i, word in enumerate(words * 3):
        other = words[(words.index(word) + 3) % len(words)]
        examples.append(_case(2 * i, f"what about the {word} trip", f"we loved the {word} trip a lot", 1.0, "locomo:gold", split))
        examples.append(_case(2 * i + 1, f"what about the {word} trip", f"my {other} story from last year, long", 0.0, "locomo:random", split))
        logits += [float(rng.normal()), float(rng.normal()) + 0.3]
    predictions = [Prediction(Label("noul", (float(e.target),), 1.0, "relevance", "relevant", e.id), np.array([z]), split, e.group)
                   for e, z in zip(examples, logits)]
    return examples, predictions


def test_the_fused_score_gains_what_the_cosine_adds() -> None:
    cal_examples, cal = _split("calibration", 1)
    dev_examples, dev = _split("dev", 2)
    result = cosine_fusion(cal, cal_examples, dev, dev_examples, HashingEmbedder())
    assert result["pairs"] == {"calibration": 48, "heldout": 48}
    assert result["all"]["model"] < 0.6 and result["all"]["cosine"] > 0.9
    assert result["all"]["fused"] > result["all"]["model"] + 0.3
    assert result["weights"]["cosine"] > 0
    assert result["locomo:bm25"]["model"] is None  # no negatives of that kind
    table = fusion_table({"m": result})
    assert "| m | fused |" in table and table.count("\n") == 4


def test_fusion_needs_both_splits() -> None:
    dev_examples, dev = _split("dev", 2)
    with pytest.raises(ValueError, match="calibration and the held-out"):
        cosine_fusion([], [], dev, dev_examples, HashingEmbedder())


def test_cli_ensemble_with_cosine_writes_both_tables(tiny_base, tiny_model, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from controller.artifacts import save_artifact
    from data.schema import write_splits
    from training.__main__ import main

    cal_examples, _ = _split("calibration", 1)
    dev_examples, _ = _split("dev", 2)
    write_splits(tmp_path / "data", [*cal_examples, *dev_examples])
    import torch

    save_artifact(tiny_model, tmp_path / "m", base_path=tiny_base)
    with torch.no_grad():
        tiny_model.heads.bias.add_(0.5)
        tiny_model.heads.weight.mul_(-1.0)
    save_artifact(tiny_model, tmp_path / "m2", base_path=tiny_base)
    out = tmp_path / "table.json"
    args = ["ensemble", "--data-dir", str(tmp_path / "data"), "--model-dirs", str(tmp_path / "m"), str(tmp_path / "m2"),
            "--base", str(tiny_base), "--threads", "1", "--cosine", "--embedder", "hashing", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "| mean logit | fused |" in printed
    table = json.loads(out.read_text())
    fused = table["cosine_fusion"]
    assert set(fused) == {str(tmp_path / "m"), str(tmp_path / "m2"), "mean logit"}
    assert fused["mean logit"]["pairs"] == {"calibration": 48, "heldout": 48}
    assert fused["mean logit"]["all"]["cosine"] > 0.9  # the hashing cosine sees the shared words
    assert table["models"]["mean logit"]["all"] == fused["mean logit"]["all"]["model"]
    twice = [a if a != str(tmp_path / "m2") else str(tmp_path / "m") for a in args]
    assert main(twice) == 2 and "twice" in capsys.readouterr().err
    (tmp_path / "data" / "calibration.jsonl").write_text("")
    assert main(args) == 2 and "calibration.jsonl" in capsys.readouterr().err


def test_cli_ensemble_scores_the_calibration_split_on_request(tiny_base, tiny_model, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from controller.artifacts import save_artifact
    from data.schema import write_splits
    from training.__main__ import main

    cal_examples, _ = _split("calibration", 1)
    write_splits(tmp_path / "data", cal_examples)  # no dev pairs at all
    save_artifact(tiny_model, tmp_path / "m", base_path=tiny_base)
    args = ["ensemble", "--data-dir", str(tmp_path / "data"), "--model-dirs", str(tmp_path / "m"), "--base", str(tiny_base),
            "--threads", "1"]
    assert main(args) == 2 and "dev.jsonl" in capsys.readouterr().err
    out = tmp_path / "table.json"
    assert main([*args, "--split", "calibration", "--out", str(out)]) == 0
    row = json.loads(out.read_text())[str(tmp_path / "m")]
    assert row["all"] is not None and 0.0 <= row["all"] <= 1.0
    assert main([*args, "--split", "calibration", "--cosine"]) == 2
    assert "score the dev split" in capsys.readouterr().err


def test_cli_ensemble_scores_a_memory_prior_per_lambda(tiny_base, tiny_model, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from controller.artifacts import save_artifact
    from data.schema import write_splits
    from training.__main__ import main

    dev_examples, _ = _split("dev", 2)
    write_splits(tmp_path / "data", dev_examples)
    save_artifact(tiny_model, tmp_path / "m", base_path=tiny_base)
    out = tmp_path / "table.json"
    args = ["ensemble", "--data-dir", str(tmp_path / "data"), "--model-dirs", str(tmp_path / "m"), "--base", str(tiny_base),
            "--threads", "1", "--out", str(out)]
    assert main([*args, "--memory-prior", "2"]) == 0
    assert "memory prior, K=2:" in capsys.readouterr().out
    table = json.loads(out.read_text())
    rows = table["memory_prior"][str(tmp_path / "m")]
    assert list(rows) == ["lam=0", "lam=0.25", "lam=0.5", "lam=0.75", "lam=1"]
    assert rows["lam=0"]["all"] == table["models"][str(tmp_path / "m")]["all"]  # lambda 0 is the model as it is
    assert all(0.0 <= row["all"] <= 1.0 for row in rows.values())
    assert main([*args, "--memory-prior", "-1"]) == 2 and "K >= 1" in capsys.readouterr().err
    assert main([*args, "--memory-prior", "2", "--query-prior", "2"]) == 0
    assert "query prior, K=2:" in capsys.readouterr().out
    both = json.loads(out.read_text())
    assert set(both) == {"models", "memory_prior", "query_prior"}
    assert both["query_prior"][str(tmp_path / "m")]["lam=0"]["all"] == table["models"][str(tmp_path / "m")]["all"]
    assert main([*args, "--query-prior", "-2"]) == 2 and "--query-prior takes K >= 1" in capsys.readouterr().err
