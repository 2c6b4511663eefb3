"""The engine's public API used wrongly: each call is a clear domain error (or the documented answer) and the store
is left as it was; never a character-by-character split, a bare TypeError from deep inside, or a closed engine that
keeps working."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memory import ConfigError, Engine, EngineClosedError, InvalidObservationError, InvalidRelationError, Observation


@pytest.fixture(params=["memory", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    path = None if request.param == "memory" else tmp_path / "m.db"
    with Engine.open(path, controller="heuristic", embedder="hashing", system_two=None) as opened:
        yield opened


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"source_ids": "abc"}, "source_ids must be a tuple or list of id strings"),
        ({"source_ids": None}, "source_ids must be a tuple or list"),
        ({"source_ids": 5}, "source_ids must be a tuple or list"),
        ({"source_ids": [None]}, r"source_ids\[0\] must be a string, got NoneType"),
        ({"source_ids": ("D1:1", {"a": 1})}, r"source_ids\[1\] must be a string, got dict"),
        ({"entities": "Mira"}, "entities must be a tuple or list of names"),
        ({"entities": 5}, "entities must be a tuple or list"),
        ({"entities": [None]}, r"entities\[0\] must be a string"),
    ],
)
def test_provenance_and_entities_of_the_wrong_shape_are_refused_not_split(engine: Any, changes: dict, message: str) -> None:
    with pytest.raises(InvalidObservationError, match=message):
        engine.write(Observation("Bob likes tea.", **changes))
    with pytest.raises(InvalidObservationError, match=f"observation 1: {message}"):
        engine.write_many([Observation("Ann likes coffee."), Observation("Bob likes tea.", **changes)])
    assert engine.stats().nodes == 0


def test_lists_and_tuples_of_strings_are_kept_as_given(engine: Any) -> None:
    node = engine.get(engine.write(Observation("Mira: I met Tom.", source_ids=["D1:1", "D1:2"], entities=("Tom",))).node_id).node
    assert node.source_ids == ("D1:1", "D1:2") and "tom" in {e.lower() for e in node.entities}


@pytest.mark.parametrize("value", [None, 5, Observation("one observation")])
def test_write_many_takes_an_iterable_of_observations(engine: Any, value: object) -> None:
    with pytest.raises(InvalidObservationError, match="write_many takes an iterable of Observations"):
        engine.write_many(value)  # type: ignore[arg-type]
    assert engine.stats().nodes == 0


def test_unlink_refuses_an_unknown_relation_as_link_does(engine: Any) -> None:
    a = engine.write(Observation("Ann likes tea.")).node_id
    b = engine.write(Observation("Bob likes tea.")).node_id
    for relation in ("bogus", None, ["semantic"]):
        with pytest.raises(InvalidRelationError):
            engine.unlink(a, b, relation)  # type: ignore[arg-type]
        with pytest.raises(InvalidRelationError):
            engine.link(a, b, relation)  # type: ignore[arg-type]
    assert engine.unlink([a], b, "semantic") is False  # type: ignore[arg-type]
    assert engine.delete([a]) is False and engine.delete(None) is False  # type: ignore[arg-type]
    assert engine.stats().nodes == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"embedder": 5}, "embedder must be an embedder name or an Embedder"),
        ({"embedder": "bogus"}, "unknown embedder 'bogus'"),
        ({"config": {"n_seeds": 3}}, "config must be an EngineConfig, a preset name or None"),
        ({"system_two": "bogus"}, "system_two must be a SystemTwo, None or 'env'"),
    ],
)
def test_engine_open_names_the_argument_of_the_wrong_kind(options: dict, message: str) -> None:
    options = {"controller": "heuristic", "embedder": "hashing", "system_two": None, **options}
    with pytest.raises(ConfigError, match=message):
        Engine.open(None, **options)


def test_engine_open_refuses_a_path_that_is_not_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="path must be a file path"):
        Engine.open(5, controller="heuristic", embedder="hashing", system_two=None)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_closed_engine_refuses_every_call(tmp_path: Path) -> None:
    for path in (None, tmp_path / "m.db"):
        engine = Engine.open(path, controller="heuristic", embedder="hashing", system_two=None)
        node = engine.write(Observation("Ann likes tea.")).node_id
        engine.close()
        engine.close()  # twice is fine
        calls = [lambda: engine.write(Observation("x y")), lambda: engine.write_many([]), lambda: engine.query("tea"),
                 lambda: engine.get(node), lambda: engine.edit(node, "Ann likes coffee."), lambda: engine.delete(node),
                 lambda: engine.link(node, node, "semantic"), lambda: engine.unlink(node, node, "semantic"),
                 lambda: engine.set_links(node, []), lambda: engine.relink(), lambda: engine.stats(),
                 lambda: engine.consolidate()]
        for call in calls:
            with pytest.raises(EngineClosedError, match="this engine is closed"):
                call()
    with Engine.open(tmp_path / "m.db", controller="heuristic", embedder="hashing", system_two=None) as again:
        assert again.stats().nodes == 1  # nothing was changed after the close


def test_a_long_token_is_written_and_found_again(engine: Any) -> None:
    blob = "ay" * 100_000  # 200,000 characters in one token: indexed as it is (`controller.lexical.STEM_MAX_CHARS`)
    node = engine.write(Observation(f"Mira: the key is {blob}")).node_id
    engine.write(Observation("Tom: the key is under the mat"))
    assert engine.query(blob, k=1).evidence[0].node_id == node
