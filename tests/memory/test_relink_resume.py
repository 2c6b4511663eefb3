"""`relink` commits node by node: a failure part-way says how many nodes were done (and keeps them), and running
it again finishes the job with exactly the links one uninterrupted run gives, and nothing changes on a third run."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.client import SystemOneClient
from controller.embedding import HashingEmbedder
from memory.config import EngineConfig
from memory.engine import Engine
from memory.store import SQLiteStore, StoreUnavailableError
from memory.types import LinkStatus
from tests.memory.engine_fakes import RuleBackend, obs
from tests.memory.sqlite_faults import FailingConnection, statement_is


def _engine(path: Path) -> Engine:
    config = EngineConfig().with_(consolidation_every=0)
    return Engine(SQLiteStore(path, dim=64), SystemOneClient(RuleBackend()), HashingEmbedder(64), config)


def _stale(engine: Engine, n: int = 5) -> list[str]:
    ids = [engine.write(obs(f"Mira: data science work item {i} at the lab", i)).node_id for i in range(n)]
    for node_id in ids:
        engine.edit(node_id, engine.store.get_node(node_id).content + " changed")  # type: ignore[union-attr]
    return ids


def _graph(engine: Engine) -> tuple[object, ...]:
    store = engine.store
    nodes = sorted((n.id, n.link_status, tuple(sorted(n.types.items()))) for n in store.iter_nodes())
    edges = sorted((e.src, e.dst, e.relation, e.origin.value, round(e.weight, 6))
                   for n in store.iter_nodes() for e in store.edges_from(n.id))
    return tuple(nodes), tuple(edges)


def test_a_failed_relink_says_how_many_nodes_were_done_and_a_rerun_equals_one_whole_run(tmp_path: Path) -> None:
    reference = _engine(tmp_path / "reference.db")
    _stale(reference)
    whole = reference.relink()
    assert len(whole.statuses) == 5

    engine = _engine(tmp_path / "m.db")
    ids = _stale(engine)
    seen: list[tuple[int, int]] = []
    FailingConnection.install(engine.store, when=statement_is("UPDATE nodes SET"), nth=3)  # the third node's update
    with pytest.raises(StoreUnavailableError) as caught:
        engine.relink(progress=lambda done, total: seen.append((done, total)))
    FailingConnection.restore(engine.store)
    assert "relink: 2 of 5 nodes were relinked (and saved) before this failure" in caught.value.__notes__
    assert seen == [(0, 5), (1, 5), (2, 5)]
    statuses = [engine.store.get_node(i).link_status for i in ids]  # type: ignore[union-attr]
    assert statuses == [LinkStatus.ASSESSED] * 2 + [LinkStatus.STALE] * 3  # the two done are kept, the rest owed
    rest = engine.relink()
    assert sorted(rest.statuses) == sorted(ids[2:])  # the rerun takes only what is still owed
    assert _graph(engine) == _graph(reference)
    again = _graph(engine)
    engine.relink(ids)  # relinking nodes already done replaces their inferred links, never adds copies
    assert _graph(engine) == again and engine.store.check() == []
    for e in (engine, reference):
        e.store.close()
