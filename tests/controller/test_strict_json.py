"""`controller.strict_json`: a key given twice is refused at any depth; a long number is told from other errors."""

from __future__ import annotations

import json

import pytest

from controller.strict_json import DuplicateKeyError, number_too_long, unique_object


def test_objects_without_repeated_keys_read_as_json_loads_reads_them() -> None:
    text = '{"a": 1, "b": {"c": [1, {"d": null}]}, "e": {}}'
    assert json.loads(text, object_pairs_hook=unique_object) == json.loads(text)


@pytest.mark.parametrize(("text", "key"), [('{"a": 1, "a": 1}', "a"), ('{"x": [{"k": 1, "k": 2}]}', "k")])
def test_a_repeated_key_is_refused_at_any_depth(text: str, key: str) -> None:
    with pytest.raises(DuplicateKeyError) as caught:
        json.loads(text, object_pairs_hook=unique_object)
    assert caught.value.key == key and isinstance(caught.value, ValueError)


def test_number_too_long_tells_the_digit_limit_from_other_value_errors() -> None:
    with pytest.raises(ValueError) as caught:
        json.loads("9" * 5000)
    assert number_too_long(caught.value)
    assert not number_too_long(ValueError("NaN is not valid JSON"))
