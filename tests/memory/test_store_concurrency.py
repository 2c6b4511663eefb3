"""More than one writer: threads sharing one engine, and two processes (or two store objects, each with its own
connection and faiss index, as two processes have) writing one SQLite file. Every writer's nodes are found by
every reader's vector search, no write collides with another's seq, a writer blocked past the busy timeout gets a
`StoreUnavailableError` and changes nothing, and the saved faiss file always matches the database."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from controller.client import SystemOneClient
from controller.embedding import HashingEmbedder
from memory.config import EngineConfig
from memory.engine import Engine
from memory.errors import NodeNotFoundError
from memory.store import SQLiteStore, StoreUnavailableError
from memory.types import EdgeOrigin, LinkStatus
from tests.memory.engine_fakes import RuleBackend, obs
from tests.memory.sqlite_faults import FailingConnection, statement_is
from tests.memory.store_contract import DIM, make_node, unit

REPO = Path(__file__).resolve().parents[2]


def _engine(path: Path, backend: RuleBackend | None = None, **config: object) -> Engine:
    cfg = EngineConfig().with_(**config) if config else EngineConfig()
    return Engine(SQLiteStore(path, dim=64), SystemOneClient(backend or RuleBackend()), HashingEmbedder(64), cfg)


@pytest.fixture
def two_engines(tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    first, second = _engine(tmp_path / "m.db"), _engine(tmp_path / "m.db")
    yield first, second
    for engine in (first, second):
        engine.store.close()


# ---------------------------------------------------------------------------------------------- two writers
def test_each_store_object_finds_the_vectors_the_other_wrote(tmp_path: Path) -> None:
    # before: each object's faiss index held only its own writes (and check() reported them as missing vectors)
    a, b = SQLiteStore(tmp_path / "m.db", dim=DIM), SQLiteStore(tmp_path / "m.db", dim=DIM)
    try:
        a.add_node(make_node("a0", 0, "alpha"), unit(0))
        b.add_node(make_node("b1", 1, "beta"), unit(1))
        assert a.vector_search(unit(1), 1)[0][0] == "b1" and b.vector_search(unit(0), 1)[0][0] == "a0"
        b.delete_node("a0")
        assert [i for i, _ in a.vector_search(unit(0), 5)] == ["b1"]
        assert a.check() == [] and b.check() == []
    finally:
        a.close()
        b.close()
    with SQLiteStore(tmp_path / "m.db", dim=DIM) as store:
        assert store.check() == [] and [i for i, _ in store.vector_search(unit(1), 5)] == ["b1"]


def test_a_store_reembedded_by_another_process_is_refused_not_searched_with_the_old_embedder(tmp_path: Path) -> None:
    # before: the open object kept searching (and writing) with the old embedder over the new embedder's vectors
    from memory.store import StoreConfigError

    path = tmp_path / "m.db"
    open_here = SQLiteStore(path, dim=DIM, embedder="old")
    try:
        open_here.add_node(make_node("n0", 0, "x"), unit(0))
        with SQLiteStore(path, dim=DIM) as elsewhere:  # what `jevmem reembed` does
            elsewhere.replace_embeddings([0], unit(1)[None, :], "new")
        for call in (lambda: open_here.vector_search(unit(0), 1),
                     lambda: open_here.add_node(make_node("n1", 1, "y"), unit(2))):
            with pytest.raises(StoreConfigError, match="re-embedded with 'new'"):
                call()
        assert open_here.count_nodes() == 1  # nothing written with the old embedder
    finally:
        open_here.close()
    with SQLiteStore(path, dim=DIM, embedder="new") as store:
        assert store.check() == [] and store.vector_search(unit(1), 1)[0][0] == "n0"


def test_a_second_engine_writing_the_same_file_does_not_break_the_first(two_engines: tuple[Engine, Engine]) -> None:
    # before: the first engine kept its cached next seq, so after the second one wrote, every write of the first
    # failed with DuplicateNodeError ("a node with seq 1 is already stored") until it was restarted
    first, second = two_engines
    first.write(obs("Mira: I like my red bicycle.", 0))
    second.write(obs("Tom: I paint landscapes on Sundays.", 1))
    third = first.write(obs("Mira: My red bicycle broke yesterday.", 2))
    assert first.store.get_node(third.node_id) is not None
    assert first.store.count_nodes() == second.store.count_nodes() == 3
    assert len({n.seq for n in first.store.iter_nodes()}) == 3
    evidence = [e.content for e in first.query("Who paints landscapes?", k=3).evidence]
    assert "Tom: I paint landscapes on Sundays." in evidence
    assert first.store.check() == [] and second.store.check() == []


_OTHER_PROCESS = """
import sys
from memory.store import SQLiteStore
from tests.memory.store_contract import DIM, make_node, unit
with SQLiteStore(sys.argv[1], dim=DIM) as store:
    for seq in range(10, 15):
        store.add_node(make_node(f"p{seq}", seq, f"from the other process {seq}"), unit(seq))
"""


def test_another_process_writing_the_file_leaves_both_indexes_and_the_saved_file_right(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(path, dim=DIM)
    try:
        store.add_node(make_node("n0", 0, "mine"), unit(0) + 0.1)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run([sys.executable, "-c", _OTHER_PROCESS, str(path)], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert store.vector_search(unit(12), 1)[0][0] == "p12"  # written by the other process
        store.add_node(make_node("n1", 1, "mine again"), unit(1) + 0.1)
        assert store.check() == [] and store.count_nodes() == 7
    finally:
        store.close()  # saves an index that holds both processes' vectors
    with SQLiteStore(path, dim=DIM) as reopened:
        assert reopened.check() == []
        assert {reopened.vector_search(unit(s), 1)[0][0] for s in (0, 1, 13)} == {"n0", "n1", "p13"}


_LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO meta (key, value) VALUES ('held', 'yes')")
print("locked", flush=True)
sys.stdin.read()  # until the test closes our stdin
conn.execute("ROLLBACK")
"""


def test_a_writer_blocked_by_another_process_gets_store_unavailable_after_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(path, dim=DIM, busy_timeout_s=0.3)
    try:
        store.add_node(make_node("n0", 0, "before"), unit(0))
        holder = subprocess.Popen([sys.executable, "-c", _LOCK_HOLDER, str(path)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="locked") as caught:
                store.add_node(make_node("n1", 1, "blocked"), unit(1))
            assert caught.value.transient and 0.2 < time.monotonic() - started < 3
            assert [i for i, _ in store.vector_search(unit(1), 5)] == ["n0"]  # nothing of it reached the index
            assert store.count_nodes() == 1  # WAL: reads go on
            # the FTS integrity check is a write: a lock is reported as such, not as "fts: index is damaged"
            with pytest.raises(StoreUnavailableError, match="check"):
                store.check()
        finally:
            assert holder.stdin is not None
            holder.stdin.close()
            holder.wait(timeout=10)
            assert holder.stdout is not None
            holder.stdout.close()
        store.add_node(make_node("n1", 1, "after"), unit(1))
        assert store.check() == []
    finally:
        store.close()
    with SQLiteStore(path, dim=DIM) as reopened:
        assert reopened.check() == [] and reopened.vector_search(unit(1), 1)[0][0] == "n1"


def test_the_busy_timeout_must_be_sensible(tmp_path: Path) -> None:
    from memory.store import StoreError

    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(StoreError, match="busy_timeout_s"):
            SQLiteStore(tmp_path / "m.db", dim=DIM, busy_timeout_s=bad)


# ---------------------------------------------------------------------------------------------- one engine, threads
MERGING = {("consolidation", "representation"): lambda s: {"merge_summary": 0.95}}


def test_threads_sharing_one_engine_leave_a_consistent_store(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "m.db", RuleBackend(MERGING), consolidation_every=2, tau_representation=0.5)
    seeded = [engine.write(obs(f"Mira: my red bike note {i}", i)).node_id for i in range(6)]
    errors: list[BaseException] = []
    written: list[str] = []

    def guarded(work: object) -> threading.Thread:
        def run() -> None:
            try:
                work()  # type: ignore[operator]
            except BaseException as error:  # noqa: BLE001 - reported by the test
                errors.append(error)
        return threading.Thread(target=run)

    def writes() -> None:
        written.extend(engine.write(obs(f"Mira: my red bike again {i}", 10 + i)).node_id for i in range(8))

    def queries() -> None:
        for _ in range(10):
            engine.query("Mira red bike", k=5)

    def deletes() -> None:
        for node_id in seeded[:4]:  # sources of summaries, while writes consolidate
            assert engine.delete(node_id) is True

    def edits_and_relinks() -> None:
        rng = random.Random(0)
        for i in range(6):
            try:
                engine.edit(rng.choice(seeded), f"Mira: edited note {i}")
            except NodeNotFoundError:
                pass  # deleted by the other thread first
            engine.relink()

    threads = [guarded(w) for w in (writes, queries, deletes, edits_and_relinks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and all(not t.is_alive() for t in threads)
    store = engine.store
    assert store.check() == []
    assert all(store.get_node(i) is None for i in seeded[:4]) and all(store.get_node(i) for i in written)
    for node in store.iter_nodes():
        if node.kind == "summary":  # every summary's sources are still stored
            assert all(store.get_node(s) is not None for s in node.metadata["summary_of"]), node.id
    store.close()


# ---------------------------------------------------------------------------------------------- relink failures
def _stale_nodes(engine: Engine) -> list[str]:
    ids = [engine.write(obs(f"Mira: data science work item {i}", i)).node_id for i in range(4)]
    for node_id in ids:
        engine.edit(node_id, engine.store.get_node(node_id).content + " changed")  # type: ignore[union-attr]
    return ids


def test_a_store_failure_midway_through_relink_leaves_every_node_whole(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "m.db", consolidation_every=0)
    ids = _stale_nodes(engine)
    FailingConnection.install(engine.store, when=statement_is("UPDATE nodes SET"), nth=3)
    with pytest.raises(StoreUnavailableError):
        engine.relink()
    FailingConnection.restore(engine.store)
    store = engine.store
    for node_id in ids:
        node = store.get_node(node_id)
        assert node is not None
        fresh = all(e.src_fingerprint in (None, store.get_node(e.src).fingerprint)  # type: ignore[union-attr]
                    and e.dst_fingerprint in (None, store.get_node(e.dst).fingerprint)  # type: ignore[union-attr]
                    for e in [*store.edges_from(node_id), *store.edges_to(node_id)] if e.origin == EdgeOrigin.INFERRED)
        assert fresh, node_id
        assert (node.link_status, bool(node.types)) in {(LinkStatus.ASSESSED, True), (LinkStatus.STALE, False)}
    assert store.nodes_with_status(LinkStatus.STALE)  # the rest is still owed ...
    assert set(engine.relink().statuses.values()) == {LinkStatus.ASSESSED}  # ... and a second run pays it
    assert store.check() == []
    store.close()


def test_a_controller_failure_midway_through_relink_marks_the_rest_pending(tmp_path: Path) -> None:
    backend = RuleBackend()
    engine = _engine(tmp_path / "m.db", backend, consolidation_every=0)
    ids = _stale_nodes(engine)
    real = backend.answer
    calls = iter(range(100))

    def flaky(requests: object) -> object:
        if next(calls) >= 3:
            backend.fail = True
        return real(requests)  # type: ignore[arg-type]

    backend.answer = flaky  # type: ignore[method-assign]
    report = engine.relink()
    assert set(report.statuses) == set(ids)
    assert LinkStatus.ASSESSED in report.statuses.values() and LinkStatus.RELATIONS_PENDING in report.statuses.values()
    for node_id, status in report.statuses.items():
        assert engine.store.get_node(node_id).link_status == status  # type: ignore[union-attr]
        assert (node_id in report.errors) == (status == LinkStatus.RELATIONS_PENDING)
    backend.fail, backend.answer = False, real  # type: ignore[method-assign]
    assert set(engine.relink().statuses.values()) == {LinkStatus.ASSESSED}
    assert engine.store.check() == []
    engine.store.close()


def test_replace_embeddings_is_atomic_for_a_concurrent_reader(tmp_path: Path) -> None:
    """A search running in another thread during `replace_embeddings` sees the old vectors or the new ones, never
    an index half rebuilt (empty, or new rows over old vectors)."""
    with SQLiteStore(tmp_path / "m.db", dim=DIM) as store:
        for i in range(6):
            store.add_node(make_node(f"n{i}", i, f"t{i}"), unit(i))
        old, new = np.stack([unit(i) for i in range(6)]), np.stack([unit((i + 3) % 6) for i in range(6)])
        stop = threading.Event()
        seen: list[str] = []
        errors: list[BaseException] = []

        def search() -> None:
            try:
                while not stop.is_set():
                    seen.append(store.vector_search(unit(0), 1)[0][0])
            except BaseException as error:  # noqa: BLE001 - reported by the test
                errors.append(error)

        reader = threading.Thread(target=search)
        reader.start()
        try:
            for _ in range(5):
                store.replace_embeddings(list(range(6)), new, "new")
                store.replace_embeddings(list(range(6)), old, "old")
        finally:
            stop.set()
            reader.join()
        assert errors == [] and seen and set(seen) <= {"n0", "n3"} and store.check() == []
