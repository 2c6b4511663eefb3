"""`Engine.write_many` is all-or-nothing against store failures too: a store that fails on the Nth item leaves
the store and the engine as they were before the batch, and the same batch can then be sent again without
duplicating its head. A successful batch stores exactly what writing its observations one by one stores."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from controller.client import SystemOneClient
from controller.embedding import HashingEmbedder
from memory.config import EngineConfig
from memory.engine import Engine
from memory.store import InMemoryStore, SQLiteStore, StoreError, StoreUnavailableError
from memory.types import Observation, WriteResult
from tests.memory.engine_fakes import RuleBackend, obs
from tests.memory.sqlite_faults import INSERT_NODE, FailingConnection, statement_is
from tests.memory.store_contract import snapshot

KINDS = ["memory", "sqlite"]
# consolidation runs after every third write and merges its best pair into a summary node (one more add_node)
RULES = {("consolidation", "representation"): lambda s: {"merge_summary": 0.9}, ("pair", "semantic"): lambda s: 0.9}
CONFIG = EngineConfig(consolidation_every=3, consolidation_max_pairs=1)

HEAD = [obs("Mira: the garden tomatoes are red", 0, source="D1:1"), obs("Tom: my bicycle broke yesterday", 1, source="D1:2")]
BATCH = [
    obs("Mira: the garden tomatoes are ripe now", 2, source="D1:3"),  # write 3: consolidation + summary
    obs("Tom: I bought a new bicycle because the old one broke", 3, source="D1:4"),
    obs("Mira: garden tomatoes picked today", 4, source="D1:5"),
    obs("Tom: the bicycle shop on Elm Street", 5, source="D1:6"),  # write 6: consolidation + summary
    obs("Mira: tomato soup for dinner", 6, source="D1:7"),
]


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[[str], Engine]]:
    made: list[Engine] = []

    def build(kind: str) -> Engine:
        store = InMemoryStore(64) if kind == "memory" else SQLiteStore(tmp_path / f"m{len(made)}.db", dim=64)
        engine = Engine(store, SystemOneClient(RuleBackend(RULES)), HashingEmbedder(64), CONFIG)
        made.append(engine)
        return engine

    yield build
    for engine in made:
        FailingConnection.restore(engine.store)
        engine.store.close()


def outcome(results: Sequence[WriteResult]) -> list[tuple[Any, ...]]:
    """A write's result without its timings."""
    return [(r.node_id, r.candidates, r.edges_written, r.controller_questions, r.link_status, r.unjudged) for r in results]


def engine_state(engine: Engine) -> tuple[Any, ...]:
    return (engine._seq, engine._writes, list(engine._recent), set(engine._consolidated), engine._known_names,
            engine.last_consolidation, engine.last_candidates, engine._consolidations, engine._summaries)


def written(engine: Engine, batch: Sequence[Observation]) -> list[WriteResult]:
    return engine.write_many(batch)


def fail_add_node(engine: Engine, monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    add_node = engine.store.add_node
    calls = 0

    def flaky(*args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == nth:
            raise StoreError("injected: database or disk is full")
        add_node(*args, **kwargs)

    monkeypatch.setattr(engine.store, "add_node", flaky)


@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_stores_what_one_by_one_writes_store(make: Callable[[str], Engine], kind: str) -> None:
    """Linking inside a batch sees the batch's earlier (not yet committed) nodes, summaries included."""
    single, batched = make(kind), make(kind)
    one_by_one = [single.write(o) for o in [*HEAD, *BATCH]]
    together = batched.write_many([*HEAD, *BATCH])
    assert outcome(together) == outcome(one_by_one)
    assert snapshot(batched.store) == snapshot(single.store)
    assert single._summaries == batched._summaries == 2 and batched.store.count_nodes() == 9
    assert sum(batched.store.count_edges().values()) > 9 and batched.store.check() == []
    assert engine_state(batched)[:6] == engine_state(single)[:6]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("nth", [1, 2, 4, 6, 7])  # add_node calls: 2 and 6 are summaries, 7 the last item
def test_a_store_failure_mid_batch_stores_nothing_and_the_batch_can_be_sent_again(
    make: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch, kind: str, nth: int
) -> None:
    engine, reference = make(kind), make(kind)
    written(engine, HEAD)
    before, state = snapshot(engine.store), engine_state(engine)
    fail_add_node(engine, monkeypatch, nth)
    with pytest.raises(StoreError, match="injected"):
        engine.write_many(BATCH)
    assert engine.store.count_nodes() == len(HEAD) and engine.store.check() == []
    assert snapshot(engine.store) == before  # vectors and lexical index included
    assert engine_state(engine) == state and engine.stats().writes == len(HEAD)
    monkeypatch.undo()
    results = engine.write_many(BATCH)  # the same batch again: no duplicated head
    expected = [*written(reference, HEAD), *written(reference, BATCH)][len(HEAD):]
    assert outcome(results) == outcome(expected)
    assert snapshot(engine.store) == snapshot(reference.store) and engine.store.count_nodes() == len(HEAD) + len(BATCH) + 2
    assert engine_state(engine)[:6] == engine_state(reference)[:6]


def test_a_sqlite_error_mid_batch_is_a_store_error_and_stores_nothing(make: Callable[[str], Engine]) -> None:
    """The disk fills up while the third observation of the batch is written."""
    engine, reference = make("sqlite"), make("sqlite")
    written(engine, HEAD)
    before = snapshot(engine.store)
    FailingConnection.install(engine.store, when=statement_is(INSERT_NODE), nth=3)
    with pytest.raises(StoreUnavailableError, match="disk is full") as caught:
        engine.write_many(BATCH)
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    FailingConnection.restore(engine.store)
    assert snapshot(engine.store) == before and engine.store.check() == []
    assert outcome(engine.write_many(BATCH)) == outcome([*written(reference, HEAD), *written(reference, BATCH)][len(HEAD):])
    assert snapshot(engine.store) == snapshot(reference.store)


def test_a_single_write_whose_consolidation_fails_stores_nothing(make: Callable[[str], Engine],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The third write triggers consolidation; its summary cannot be stored: the write is undone with it, so a
    client told that the write failed may send it again."""
    engine = make("sqlite")
    written(engine, HEAD)
    before, state = snapshot(engine.store), engine_state(engine)
    fail_add_node(engine, monkeypatch, 2)  # 1: the observation, 2: the summary
    with pytest.raises(StoreError, match="injected"):
        engine.write(BATCH[0])
    assert snapshot(engine.store) == before and engine_state(engine) == state


def test_write_many_reports_progress_after_each_write(make: Callable[[str], Engine]) -> None:
    engine = make("memory")
    seen: list[tuple[int, int]] = []
    results = engine.write_many(BATCH, progress=lambda done: seen.append((done, engine.store.count_nodes())))
    assert [done for done, _ in seen] == list(range(1, len(BATCH) + 1))
    assert all(nodes >= done for done, nodes in seen) and len(results) == len(BATCH)  # each call follows its write
