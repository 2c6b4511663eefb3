"""Synthetic generators: determinism, state shapes, valid wire questions, and label sanity per generator."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from controller.families import FAMILIES
from controller.questions import normalize_questions
from data.schema import DataError, DecisionExample
from data.splits import SplitPlan
from data.synthetic import GENERATORS, Emitter, QuestionStyle, SyntheticConfig, generate, register
from data.synthetic import causal, consolidation, memory_types, retrieval, temporal
from data.synthetic.paraphrases import wordings


@pytest.fixture(scope="module")
def examples() -> list[DecisionExample]:
    return generate(SyntheticConfig(per_family=60, seed=3), SplitPlan())


def _emitter(seed: int = 0, style: QuestionStyle | None = None) -> Emitter:
    return Emitter(source="synthetic:t", group="synthetic:t:0:0", split="train", rng=random.Random(seed), id_prefix="t", style=style or QuestionStyle())


def _argmax(e: DecisionExample) -> str:
    assert isinstance(e.target, dict)
    return max(e.target, key=e.target.__getitem__)


def test_same_seed_same_bytes_other_seed_other_data(examples: list[DecisionExample]) -> None:
    again = generate(SyntheticConfig(per_family=60, seed=3), SplitPlan())
    assert [e.to_json() for e in again] == [e.to_json() for e in examples]
    other = generate(SyntheticConfig(per_family=60, seed=4), SplitPlan())
    assert {e.to_json() for e in other} != {e.to_json() for e in examples}


def test_every_family_and_generator_is_covered(examples: list[DecisionExample]) -> None:
    assert {e.family for e in examples} == set(FAMILIES)
    assert {e.source for e in examples} == {f"synthetic:{name}" for name in GENERATORS}
    assert len({e.id for e in examples}) == len(examples)


def test_duplicate_generator_names_are_refused() -> None:
    with pytest.raises(DataError):
        register("typing", "typing")(lambda rng, emit, n: None)


def test_states_keep_the_catalogue_shapes_and_questions_are_valid(examples: list[DecisionExample]) -> None:
    for e in examples:
        assert tuple(e.state) == FAMILIES[e.family].state_fields
        canonical = FAMILIES[e.family].questions[e.question_name]
        assert e.question["instructions"] in wordings(e.family, e.question_name)
        if e.kind == "choice":
            assert e.question["criteria"] == canonical["criteria"]  # same options and descriptions (dict equality ignores order)
        normalize_questions({"q": e.question})


def test_choice_options_are_shuffled_and_targets_follow(examples: list[DecisionExample]) -> None:
    choices = [e for e in examples if e.kind == "choice"]
    orders = Counter(tuple(e.question["criteria"]) for e in choices if e.question_name == "temporal")
    assert len(orders) > 5
    for e in choices:
        assert list(e.target) == list(e.question["criteria"])  # type: ignore[arg-type]


def test_paraphrases_name_the_same_state_fields() -> None:
    for family in FAMILIES.values():
        for name in family.questions:
            texts = wordings(family.name, name)
            assert len(texts) >= 3
            fields = set(re.findall(r"state\.(\w+)", texts[0]))
            for text in texts:
                assert set(re.findall(r"state\.(\w+)", text)) == fields, text


def test_question_style_rates() -> None:
    canonical = _emitter(1, QuestionStyle(paraphrase_rate=0.0, drop_criteria_rate=0.0, shuffle_options=False))
    memory_types.typing_examples(canonical.rng, canonical, 20)
    assert all(e.question == FAMILIES["typing"].questions[e.question_name] for e in canonical.examples)
    varied = _emitter(1, QuestionStyle(paraphrase_rate=1.0, drop_criteria_rate=1.0))
    memory_types.typing_examples(varied.rng, varied, 20)
    assert all(e.question["instructions"] != FAMILIES["typing"].questions[e.question_name]["instructions"] for e in varied.examples)
    assert all("criteria" not in e.question for e in varied.examples)
    with pytest.raises(DataError):
        QuestionStyle(paraphrase_rate=1.5)


def test_typing_labels_follow_their_template() -> None:
    emit = _emitter()
    memory_types.typing_examples(emit.rng, emit, 200)
    table = {make.__name__.strip("_"): labels for make, labels in memory_types.TEMPLATES}
    for e in emit.examples:
        index = ("episodic", "semantic", "procedural", "preference").index(e.question_name)
        assert e.target == float(table[e.notes][index])
    assert {e.notes for e in emit.examples} == set(table)


def test_temporal_relation_and_mirrors() -> None:
    rel, iv = temporal.relation, temporal.Interval
    assert rel(iv(1, 2), iv(3, 4)) == "before" and rel(iv(5, 6), iv(3, 4)) == "after"
    assert rel(iv(3, 3), iv(1, 5)) == "during" and rel(iv(1, 5), iv(3, 3)) == "contains"
    assert rel(iv(1, 4), iv(3, 6)) == "overlaps" and rel(iv(2, 2), iv(2, 2)) == "same_time"
    for a in range(4):
        for b in range(4):
            x, y = iv(a, a + 2), iv(b, b + 1)
            assert temporal.MIRROR[rel(x, y)] == rel(y, x)


def test_temporal_calendar_labels_match_the_days() -> None:
    emit = _emitter(2)
    temporal.temporal_examples(emit.rng, emit, 400)
    calendar = [e for e in emit.examples if e.notes == "temporal:calendar"]
    assert len(calendar) > 20
    for e in calendar:
        day = {k: int(re.search(r"\b(\d{1,2}) [A-Z][a-z]+", v).group(1)) for k, v in e.state.items()}  # type: ignore[union-attr]
        expected = "before" if day["memory_a"] < day["memory_b"] else "after" if day["memory_a"] > day["memory_b"] else "same_time"
        assert _argmax(e) == expected
    labels = Counter(_argmax(e) for e in emit.examples)
    assert set(labels) == {"before", "after", "during", "contains", "overlaps", "same_time", "unknown"}


def _pattern(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{\w+\\\}", ".+", re.escape(template)) + "$")


def test_causal_direction() -> None:
    emit = _emitter(4)
    causal.causal_examples(emit.rng, emit, 150)
    causes = [_pattern(c) for c, _ in causal.PAIRS]
    effects = [_pattern(e) for _, e in causal.PAIRS]
    forward = [e for e in emit.examples if e.notes == "causal:forward" and e.question_name == "causal"]
    reverse = [e for e in emit.examples if e.notes == "causal:reverse" and e.question_name == "causal"]
    assert forward and reverse
    for e in forward:
        assert e.target == 1.0 and any(p.match(e.state["memory_b"]) for p in causes) and any(p.match(e.state["memory_a"]) for p in effects)
    for e in reverse:
        assert e.target == 0.0 and any(p.match(e.state["memory_a"]) for p in causes)
    assert all(e.target == 0.0 for e in emit.examples if e.notes in ("causal:unrelated", "causal:other_person"))


def test_entity_traps_are_negative(examples: list[DecisionExample]) -> None:
    ent = [e for e in examples if e.question_name == "entity_equivalence" and e.source == "synthetic:entities"]
    positive = {"entities:nickname", "entities:title", "entities:description", "entities:place"}
    assert ent
    for e in ent:
        assert e.target == (1.0 if e.notes in positive else 0.0)


def test_consolidation_representation_agrees_with_nouls() -> None:
    emit = _emitter(5)
    consolidation.consolidation_examples(emit.rng, emit, 200)
    by_state: dict[str, dict[str, DecisionExample]] = {}
    for e in emit.examples:
        by_state.setdefault(e.id.rsplit(":", 1)[0], {})[e.question_name] = e
    for qs in by_state.values():
        rep = qs["representation"].target
        assert abs(sum(rep.values()) - 1) < 1e-9  # type: ignore[union-attr]
        if qs["obsolete"].target == 1.0:
            assert _argmax(qs["representation"]) == "supersede"
        if qs["redundant"].target == 1.0:
            assert _argmax(qs["representation"]) == "merge_summary"
        if all(qs[n].target == 0.0 for n in consolidation.NAMES):
            assert _argmax(qs["representation"]) == "keep_separate"


def test_stopping_evidence_matches_labels() -> None:
    rng = random.Random(6)
    for _ in range(200):
        need = retrieval._need(rng)
        emit = _emitter(rng.randint(0, 10**6))
        retrieval._stopping(emit.rng, emit, need)
        labels = {e.question_name: e.target for e in emit.examples}
        evidence = emit.examples[0].state["evidence"]
        assert evidence
        has_all = all(f in evidence for f in need.facts)
        assert labels["evidence_sufficient"] == float(has_all and need.conflict not in evidence)
        assert labels["contradiction"] == float(need.conflict in evidence)


def test_relevance_needed_facts_are_positive() -> None:
    rng = random.Random(7)
    for _ in range(100):
        need = retrieval._need(rng)
        emit = _emitter(rng.randint(0, 10**6))
        retrieval._relevance(emit.rng, emit, need)
        for e in emit.examples:
            if e.question_name == "relevant":
                assert e.target == float(e.state["memory"] in need.facts)


def test_routing_labels_match_query_forms(examples: list[DecisionExample]) -> None:
    routes = [e for e in examples if e.family == "routing"]
    for e in routes:
        q = e.state["query"]
        if e.question_name == "causal" and q.startswith("Why"):
            assert e.target == 1.0
        if e.question_name == "temporal" and q.startswith("When did"):
            assert e.target == 1.0


def test_held_out_shards() -> None:
    plan = SplitPlan()
    assert [plan.split_for(f"synthetic:typing:0:{k}") for k in (0, 7, 8, 9, 18, 19)] == ["train", "train", "calibration", "test", "calibration", "test"]
