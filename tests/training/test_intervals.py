from __future__ import annotations

import numpy as np
import pytest

from controller.calibration import Calibration
from training.evaluate import auroc, reliability
from training.intervals import auroc_interval, cluster_weights, ece_change_intervals, weighted_auroc, weighted_ece
from training.predict import Prediction
from training.card import _acceptance_lines as acceptance_lines
from training.report import acceptance
from training.sampling import Label


def _noul(z: float, y: float, state: str, family: str = "stopping", list_key: str = "") -> Prediction:
    label = Label("noul", (y,), 1.0, family, "q", f"{state}:q", catalogue=f"{family}.q")
    return Prediction(label, np.array([z]), "dev", "g", list_key)


def _sample(n: int, seed: int, *, scale: float = 1.0, copies: int = 1, shared: bool = True) -> list[Prediction]:
    """n states whose label follows sigmoid(z) (calibrated logits when scale = 1), each state `copies` times
    (in one cluster when `shared`, else as separate states)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 1.5, n)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-z))).astype(float)
    return [_noul(scale * zi, yi, f"s{i}" if shared else f"s{i}-{c}") for i, (zi, yi) in enumerate(zip(z, y)) for c in range(copies)]


def test_unit_weights_give_the_plain_ece_and_auroc() -> None:
    rng = np.random.default_rng(3)
    conf = rng.random(300)
    outcome = (rng.random(300) < conf).astype(float)
    ones = np.ones((1, 300))
    assert weighted_ece(conf, outcome, ones)[0] == pytest.approx(reliability(conf, outcome)[0])
    scores = np.round(rng.random(300), 1)  # many ties
    assert weighted_auroc(scores, outcome, ones)[0] == pytest.approx(auroc(scores, outcome.astype(int)))
    twice = np.full((1, 300), 2.0)  # doubling every weight changes neither
    assert weighted_ece(conf, outcome, twice)[0] == pytest.approx(reliability(conf, outcome)[0])
    assert weighted_auroc(scores, outcome, twice)[0] == pytest.approx(auroc(scores, outcome.astype(int)))


def test_cluster_weights_draw_whole_clusters() -> None:
    clusters = ["a", "a", "b", "c", "c", "c"]
    w = cluster_weights(clusters, 200, seed=1)
    assert w.shape == (200, 6)
    assert np.all(w[:, 0] == w[:, 1]) and np.all(w[:, 3] == w[:, 5])  # one cluster, one weight
    assert np.all(w[:, [0, 2, 3]].sum(axis=1) == 3)  # three clusters drawn per resample
    assert np.array_equal(w, cluster_weights(clusters, 200, seed=1))


def test_identity_calibration_changes_nothing_and_a_harmful_one_is_flagged() -> None:
    preds = _sample(600, 0)
    same = ece_change_intervals(preds, Calibration({"noul": 1.0}), n_boot=200)["stopping"]
    assert same["change"] == 0.0 and same["lo"] == 0.0 and same["hi"] == 0.0 and same["clusters"] == 600
    sharpened = ece_change_intervals(preds, Calibration({"noul": 0.4}), n_boot=200)["stopping"]  # overconfident: worse
    assert sharpened["calibrated"] > sharpened["raw"] and sharpened["lo"] > 0.0
    soft = _sample(600, 0, scale=0.4)  # underconfident logits: T = 0.4 repairs them
    repaired = ece_change_intervals(soft, Calibration({"noul": 0.4}), n_boot=200)["stopping"]
    assert repaired["hi"] < 0.0 and repaired["lo"] <= repaired["change"] <= repaired["hi"]


def test_copies_of_one_state_do_not_narrow_the_interval() -> None:
    single = auroc_interval(_sample(400, 5), n_boot=300)
    clustered = auroc_interval(_sample(400, 5, copies=4), n_boot=300)
    independent = auroc_interval(_sample(400, 5, copies=4, shared=False), n_boot=300)
    assert single is not None and clustered is not None and independent is not None
    assert clustered["auroc"] == pytest.approx(single["auroc"]) and clustered["clusters"] == 400 and clustered["n"] == 1600
    assert (clustered["lo"], clustered["hi"]) == pytest.approx((single["lo"], single["hi"]))  # the same draws of states
    assert independent["hi"] - independent["lo"] < 0.7 * (single["hi"] - single["lo"])  # treated as 4x the data
    assert single["lo"] < single["auroc"] < single["hi"]
    assert auroc_interval([_noul(0.3, 1.0, "a"), _noul(0.1, 1.0, "b")]) is None  # one class only


def test_a_prediction_clusters_by_its_ranking_list_else_its_state() -> None:
    assert _noul(0.0, 1.0, "locomo:conv-26:relevance:00007", "relevance", list_key="conv-26\x1fquery").cluster == "conv-26\x1fquery"
    a, b = _noul(0.0, 1.0, "syn:typing:0:9:00003"), _noul(0.0, 0.0, "syn:typing:0:9:00004")
    assert a.cluster == "g\x1fsyn:typing:0:9:00003" and a.cluster != b.cluster


def test_acceptance_and_the_card_carry_the_intervals() -> None:
    row = {"raw": {"ece": 0.042, "n": 3340, "auroc": 0.7}, "calibrated": {"ece": 0.047, "n": 3340, "auroc": 0.7}}
    relevance = {"raw": {"auroc": 0.82, "n": 5000}, "calibrated": {"auroc": 0.825, "n": 5000}}
    evaluation = {"heldout": {"by_family": {"stopping": row}, "per_question": {"locomo:relevance/relevant": relevance},
                              "intervals": {"ece_change": {"stopping": {"lo": -0.002, "hi": 0.011}},
                                            "relevance_auroc": {"locomo_dev": {"lo": 0.80, "hi": 0.85}}}}}
    acc = acceptance(evaluation)
    assert acc["ece_after_calibration"]["families"]["stopping"]["change_ci"] == [-0.002, 0.011]
    assert acc["relevance_auroc_locomo_dev"]["ci"] == [0.80, 0.85] and not acc["relevance_auroc_locomo_dev"]["pass"]
    lines = "\n".join(acceptance_lines(acc))
    assert "ECE stopping (n=3340): 0.042 -> 0.047; change +0.005, 95% CI [-0.002, +0.011]" in lines
    assert "relevance_auroc_locomo_dev: 0.825, 95% CI [0.800, 0.850]" in lines
    del evaluation["heldout"]["intervals"]  # an evaluation from before the intervals: the same checks, no interval
    assert "change_ci" not in acceptance(evaluation)["ece_after_calibration"]["families"]["stopping"]
