from __future__ import annotations

import math

import numpy as np
import pytest

from controller.calibration import (
    Calibration,
    fit_temperatures,
    group_of,
    identity,
    load_calibration,
    save_calibration,
)
from controller.errors import ArtifactError, CalibrationMismatchError


def test_groups() -> None:
    assert group_of("noul", 1) == "noul"
    assert [group_of("choice", n) for n in (2, 3, 4, 5, 8, 9, 255)] == ["choice:2", "choice:3-4", "choice:3-4", "choice:5-8", "choice:5-8", "choice:9+", "choice:9+"]
    assert [group_of("score", n) for n in (2, 3, 4, 6, 7, 10)] == ["score:2-3", "score:2-3", "score:4-6", "score:4-6", "score:7-10", "score:7-10"]


def test_identity_is_sigmoid_and_softmax() -> None:
    cal = identity("h")
    assert cal.probabilities("noul", np.array([0.0])) == (0.5,)
    assert math.isclose(cal.probabilities("noul", np.array([2.0]))[0], 1 / (1 + math.exp(-2)))
    probs = cal.probabilities("choice", np.array([1.0, 2.0, 3.0]))
    assert math.isclose(sum(probs), 1.0) and probs[2] > probs[1] > probs[0]
    assert identity().probabilities("noul", np.array([-1000.0]))[0] == 0.0  # no overflow


def test_fit_recovers_a_known_temperature() -> None:
    rng = np.random.default_rng(0)
    true_logits = rng.normal(0, 2, size=4000)
    labels = (rng.random(4000) < 1 / (1 + np.exp(-true_logits))).astype(float)
    choice = rng.normal(0, 1.5, size=(3000, 3))
    p = np.exp(choice) / np.exp(choice).sum(1, keepdims=True)
    picks = [int(rng.choice(3, p=row)) for row in p]
    # The model is over-confident by 3x (noul) and under-confident by 2x (choice).
    logits = [[z * 3] for z in true_logits] + [list(row / 2) for row in choice]
    targets = list(labels) + picks
    groups = ["noul"] * 4000 + ["choice:3-4"] * 3000
    cal = fit_temperatures(logits, targets, groups, model_hash="abc")
    assert cal.temperatures["noul"] == pytest.approx(3.0, rel=0.15)
    assert cal.temperatures["choice:3-4"] == pytest.approx(0.5, rel=0.15)
    assert cal.temperature("score", 5) == 1.0 and cal.fitted_on == {"choice:3-4": 3000, "noul": 4000}


def test_round_trip_and_hash_check(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cal = Calibration({"noul": 1.7, "score:4-6": 0.8}, "hash-a", {"noul": 10})
    path = tmp_path / "calibration.json"
    save_calibration(cal, path)
    assert load_calibration(path, "hash-a") == cal
    with pytest.raises(CalibrationMismatchError):
        load_calibration(path, "hash-b")


def test_prior_shifts_add_to_a_catalogue_nouls_logit_and_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cal = Calibration({"noul": 2.0}, "h", family_temperatures={"relevance:noul": 2.0}, family_biases={"relevance:noul": -0.5},
                      prior_shifts={"relevance.bridge": -0.25})
    z = np.array([1.0])
    assert cal.probabilities("noul", z, "relevance.bridge")[0] == pytest.approx(1 / (1 + np.exp(-(0.5 - 0.5 - 0.25))))
    assert cal.probabilities("noul", z, "relevance.relevant")[0] == pytest.approx(1 / (1 + np.exp(-(0.5 - 0.5))))
    assert cal.bias("choice", "relevance.bridge") == 0.0  # Nouls only
    path = tmp_path / "calibration.json"
    save_calibration(cal, path)
    assert load_calibration(path, "h") == cal
    plain = Calibration({"noul": 2.0}, "h")
    assert "prior_shifts" not in plain.to_json()  # files without shifts keep their old form
    with pytest.raises(ArtifactError, match="prior shift"):
        Calibration(prior_shifts={"relevance.bridge": float("nan")})
    with pytest.raises(ArtifactError, match="prior shift"):
        Calibration(prior_shifts={"relevance:noul": 0.1})


def test_invalid_temperatures_are_refused() -> None:
    with pytest.raises(ArtifactError):
        Calibration({"noul": 0.0})
    with pytest.raises(ArtifactError):
        Calibration({"choice:7": 1.0})


def test_catalogue_families_get_their_own_temperature_when_they_have_the_data(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    z = rng.normal(0, 2, size=3000)
    y = (rng.random(3000) < 1 / (1 + np.exp(-z))).astype(float)
    # "pair" is over-confident by 3x, "typing" well calibrated, "routing" has too few examples for its own T.
    logits = [[v * 3] for v in z[:1500]] + [[v] for v in z[1500:2900]] + [[v] for v in z[2900:]]
    families = ["pair"] * 1500 + ["typing"] * 1400 + ["routing"] * 100
    cal = fit_temperatures(logits, list(y), ["noul"] * 3000, families=families, min_family_examples=200, model_hash="h")
    assert cal.family_temperatures["pair:noul"] == pytest.approx(3.0, rel=0.2)
    assert cal.family_temperatures["typing:noul"] == pytest.approx(1.0, rel=0.2)
    assert "routing:noul" not in cal.family_temperatures and cal.fitted_on["pair:noul"] == 1500
    shared = cal.temperatures["noul"]
    assert cal.temperature("noul", 1, "routing") == shared == cal.temperature("noul", 1, None)
    assert cal.temperature("noul", 1, "pair") == cal.family_temperatures["pair:noul"] != shared
    path = tmp_path / "calibration.json"
    save_calibration(cal, path)
    assert load_calibration(path, "h") == cal


def test_family_nouls_get_a_platt_bias_that_undoes_a_shift(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from controller.calibration_fit import fit_platt, noul_nll

    rng = np.random.default_rng(2)
    z = rng.normal(0, 2, size=4000)
    y = (rng.random(4000) < 1 / (1 + np.exp(-z))).astype(float)
    # "relevance" logits are 2x over-confident AND shifted up by 1.5: a temperature alone cannot fix both.
    seen = 2 * z + 1.5
    t, b = fit_platt(seen, y)
    assert t == pytest.approx(2.0, rel=0.1) and b == pytest.approx(-0.75, abs=0.15)
    assert noul_nll(seen, y, t, b) < noul_nll(seen, y, t) - 0.01  # the bias earns its keep
    cal = fit_temperatures([[v] for v in seen], list(y), ["noul"] * 4000, families=["relevance"] * 4000, model_hash="h", bias=True)
    assert not fit_temperatures([[v] for v in seen], list(y), ["noul"] * 4000, families=["relevance"] * 4000).family_biases  # off by default
    assert cal.family_biases["relevance:noul"] == pytest.approx(b, abs=1e-6)
    p = cal.probabilities("noul", np.array([seen[0]]), "relevance")[0]
    assert p == pytest.approx(1 / (1 + math.exp(-(seen[0] / t + b))), rel=1e-6)
    assert cal.bias("noul", None) == 0.0 and cal.bias("choice", "relevance") == 0.0
    path = tmp_path / "calibration.json"
    save_calibration(cal, path)
    assert load_calibration(path, "h") == cal
    with pytest.raises(ArtifactError):
        Calibration({"noul": 1.0}, family_biases={"relevance:noul": 0.3})  # a bias without its family temperature
    with pytest.raises(ArtifactError):
        Calibration({"noul": 1.0}, family_temperatures={"relevance:noul": 1.0}, family_biases={"relevance:noul": float("nan")})


def test_platt_handles_separable_data_without_diverging() -> None:
    from controller.calibration_fit import MAX_T, MIN_T, fit_platt

    t, b = fit_platt([-3.0, -2.0, 2.0, 3.0], [0.0, 0.0, 1.0, 1.0])
    assert MIN_T <= t <= MAX_T and math.isfinite(b)


def test_a_bias_that_does_not_carry_over_across_sources_is_dropped() -> None:
    from controller.calibration_fit import bias_carries_over

    rng = np.random.default_rng(3)
    z = rng.normal(0, 2, size=2000)
    y = (rng.random(2000) < 1 / (1 + np.exp(-z))).astype(float)
    # Source "a" is shifted up by 2, source "b" down by 2: a shared bias helps neither on the other.
    seen = np.where(np.arange(2000) < 1000, z + 2.0, z - 2.0)
    folds = ["a"] * 1000 + ["b"] * 1000
    assert not bias_carries_over(seen, y, folds)
    # The same shift in both sources carries over.
    assert bias_carries_over(z + 1.5, y, folds)
    cal = fit_temperatures([[v] for v in seen], list(y), ["noul"] * 2000, families=["pair"] * 2000, folds=folds, model_hash="h", bias=True)
    assert "pair:noul" in cal.family_temperatures and "pair:noul" not in cal.family_biases
    assert bias_carries_over(seen[:10], y[:10], folds[:10])  # nothing to check against: the bias stays


def _noul_sample(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2, size=n)
    return z, (rng.random(n) < 1 / (1 + np.exp(-z))).astype(float)


def test_a_question_gets_its_own_calibration_where_it_beats_its_family_out_of_fold() -> None:
    z, y = _noul_sample(4, 6000)
    # "pair.semantic" is 3x over-confident, "pair.causal" calibrated, in both sources; "pair.update" too rare.
    scale = np.where(np.arange(6000) % 2 == 0, 3.0, 1.0)
    keys = ["pair.semantic" if i % 2 == 0 else "pair.causal" for i in range(6000)]
    keys[:100] = ["pair.update"] * 100
    folds = ["a" if i < 3000 else "b" for i in range(6000)]
    cal = fit_temperatures([[v] for v in z * scale], list(y), ["noul"] * 6000, families=keys, folds=folds, model_hash="h")
    assert cal.temperature("noul", 1, "pair.semantic") == pytest.approx(3.0, rel=0.2)
    assert cal.temperature("noul", 1, "pair.causal") == pytest.approx(1.0, rel=0.2)
    assert cal.level("noul", 1, "pair.update") == "pair:noul" and cal.level("noul", 1, "pair.semantic") == "pair.semantic:noul"
    assert cal.level("noul", 1, "typing.episodic") == "noul" == cal.level("noul", 1, None)
    assert cal.fitted_on["pair.semantic:noul"] > 2500 and "pair.update:noul" not in cal.fitted_on
    # Source "b" is under-confident where "a" is over-confident: a question fit on one source loses on the other.
    flipped = np.where(np.array(folds) == "a", scale, 1.0 / scale)
    cal = fit_temperatures([[v] for v in z * flipped], list(y), ["noul"] * 6000, families=keys, folds=folds, model_hash="h")
    assert cal.level("noul", 1, "pair.semantic") == "pair:noul"


def test_a_lookup_takes_temperature_and_bias_from_the_same_level() -> None:
    cal = Calibration({"noul": 1.5}, "h", family_temperatures={"pair:noul": 2.0, "pair.semantic:noul": 3.0},
                      family_biases={"pair:noul": 0.5})
    assert (cal.temperature("noul", 1, "pair.semantic"), cal.bias("noul", "pair.semantic")) == (3.0, 0.0)
    assert (cal.temperature("noul", 1, "pair.causal"), cal.bias("noul", "pair.causal")) == (2.0, 0.5)
    assert (cal.temperature("noul", 1, "pair"), cal.bias("noul", "pair")) == (2.0, 0.5)
    assert (cal.temperature("noul", 1, "typing.episodic"), cal.bias("noul", "typing.episodic")) == (1.5, 0.0)
    p = cal.probabilities("noul", np.array([1.0]), "pair.causal")[0]
    assert p == pytest.approx(1 / (1 + math.exp(-(1.0 / 2.0 + 0.5))))


def test_keep_raw_leaves_a_family_whose_fit_does_not_carry_over_at_temperature_one() -> None:
    z, y = _noul_sample(5, 4000)
    folds = ["a" if i < 2000 else "b" for i in range(4000)]
    # "pair" is over-confident by 3x in one source and under-confident by 3x in the other: a temperature fitted
    # on either loses to the raw logits on the other. "typing" is 3x over-confident in both: its fit carries over.
    pair_scale = np.where(np.array(folds) == "a", 3.0, 1.0 / 3.0)
    logits = [[v] for v in np.concatenate([z * pair_scale, z * 3.0])]
    targets, families = [*y, *y], ["pair"] * 4000 + ["typing"] * 4000
    args = dict(families=families, folds=folds * 2, model_hash="h", bias=True)
    fitted = fit_temperatures(logits, targets, ["noul"] * 8000, **args)
    assert fitted.temperature("noul", 1, "pair") != 1.0  # without the check the pooled fit is applied
    kept = fit_temperatures(logits, targets, ["noul"] * 8000, keep_raw=True, **args)
    assert kept.level("noul", 1, "pair") == "pair:noul"
    assert (kept.temperature("noul", 1, "pair"), kept.bias("noul", "pair")) == (1.0, 0.0)
    assert kept.temperature("noul", 1, "typing") == pytest.approx(3.0, rel=0.2)
    assert kept.probabilities("noul", np.array([1.2]), "pair")[0] == pytest.approx(1 / (1 + math.exp(-1.2)))
    # the check needs folds: without them every fit is kept
    assert fit_temperatures(logits, targets, ["noul"] * 8000, families=families, model_hash="h", keep_raw=True).temperature("noul", 1, "pair") != 1.0


def test_a_level_with_too_few_examples_or_one_class_stays_at_temperature_one() -> None:
    # Two examples used to give T = 0.05 (the search bound), and an all-positive family a bias of about +16:
    # a fit on such data only sharpens towards what the few labels say.
    rng = np.random.default_rng(3)
    z = rng.normal(0, 2, size=600)
    y = (rng.random(600) < 1 / (1 + np.exp(-z))).astype(float)
    few = fit_temperatures([[3.0], [-2.5]], [1.0, 0.0], ["noul", "noul"], model_hash="h")
    assert few.temperatures["noul"] == 1.0 and not few.fitted("noul", 1)
    one_class = fit_temperatures([[v * 3] for v in z[:100]], [1.0] * 100, ["noul"] * 100, model_hash="h")
    assert one_class.temperatures["noul"] == 1.0
    same_answer = fit_temperatures([[v, 0.0, -v] for v in z[:100]], [0] * 100, ["choice:3-4"] * 100, model_hash="h")
    assert same_answer.temperatures["choice:3-4"] == 1.0
    # a family that is all positive gets no level of its own (nor a bias); the others are fitted as before
    logits = [[v * 3] for v in z[:400]] + [[v] for v in z[400:]]
    families = ["pair"] * 400 + ["typing"] * 200
    cal = fit_temperatures(logits, list(y[:400]) + [1.0] * 200, ["noul"] * 600, families=families, bias=True,
                           min_family_examples=150, model_hash="h")
    assert "typing:noul" not in cal.family_temperatures and "typing:noul" not in cal.family_biases
    assert cal.family_temperatures["pair:noul"] == pytest.approx(3.0, rel=0.3)
