"""The generator registry and the driver that runs every generator over seeded shards.

A generator is `fn(rng, emitter, n)`: it emits `n` labelled states through the emitter, drawing all
randomness from `rng`. Each (generator, seed, shard) gets `random.Random("<name>:<seed>:<shard>")` and the
group `synthetic:<name>:<seed>:<shard>`, so output depends only on those three values, and the split plan
decides which shards are held out.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from data.schema import DataError, DecisionExample
from data.splits import SplitPlan, synthetic_group
from data.synthetic.emit import Emitter, QuestionStyle

log = logging.getLogger(__name__)

GeneratorFn = Callable[[random.Random, Emitter, int], None]


@dataclass(frozen=True)
class Generator:
    name: str
    family: str  # the family whose budget it draws from (it may emit related families too)
    fn: GeneratorFn
    share: float = 1.0  # states made = share x SyntheticConfig.per_family


GENERATORS: dict[str, Generator] = {}


def register(name: str, family: str, *, share: float = 1.0) -> Callable[[GeneratorFn], GeneratorFn]:
    """Decorator: register a generator under a unique name."""

    def wrap(fn: GeneratorFn) -> GeneratorFn:
        if share <= 0:
            raise DataError(f"generator {name!r} needs a positive share, got {share}")
        if name in GENERATORS:
            raise DataError(f"a synthetic generator named {name!r} is already registered")
        GENERATORS[name] = Generator(name, family, fn, share)
        return fn

    return wrap


@dataclass(frozen=True)
class SyntheticConfig:
    per_family: int = 1500  # labelled states of a generator with share 1.0 (one per family, except pair)
    seed: int = 0
    style: QuestionStyle = field(default_factory=QuestionStyle)

    def __post_init__(self) -> None:
        if self.per_family < 0:
            raise DataError(f"per_family must be >= 0, got {self.per_family}")


def budget(config: SyntheticConfig, names: Sequence[str]) -> dict[str, int]:
    """States per generator: share x per_family, rounded up."""
    return {name: math.ceil(config.per_family * GENERATORS[name].share) for name in names}


def generate(config: SyntheticConfig, plan: SplitPlan, names: Sequence[str] | None = None) -> list[DecisionExample]:
    """Run the chosen generators (all by default) over every shard of the plan."""
    chosen = list(names) if names is not None else sorted(GENERATORS)
    unknown = [n for n in chosen if n not in GENERATORS]
    if unknown:
        raise DataError(f"unknown synthetic generators {unknown}; known: {sorted(GENERATORS)}")
    out: list[DecisionExample] = []
    for name, states in budget(config, chosen).items():
        per_shard = math.ceil(states / plan.shards)
        for shard in range(plan.shards):
            group = synthetic_group(name, config.seed, shard)
            emitter = Emitter(
                source=f"synthetic:{name}",
                group=group,
                split=plan.split_for(group),
                rng=random.Random(f"{name}:{config.seed}:{shard}"),
                id_prefix=f"syn:{name}:{config.seed}:{shard}",
                style=config.style,
            )
            GENERATORS[name].fn(emitter.rng, emitter, per_shard)
            out.extend(emitter.examples)
        log.info("synthetic %s: %d states", name, states)
    return out
