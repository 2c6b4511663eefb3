"""Splits by group (a LoCoMo conversation or a synthetic generator shard), and the leakage guard.

The split unit is `DecisionExample.group`; every example of a group lands in the same split:

- `locomo:<sample_id>`: the dev pair conv-26 + conv-30 is "dev" (never trained on); the conversations named
  in `calibration_groups` (default conv-44) are "calibration"; the other LoCoMo conversations are "train".
- `synthetic:<generator>:<seed>:<shard>`: shard % `shards` in `calibration_shards` -> "calibration", in
  `test_shards` -> "test", otherwise "train" (held-out seeds of every generator).
- anything else (teacher records keep their input's group): by the same rules, "train" when none applies.

Template text and LoCoMo's short chit-chat can repeat across groups, so `enforce_disjoint` then removes
every example of a lower-priority split whose state shares a source string with a higher-priority split
(dev > test > calibration > train): no source text appears in two splits, which `find_leaks` checks.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from data.schema import SPLITS, DecisionExample, SplitError

DEV_CONVERSATIONS: tuple[str, ...] = ("conv-26", "conv-30")
PRIORITY: tuple[str, ...] = ("dev", "test", "calibration", "train")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class SplitPlan:
    """Which groups go where. Validated on construction."""

    dev_groups: tuple[str, ...] = tuple(f"locomo:{c}" for c in DEV_CONVERSATIONS)
    calibration_groups: tuple[str, ...] = ("locomo:conv-44",)
    test_groups: tuple[str, ...] = ()
    shards: int = 10  # synthetic shards per generator
    calibration_shards: tuple[int, ...] = (8,)
    test_shards: tuple[int, ...] = (9,)

    def __post_init__(self) -> None:
        named = [*self.dev_groups, *self.calibration_groups, *self.test_groups]
        dupes = sorted(g for g, n in Counter(named).items() if n > 1)
        if dupes:
            raise SplitError(f"groups assigned to two splits: {dupes}")
        if self.shards < 1:
            raise SplitError(f"shards must be >= 1, got {self.shards}")
        held = [*self.calibration_shards, *self.test_shards]
        if len(set(held)) != len(held) or any(not 0 <= s < self.shards for s in held):
            raise SplitError(f"held-out shards must be distinct and in [0, {self.shards}): {held}")
        if len(held) >= self.shards:
            raise SplitError("every synthetic shard is held out: nothing left to train on")

    def split_for(self, group: str) -> str:
        if group in self.dev_groups:
            return "dev"
        if group in self.test_groups:
            return "test"
        if group in self.calibration_groups:
            return "calibration"
        shard = synthetic_shard(group)
        if shard is not None:
            if shard % self.shards in self.test_shards:
                return "test"
            if shard % self.shards in self.calibration_shards:
                return "calibration"
        return "train"


def synthetic_group(generator: str, seed: int, shard: int) -> str:
    return f"synthetic:{generator}:{seed}:{shard}"


def synthetic_shard(group: str) -> int | None:
    parts = group.split(":")
    if len(parts) == 4 and parts[0] == "synthetic" and parts[3].isdigit():
        return int(parts[3])
    return None


def apply_plan(examples: Iterable[DecisionExample], plan: SplitPlan) -> list[DecisionExample]:
    """Examples with `split` recomputed from their group."""
    return [e if e.split == plan.split_for(e.group) else e.with_split(plan.split_for(e.group)) for e in examples]


def state_strings(state: object) -> set[str]:
    """Every string leaf of a state (keys excluded), case- and blank-normalised: the 'source text'."""
    out: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, str):
            text = _SPACE.sub(" ", value).strip().lower()
            if text:
                out.add(text)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(state)
    return out


@dataclass(frozen=True)
class DisjointReport:
    kept: int
    dropped: dict[str, int] = field(default_factory=dict)  # split -> examples removed


def enforce_disjoint(examples: Sequence[DecisionExample], priority: Sequence[str] = PRIORITY) -> tuple[list[DecisionExample], DisjointReport]:
    """Drop examples whose state shares a source string with a split of higher priority."""
    if sorted(priority) != sorted(SPLITS):
        raise SplitError(f"priority must order all of {SPLITS}, got {tuple(priority)}")
    rank = {split: i for i, split in enumerate(priority)}
    owner: dict[str, int] = {}  # string -> best rank that uses it
    cache: dict[str, set[str]] = {}

    def strings(example: DecisionExample) -> set[str]:
        key = example.state_key
        if key not in cache:
            cache[key] = state_strings(example.state)
        return cache[key]

    for example in examples:
        r = rank[example.split]
        for text in strings(example):
            if r < owner.get(text, len(priority)):
                owner[text] = r
    kept, dropped = [], Counter()
    for example in examples:
        r = rank[example.split]
        if any(owner[text] < r for text in strings(example)):
            dropped[example.split] += 1
        else:
            kept.append(example)
    return kept, DisjointReport(len(kept), dict(dropped))


def find_leaks(examples: Iterable[DecisionExample], limit: int = 10) -> list[tuple[str, tuple[str, ...]]]:
    """Up to `limit` source strings used by more than one split, with the splits that use them."""
    seen: dict[str, set[str]] = {}
    for example in examples:
        for text in state_strings(example.state):
            seen.setdefault(text, set()).add(example.split)
    leaks = [(text, tuple(sorted(splits))) for text, splits in seen.items() if len(splits) > 1]
    return sorted(leaks)[:limit]


def check_disjoint(examples: Iterable[DecisionExample]) -> None:
    """Raise `SplitError` naming a few leaked strings when any source text is in two splits."""
    leaks = find_leaks(examples)
    if leaks:
        shown = "; ".join(f"{text[:60]!r} in {splits}" for text, splits in leaks[:3])
        raise SplitError(f"source text appears in more than one split: {shown}")


def check_groups(examples: Iterable[DecisionExample]) -> None:
    """Raise `SplitError` when a group's examples sit in more than one split."""
    splits: dict[str, set[str]] = {}
    for example in examples:
        splits.setdefault(example.group, set()).add(example.split)
    bad = {g: sorted(s) for g, s in splits.items() if len(s) > 1}
    if bad:
        raise SplitError(f"groups split across splits: {dict(list(bad.items())[:3])}")
