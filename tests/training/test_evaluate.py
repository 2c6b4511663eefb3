from __future__ import annotations

import math

import numpy as np
import pytest

from controller.calibration import Calibration
from training.evaluate import auroc, base_rates, compute_metrics, format_table, metric_table, plot_reliability, question_scores, reliability
from training.predict import Prediction
from training.sampling import Label


def test_auroc_matches_hand_computed_values() -> None:
    assert auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert auroc([0.5, 0.5, 0.5, 0.9], [0, 1, 0, 1]) == pytest.approx(0.75)  # ties count half: (1 + 0.5) / 2
    assert auroc([0.2, 0.3], [1, 1]) is None


def test_ece_and_mce_match_hand_computed_values() -> None:
    # 15 bins of width 1/15: 0.05 -> bin 0, 0.95 / 0.97 -> bin 14, 0.50 -> bin 7
    conf = [0.05, 0.05, 0.95, 0.97, 0.50, 0.50]
    outcome = [0, 1, 1, 1, 1, 1]
    ece, mce, bins = reliability(conf, outcome)
    gaps = [abs(0.05 - 0.5), abs(0.96 - 1.0), abs(0.5 - 1.0)]
    assert ece == pytest.approx(sum(2 / 6 * g for g in gaps))
    assert mce == pytest.approx(0.5)
    assert [b["bin"] for b in bins] == [0, 7, 14] and [b["n"] for b in bins] == [2, 2, 2]
    assert reliability([1.0], [1])[0] == 0.0  # p = 1 falls in the last bin


def test_question_scores_brier_and_nll() -> None:
    correct, nll, brier, conf, outcome = question_scores("noul", np.array([0.8]), (1.0,))
    assert (correct, conf, outcome) == (1.0, 0.8, 1.0)
    assert nll == pytest.approx(-math.log(0.8)) and brier == pytest.approx(0.04)
    correct, nll, brier, conf, outcome = question_scores("choice", np.array([0.5, 0.3, 0.2]), (0.0, 1.0, 0.0))
    assert correct == 0.0 and conf == 0.5 and outcome == 0.0
    assert nll == pytest.approx(-math.log(0.3)) and brier == pytest.approx(0.25 + 0.49 + 0.04)
    # a tied target: either of its top options counts as correct, whatever the option order
    assert question_scores("choice", np.array([0.1, 0.6, 0.3]), (0.5, 0.0, 0.5))[0] == 0.0
    assert question_scores("choice", np.array([0.1, 0.3, 0.6]), (0.5, 0.0, 0.5))[0] == 1.0


def test_compute_metrics_mixes_kinds() -> None:
    m = compute_metrics(
        ["noul", "noul", "noul", "choice"],
        [np.array([0.9]), np.array([0.2]), np.array([0.6]), np.array([0.7, 0.3])],
        [(1.0,), (0.0,), (0.0,), (1.0, 0.0)],
    )
    assert m.n == 4 and m.accuracy == pytest.approx(0.75)
    assert m.auroc == pytest.approx(1.0)
    assert m.brier == pytest.approx((0.01 + 0.04 + 0.36 + 0.18) / 4)


def _pred(kind: str, family: str, logits: list[float], target: tuple[float, ...], options: tuple[str, ...] = ()) -> Prediction:
    return Prediction(Label(kind, target, 1.0, family, "q", f"{family}{logits}{target}", options=options), np.array(logits), "dev", "g")


def test_metric_table_has_baselines_and_calibrated_rows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    preds = [_pred("noul", "a", [2.0], (1.0,)), _pred("noul", "a", [-1.0], (0.0,)), _pred("noul", "a", [0.5], (1.0,)),
             _pred("choice", "b", [1.0, 0.0], (1.0, 0.0), ("x", "y"))]

    class R:
        labels = [p.label for p in preds[:3]] + [Label("choice", (0.0, 1.0), 1.0, "b", "q", "t", options=("y", "x"))]

    rates = base_rates([R()])  # type: ignore[list-item]
    assert rates.noul[("a", "q")] == pytest.approx(2 / 3)
    assert rates.options[("b", "q")] == {"y": 0.0, "x": 1.0}
    table = metric_table(preds, Calibration({"noul": 2.0}), rates)
    assert set(table) == {"a", "b", "all"}
    assert table["a"]["uniform"]["nll"] == pytest.approx(math.log(2), abs=1e-4)
    assert table["a"]["raw"]["nll"] != table["a"]["calibrated"]["nll"]
    assert table["b"]["base_rate"]["accuracy"] == 1.0
    assert "| a | 3 |" in format_table(table)
    path = plot_reliability(preds, Calibration({"noul": 2.0}), tmp_path / "rel.png")
    assert path and (tmp_path / "rel.png").stat().st_size > 1000


def test_a_reliability_diagram_killed_mid_save_keeps_the_old_png(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from matplotlib.figure import Figure

    preds = [_pred("noul", "a", [2.0], (1.0,)), _pred("noul", "a", [-1.0], (0.0,))]
    path = tmp_path / "reliability.png"
    assert plot_reliability(preds, Calibration({"noul": 2.0}), path) == str(path)
    before = path.read_bytes()
    assert before.startswith(b"\x89PNG")  # the temporary file's suffix told matplotlib the format
    savefig = Figure.savefig

    def killed_mid_save(self, fname, *args, **kwargs):  # type: ignore[no-untyped-def]
        savefig(self, fname, *args, **kwargs)
        with open(fname, "r+b") as handle:  # half of it on disk, then the kill
            handle.truncate(len(before) // 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", killed_mid_save)
    with pytest.raises(KeyboardInterrupt):
        plot_reliability(preds, Calibration({"noul": 3.0}), path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["reliability.png"]
