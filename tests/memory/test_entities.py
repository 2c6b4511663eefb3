"""Deterministic entity extraction (memory/entities.py)."""

from __future__ import annotations

from collections.abc import Iterator

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


def test_keeping_the_first_ids_stops_reading_once_it_has_them() -> None:
    # One write of a few hundred kB (the server accepts 4 MiB bodies) must not hold the engine for minutes:
    # keeping the first `limit` distinct ids used to compare every mention with every id kept so far, all of them.
    def names() -> Iterator[str]:
        yield from (f"Name{i:05d}x" for i in range(13))
        raise AssertionError("read past the limit")

    assert clean_entities(names(), limit=12) == tuple(f"name{i:05d}x" for i in range(12))
    many = [f"Name{i:05d}x" for i in range(30000)]
    assert extract_entities("so " + ", ".join(many), limit=12) == tuple(n.lower() for n in many[:12])
