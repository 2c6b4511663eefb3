"""Temperature scaling per question kind and option-count bucket, tied to the model it was fitted on.

Groups: `noul`; `choice:2`, `choice:3-4`, `choice:5-8`, `choice:9+`; `score:2-3`, `score:4-6`, `score:7-10`.
A Noul's probability is sigmoid(z / T); a Choice's / Score's is softmax(z / T) over its options. Each T is
fitted by minimising the NLL on a held-out split; NLL is convex in 1/T, so a bracketed golden-section search
finds the optimum. A group without data keeps T = 1, and so does one with fewer than `min_group_examples` or
with a single class (every Noul label on one side of 0.5, every Choice / Score the same answer): a temperature
fitted there only sharpens towards whatever the few labels say.

Questions of the built-in Jev-Mem catalogue are recognised by their instructions (`controller.families.lookup`,
the same rule at inference and in evaluation) and carry a key `family.question` (`pair.semantic`); a question in
other wording carries the family of its request's state shape (`relevance`), `controller.families.calibration_key`.
They are
calibrated on a hierarchy: a family gets a temperature of its own per group (`"pair:noul"`) when the
calibration split holds at least `min_family_examples` of it, and a question gets its own
(`"pair.semantic:noul"`) when it holds `min_question_examples` and, given cross-validation folds (the data
sources), the finer fit beats its parent's out of fold: the families, and the questions within a family,
are miscalibrated in different directions, so one shared T leaves each a little off, but a fit on too few
examples or on one source only would not carry over. A lookup takes the most specific level fitted
(question, then family, then group) and uses that level's temperature and bias together.

With `bias=True` a level's Nouls also get a bias (Platt scaling, sigmoid(z / T + b), fitted jointly by NLL),
kept only where it survives cross-validation across folds: a temperature can only sharpen or soften, a bias
can also shift. Choices keep a temperature alone (a shared shift cancels in the softmax).

`prior_shifts` (catalogue key -> log-odds) move a Noul's calibrated logit from the label rate of the
calibration split to a rate estimated from more data (`training.calibrate.prior_shifts`): the one calibration
conversation's rate of a question is a single draw of a rate that varies between conversations.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from controller.calibration_fit import Fitter
from controller.errors import ArtifactError, CalibrationMismatchError
from controller.files import write_json_atomic
from controller.states import STATES_FILE, StateConventions, conventions_dir, read_states
from controller.strict_json import unique_object

FORMAT = "jevmem-calibration/1"
_BUCKETS: dict[str, tuple[tuple[int, int, str], ...]] = {
    "choice": ((1, 2, "choice:2"), (3, 4, "choice:3-4"), (5, 8, "choice:5-8"), (9, 10**9, "choice:9+")),
    "score": ((1, 3, "score:2-3"), (4, 6, "score:4-6"), (7, 10**9, "score:7-10")),
}
GROUPS: tuple[str, ...] = ("noul", *(name for buckets in _BUCKETS.values() for _, _, name in buckets))
# A fit lies in [0.05, 20] (`calibration_fit`); a temperature far outside is no fit but a damaged file: near 1e-308,
# z / T overflows and the softmax turns into NaN, near 1e308 every answer reads as a coin flip.
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-3, 1e3
_NUMBER_TABLES = ("temperatures", "family_temperatures", "family_biases", "prior_shifts")


def group_of(kind: str, n_options: int) -> str:
    """The calibration group of a question (a Noul is always `noul`)."""
    if kind == "noul":
        return "noul"
    for low, high, name in _BUCKETS[kind]:
        if low <= n_options <= high:
            return name
    raise ValueError(f"no calibration group for {kind} with {n_options} options")


@dataclass(frozen=True)
class Calibration:
    """Temperatures by group (missing groups use 1.0) and the hash of the model they were fitted on."""

    temperatures: dict[str, float] = field(default_factory=dict)
    model_hash: str | None = None
    fitted_on: dict[str, int] = field(default_factory=dict)  # examples per group (and per family:group)
    family_temperatures: dict[str, float] = field(default_factory=dict)  # "pair:noul" -> T
    family_biases: dict[str, float] = field(default_factory=dict)  # "pair:noul" -> b (Nouls only)
    prior_shifts: dict[str, float] = field(default_factory=dict)  # catalogue key ("relevance.bridge") -> log-odds

    def __post_init__(self) -> None:
        for name, t in {**self.temperatures, **self.family_temperatures}.items():
            group = name if name in self.temperatures else name.partition(":")[2]
            if group not in GROUPS:
                raise ArtifactError(f"unknown calibration group {name!r}; expected one of {', '.join(GROUPS)}")
            if not (math.isfinite(t) and t > 0):
                raise ArtifactError(f"temperature of {name!r} must be a positive number, not {t!r}")
            if not MIN_TEMPERATURE <= t <= MAX_TEMPERATURE:
                raise ArtifactError(f"temperature of {name!r} is {t!r}, outside [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]: "
                                    "no fit gives that, the file is damaged")
        for name, b in self.family_biases.items():
            if not name.endswith(":noul") or name not in self.family_temperatures:
                raise ArtifactError(f"a bias needs a family Noul temperature beside it, got {name!r}")
            if not math.isfinite(b):
                raise ArtifactError(f"bias of {name!r} must be a finite number, not {b!r}")
        for name, shift in self.prior_shifts.items():
            if not name or ":" in name or not math.isfinite(shift):
                raise ArtifactError(f"prior shift {name!r}: {shift!r} needs a catalogue key and a finite number")

    def level(self, kind: str, n_options: int, family: str | None = None) -> str:
        """The calibration entry a question uses: `family.question:group`, `family:group` or `group`
        (the most specific one fitted). `family` is a catalogue key, `family` or `family.question`."""
        group = group_of(kind, n_options)
        if family is not None:
            for name in dict.fromkeys((family, family.partition(".")[0])):
                if f"{name}:{group}" in self.family_temperatures:
                    return f"{name}:{group}"
        return group

    def temperature(self, kind: str, n_options: int, family: str | None = None) -> float:
        level = self.level(kind, n_options, family)
        if level in self.family_temperatures:
            return float(self.family_temperatures[level])
        return float(self.temperatures.get(level, 1.0))

    def fitted(self, kind: str, n_options: int, family: str | None = None) -> bool:
        """Whether the level a question uses changes its raw logits (a temperature other than 1, or a bias)."""
        return self.temperature(kind, n_options, family) != 1.0 or self.level(kind, n_options, family) in self.family_biases

    def bias(self, kind: str, family: str | None = None) -> float:
        """The Platt bias of a catalogue question's Noul at the level it is calibrated on, plus its prior shift
        (0 elsewhere)."""
        if kind != "noul" or family is None:
            return 0.0
        return float(self.family_biases.get(self.level(kind, 1, family), 0.0)) + float(self.prior_shifts.get(family, 0.0))

    def probabilities(self, kind: str, logits: np.ndarray, family: str | None = None) -> tuple[float, ...]:
        """Calibrated probabilities: (p_true,) for a Noul, a distribution otherwise."""
        z = np.asarray(logits, dtype=np.float64) / self.temperature(kind, len(logits), family)
        if kind == "noul":
            return (float(_sigmoid(z[0] + self.bias(kind, family))),)
        return tuple(float(p) for p in _softmax(z))

    def for_family(self, family: str) -> Calibration:
        """The calibration for questions of `family` (a training-side family name): this one. A model with
        family specialists evaluates through a subclass that returns the specialist's (`training.specialist`)."""
        return self

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "model_hash": self.model_hash, "temperatures": dict(sorted(self.temperatures.items())),
                "family_temperatures": dict(sorted(self.family_temperatures.items())),
                "family_biases": dict(sorted(self.family_biases.items())), "fitted_on": self.fitted_on,
                **({"prior_shifts": dict(sorted(self.prior_shifts.items()))} if self.prior_shifts else {})}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        if data.get("format") != FORMAT:
            raise ArtifactError(f"calibration format {data.get('format')!r} is not {FORMAT!r}")
        tables = {key: _numbers(data, key) for key in _NUMBER_TABLES}
        fitted_on = data.get("fitted_on", {})
        if not isinstance(fitted_on, dict):
            raise ArtifactError(f"'fitted_on' must be a JSON object, not {type(fitted_on).__name__}")
        return cls(tables["temperatures"], data.get("model_hash"), dict(fitted_on), tables["family_temperatures"],
                   tables["family_biases"], tables["prior_shifts"])


def _numbers(data: dict[str, Any], key: str) -> dict[str, float]:
    """`data[key]` as a name -> float table; a JSON string or boolean is refused, not converted (`"2.5"`, `true`)."""
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise ArtifactError(f"{key!r} must be a JSON object of numbers, not {type(table).__name__}")
    bad = [name for name, value in table.items() if isinstance(value, bool) or not isinstance(value, (int, float))]
    if bad:
        raise ArtifactError(f"{key!r} must map names to numbers; {bad[0]!r} is {table[bad[0]]!r}")
    return {name: float(value) for name, value in table.items()}


def identity(model_hash: str | None = None) -> Calibration:
    return Calibration({}, model_hash)


def save_calibration(calibration: Calibration, path: str | Path, *, states: StateConventions | None = None) -> None:
    """Write calibration.json (atomically). A fitted calibration (any temperature, bias or shift) also records,
    as `states`, the state conventions it was fitted under: `states`, else those of the directory it is written
    into (its `states.json`, the defaults without one), so write `states.json` first. A specialist is rendered
    with its parent directory's conventions, so a specialist folder listed in its parent's index gets the
    parent's (`controller.states.conventions_dir`). An identity map depends on no rendering and records none."""
    target = Path(path)
    data = calibration.to_json()
    if calibration.temperatures or calibration.family_temperatures or calibration.family_biases or calibration.prior_shifts:
        data["states"] = asdict(states if states is not None else read_states(conventions_dir(target.parent)))
    write_json_atomic(target, data, sort_keys=False)


def load_calibration(path: str | Path, model_hash: str, states: StateConventions | None = None) -> Calibration:
    """Read calibration.json; `CalibrationMismatchError` when it was fitted on another model, or, given the
    directory's `states`, under other state conventions than those it records (a file without the record,
    written before it existed, is not checked)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"), object_pairs_hook=unique_object)
    except (OSError, ValueError) as error:  # a duplicate key too: the parser would keep the last value silently
        raise ArtifactError(f"cannot read calibration file {path}: {error}") from error
    if not isinstance(data, dict):
        raise ArtifactError(f"cannot read calibration file {path}: not a JSON object")
    try:
        calibration = Calibration.from_json(data)
    except (ArtifactError, AttributeError, TypeError, ValueError) as error:
        raise ArtifactError(f"cannot read calibration file {path}: {error}") from error
    if calibration.model_hash != model_hash:
        raise CalibrationMismatchError(
            f"{path} was fitted on model {calibration.model_hash!r}, but the model directory now hashes to {model_hash!r}: "
            "its weights or config.json changed since the calibration was written (restore them), or the calibration "
            "belongs to another model (refit it)"
        )
    if states is not None and "states" in data:
        check_fitted_states(data["states"], states, Path(path))
    return calibration


def check_fitted_states(recorded: Any, states: StateConventions, path: Path) -> None:
    """`CalibrationMismatchError` unless the conventions `path` records as `states` are `states`."""
    known = {f.name for f in fields(StateConventions)}
    if not isinstance(recorded, dict) or not all(isinstance(v, bool) for v in recorded.values()):
        raise ArtifactError(f"cannot read calibration file {path}: 'states' must map convention names to true or false")
    unknown = sorted(set(recorded) - known)
    if unknown or any(recorded.get(name, False) != getattr(states, name) for name in known):
        fitted = {name: recorded.get(name, False) for name in sorted(known | set(recorded))}
        raise CalibrationMismatchError(
            f"{path} was fitted on states rendered with {fitted}, but {path.parent / STATES_FILE} now declares "
            f"{asdict(states)}: the engine would render states the calibration never saw. Restore {STATES_FILE}, "
            "or refit the calibration (python -m training calibrate --model-dir ...)"
        )


def fit_temperatures(
    logits: Sequence[Sequence[float]],
    targets: Sequence[float],
    groups: Sequence[str],
    *,
    model_hash: str | None = None,
    families: Sequence[str | None] | None = None,
    min_group_examples: int = 50,
    min_family_examples: int = 200,
    min_question_examples: int = 150,
    bias: bool = False,
    folds: Sequence[str] | None = None,
    keep_raw: bool = False,
) -> Calibration:
    """Fit one temperature per group by NLL, one per (catalogue family, group) with enough examples, and one
    per (catalogue question, group) with enough examples that beats its parent out of fold (for Nouls with
    `bias`, a temperature and a bias, fitted jointly).

    `logits[i]` is one question's raw logits (1 for a Noul); `targets[i]` the Noul label in [0, 1] or the
    index of the correct option; `groups[i]` its `group_of(...)`; `families[i]` its catalogue key
    (`family` or `family.question`) or None. With `bias`, Nouls get a bias too (Platt scaling); with
    `folds` as well (for example each example's data source), a bias is kept only when it lowers the
    out-of-fold NLL (fit on the other folds, scored on each), and so is a question's own calibration
    against its family's: a fit that does not carry over from one source to another would make the
    calibration worse on new data than the coarser one. With `keep_raw` (and `folds`), a group's or family's
    fit must also beat the raw logits (T = 1, no bias) out of fold, and a question takes the best of its own
    fit, its parent's and the raw logits; a level the raw logits win is stored as T = 1, so questions whose raw
    probabilities are already as good stay as the model gives them. A level with fewer examples than its minimum
    (`min_group_examples`, `min_family_examples`, `min_question_examples`) or with one class only is not fitted.
    """
    if not len(logits) == len(targets) == len(groups) or (families is not None and len(families) != len(groups)):
        raise ValueError("logits, targets, groups (and families) must have the same length")
    by_group: dict[str, list[int]] = {}
    by_family: dict[str, list[int]] = {}
    by_question: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        if g not in GROUPS:
            raise ValueError(f"unknown calibration group {g!r}")
        by_group.setdefault(g, []).append(i)
        key = families[i] if families is not None else None
        if key is not None:
            by_family.setdefault(f"{key.partition('.')[0]}:{g}", []).append(i)
            if "." in key:
                by_question.setdefault(f"{key}:{g}", []).append(i)
    fitter = Fitter(logits, targets, groups)
    check_raw = keep_raw and folds is not None

    def beats_raw(idx: list[int], with_bias: bool) -> bool:  # the fit beats T = 1 out of fold (or nothing asks it to)
        return not check_raw or fitter.best(idx, {"fit": (idx, with_bias), "raw": None}, folds) == "fit"

    # levels left at T = 1: too few examples or one class, or no fit beat raw
    raw: set[str] = {g for g, idx in by_group.items() if not fitter.informative(idx, min_group_examples) or not beats_raw(idx, False)}
    group_t = {g: 1.0 if g in raw else fitter.temperature(idx) for g, idx in sorted(by_group.items())}
    levels: dict[str, tuple[float, float]] = {}
    platt: dict[str, bool] = {}  # level -> fitted with a bias

    def keeps_bias(name: str, idx: list[int]) -> bool:  # a Noul bias, where it beats a temperature alone out of fold
        return bias and name.endswith(":noul") and (folds is None or fitter.beats(idx, idx, True, False, folds))

    for name, idx in sorted(by_family.items()):
        if not fitter.informative(idx, min_family_examples):
            continue
        platt[name] = keeps_bias(name, idx)
        if beats_raw(idx, platt[name]):
            levels[name] = fitter.params(idx, platt[name])
        else:
            platt[name], levels[name] = False, (1.0, 0.0)
            raw.add(name)
    for name, idx in sorted(by_question.items()):
        if not fitter.informative(idx, min_question_examples):
            continue
        key, _, group = name.partition(":")
        parent = f"{key.partition('.')[0]}:{group}"
        parent_idx, parent_platt = (by_family[parent], platt[parent]) if parent in levels else (by_group[group], False)
        parent_raw = parent in raw if parent in levels else group in raw
        own = keeps_bias(name, idx)
        if check_raw:  # the best of its own fit, its parent's and the raw logits on its examples, out of fold
            choice = fitter.best(idx, {"own": (idx, own), "parent": None if parent_raw else (parent_idx, parent_platt), "raw": None}, folds)
            if choice != "parent" or parent_raw:
                platt[name] = own and choice == "own"
                levels[name] = fitter.params(idx, own) if choice == "own" else (1.0, 0.0)
        elif folds is None or fitter.beats(idx, parent_idx, own, parent_platt, folds):
            platt[name] = own
            levels[name] = fitter.params(idx, own)
    counts = {name: len(idx) for name, idx in sorted({**by_group, **by_family, **by_question}.items()) if name in group_t or name in levels}
    return Calibration(group_t, model_hash, counts, {k: t for k, (t, _) in sorted(levels.items())},
                       {k: levels[k][1] for k in sorted(levels) if platt[k]})


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()
