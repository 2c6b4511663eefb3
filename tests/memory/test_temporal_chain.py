"""The `temporal_next` chain follows time, not insertion order: backfills and interleaved sources land where
their timestamps put them (DESIGN.md "timestamp order -> temporal edges"), on both stores."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from controller.client import SystemOneClient
from controller.embedding import HashingEmbedder
from memory.engine import Engine
from memory.ingest import read_jsonl
from memory.store import InMemoryStore, SQLiteStore
from memory.store.base import Store
from memory.types import EdgeOrigin, Observation
from memory.write_path import time_of
from tests.memory.engine_fakes import RuleBackend, make_engine

REPO = Path(__file__).resolve().parents[2]
DAY = datetime(2024, 5, 1, 10)


def engine_on(store: Store) -> Engine:
    return Engine(store, SystemOneClient(RuleBackend()), HashingEmbedder(64), make_engine(consolidation_every=0).config)


@pytest.fixture(params=["memory", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    store: Store = InMemoryStore(64) if request.param == "memory" else SQLiteStore(tmp_path / "m.db", dim=64)
    yield engine_on(store)
    store.close()


def note(day: float | None, text: str | None = None) -> Observation:
    when = None if day is None else DAY + timedelta(days=day)
    return Observation(text or f"Note from day {day} about the garden.", observed_at=when, speaker="A")


def chain(store: Store) -> set[tuple[str, str]]:
    return {(e.src, e.dst) for n in store.iter_nodes() for e in store.edges_from(n.id, ["temporal_next"])}


def consecutive(ids: list[str]) -> set[tuple[str, str]]:
    return set(zip(ids, ids[1:]))


def time_order(store: Store) -> list[str]:
    timed = [n for n in store.iter_nodes() if n.kind == "observation" and time_of(n) is not None]
    return [n.id for n in sorted(timed, key=lambda n: (time_of(n), n.seq))]


def test_a_backfill_before_everything_becomes_the_head(engine: Engine) -> None:
    days = {d: engine.write(note(d)).node_id for d in range(10, 30)}
    first = engine.write(note(5)).node_id
    assert chain(engine.store) == consecutive([first, *days.values()])
    assert [e.src for e in engine.store.edges_to(days[10], ["temporal_next"])] == [first]
    assert len(engine.store.edges_to(days[22], ["temporal_next"])) == 1
    assert engine.store.check() == []


def test_a_backfill_in_the_middle_replaces_the_derived_link(engine: Engine) -> None:
    days = {d: engine.write(note(d)).node_id for d in range(10, 50, 2)}  # 14 and 16 are many writes back
    mid = engine.write(note(15)).node_id
    late = engine.write(note(60)).node_id
    order = [days[d] for d in range(10, 16, 2)] + [mid] + [days[d] for d in range(16, 50, 2)] + [late]
    assert chain(engine.store) == consecutive(order)
    assert (days[14], days[16]) not in chain(engine.store)
    assert engine.store.check() == []


def test_an_authored_link_over_the_gap_stays(engine: Engine) -> None:
    a, c = engine.write(note(10)).node_id, engine.write(note(12)).node_id
    engine.link(a, c, "temporal_next")
    b = engine.write(note(11)).node_id
    assert {(e.src, e.dst, e.origin) for e in engine.store.edges_from(a, ["temporal_next"])} == {
        (a, b, EdgeOrigin.DETERMINISTIC), (a, c, EdgeOrigin.EXPLICIT)}
    assert [e.dst for e in engine.store.edges_from(b, ["temporal_next"])] == [c]


def test_equal_timestamps_keep_insertion_order(engine: Engine) -> None:
    a = engine.write(note(10, "First at ten.")).node_id
    b1 = engine.write(note(11, "First at eleven.")).node_id
    b2 = engine.write(note(11, "Second at eleven.")).node_id
    c = engine.write(note(12, "At twelve.")).node_id
    later = [engine.write(note(d)).node_id for d in range(20, 30)]
    b3 = engine.write(note(11, "Third at eleven, written last.")).node_id
    assert chain(engine.store) == consecutive([a, b1, b2, b3, c, *later])
    assert engine.store.check() == []


def test_nodes_without_a_time_are_not_in_the_chain(engine: Engine) -> None:
    a = engine.write(note(10)).node_id
    untimed = engine.write(note(None, "A remark without a date.")).node_id
    c = engine.write(note(12)).node_id
    b = engine.write(note(11)).node_id
    timed = {(s, d) for s, d in chain(engine.store) if untimed not in (s, d)}
    assert timed == consecutive([a, b, c])
    assert engine.store.edges_from(untimed, ["temporal_next"]) == []  # never a timed node's neighbour
    assert engine.store.check() == []


def test_the_chain_continues_after_reopening_a_sqlite_store(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "m.db", dim=64) as store:
        written = [engine_on(store).write(note(d)).node_id for d in (10, 12, 14)]
    with SQLiteStore(tmp_path / "m.db", dim=64) as store:
        engine = engine_on(store)
        head, mid = engine.write(note(3)).node_id, engine.write(note(13)).node_id
        assert chain(store) == consecutive([head, written[0], written[1], mid, written[2]])
        assert store.check() == []


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_chronological_input_chains_in_insertion_order(tmp_path: Path, kind: str) -> None:
    """For chronological input (the sample conversation, LoCoMo) time order is insertion order: the chain is the
    same as a chain by sequence."""
    store: Store = InMemoryStore(64) if kind == "memory" else SQLiteStore(tmp_path / "m.db", dim=64)
    engine = Engine(store, SystemOneClient(RuleBackend()), HashingEmbedder(64), make_engine().config)  # consolidates
    ids = [engine.write(o).node_id for o in read_jsonl(REPO / "data/samples/demo_conversation.jsonl")]
    assert len(ids) > 20 and time_order(store) == ids
    assert chain(store) == consecutive(ids)
    store.close()
