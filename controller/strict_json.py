"""JSON read without silent loss: `json.loads(text, object_pairs_hook=unique_object)` refuses an object that gives a
key twice (the standard parser keeps the last value and drops the others without a word). The memory store's JSONL
ingest and the server's bodies both read with it; `number_too_long` tells the parser's refusal of a number with
more digits than Python converts (4,300) from its other errors, so callers can say it in their own words."""

from __future__ import annotations

from typing import Any


class DuplicateKeyError(ValueError):
    """A JSON object with a key given more than once."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} appears twice in one object")
        self.key = key


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for `json.loads`: the object as a dict, or `DuplicateKeyError`."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def number_too_long(error: ValueError) -> bool:
    """Whether `json.loads` raised `error` for an integer longer than `sys.get_int_max_str_digits()`."""
    return "integer string conversion" in str(error)
