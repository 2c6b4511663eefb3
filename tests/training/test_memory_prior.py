"""The per-memory relevance prior: which questions probe a memory, the prior, and the shifted logits."""

from __future__ import annotations

import numpy as np
import pytest

from data.schema import DecisionExample
from training.ensemble import ensemble_table
from training.memory_prior import memory_priors, probe_examples, shifted, shifted_runs
from training.predict import Prediction
from training.sampling import Label


def _case(i: int, query: str, memory: str, target: float, *, question: str = "relevant", group: str = "locomo:c",
          notes: str = "locomo:bm25") -> DecisionExample:
    return DecisionExample(id=f"x{i}", family="relevance", question_name=question, state={"query": query, "memory": memory},
                           question={"type": "noul", "instructions": "Does state.memory help answer state.query?"},
                           target=target, source="locomo", group=group, split="dev", notes=notes)


def _run(examples: list[DecisionExample], logits: list[float]) -> list[Prediction]:
    return [Prediction(Label("noul", (float(e.target),), 1.0, "relevance", e.question_name, e.id), np.array([z]), "dev", e.group)
            for e, z in zip(examples, logits)]


def test_probes_ask_each_memory_only_questions_it_does_not_answer() -> None:
    examples = [_case(0, "q1", "A", 1.0, notes="locomo:gold"), _case(1, "q2", "A", 0.0), _case(2, "q3", "B", 0.0),
                _case(3, "q2", "B", 1.0, question="bridge"),  # B is a bridge for q2: not an unrelated question either
                _case(4, "q9", "C", 0.0, group="locomo:other")]
    probes = probe_examples(examples, k=4, seed=0)
    asked = {(p.state["memory"], p.state["query"]) for p in probes}
    # a memory's own negative question may probe it; questions of another conversation never do
    assert asked == {("A", "q2"), ("A", "q3"), ("B", "q1"), ("B", "q3"), ("C", "q9")}
    assert all(p.question["instructions"] == "Does state.memory contain information that helps answer state.query?" for p in probes)
    assert len({p.id for p in probes}) == len(probes) and all(p.target == 0.0 for p in probes)
    assert [p.id for p in probe_examples(examples, k=1, seed=3)] == [p.id for p in probe_examples(examples, k=1, seed=3)]
    assert len(probe_examples(examples, k=1, seed=0)) == 3
    with pytest.raises(ValueError, match="k >= 1"):
        probe_examples(examples, k=0)


def test_subtracting_the_prior_can_fix_a_memory_that_looks_relevant_to_everything() -> None:
    # memory "loud" scores high under every question; the gold turn "quiet" scores lower than it in raw logits
    examples = [_case(0, "q", "quiet", 1.0, notes="locomo:gold"), _case(1, "q", "loud", 0.0)]
    predictions = _run(examples, [1.0, 2.0])
    probes = [_case(10, "p1", "loud", 0.0), _case(11, "p2", "loud", 0.0), _case(12, "p1", "quiet", 0.0)]
    priors = memory_priors(_run(probes, [2.0, 3.0, -1.0]), probes)
    assert priors == {"loud": 2.5, "quiet": -1.0}
    assert [float(p.logits[0]) for p in shifted(predictions, examples, priors, 0.5)] == [1.5, 0.75]
    runs = shifted_runs(predictions, examples, priors, (0.0, 1.0))
    rows = {lam: ensemble_table({lam: run}, examples)[lam] for lam, run in runs.items()}
    assert rows["lam=0"]["all"] == 0.0 and rows["lam=1"]["all"] == 1.0
    assert [float(p.logits[0]) for p in shifted(predictions, examples, {}, 1.0)] == [1.0, 2.0]  # no probes: unchanged


def test_query_probes_ask_each_question_about_memories_that_do_not_answer_it() -> None:
    examples = [_case(0, "q1", "A", 1.0, notes="locomo:gold"), _case(1, "q2", "A", 0.0), _case(2, "q1", "B", 0.0),
                _case(3, "q2", "B", 1.0, question="bridge"), _case(4, "q3", "C", 0.0),
                _case(5, "q9", "Z", 0.0, group="locomo:other")]
    probes = probe_examples(examples, k=4, seed=0, side="query")
    asked = {(p.state["query"], p.state["memory"]) for p in probes}
    # q1's evidence A and q2's bridge B never probe them; memories of another conversation never do
    assert asked == {("q1", "B"), ("q1", "C"), ("q2", "A"), ("q2", "C"), ("q3", "A"), ("q3", "B"), ("q3", "C"), ("q9", "Z")}
    assert len({p.id for p in probes}) == len(probes) and all(p.target == 0.0 for p in probes)
    assert len(probe_examples(examples, k=1, seed=0, side="query")) == 4
    with pytest.raises(ValueError, match="keyed by one of memory, query"):
        probe_examples(examples, side="turn")


def test_a_query_prior_discounts_a_question_that_finds_everything_relevant() -> None:
    # under "broad" every memory scores high, so its negative outranks the gold turn of "narrow" in raw logits
    examples = [_case(0, "narrow", "n-gold", 1.0, notes="locomo:gold"), _case(1, "broad", "b-neg", 0.0),
                _case(2, "broad", "b-gold", 1.0, notes="locomo:gold"), _case(3, "narrow", "n-neg", 0.0)]
    predictions = _run(examples, [1.0, 2.0, 3.0, -1.0])
    probes = [_case(10, "broad", "p1", 0.0), _case(11, "broad", "p2", 0.0), _case(12, "narrow", "p1", 0.0)]
    priors = memory_priors(_run(probes, [2.0, 2.0, -1.0]), probes, side="query")
    assert priors == {"broad": 2.0, "narrow": -1.0}
    assert [float(p.logits[0]) for p in shifted(predictions, examples, priors, 1.0, side="query")] == [2.0, 0.0, 1.0, 0.0]
    runs = shifted_runs(predictions, examples, priors, (0.0, 1.0), side="query")
    rows = {lam: ensemble_table({lam: run}, examples)[lam] for lam, run in runs.items()}
    assert rows["lam=0"]["all"] == 0.75 and rows["lam=1"]["all"] == 1.0
