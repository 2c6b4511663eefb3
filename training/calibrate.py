"""Temperature calibration of a saved model directory on the calibration split.

    result = calibrate_predictions(predictions, model_hash)   # T per kind / option-count group, catalogue family, question
    save_calibration(result.calibration, model_dir / "calibration.json")

Uses `controller.calibration.fit_temperatures` (NLL-optimal T per group, bound to the model hash; a question's
own fit and a Noul bias only where they survive cross-validation: across data sources, `source_folds`, or
across groups, `group_folds`). A Choice
or Score question is fitted on the index of its most probable target option; a Noul on its target
probability. Groups without calibration data keep T = 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.calibration import Calibration, fit_temperatures, group_of, nll
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


def calibrate_predictions(predictions: Sequence[Prediction], model_hash: str | None, *, bias: bool = False,
                          folds: str = "source", keep_raw: bool = False) -> CalibrationResult:
    if not predictions:
        raise ValueError("calibration needs predictions on the calibration split; it is empty")
    if folds not in FOLDS:
        raise ValueError(f"unknown calibration folds {folds!r}; choose from {', '.join(FOLDS)}")
    logits, targets, groups = calibration_inputs(predictions)
    families = [p.label.catalogue for p in predictions]
    calibration = fit_temperatures(logits, targets, groups, model_hash=model_hash, families=families, bias=bias,
                                   folds=FOLDS[folds](predictions), keep_raw=keep_raw)
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
