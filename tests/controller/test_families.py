"""The Jev-Mem question catalogue: valid wire questions, consistent names, lookup, and heuristic coverage."""

from __future__ import annotations

import re

import pytest

from controller import families
from controller.families import (
    CONSOLIDATION_SIGNALS,
    FAMILIES,
    MEMORY_TYPES,
    PAIR_RELATIONS,
    PARAPHRASES,
    RELEVANCE_SIGNALS,
    REPRESENTATIONS,
    ROUTES,
    STOP_SIGNALS,
    TEMPORAL_RELATIONS,
    family_questions,
    lookup,
)
from controller.heuristic import HeuristicBackend
from controller.questions import ChoiceQuestion, NoulQuestion, normalize_questions


def test_every_family_question_is_a_valid_wire_question() -> None:
    for name, family in FAMILIES.items():
        assert family.name == name
        parsed = normalize_questions(family_questions(name))
        assert list(parsed) == list(family.questions)
        for question in parsed.values():
            assert isinstance(question, (NoulQuestion, ChoiceQuestion))
            assert isinstance(question.instructions, str) and question.instructions.endswith("?")


def test_name_tuples_match_the_questions() -> None:
    assert tuple(FAMILIES["typing"].questions) == MEMORY_TYPES
    assert tuple(FAMILIES["routing"].questions) == ROUTES
    assert tuple(FAMILIES["stopping"].questions) == STOP_SIGNALS
    assert tuple(FAMILIES["relevance"].questions) == RELEVANCE_SIGNALS
    assert set(PAIR_RELATIONS) | {"temporal"} == set(FAMILIES["pair"].questions)
    assert set(CONSOLIDATION_SIGNALS) | {"representation"} == set(FAMILIES["consolidation"].questions)
    assert tuple(FAMILIES["pair"].questions["temporal"]["criteria"]) == TEMPORAL_RELATIONS
    assert tuple(FAMILIES["consolidation"].questions["representation"]["criteria"]) == REPRESENTATIONS


def test_instructions_only_name_their_state_fields() -> None:
    for family in FAMILIES.values():
        for name, question in family.questions.items():
            fields = set(re.findall(r"state\.(\w+)", question["instructions"]))
            assert fields, f"{family.name}.{name} does not say which state fields it reads"
            assert fields <= set(family.state_fields), (family.name, name, fields)
    for (family_name, name), texts in PARAPHRASES.items():
        for text in texts:
            assert set(re.findall(r"state\.(\w+)", text)) <= set(FAMILIES[family_name].state_fields)


def test_lookup_round_trips() -> None:
    canonical = [(f.name, n, q["instructions"]) for f in FAMILIES.values() for n, q in f.questions.items()]
    assert len({text for _, _, text in canonical}) == len(canonical)  # no two questions share instructions
    for family_name, name, text in canonical:
        assert lookup(text) == (family_name, name)
    for key, texts in PARAPHRASES.items():
        assert key[1] in FAMILIES[key[0]].questions
        for text in texts:
            assert lookup(text) == key
    assert lookup("Is this about billing?") is None
    assert lookup(canonical[0][2] + " ") is None  # exact match only
    assert lookup({"instructions": canonical[0][2]}) is None
    assert lookup(None) is None


def test_catalogue_key_names_family_and_question_for_canonical_and_paraphrased_wording() -> None:
    from controller.families import catalogue_key

    parsed = normalize_questions(family_questions("pair"))
    assert catalogue_key(parsed["semantic"]) == "pair.semantic"
    (family_name, name), texts = next(iter(PARAPHRASES.items()))
    assert catalogue_key(NoulQuestion(instructions=texts[0])) == f"{family_name}.{name}"
    assert catalogue_key(NoulQuestion(instructions="Is this about billing?")) is None


def test_calibration_key_falls_back_to_the_family_of_the_state_shape() -> None:
    from controller.families import calibration_key

    relevance = {"query": "When did Caroline go?", "memory": "Caroline: I went yesterday."}
    custom = NoulQuestion(instructions="Would state.memory help a reader answer state.query?")
    canonical = normalize_questions(family_questions("relevance"))["relevant"]
    assert calibration_key(canonical, relevance) == "relevance.relevant"  # catalogue wording keeps its own key
    assert calibration_key(canonical, {"anything": 1}) == "relevance.relevant"
    assert calibration_key(custom, relevance) == "relevance"
    assert calibration_key(custom, {**relevance, "previous": "Melanie: How was it?"}) == "relevance"
    assert calibration_key(custom, {**relevance, "extra": 1}) is None  # no family has that shape
    assert calibration_key(custom, {"memory_a": "a", "memory_b": "b"}) is None  # pair and consolidation share it
    assert calibration_key(custom, "a plain string state") is None
    assert calibration_key(custom) is None


def test_family_questions_are_fresh_copies_in_the_asked_order() -> None:
    first = family_questions("pair")
    first["temporal"]["criteria"]["before"] = "changed"
    assert family_questions("pair")["temporal"]["criteria"]["before"] != "changed"
    assert list(family_questions("routing", ("recency", "semantic"))) == ["recency", "semantic"]
    with pytest.raises(KeyError):
        family_questions("nope")


def test_paraphrases_get_the_canonical_rule() -> None:
    backend = HeuristicBackend()
    states = {
        "typing": {"observation": "I went hiking with Jon yesterday."},
        "pair": {"memory_a": "Mel went camping at the lake.", "memory_b": "Melanie camped by the lake with her kids."},
        "routing": {"query": "When did Caroline and Melanie both go to the lake?"},
        "relevance": {"query": "Where did Melanie camp?", "memory": "Melanie: we camped at the lake."},
        "stopping": {"query": "Where did Melanie camp?", "evidence": ["Melanie: we camped at the lake."], "depth": 1},
    }
    for (family_name, name), texts in PARAPHRASES.items():
        canonical = FAMILIES[family_name].questions[name]
        expected = backend.probabilities(states[family_name], NoulQuestion(canonical["instructions"]))
        for text in texts:
            assert backend.probabilities(states[family_name], NoulQuestion(text)) == expected


def test_module_exports_the_documented_helpers() -> None:
    assert callable(families.family_questions) and callable(families.lookup)


def test_optional_state_fields_and_previous_text() -> None:
    from controller.families import PREVIOUS_MAX_CHARS, previous_text

    for family in FAMILIES.values():
        assert not set(family.optional_fields) & set(family.state_fields), family.name
    assert FAMILIES["relevance"].optional_fields == ("previous",)
    assert previous_text("Melanie: Did you go?") == "Melanie: Did you go?"
    cut = previous_text("Melanie: " + "word " * 100)
    assert len(cut) <= PREVIOUS_MAX_CHARS and cut.endswith(" [truncated]") and cut.startswith("Melanie: word")
