"""A per-memory prior for candidate relevance: how relevant a memory looks to questions it does not answer.

    probes = probe_examples(examples, k=4, seed=0)          # each memory under k unrelated questions
    priors = memory_priors(probe_predictions, probes)        # memory text -> mean raw logit
    runs = shifted_runs(predictions, examples, priors)       # logit - lam * prior, per lam

`python -m training ensemble ... --memory-prior K` prints the table per model (docs/EXPERIMENTS.md, row "a
per-memory prior subtracted from the relevance logit"). A memory the judge scores high under any question is
discounted by lam times that score; lam 0 is the model as it is.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from controller.families import FAMILIES
from data.schema import DecisionExample
from training.predict import Prediction
from training.relevance_report import relevance_rows

LAMBDAS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)


def probe_examples(examples: Sequence[DecisionExample], *, k: int = 4, seed: int = 0) -> list[DecisionExample]:
    """Each distinct memory of the LoCoMo `relevant` pairs under up to `k` questions (seeded draw) from its
    conversation for which it is neither gold nor a bridge, asked in the canonical wording; targets 0 (they are not read)."""
    if k < 1:
        raise ValueError(f"a memory prior needs k >= 1 probe questions, got {k}")
    labelled = [e for e in examples if e.family == "relevance" and e.source == "locomo"]
    gold = {(e.state["query"], e.state["memory"]) for e in labelled if float(e.target) >= 0.5}  # evidence or a bridge to it
    pairs = [e for e in labelled if e.question_name == "relevant"]
    questions: dict[str, set[str]] = {}
    for e in pairs:
        questions.setdefault(e.group, set()).add(e.state["query"])
    by_group = {g: sorted(qs) for g, qs in questions.items()}
    first: dict[str, DecisionExample] = {}
    for e in pairs:
        first.setdefault(e.state["memory"], e)
    asked = copy.deepcopy(FAMILIES["relevance"].questions["relevant"])
    rng = random.Random(seed)
    probes = []
    for memory, e in first.items():
        pool = [q for q in by_group[e.group] if (q, memory) not in gold]
        for j, query in enumerate(rng.sample(pool, min(k, len(pool)))):
            probes.append(replace(e, id=f"{e.id}:probe{j}", state={**e.state, "query": query}, question=copy.deepcopy(asked),
                                  target=0.0, notes="probe"))
    return probes


def memory_priors(predictions: Sequence[Prediction], probes: Sequence[DecisionExample]) -> dict[str, float]:
    """Memory text -> the mean raw logit of its probe questions."""
    logits: dict[str, list[float]] = {}
    for p, e in relevance_rows(predictions, probes):
        logits.setdefault(e.state["memory"], []).append(float(p.logits[0]))
    return {memory: float(np.mean(v)) for memory, v in logits.items()}


def shifted(predictions: Sequence[Prediction], examples: Sequence[DecisionExample], priors: dict[str, float],
            lam: float) -> list[Prediction]:
    """The `relevant` predictions with logit - lam * prior(memory) (a memory without probes keeps its logit)."""
    return [replace(p, logits=np.array([float(p.logits[0]) - lam * priors.get(e.state["memory"], 0.0)]))
            for p, e in relevance_rows(predictions, examples)]


def shifted_runs(predictions: Sequence[Prediction], examples: Sequence[DecisionExample], priors: dict[str, float],
                 lambdas: Sequence[float] = LAMBDAS) -> dict[str, list[Prediction]]:
    """{"lam=L": shifted predictions} for each lam in `lambdas`."""
    return {f"lam={lam:g}": shifted(predictions, examples, priors, lam) for lam in lambdas}


__all__ = ["LAMBDAS", "memory_priors", "probe_examples", "shifted", "shifted_runs"]
