"""Temperature calibration of a saved model directory on the calibration split.

    result = calibrate_predictions(predictions, model_hash)   # T per kind / option-count group, catalogue family, question
    save_calibration(result.calibration, model_dir / "calibration.json")

Uses `controller.calibration.fit_temperatures` (NLL-optimal T per group, bound to the model hash; a question's
own fit and a Noul bias only where they survive cross-validation: across data sources, `source_folds`, or
across groups, `group_folds`). A Choice
or Score question is fitted on the index of its most probable target option; a Noul on its target
probability. Groups without calibration data keep T = 1.

With `reference` examples (the training and calibration splits), each Noul catalogue key also gets a prior
shift (`prior_shifts`): the log-odds from its label rate on the calibration split to its rate on the reference
examples of the same questions and sources, mixed in the calibration split's proportions. With
`shift_fitted_only`, a key gets its shift only where its level was fitted (`Calibration.fitted`): the shift
corrects the calibration split's label rate, which only a fitted map has learnt; a level left at the raw
logits (T = 1, no bias) answers at the rate the model was trained on, already close to the pooled one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from controller.calibration import Calibration, fit_temperatures, group_of
from controller.calibration_fit import nll
from data.schema import DecisionExample
from training.predict import Prediction


@dataclass(frozen=True)
class CalibrationResult:
    calibration: Calibration
    nll_before: dict[str, float] = field(default_factory=dict)  # per group, on the calibration split
    nll_after: dict[str, float] = field(default_factory=dict)


def calibration_inputs(predictions: Sequence[Prediction]) -> tuple[list[np.ndarray], list[float], list[str]]:
    """(logits, targets, groups) in the form `fit_temperatures` takes."""
    logits, targets, groups = [], [], []
    for p in predictions:
        logits.append(np.asarray(p.logits, dtype=np.float64))
        if p.kind == "noul":
            targets.append(float(p.label.target[0]))
        else:
            targets.append(float(int(np.argmax(p.label.target))))
        groups.append(group_of(p.kind, len(p.logits)))
    return logits, targets, groups


def source_folds(predictions: Sequence[Prediction]) -> list[str]:
    """Cross-validation folds for the bias check: the data source (`locomo`, `synthetic`, ...) of each example's
    group; a family drawn from one source alone is split in two by a stable hash of the group instead."""
    import hashlib

    sources = [p.group.partition(":")[0] for p in predictions]
    by_family: dict[str | None, set[str]] = {}
    for p, source in zip(predictions, sources):
        by_family.setdefault(p.label.catalogue, set()).add(source)
    out = []
    for p, source in zip(predictions, sources):
        if len(by_family[p.label.catalogue]) > 1:
            out.append(source)
        else:
            out.append(f"{source}/{hashlib.blake2b(p.group.encode(), digest_size=2).digest()[0] % 2}")
    return out


def group_folds(predictions: Sequence[Prediction]) -> list[str]:
    """Cross-validation folds that ask whether a fit carries over to new groups of the serving kind, not to
    another source: each example's group (a LoCoMo conversation, a synthetic generator shard). Where a
    catalogue question's examples of one source come from a single group (the one calibration conversation),
    that group is split in two by a stable hash of the state, so its questions are still checked out of fold.

    With `source_folds`, a fit must carry over between LoCoMo and the synthetic generators; for a question
    the model answers almost perfectly on synthetic states (relevance: AUROC 0.99) and far less well on
    conversations, no bias can pass that check, although the conversation data need one."""
    import hashlib

    groups: dict[tuple[str | None, str], set[str]] = {}
    for p in predictions:
        groups.setdefault((p.label.catalogue, p.group.partition(":")[0]), set()).add(p.group)
    out = []
    for p in predictions:
        if len(groups[(p.label.catalogue, p.group.partition(":")[0])]) > 1:
            out.append(p.group)
        else:
            state = p.label.example_id.rpartition(":")[0] or p.label.example_id  # both questions of a state together
            out.append(f"{p.group}/{hashlib.blake2b(state.encode(), digest_size=2).digest()[0] % 2}")
    return out


FOLDS = {"source": source_folds, "group": group_folds}


def prior_shifts(predictions: Sequence[Prediction], reference: Iterable[DecisionExample], *,
                 min_examples: int = 100) -> dict[str, float]:
    """Catalogue key -> log-odds from the key's label rate among the calibration `predictions` (Nouls) to the
    rate its questions have among the `reference` examples (training and calibration splits), each question
    and source at its own rate, mixed in the calibration split's proportions.

    A calibration map matches the label rate of the split it was fitted on. LoCoMo questions are calibrated on
    one conversation, whose rate of a question is one draw of a rate that differs between conversations (the
    `bridge` question: 0.23 on the calibration conversation, 0.14-0.23 on the training ones); the pooled rate
    of every labelled conversation is the better estimate for the next one. Synthetic rates differ only by
    sampling noise, which pooling also removes. Keys with fewer than `min_examples` calibration Nouls get none.
    Rates are smoothed by half an example each way."""
    source_of: dict[str, str] = {}
    totals: dict[tuple[str, str, str], list[float]] = {}
    for e in reference:
        if e.question.get("type") != "noul":
            continue
        source_of.setdefault(e.group, e.source)
        total = totals.setdefault((e.family, e.question_name, e.source), [0.0, 0.0])
        total[0] += float(e.target)  # type: ignore[arg-type]
        total[1] += 1.0
    rate = {k: (a + 0.5) / (n + 1.0) for k, (a, n) in totals.items()}
    by_key: dict[str, list[tuple[float, float]]] = {}  # key -> (calibration target, reference rate) per prediction
    for p in predictions:
        if p.kind != "noul" or p.label.catalogue is None or p.label.variant:
            continue
        pooled = rate.get((p.family, p.label.question_name, source_of.get(p.group, "")))
        if pooled is not None:
            by_key.setdefault(p.label.catalogue, []).append((float(p.label.target[0]), pooled))
    shifts: dict[str, float] = {}
    for key, rows in sorted(by_key.items()):
        if len(rows) < min_examples:
            continue
        own = (sum(t for t, _ in rows) + 0.5) / (len(rows) + 1.0)
        target = sum(r for _, r in rows) / len(rows)
        shifts[key] = round(math.log(target / (1 - target)) - math.log(own / (1 - own)), 5)
    return shifts


def at_fitted_levels(shifts: dict[str, float], calibration: Calibration) -> dict[str, float]:
    """The prior shifts of the keys whose calibration level was fitted (`Calibration.fitted`)."""
    return {key: s for key, s in shifts.items() if calibration.fitted("noul", 1, key)}


def calibrate_predictions(predictions: Sequence[Prediction], model_hash: str | None, *, bias: bool = False,
                          folds: str = "source", keep_raw: bool = False,
                          reference: Iterable[DecisionExample] | None = None, prior_min_examples: int = 100,
                          shift_fitted_only: bool = False) -> CalibrationResult:
    if not predictions:
        raise ValueError("calibration needs predictions on the calibration split; it is empty")
    if folds not in FOLDS:
        raise ValueError(f"unknown calibration folds {folds!r}; choose from {', '.join(FOLDS)}")
    logits, targets, groups = calibration_inputs(predictions)
    broken = [p.label.example_id for p, row in zip(predictions, logits) if not np.isfinite(row).all()]
    if broken:  # a temperature fitted through NaN / inf lands on its search bound and looks like a fit
        verb = "prediction has" if len(broken) == 1 else "predictions have"
        raise ValueError(f"{len(broken)} calibration {verb} non-finite logits (first {broken[0]}): the model's outputs are broken")
    families = [p.label.catalogue for p in predictions]
    calibration = fit_temperatures(logits, targets, groups, model_hash=model_hash, families=families, bias=bias,
                                   folds=FOLDS[folds](predictions), keep_raw=keep_raw)
    if reference is not None:
        shifts = prior_shifts(predictions, reference, min_examples=prior_min_examples)
        calibration = replace(calibration, prior_shifts=at_fitted_levels(shifts, calibration) if shift_fitted_only else shifts)
    before, after = {}, {}
    for g in sorted(set(groups)):
        idx = [i for i, x in enumerate(groups) if x == g]
        rows, ys = [logits[i] for i in idx], [targets[i] for i in idx]
        before[g] = round(nll(rows, ys, 1.0, noul=g == "noul"), 5)
        by_t: dict[tuple[float, float], list[int]] = {}  # questions sharing (temperature, bias): their group's or family's
        for i in idx:
            kind = predictions[i].kind
            by_t.setdefault((calibration.temperature(kind, len(logits[i]), families[i]), calibration.bias(kind, families[i])), []).append(i)
        total = sum(len(ix) * nll([logits[i] for i in ix], [targets[i] for i in ix], t, noul=g == "noul", bias=b)
                    for (t, b), ix in by_t.items())
        after[g] = round(total / len(idx), 5)
    return CalibrationResult(calibration, before, after)
