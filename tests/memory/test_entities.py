"""Deterministic entity extraction (memory/entities.py)."""

from __future__ import annotations

from memory.entities import clean_entities, extract_entities, normalise_entity


def test_speaker_first_and_names_inside_sentences() -> None:
    got = extract_entities("Melanie: Hey Caroline! We drove to New York with Oscar.", speaker="Melanie")
    assert got == ("melanie", "caroline", "new york", "oscar")


def test_sentence_start_words_are_not_names_unless_known() -> None:
    text = "Thanks for the tip. Yesterday was fun. Caroline said hi."
    assert extract_entities(text) == ()
    assert extract_entities(text, known_names=["Caroline"]) == ("caroline",)


def test_pronouns_months_and_greetings_are_not_entities() -> None:
    assert extract_entities("It was great, I think we met in May on a Monday, OK?") == ()


def test_quoted_titles_numbers_with_units_and_money() -> None:
    got = extract_entities('we read "Charlotte\'s Web" twice, ran 5 km and paid $20 for 3 tickets over 2 years')
    assert "charlotte web" in got
    assert "5 km" in got and "$20" in got and "2 years" in got
    assert "3" not in got  # a bare number is not an entity


def test_ids_are_normalised_and_deduplicated() -> None:
    assert normalise_entity("  Mira’s ") == "mira"
    assert normalise_entity("NEW   York") == "new york"
    got = extract_entities("I saw Mira. Then Mira's dog and MIRA again.", known_names=["mira"])
    assert got == ("mira",)


def test_extraction_is_deterministic_and_limited() -> None:
    text = "We met Ann, Bob, Cid, Dan, Eve, Fay, Gus and Hal at the Louvre in Paris."
    first = extract_entities(text, limit=5)
    assert first == extract_entities(text, limit=5)
    assert len(first) == 5 and first[0] == "ann"


def test_caller_given_entities_are_cleaned_not_extracted() -> None:
    assert clean_entities(["Mira", " bicycle ", "mira"]) == ("mira", "bicycle")
    assert clean_entities([]) == ()
