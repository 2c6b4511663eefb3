from __future__ import annotations

import numpy as np
import pytest

from controller.calibration import Calibration
from data.schema import DecisionExample
from training.calibrate import calibrate_predictions
from training.evaluate import compute_metrics
from training.predict import Prediction, probabilities
from training.sampling import Label


def _miscalibrated(n: int = 3000, scale: float = 3.0, seed: int = 0) -> list[Prediction]:
    """Nouls whose true logit is z but whose model says scale * z; 4-option Choices likewise."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        z = rng.normal(0.0, 1.5)
        y = float(rng.random() < 1 / (1 + np.exp(-z)))
        out.append(Prediction(Label("noul", (y,), 1.0, "f", "q", f"n{i}"), np.array([scale * z]), "calibration", "g"))
    for i in range(n // 2):
        z = rng.normal(0.0, 1.0, size=4)
        p = np.exp(z) / np.exp(z).sum()
        k = int(rng.choice(4, p=p))
        target = tuple(1.0 if j == k else 0.0 for j in range(4))
        out.append(Prediction(Label("choice", target, 1.0, "f", "c", f"c{i}", options=("a", "b", "c", "d")), scale * z, "calibration", "g"))
    return out


def test_calibration_recovers_the_temperature_and_improves_nll() -> None:
    preds = _miscalibrated()
    result = calibrate_predictions(preds, "hash-1")
    cal = result.calibration
    assert cal.model_hash == "hash-1" and cal.fitted_on == {"noul": 3000, "choice:3-4": 1500}
    assert cal.temperatures["noul"] == pytest.approx(3.0, rel=0.15)
    assert cal.temperatures["choice:3-4"] == pytest.approx(3.0, rel=0.2)
    for group in ("noul", "choice:3-4"):
        assert result.nll_after[group] < result.nll_before[group]
    kinds = [p.kind for p in preds]
    targets = [p.label.target for p in preds]
    before = compute_metrics(kinds, probabilities(preds), targets)
    after = compute_metrics(kinds, probabilities(preds, cal), targets)
    assert after.nll < before.nll and after.ece < before.ece
    assert after.accuracy == pytest.approx(before.accuracy)  # a temperature never changes the decision


def test_a_calibrated_model_keeps_temperature_one() -> None:
    cal = calibrate_predictions(_miscalibrated(scale=1.0, seed=1), None).calibration
    assert cal.temperatures["noul"] == pytest.approx(1.0, abs=0.15)


def test_calibration_needs_data() -> None:
    with pytest.raises(ValueError, match="empty"):
        calibrate_predictions([], "h")
    assert Calibration().temperature("noul", 1) == 1.0


def test_source_folds_split_by_source_or_by_group_hash() -> None:
    from training.calibrate import source_folds

    def pred(family: str, group: str) -> Prediction:
        return Prediction(Label("noul", (1.0,), 1.0, family, "q", group, catalogue=family), np.array([0.0]), "calibration", group)

    preds = [pred("pair", "locomo:conv-44"), pred("pair", "synthetic:pairs:1:8"),
             *(pred("typing", f"synthetic:typing:{s}:8") for s in range(40))]
    folds = source_folds(preds)
    assert folds[:2] == ["locomo", "synthetic"]  # two sources: one fold each
    typing = set(folds[2:])
    assert typing <= {"synthetic/0", "synthetic/1"} and len(typing) == 2  # one source: two stable halves
    assert source_folds(preds) == folds


def _shifted(n: int, group: str, *, scale: float, shift: float, seed: int, prefix: str) -> list[Prediction]:
    """Nouls whose model logit is scale * z while the truth is sigmoid(z + shift)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        z = rng.normal(0.0, 1.5)
        y = float(rng.random() < 1 / (1 + np.exp(-(z + shift))))
        label = Label("noul", (y,), 1.0, "relevance", "relevant", f"{prefix}:{i}:relevant", catalogue="relevance.relevant")
        out.append(Prediction(label, np.array([scale * z]), "calibration", group))
    return out


def test_group_folds_split_by_group_and_halve_a_lone_group_by_state() -> None:
    from training.calibrate import group_folds

    preds = (_shifted(60, "locomo:conv-44", scale=1, shift=0, seed=0, prefix="a")
             + _shifted(30, "synthetic:relevance:0:8", scale=1, shift=0, seed=1, prefix="b")
             + _shifted(30, "synthetic:relevance:1:8", scale=1, shift=0, seed=2, prefix="c"))
    folds = group_folds(preds)
    assert set(folds[:60]) == {"locomo:conv-44/0", "locomo:conv-44/1"}  # one conversation: two stable halves
    assert folds[60:] == ["synthetic:relevance:0:8"] * 30 + ["synthetic:relevance:1:8"] * 30
    assert group_folds(preds) == folds


def test_group_folds_keep_a_bias_the_conversations_need_where_source_folds_drop_it() -> None:
    # Conversations: the model over-predicts (truth shifted by -1.2); synthetic states: sharp and right.
    calibration = (_shifted(1500, "locomo:conv-44", scale=1.0, shift=-1.2, seed=3, prefix="l")
                   + _shifted(300, "synthetic:relevance:0:8", scale=6.0, shift=0.0, seed=4, prefix="s"))
    by_source = calibrate_predictions(calibration, None, bias=True, folds="source").calibration
    by_group = calibrate_predictions(calibration, None, bias=True, folds="group").calibration
    assert "relevance:noul" not in by_source.family_biases
    assert by_group.family_biases["relevance:noul"] < -0.5
    held = _shifted(3000, "locomo:conv-26", scale=1.0, shift=-1.2, seed=5, prefix="d")
    kinds, targets = [p.kind for p in held], [p.label.target for p in held]
    ece_source = compute_metrics(kinds, probabilities(held, by_source), targets).ece
    ece_group = compute_metrics(kinds, probabilities(held, by_group), targets).ece
    assert ece_group < ece_source - 0.03, (ece_group, ece_source)  # pooled with the synthetic states, yet closer
    with pytest.raises(ValueError, match="unknown calibration folds"):
        calibrate_predictions(calibration, None, folds="shards")


def _labels(n_pos: int, n: int, group: str, *, question: str = "bridge", source: str = "locomo", split: str = "train") -> list[DecisionExample]:
    return [DecisionExample(id=f"{group}:{i}:{question}", family="relevance", question_name=question,
                            state={"query": "q", "memory": f"m{i}"}, question={"type": "noul", "instructions": "Does it help?"},
                            target=float(i < n_pos), source=source, group=group, split=split) for i in range(n)]


def _bridge(n: int, group: str, *, shift: float, seed: int) -> list[Prediction]:
    """`bridge` Nouls of one conversation, calibrated in slope, whose positive rate moves with `shift`."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        z = rng.normal(-1.5, 1.5)
        y = float(rng.random() < 1 / (1 + np.exp(-(z + shift))))
        label = Label("noul", (y,), 1.0, "relevance", "bridge", f"{group}:{i}:bridge", catalogue="relevance.bridge")
        out.append(Prediction(label, np.array([z]), "calibration", group))
    return out


def test_prior_shifts_move_a_question_to_its_pooled_label_rate() -> None:
    from training.calibrate import prior_shifts

    calibration = _bridge(1500, "locomo:conv-44", shift=0.8, seed=7)  # the calibration conversation: a high rate
    cal_rate = float(np.mean([p.label.target[0] for p in calibration]))
    cal_labels = [DecisionExample(id=p.label.example_id, family="relevance", question_name="bridge",
                                  state={"query": "q", "memory": p.label.example_id}, question={"type": "noul", "instructions": "Does it help?"},
                                  target=p.label.target[0], source="locomo", group=p.group, split="calibration") for p in calibration]
    reference = (_labels(150, 1500, "locomo:conv-41") + _labels(180, 1500, "locomo:conv-42") + cal_labels
                 + _labels(900, 1000, "synthetic:relevance:0:1", source="synthetic:relevance"))  # another source: not mixed in
    pooled = (150 + 180 + cal_rate * 1500 + 0.5) / 4501
    shifts = prior_shifts(calibration, reference)
    logit = lambda p: float(np.log(p / (1 - p)))  # noqa: E731
    assert shifts["relevance.bridge"] == pytest.approx(logit(pooled) - logit((cal_rate * 1500 + 0.5) / 1501), abs=1e-4)
    assert shifts["relevance.bridge"] < -0.3
    assert prior_shifts(calibration[:50], reference) == {}  # too few calibration examples to move a key
    assert prior_shifts(calibration, _labels(900, 1000, "synthetic:relevance:0:1", source="synthetic:relevance")) == {}

    plain = calibrate_predictions(calibration, None, bias=True).calibration
    shifted = calibrate_predictions(calibration, None, bias=True, reference=reference).calibration
    assert shifted.prior_shifts == shifts and not plain.prior_shifts
    assert shifted.bias("noul", "relevance.bridge") == pytest.approx(plain.bias("noul", "relevance.bridge") + shifts["relevance.bridge"])
    held = _bridge(3000, "locomo:conv-26", shift=0.0, seed=8)  # a new conversation at the training conversations' rate
    kinds, targets = [p.kind for p in held], [p.label.target for p in held]
    ece_plain = compute_metrics(kinds, probabilities(held, plain), targets).ece
    ece_shifted = compute_metrics(kinds, probabilities(held, shifted), targets).ece
    assert ece_shifted < ece_plain - 0.02, (ece_shifted, ece_plain)


def _question(n: int, catalogue: str, group: str, *, scale: float, shift: float, seed: int) -> list[Prediction]:
    """Nouls of one catalogue question in one group whose model says scale * z where the label's logit is
    z + shift (scale 1, shift 0: calibrated)."""
    family, _, question = catalogue.partition(".")
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        z = rng.normal(-0.5, 1.5)
        y = float(rng.random() < 1 / (1 + np.exp(-(z + shift))))
        label = Label("noul", (y,), 1.0, family, question, f"{group}:{catalogue}:{i}", catalogue=catalogue)
        out.append(Prediction(label, np.array([scale * z]), "calibration", group))
    return out


def test_a_level_counts_as_fitted_when_it_changes_the_raw_logits() -> None:
    cal = Calibration({"noul": 1.0}, None, family_temperatures={"pair:noul": 1.0, "typing:noul": 0.8, "stopping:noul": 1.0},
                      family_biases={"pair:noul": 0.2})
    assert cal.fitted("noul", 1, "pair.semantic") and cal.fitted("noul", 1, "typing.episodic")
    assert not cal.fitted("noul", 1, "stopping.evidence_sufficient") and not cal.fitted("noul", 1, "routing.temporal")
    assert Calibration({"noul": 2.0}).fitted("noul", 1, "routing.temporal")
    assert not Calibration().fitted("choice", 4) and Calibration({"choice:3-4": 0.5}).fitted("choice", 4)


def test_shift_fitted_only_drops_the_prior_shift_of_a_level_left_raw() -> None:
    # two calibration groups each: the miscalibrated question's fit carries from one to the other, while the
    # calibrated question's two groups sit on either side of its raw rate, so its raw logits win out of fold
    predictions = (_question(800, "relevance.bridge", "locomo:conv-44", scale=3.0, shift=0.0, seed=11)
                   + _question(800, "relevance.bridge", "synthetic:relevance:0:8", scale=3.0, shift=0.0, seed=12)
                   + _question(800, "stopping.evidence_sufficient", "locomo:conv-44", scale=1.0, shift=0.6, seed=13)
                   + _question(800, "stopping.evidence_sufficient", "synthetic:stopping:0:8", scale=1.0, shift=-0.6, seed=14))
    reference = [DecisionExample(id=f"{p.group}:{p.label.example_id}:{copy}", family=p.family, question_name=p.label.question_name,
                                 state={"query": "q", "memory": f"{p.label.example_id}:{copy}"},
                                 question={"type": "noul", "instructions": "Does it?"}, target=float(copy == 0 and p.label.target[0]),
                                 source=p.group.partition(":")[0], group=p.group, split="train" if copy else "calibration")
                 for p in predictions for copy in (0, 1)]  # a training copy of every state, labelled 0: a lower pooled rate
    every = calibrate_predictions(predictions, None, bias=True, folds="group", keep_raw=True, reference=reference).calibration
    fitted_only = calibrate_predictions(predictions, None, bias=True, folds="group", keep_raw=True, reference=reference,
                                        shift_fitted_only=True).calibration
    assert every.fitted("noul", 1, "relevance.bridge") and not every.fitted("noul", 1, "stopping.evidence_sufficient")
    assert every.prior_shifts["stopping.evidence_sufficient"] < -0.5  # the pooled rate is lower: pooled moves it
    assert fitted_only.prior_shifts == {"relevance.bridge": every.prior_shifts["relevance.bridge"]}
    raw = [p for p in predictions if p.family == "stopping"]
    assert probabilities(raw, fitted_only) == probabilities(raw)  # the raw level answers as the model does
    assert probabilities(raw, every) != probabilities(raw)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_logits_are_refused_not_fitted(bad: float) -> None:
    # one broken output (a diverged fit) must not silently become a temperature at the search's bound
    preds = _miscalibrated(n=400)
    preds[7] = Prediction(preds[7].label, np.array([bad]), "calibration", "g")
    with pytest.raises(ValueError, match="1 calibration prediction has non-finite logits .*n7"):
        calibrate_predictions(preds, "h", bias=True, keep_raw=True)
