from __future__ import annotations

import json

import pytest

from controller.errors import ArtifactError
from controller.states import FORMAT, STATES_FILE, StateConventions, read_states, write_states


def test_a_directory_without_the_file_declares_the_defaults(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert read_states(tmp_path) == StateConventions(relevance_dated=False, relevance_context=False)


def test_written_conventions_read_back(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = write_states(tmp_path, StateConventions(relevance_dated=True))
    assert json.loads(path.read_text()) == {"format": FORMAT, "relevance_dated": True, "relevance_context": False}
    assert read_states(tmp_path) == StateConventions(relevance_dated=True)


def test_conventions_of_a_data_build_come_from_its_rules() -> None:
    assert StateConventions.from_rules({"relevance_dated": True, "bm25_negatives": 4}) == StateConventions(relevance_dated=True)
    assert StateConventions.from_rules({}) == StateConventions()


@pytest.mark.parametrize("text, message", [
    ("not json", "cannot read"),
    (json.dumps({"relevance_dated": True}), FORMAT),
    (json.dumps({"format": FORMAT, "relevance_dated": "yes"}), "must be true or false"),
    (json.dumps({"format": FORMAT, "relevance_sideways": True}), "unknown state conventions relevance_sideways"),
])
def test_a_malformed_file_is_refused_with_its_reason(tmp_path, text, message) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / STATES_FILE).write_text(text)
    with pytest.raises(ArtifactError, match=message):
        read_states(tmp_path)
