"""Turning labelled states into `DecisionExample`s: question wording, option order, ids.

Every source (LoCoMo rules, generators) labels a state with targets by question *name*; the `Emitter`
builds the wire question from the catalogue (controller/families.py), picks a wording (the canonical one
with probability 1 - `paraphrase_rate`), sometimes drops a Noul's criteria, and shuffles a Choice's options
(the target is a {option: p} map, so it follows the options). Ids are `<prefix>:<state no>:<question>`.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from controller.families import FAMILIES
from data.schema import DecisionExample, SchemaError, Target
from data.synthetic.paraphrases import wordings

TargetSpec = Union[bool, int, float, str, Mapping[str, float], Sequence[float]]


@dataclass(frozen=True)
class QuestionStyle:
    """How questions are worded in the data (validated)."""

    paraphrase_rate: float = 0.5  # share of questions worded by a paraphrase instead of the canonical text
    drop_criteria_rate: float = 0.1  # share of Nouls sent with instructions only
    shuffle_options: bool = True  # Choice options in random order

    def __post_init__(self) -> None:
        for name in ("paraphrase_rate", "drop_criteria_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise SchemaError(f"{name} must lie in [0, 1], got {value}", field_name=name, value=value)


@dataclass
class Emitter:
    """Collects the examples of one group (one conversation or one generator shard)."""

    source: str
    group: str
    split: str
    rng: random.Random
    id_prefix: str
    style: QuestionStyle = field(default_factory=QuestionStyle)
    examples: list[DecisionExample] = field(default_factory=list)
    states: int = 0

    def question(self, family: str, name: str) -> dict[str, Any]:
        """A fresh wire question for (family, name) in a sampled wording and option order."""
        base = copy.deepcopy(FAMILIES[family].questions[name])
        options = wordings(family, name)
        if len(options) > 1 and self.rng.random() < self.style.paraphrase_rate:
            base["instructions"] = self.rng.choice(options[1:])
        if base["type"] == "noul" and "criteria" in base and self.rng.random() < self.style.drop_criteria_rate:
            del base["criteria"]
        if base["type"] == "choice" and self.style.shuffle_options:
            items = list(base["criteria"].items())
            self.rng.shuffle(items)
            base["criteria"] = dict(items)
        return base

    def emit(
        self,
        family: str,
        state: Any,
        targets: Mapping[str, TargetSpec],
        *,
        weight: float = 1.0,
        weights: Mapping[str, float] | None = None,
        notes: str = "",
    ) -> int:
        """Add one example per labelled question of `state`; returns how many were added."""
        if not targets:
            return 0
        number = self.states
        self.states += 1
        for name, spec in targets.items():
            question = self.question(family, name)
            self.examples.append(
                DecisionExample(
                    id=f"{self.id_prefix}:{number:05d}:{name}",
                    family=family,
                    question_name=name,
                    state=state,
                    question=question,
                    target=as_target(question, spec),
                    source=self.source,
                    group=self.group,
                    split=self.split,
                    weight=(weights or {}).get(name, weight),
                    notes=notes,
                )
            )
        return len(targets)


def as_target(question: Mapping[str, Any], spec: TargetSpec) -> Target:
    """Noul: a probability (bools allowed); Choice: a label (one-hot) or {label: p}; Score: a level or a list."""
    kind = question["type"]
    if kind == "noul":
        return float(spec)  # type: ignore[arg-type]
    if kind == "choice":
        options = list(question["criteria"])
        if isinstance(spec, str):
            if spec not in options:
                raise SchemaError(f"{spec!r} is not an option of {options}", field_name="target", value=spec)
            return {o: 1.0 if o == spec else 0.0 for o in options}
        if isinstance(spec, Mapping):
            return {o: float(spec.get(o, 0.0)) for o in options}
        raise SchemaError("a choice target is a label or a {label: p} map", field_name="target", value=spec)
    levels = len(question["criteria"])
    if isinstance(spec, int) and not isinstance(spec, bool):
        return [1.0 if i == spec else 0.0 for i in range(levels)]
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return [float(v) for v in spec]
    raise SchemaError("a score target is a level index or a list of level probabilities", field_name="target", value=spec)
