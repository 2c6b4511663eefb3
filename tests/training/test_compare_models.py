"""Raw per-family figures of several models on one split: the figures, the differences, the table."""

from __future__ import annotations

import numpy as np
import pytest

from training.compare_models import comparison, family_figures, format_comparison
from training.predict import Prediction
from training.sampling import Label


def _noul(i: int, family: str, target: float, logit: float) -> Prediction:
    return Prediction(Label("noul", (target,), 1.0, family, "q", f"{family}{i}"), np.array([logit]), "calibration", "g")


def _choice(i: int, target: tuple[float, ...], logits: list[float]) -> Prediction:
    return Prediction(Label("choice", target, 1.0, "routing", "route", f"r{i}"), np.array(logits), "calibration", "g")


def test_figures_per_family_pool_the_main_models_families() -> None:
    ranked = [_noul(0, "pair", 1.0, 2.0), _noul(1, "pair", 0.0, -1.0), _noul(2, "pair", 1.0, 0.5), _noul(3, "pair", 0.0, 1.0)]
    relevance = [_noul(4, "relevance", 1.0, 3.0), _noul(5, "relevance", 0.0, -3.0)]
    routing = [_choice(6, (1.0, 0.0), [2.0, 0.0]), _choice(7, (0.0, 1.0), [2.0, 0.0])]
    table = family_figures(ranked + relevance + routing, main_families={"pair", "routing"})
    assert list(table) == ["pair", "relevance", "routing", "main", "all"]
    assert table["pair"]["auroc"] == pytest.approx(0.75)  # one of four (positive, negative) pairs misordered
    assert table["relevance"]["auroc"] == 1.0 and table["routing"]["auroc"] is None  # a Choice has no AUROC
    assert table["main"]["n"] == 6 and table["all"]["n"] == 8
    assert table["routing"]["accuracy"] == 0.5
    p = 1 / (1 + np.exp(-2.0))  # the routing Choice puts p on its first option both times
    assert table["routing"]["nll"] == pytest.approx(-(np.log(p) + np.log(1 - p)) / 2, abs=1e-4)
    assert "main" not in family_figures(ranked, main_families={"pair", "routing"})  # it would repeat `all`
    assert "main" not in family_figures(ranked + relevance)


def test_differences_are_against_the_first_model_and_the_table_shows_them() -> None:
    examples = [(0, 1.0), (1, 0.0), (2, 1.0), (3, 0.0)]
    good = family_figures([_noul(i, "pair", y, 2.0 if y else -2.0) for i, y in examples])
    bad = family_figures([_noul(i, "pair", y, -2.5 if i == 0 else (2.0 if y else -2.0)) for i, y in examples])
    table = comparison({"ref": good, "new": bad})
    assert set(table["pair"]) == {"ref", "new"} and "delta_auroc" not in table["pair"]["ref"]
    assert table["pair"]["new"]["delta_auroc"] == pytest.approx(0.5 - 1.0)  # the first positive now ranks below both negatives
    assert table["pair"]["new"]["delta_nll"] > 0 and table["pair"]["new"]["delta_nll"] == pytest.approx(bad["pair"]["nll"] - good["pair"]["nll"], abs=1e-5)
    text = format_comparison(table)
    assert text.splitlines()[0] == "| family | n | ref: AUROC / NLL / ECE | new: AUROC / NLL / ECE |"
    assert "0.500 (-0.500)" in text and "| pair | 4 | 1.000 / " in text
    with pytest.raises(ValueError, match="at least one"):
        comparison({})


def test_a_family_only_one_model_scored_has_no_difference() -> None:
    ref = family_figures([_noul(0, "pair", 1.0, 1.0), _noul(1, "pair", 0.0, -1.0)])
    other = family_figures([_noul(0, "typing", 1.0, 1.0), _noul(1, "typing", 0.0, -1.0)])
    table = comparison({"ref": ref, "other": other})
    assert list(table) == ["pair", "typing", "all"]
    assert not any(k.startswith("delta") for k in table["typing"]["other"])
    assert "| typing | 2 | - | 1.000 / " in format_comparison(table)
