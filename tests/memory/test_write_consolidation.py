"""Periodic consolidation: bounded neighbourhood, one batched call, representation decisions applied safely."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from memory.types import EdgeOrigin
from tests.memory.engine_fakes import RuleBackend, make_engine, obs

TEXTS = ["Mira: the garden tomatoes are red", "Mira: the garden tomatoes are ripe now", "Mira: garden tomatoes picked today"]


def represent(label: str, p: float = 0.9) -> dict[tuple[str, str], Any]:
    return {("consolidation", "representation"): lambda s: {label: p}, ("pair", "semantic"): lambda s: 0.9}


def write_all(engine: Any, texts: Sequence[str] = TEXTS) -> list[str]:
    return [engine.write(obs(t, i, source=f"D1:{i + 1}")).node_id for i, t in enumerate(texts)]


def test_runs_every_n_writes_in_one_batched_call() -> None:
    backend = RuleBackend(represent("keep_separate"))
    engine = make_engine(backend, consolidation_every=3)
    write_all(engine, TEXTS[:2])
    assert engine.last_consolidation is None
    before = backend.calls
    engine.write(obs(TEXTS[2], 2))
    report = engine.last_consolidation
    assert report is not None and report.pairs == 3  # every inferred pair among the three recent nodes
    assert backend.calls - before == 3  # typing, pair judgments, one consolidation batch
    assert report.questions == 3 * 5 and len(report.signals) == 3
    assert engine.stats().consolidations == 1


def test_supersede_marks_the_older_node_and_deletes_nothing() -> None:
    engine = make_engine(RuleBackend(represent("supersede")), consolidation_every=3)
    ids = write_all(engine)
    report = engine.last_consolidation
    assert report is not None and report.superseded >= 1
    assert engine.store.count_nodes() == 3
    for edge in [e for i in ids for e in engine.store.edges_from(i, ["supersedes"])]:
        older = engine.store.get_node(edge.dst)
        assert engine.store.get_node(edge.src).seq > older.seq
        assert older.superseded_by == edge.src and edge.origin == EdgeOrigin.INFERRED


def test_merge_summary_is_extractive_without_system_two() -> None:
    engine = make_engine(RuleBackend(represent("merge_summary")), consolidation_every=3, consolidation_max_pairs=1)
    ids = write_all(engine)
    (summary_id,) = engine.last_consolidation.summaries
    summary = engine.store.get_node(summary_id)
    sources = [e.dst for e in engine.store.edges_from(summary_id, ["summary_of"])]
    assert summary.kind == "summary" and summary.metadata["summary_source"] == "extractive"
    assert set(sources) <= set(ids) and len(sources) == 2
    assert set(summary.source_ids) == {s for i in sources for s in engine.store.get_node(i).source_ids}
    assert all(engine.store.get_node(i).content in summary.content for i in sources)
    assert engine.store.count_nodes() == 4 and engine.stats().summaries == 1


def test_merge_summary_uses_system_two_when_configured() -> None:
    class FakeSystemTwo:
        def __init__(self) -> None:
            self.seen: list[list[str]] = []

        def merge_summary(self, texts: Sequence[str]) -> str:
            self.seen.append(list(texts))
            return "Mira's garden tomatoes ripened."

    engine = make_engine(RuleBackend(represent("merge_summary")), consolidation_every=3, consolidation_max_pairs=1)
    engine.system_two = FakeSystemTwo()  # type: ignore[assignment]
    write_all(engine)
    (summary_id,) = engine.last_consolidation.summaries
    summary = engine.store.get_node(summary_id)
    assert summary.content == "Mira's garden tomatoes ripened." and summary.metadata["summary_source"] == "system_two"
    assert len(engine.system_two.seen[0]) == 2  # type: ignore[union-attr]


def test_link_adds_a_semantic_edge_where_there_was_none() -> None:
    rules = {("consolidation", "representation"): lambda s: {"link": 0.9}, ("pair", "same_episode"): lambda s: 0.9,
             ("pair", "semantic"): lambda s: 0.0}
    engine = make_engine(RuleBackend(rules), consolidation_every=3)
    write_all(engine)
    linked = [e for n in engine.store.iter_nodes() for e in engine.store.edges_from(n.id, ["semantic"])]
    assert engine.last_consolidation.linked == len(linked) == 3
    assert all(e.attrs == {"by": "consolidation"} for e in linked)


def test_low_confidence_representation_changes_nothing() -> None:
    engine = make_engine(RuleBackend(represent("supersede", p=0.4)), consolidation_every=3)
    write_all(engine)
    assert engine.last_consolidation.superseded == 0
    assert all(n.superseded_by is None for n in engine.store.iter_nodes())


def test_controller_failure_skips_consolidation_without_changes() -> None:
    backend = RuleBackend(represent("supersede"))
    engine = make_engine(backend, consolidation_every=3)
    write_all(engine, TEXTS[:2])
    edges_before = engine.store.count_edges()
    engine.config = engine.config.with_(consolidation_every=0)
    engine.write(obs(TEXTS[2], 2))
    backend.fail = True
    report = engine.consolidate()
    assert report.error is not None and report.superseded == 0
    assert all(n.superseded_by is None for n in engine.store.iter_nodes())
    assert engine.store.count_edges()["semantic"] >= edges_before.get("semantic", 0)


def test_pairs_are_not_consolidated_twice() -> None:
    engine = make_engine(RuleBackend(represent("keep_separate")), consolidation_every=0)
    write_all(engine)
    assert engine.consolidate().pairs == 3
    assert engine.consolidate().pairs == 0


def test_a_consolidation_that_rolls_back_judges_its_pairs_again() -> None:
    engine = make_engine(RuleBackend(represent("supersede")), consolidation_every=0)
    write_all(engine)
    update = engine.store.update_node

    def disk_full(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("disk full")

    engine.store.update_node = disk_full  # type: ignore[method-assign]  # the first supersession fails
    with pytest.raises(RuntimeError):
        engine.consolidate()
    engine.store.update_node = update  # type: ignore[method-assign]
    assert all(n.superseded_by is None for n in engine.store.iter_nodes())  # nothing of the failed run stayed
    report = engine.consolidate()
    assert report.pairs == 3  # not "done": their decisions were rolled back
    assert report.superseded >= 1
