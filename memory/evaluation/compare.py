"""Paired comparisons from saved runs: the `questions.jsonl` of one or more `jevmem eval locomo --out` runs, every
system against a reference of the caller's choice, without running anything again.

A run already holds each system's per-question values, so a second reference (the trained engine against RRF as
well as against the heuristic engine), or a system of another run (a new model against the one of yesterday's
run, on the same questions), is a bootstrap away, not another evaluation. Differences are taken question by
question over the questions both systems answered (matched by conversation and question id), with the same two
bootstraps as the run's own report (`memory.evaluation.bootstrap`): whole conversations, and questions within
each conversation.

A system name met in more than one run is called `name@run`, `run` the run directory's name, with as many of its
parent directories as set it apart from the other runs (`rrf@a/run` and `rrf@b/run` for two directories called
`run`), so every column stays one run's system. The same run given twice is refused (`run_names`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory.evaluation.bootstrap import HEADLINE, MIN_CLUSTERS, Interval, paired_differences
from memory.evaluation.metrics import QuestionScore, aggregate
from memory.evaluation.report import fmt, fmt_interval, md_table

_FIXED = frozenset({"system", "conversation", "qid", "category", "n_gold", "gold_ranks"})


class CompareError(ValueError):
    """Saved runs that cannot be compared: a missing or malformed file, an unknown reference, no shared questions."""


@dataclass(frozen=True)
class Comparison:
    reference: str
    conversations: tuple[str, ...]
    means: dict[str, dict[str, float | None]]  # system -> HEADLINE key -> mean over its questions
    shared: dict[str, int]  # system -> questions matched with the reference
    cluster: dict[str, dict[str, Interval]]  # system -> key -> paired difference, conversation bootstrap
    question: dict[str, dict[str, Interval]]  # the same, question bootstrap


def read_scores(path: Path) -> dict[str, list[QuestionScore]]:
    """System -> its per-question scores, from a `questions.jsonl` (or the run directory holding one)."""
    path = path / "questions.jsonl" if path.is_dir() else path
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise CompareError(f"cannot read {path}: {error.strerror or error}") from error
    out: dict[str, list[QuestionScore]] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            score = _score(row)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise CompareError(f"{path}:{number}: not a question row of `jevmem eval locomo --out` ({error})") from error
        out.setdefault(str(row["system"]), []).append(score)
    if not out:
        raise CompareError(f"{path} holds no question rows")
    return out


def _score(row: Any) -> QuestionScore:
    if not isinstance(row, dict):
        raise TypeError(f"expected a JSON object, got {type(row).__name__}")
    values = {k: (math.nan if v is None else float(v)) for k, v in row.items() if k not in _FIXED}
    return QuestionScore(str(row["conversation"]), str(row["qid"]), int(row["category"]), int(row["n_gold"]), values,
                         dict(row.get("gold_ranks") or {}))


def run_names(runs: Sequence[str | Path]) -> list[str]:
    """The `run` of each run's `name@run` labels (`label_runs`): the run directory's name, with as many of its parent
    directories as tell it from the other runs' (`a/run`, `b/run`). A run is a directory or its `questions.jsonl`
    (a rows file of another name stands for itself); one given twice, however spelled, is a CompareError."""
    places = [_run_place(Path(run)) for run in runs]
    given: dict[Path, str] = {}
    for run, place in zip(runs, places):
        if place in given:
            also = f" (also as {given[place]})" if given[place] != str(run) else ""
            raise CompareError(f"RUN {run} given twice{also}; give each run once")
        given[place] = str(run)
    return [_distinct_tail(place, [other for other in places if other != place]) for place in places]


def _run_place(path: Path) -> Path:
    """The resolved directory a RUN argument names (the rows file itself for one not called questions.jsonl)."""
    path = path.resolve()
    return path.parent if path.name == "questions.jsonl" and not path.is_dir() else path


def _distinct_tail(path: Path, others: Sequence[Path]) -> str:
    """The shortest tail of `path` (its name, then parent/name, ...) that no path of `others` ends with."""
    for n in range(1, len(path.parts) + 1):
        if all(other.parts[-n:] != path.parts[-n:] for other in others):
            return Path(*path.parts[-n:]).as_posix()
    return path.as_posix()  # not reached: distinct resolved paths differ in some part


def label_runs(runs: Sequence[Mapping[str, list[QuestionScore]]], names: Sequence[str]) -> dict[str, list[QuestionScore]]:
    """One namespace of systems over several runs: a name met in more than one run becomes `name@<run name>`.
    The run names (`run_names`) must differ."""
    if len(names) != len(runs) or len(set(names)) < len(names):
        raise CompareError(f"each run needs a name of its own, got {', '.join(names)} for {len(runs)} runs")
    seen: dict[str, int] = {}
    for run in runs:
        for system in run:
            seen[system] = seen.get(system, 0) + 1
    out: dict[str, list[QuestionScore]] = {}
    for run, name in zip(runs, names):
        for system, scores in run.items():
            label = system if seen[system] == 1 else f"{system}@{name}"
            if label in out:  # a system already called like another's label: `a@x` beside `a` of the runs x and y
                raise CompareError(f"two systems would both be called {label!r}")
            out[label] = scores
    return out


def compare(systems: Mapping[str, Sequence[QuestionScore]], reference: str, *, draws: int = 1000,
            seed: int = 0) -> Comparison:
    """Every system of `systems` minus `reference`, question by question, with both bootstraps."""
    if seed < 0 or draws < 1:
        raise CompareError(f"seed must be >= 0 and draws >= 1, got seed {seed} and {draws} draws")
    if reference not in systems:
        raise CompareError(f"no system {reference!r} in these runs (found: {', '.join(systems)})")
    ref = systems[reference]
    conversations = tuple(dict.fromkeys(s.conversation for scores in systems.values() for s in scores))
    keys = {(s.conversation, s.qid) for s in ref}
    means, shared, cluster, question = {}, {}, {}, {}
    for name, scores in systems.items():
        table = aggregate(list(scores))
        means[name] = {f"{m} [{g}]": table.means.get(g, {}).get(m) for g, m in HEADLINE}
        if name == reference:
            continue
        shared[name] = sum((s.conversation, s.qid) in keys for s in scores)
        if shared[name] == 0:
            raise CompareError(f"{name} and {reference} share no question (conversation and question id)")
        cluster[name] = paired_differences(scores, ref, conversations, draws=draws, seed=seed)
        question[name] = paired_differences(scores, ref, conversations, draws=draws, seed=seed, unit="question")
    return Comparison(reference, conversations, means, shared, cluster, question)


def comparison_markdown(result: Comparison) -> str:
    keys = [f"{m} [{g}]" for g, m in HEADLINE]
    lines = [f"# Paired differences: system minus {result.reference}", "",
             f"Conversations: {', '.join(result.conversations)}. Means over each system's own questions; differences "
             "over the questions it shares with the reference.", "",
             *md_table(["system", "questions shared", *keys],
                     [[name, str(result.shared.get(name, "-")), *(fmt(v.get(k)) for k in keys)] for name, v in result.means.items()]),
             "", "## Question bootstrap within conversations (mean [95 % CI])", "",
             *md_table(["system", *keys], [[name, *(fmt_interval(iv.get(k)) for k in keys)] for name, iv in result.question.items()]),
             "", "## Conversation-cluster bootstrap (mean [95 % CI])", ""]
    if len(result.conversations) < MIN_CLUSTERS:
        n = len(result.conversations)
        lines += [f"With {n} conversation{'s' if n != 1 else ''} these intervals are about the range of the per-conversation "
                  "means, not 95 % intervals; read the question bootstrap above.", ""]
    lines += md_table(["system", *keys], [[name, *(fmt_interval(iv.get(k)) for k in keys)] for name, iv in result.cluster.items()])
    return "\n".join(lines) + "\n"

