"""Build the whole decision data set: LoCoMo rules + synthetic generators, split, de-leaked, written.

    result = build_dataset(BuildConfig(locomo="…/locomo_dev6.json", audit="…/locomo_audit_dev6.json"))
    write_build(result, "out/decisions")   # train/calibration/dev/test.jsonl + summary.json

Steps: LoCoMo examples (when a path is given), synthetic examples and any included example files (training
data only: `included_examples`), each with its split from the group (`SplitPlan`); states longer than `max_state_chars` are dropped (the template never truncates, and a
state must leave room for its question inside 512 positions); `enforce_disjoint` removes examples whose
source text also appears in a split of higher priority; `check_disjoint` and `check_groups` then prove it.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data.builders.locomo import LocomoRules, build_locomo
from data.builders.summary import Summary, summarize
from data.schema import DataError, DecisionExample, write_splits
from data.splits import DisjointReport, SplitPlan, check_disjoint, check_groups, enforce_disjoint
from data.synthetic import QuestionStyle, SyntheticConfig, generate

if TYPE_CHECKING:
    from data.locomo import Conversation

log = logging.getLogger(__name__)
DENSE_CHOICES = ("minilm", "hashing", "none")


@dataclass(frozen=True)
class BuildConfig:
    locomo: str | None = None  # path of a LoCoMo JSON file (never bundled)
    audit: str | None = None  # path of the audit corrections, optional
    synthetic_per_family: int = 1500  # states per generator of share 1 (pair: four generators, 2.25x in all)
    seed: int = 0
    dense: str = "minilm"  # embedder for dense hard negatives: minilm | hashing | none
    max_state_chars: int = 1800  # compact-JSON characters; longer states are dropped and counted
    plan: SplitPlan = field(default_factory=SplitPlan)
    rules: LocomoRules = field(default_factory=LocomoRules)
    # LoCoMo sample ids the train split may use (empty: every conversation the plan puts in train); the dev and
    # calibration conversations are kept either way. For learning curves over the number of labelled conversations.
    train_conversations: tuple[str, ...] = ()
    style: QuestionStyle = field(default_factory=QuestionStyle)
    # Decision-example JSONL files added to the train split (teacher recordings, an application's own labelled
    # decisions): see `included_examples`.
    include: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.dense not in DENSE_CHOICES:
            raise DataError(f"dense must be one of {DENSE_CHOICES}, got {self.dense!r}")
        if self.max_state_chars < 100:
            raise DataError(f"max_state_chars must be >= 100, got {self.max_state_chars}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BuildResult:
    examples: tuple[DecisionExample, ...]
    summary: Summary
    seconds: dict[str, float]  # step -> wall-clock seconds
    too_long: int  # examples dropped for an over-long state
    disjoint: DisjointReport
    config: BuildConfig
    included: dict[str, dict[str, int]] = field(default_factory=dict)  # path -> read / held_out (dropped) / train


def _embedder(name: str) -> Any:
    if name == "none":
        return None
    from controller.embedding import create_embedder

    return create_embedder(name)


def training_subset(conversations: Sequence[Conversation], config: BuildConfig) -> list[Conversation]:
    """The conversations to label: all, or with `train_conversations` the held-out ones and the named train ones.
    Every LoCoMo conversation the split plan holds out must be in the file: a misspelt one would be trained on."""
    ids = {c.sample_id for c in conversations}
    plan = config.plan
    held_out = [g.partition(":")[2] for g in (*plan.dev_groups, *plan.test_groups, *plan.calibration_groups) if g.startswith("locomo:")]
    absent = [c for c in held_out if c not in ids]
    if absent:
        raise DataError(f"held-out LoCoMo conversations not in the LoCoMo file: {', '.join(absent)} (file has {', '.join(sorted(ids))}); "
                        "hold out none with an empty --dev-conversations / --calibration-conversations")
    if not config.train_conversations:
        return list(conversations)
    unknown = sorted(set(config.train_conversations) - ids)
    if unknown:
        raise DataError(f"train_conversations not in the LoCoMo file: {unknown}")
    held = [c for c in config.train_conversations if config.plan.split_for(f"locomo:{c}") != "train"]
    if held:
        raise DataError(f"train_conversations are held out by the split plan: {held}")
    return [c for c in conversations
            if config.plan.split_for(f"locomo:{c.sample_id}") != "train" or c.sample_id in config.train_conversations]


def included_examples(paths: Sequence[str], plan: SplitPlan, taken: set[str], *,
                      train_conversations: Sequence[str] = ()) -> tuple[list[DecisionExample], dict[str, dict[str, int]]]:
    """The examples of decision-example JSONL files (`data.schema`; a torn last line is skipped), as training
    data: each example's split follows its group under `plan` (a teacher record keeps its input's group, so it
    lands where its input did; a group the plan does not name is "train"), and those that land in a held-out
    split are dropped and counted, so calibration and evaluation keep reading the builders' own labels only.
    An id seen before (in `taken`, the built examples' ids, or in an earlier file) is an error: the same file
    given twice, or records that would shadow each other. With `train_conversations` (the build trains on these
    LoCoMo conversations only), an example of another LoCoMo conversation is dropped and counted too. Returns the
    examples and per-file counts."""
    from data.schema import read_jsonl
    from data.splits import apply_plan

    out: list[DecisionExample] = []
    counts: dict[str, dict[str, int]] = {}
    for path in paths:
        try:
            rows = apply_plan(read_jsonl(path), plan)
        except (OSError, UnicodeDecodeError) as error:
            raise DataError(f"cannot read included decision examples {path}: {error}") from error
        repeated = [i for i, n in Counter(e.id for e in rows).items() if n > 1]
        if repeated:
            raise DataError(f"{path}: {len(repeated)} example ids appear more than once (first {repeated[0]!r}); ids must be unique")
        seen = [e.id for e in rows if e.id in taken]
        if seen:
            raise DataError(f"{path}: {len(seen)} example ids already in the build (first {seen[0]!r}); is a file included twice?")
        taken.update(e.id for e in rows)
        train = [e for e in rows if e.split == "train"]
        kept = [e for e in train if not train_conversations or not e.group.startswith("locomo:")
                or e.group.partition(":")[2] in train_conversations]
        out.extend(kept)
        counts[str(path)] = {"read": len(rows), "held_out_dropped": len(rows) - len(train),
                             "other_conversations_dropped": len(train) - len(kept), "train": len(kept)}
        if len(train) < len(rows):
            log.warning("%s: %d examples of held-out groups dropped (included files add training data only)", path, len(rows) - len(train))
        if len(kept) < len(train):
            log.warning("%s: %d examples of LoCoMo conversations outside train_conversations dropped", path, len(train) - len(kept))
    return out, counts


def build_dataset(config: BuildConfig, *, embedder: Any = None) -> BuildResult:
    """Run every source and the split discipline; `embedder` overrides `config.dense`."""
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    examples: list[DecisionExample] = []
    if config.locomo is not None:
        from data.locomo import load_locomo

        t = time.perf_counter()
        conversations = training_subset(load_locomo(config.locomo, audit=config.audit), config)
        rules = config.rules if config.rules.seed == config.seed else LocomoRules(**{**asdict(config.rules), "seed": config.seed})
        examples.extend(build_locomo(conversations, config.plan, rules=rules, embedder=embedder or _embedder(config.dense), style=config.style))
        seconds["locomo"] = time.perf_counter() - t
    t = time.perf_counter()
    examples.extend(generate(SyntheticConfig(config.synthetic_per_family, config.seed, config.style), config.plan))
    seconds["synthetic"] = time.perf_counter() - t
    included: dict[str, dict[str, int]] = {}
    if config.include:
        t = time.perf_counter()
        extra, included = included_examples(config.include, config.plan, {e.id for e in examples},
                                            train_conversations=config.train_conversations)
        examples.extend(extra)
        seconds["include"] = time.perf_counter() - t
    t = time.perf_counter()
    fitting = [e for e in examples if len(json.dumps(e.state, ensure_ascii=False, separators=(",", ":"))) <= config.max_state_chars]
    too_long = len(examples) - len(fitting)
    kept, report = enforce_disjoint(fitting)
    check_disjoint(kept)
    check_groups(kept)
    seconds["splits"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - start
    log.info("built %d examples (%d too long, dropped for leakage: %s)", len(kept), too_long, report.dropped)
    return BuildResult(tuple(kept), summarize(kept), seconds, too_long, report, config, included)


def write_build(result: BuildResult, out: str | Path) -> dict[str, int]:
    """Write the split files and `summary.json` into a copy of `out` that replaces it whole once all are written
    (`data.schema.write_splits`: a build killed at any point leaves the previous build or this one); returns
    examples per split."""
    out = Path(out)
    t = time.perf_counter()

    def summary(counts: dict[str, int]) -> dict[str, str]:
        seconds = {**result.seconds, "write": time.perf_counter() - t}
        payload = {
            "counts": counts,
            "seconds": {k: round(v, 3) for k, v in seconds.items()},
            "too_long": result.too_long,
            "dropped_for_leakage": result.disjoint.dropped,
            **({"included": result.included} if result.included else {}),
            "config": result.config.to_dict(),
            **result.summary.to_dict(),
        }
        return {"summary.json": json.dumps(payload, indent=1, ensure_ascii=False) + "\n"}

    return write_splits(out, result.examples, extra=summary)
