"""The write path: phases, one batched judgment call per write, thresholds, statuses, atomicity."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from controller.families import TEMPORAL_RELATIONS
from memory.errors import InvalidObservationError
from memory.types import EdgeOrigin, LinkStatus, Observation
from memory.write_path import REFUSALS, RESERVED_METADATA
from tests.memory.engine_fakes import T0, RuleBackend, make_engine, obs


def edges_of(engine: Any, relation: str) -> list:
    return [e for n in engine.store.iter_nodes() for e in engine.store.edges_from(n.id, [relation])]


def test_first_write_has_an_empty_shortlist_and_is_typed() -> None:
    engine = make_engine()
    result = engine.write(obs("Mira: My old bicycle broke yesterday.", source="D1:1"))
    node = engine.store.get_node(result.node_id)
    assert result.link_status == LinkStatus.EMPTY_SHORTLIST and result.candidates == 0
    assert node.types["episodic"] == pytest.approx(0.8) and set(node.types) == {"episodic", "semantic", "procedural", "preference"}
    assert node.source_ids == ("D1:1",) and node.entities[0] == "mira"
    assert set(result.timings_ms) >= {"embedding", "typing", "candidates", "judgment", "apply"}


def test_one_batched_pair_call_per_write_with_prefixed_keys() -> None:
    backend = RuleBackend()
    engine = make_engine(backend)
    for i in range(5):
        engine.write(obs(f"Mira: garden note {i} about tomatoes", i))
    calls_before = backend.calls
    seen_before = len(backend.requests)
    result = engine.write(obs("Mira: the tomatoes in the garden are ripe", 10))
    assert backend.calls - calls_before == 2  # typing + one batch of pair requests
    pair_requests = backend.requests[seen_before + 1 :]
    assert len(pair_requests) == result.candidates == 5
    for r in pair_requests:
        assert set(r.state) == {"memory_a", "memory_b"}
        # Memories travel as dated text, the form the training data uses.
        assert isinstance(r.state["memory_a"], str) and r.state["memory_a"].startswith("[")
        assert r.state["memory_a"].endswith("Mira: the tomatoes in the garden are ripe")
    assert result.controller_questions == 4 + 4 * 5  # typing + 4 Nouls per pair (timestamps known, same entities)


def test_question_keys_are_pair_i_prefixed() -> None:
    engine = make_engine()
    engine.write(obs("Mira: tomatoes grow", 0))
    node = engine.store.get_node(engine.write(obs("Mira: tomatoes grow well", 1)).node_id)
    from memory.write_path import plan_pairs

    plans, over = plan_pairs(node, [engine.store.iter_nodes().__next__()], engine.config)
    assert over == [] and set(plans[0].questions) == {"pair_0_semantic", "pair_0_causal", "pair_0_same_episode", "pair_0_update"}


def test_inferred_edge_needs_p_at_least_tau_and_keeps_fingerprints() -> None:
    rules = {("pair", "semantic"): lambda s: 0.6, ("pair", "same_episode"): lambda s: 0.5999}
    engine = make_engine(RuleBackend(rules))
    a = engine.write(obs("Mira: one", 0)).node_id
    result = engine.write(obs("Mira: two", 1))
    semantic = edges_of(engine, "semantic")
    assert [(e.src, e.dst) for e in semantic] == [(result.node_id, a)]
    assert semantic[0].origin == EdgeOrigin.INFERRED and semantic[0].weight == pytest.approx(0.6)
    assert semantic[0].src_fingerprint == engine.store.get_node(result.node_id).fingerprint
    assert semantic[0].dst_fingerprint == engine.store.get_node(a).fingerprint
    assert edges_of(engine, "same_episode") == []
    assert result.edges_written == 1 and result.link_status == LinkStatus.ASSESSED


def test_causal_edge_runs_from_cause_to_effect() -> None:
    engine = make_engine(RuleBackend({("pair", "causal"): lambda s: 0.9}))
    cause = engine.write(obs("Mira: My old bicycle broke.", 0)).node_id
    effect = engine.write(obs("Mira: I bought a new bicycle because my old one broke.", 2880)).node_id
    assert [(e.src, e.dst) for e in edges_of(engine, "causal")] == [(cause, effect)]


def test_no_link_is_assessed_with_zero_edges() -> None:
    engine = make_engine(RuleBackend({("pair", n): (lambda s: 0.0) for n in ("semantic", "causal", "same_episode", "update")}))
    engine.write(obs("Mira: tomatoes", 0))
    result = engine.write(obs("Mira: tomatoes again", 1))
    assert result.link_status == LinkStatus.ASSESSED and result.edges_written == 0 and result.candidates == 1


def test_temporal_choice_only_when_a_timestamp_is_missing() -> None:
    backend = RuleBackend({("pair", "temporal"): lambda s: {"after": 0.8}})
    engine = make_engine(backend)
    engine.write(obs("Mira: tomatoes", 0))
    engine.write(obs("Mira: tomatoes later", 5))
    assert all(len(r.questions) == 4 for r in backend.requests if "memory_a" in r.state)
    det = edges_of(engine, "temporal")
    assert det and det[0].origin == EdgeOrigin.DETERMINISTIC and det[0].attrs == {"order": "after"}
    result = engine.write(Observation("Mira: tomatoes with no time", speaker="Mira"))
    pair = [r for r in backend.requests if "memory_a" in r.state][-1]
    assert len(pair.questions) == 5
    inferred = [e for e in edges_of(engine, "temporal") if e.origin == EdgeOrigin.INFERRED]
    assert inferred and all(e.src == result.node_id and e.attrs["order"] in TEMPORAL_RELATIONS for e in inferred)


def test_entity_equivalence_only_when_entities_differ_and_none_is_shared() -> None:
    backend = RuleBackend({("pair", "entity_equivalence"): lambda s: 0.9})
    engine = make_engine(backend)
    engine.write(Observation("my sister Jo loves paint", observed_at=T0, entities=("jo",)))
    engine.write(Observation("Joanna painted a lake", observed_at=T0, entities=("joanna",)))
    engine.write(Observation("Joanna and Jo went out", observed_at=T0, entities=("joanna", "jo")))
    asked = [r for r in backend.requests if "memory_a" in r.state and len(r.questions) == 5]
    assert len(asked) == 1  # jo vs joanna only; the third shares an exact id with both
    eq = edges_of(engine, "entity_equivalence")
    assert len(eq) == 1 and eq[0].origin == EdgeOrigin.INFERRED


def test_entity_edges_are_exact_and_bounded() -> None:
    engine = make_engine(entity_edge_limit=2)
    ids = [engine.write(obs(f"Mira: I saw Oscar at place {i}", i)).node_id for i in range(4)]
    last = engine.write(obs("Mira: I met Oscar again", 9)).node_id
    out = [e for e in engine.store.edges_from(last, ["entity"])]
    assert {e.dst for e in out} == set(ids[-2:])
    assert all(e.origin == EdgeOrigin.DETERMINISTIC and e.attrs["entities"] == ["oscar"] for e in out)
    assert not any(e.attrs["entities"] == ["mira"] for e in edges_of(engine, "entity"))  # the speaker alone links nothing


def test_temporal_next_follows_time_even_out_of_order() -> None:
    engine = make_engine()
    a = engine.write(obs("first", 0)).node_id
    c = engine.write(obs("third", 20)).node_id
    b = engine.write(obs("second", 10)).node_id
    chain = {(e.src, e.dst) for e in edges_of(engine, "temporal_next")}
    assert chain == {(a, b), (b, c)}


def test_over_budget_when_texts_exceed_the_state_bound() -> None:
    engine = make_engine(max_memory_chars=30)
    engine.write(obs("Mira: a very long observation that does not fit", 0))
    result = engine.write(obs("Mira: short", 1))
    assert result.link_status == LinkStatus.OVER_BUDGET and result.edges_written == 0


def test_controller_unavailable_keeps_the_node_and_marks_it_pending() -> None:
    backend = RuleBackend()
    engine = make_engine(backend)
    engine.write(obs("Mira: tomatoes", 0))
    backend.fail = True
    result = engine.write(obs("Mira: tomatoes again", 1))
    node = engine.store.get_node(result.node_id)
    assert node is not None and node.link_status == LinkStatus.RELATIONS_PENDING and node.types == {}
    assert result.link_status == LinkStatus.RELATIONS_PENDING
    assert edges_of(engine, "temporal_next")  # deterministic edges need no controller
    backend.fail = False
    report = engine.relink()
    assert report.statuses == {result.node_id: LinkStatus.ASSESSED} and report.edges_written > 0
    assert engine.store.get_node(result.node_id).types


def test_invalid_observations_are_refused() -> None:
    engine = make_engine()
    for bad in (Observation("   "), Observation(""), Observation("x", observed_at="yesterday")):  # type: ignore[arg-type]
        with pytest.raises(InvalidObservationError):
            engine.write(bad)
    assert engine.store.count_nodes() == 0


@pytest.mark.parametrize("speaker", ["", "   ", "Mi\x00ra", "Mira\n", "Mi\tra", "\x1b[31mMira", "Mira\u2028Tom"])
def test_a_blank_or_multiline_speaker_is_refused(speaker: str) -> None:
    """A speaker leads the memory text and may become an entity: a blank one or one with control characters
    is refused before anything is stored, alone and in a batch."""
    engine = make_engine()
    with pytest.raises(InvalidObservationError, match="speaker must"):
        engine.write(Observation("fine text", speaker=speaker))
    with pytest.raises(InvalidObservationError, match="observation 1: speaker must"):
        engine.write_many([Observation("fine text", speaker="Mira"), Observation("more text", speaker=speaker)])
    assert engine.store.count_nodes() == 0
    assert engine.write(Observation("fine text", speaker="Mary Ann O'Neil-Łukasz 李")).link_status  # names may be any script


def test_a_failure_inside_the_write_transaction_leaves_nothing() -> None:
    engine = make_engine()
    engine.write(obs("Mira: tomatoes", 0))
    store = engine.store
    original = store.add_edge

    def broken(edge: Any) -> None:
        if edge.relation == "semantic":
            raise RuntimeError("disk full")
        original(edge)

    store.add_edge = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        engine.write(obs("Mira: tomatoes and more tomatoes", 1))
    store.add_edge = original  # type: ignore[method-assign]
    assert store.count_nodes() == 1 and store.count_edges() == {} and store.check() == []
    assert engine.write(obs("Mira: retry works", 2)).link_status == LinkStatus.ASSESSED


def test_ids_are_reproducible_and_seq_is_monotonic() -> None:
    engine = make_engine()
    first = [engine.write(obs(t, i)).node_id for i, t in enumerate(["a b", "c d"])]
    engine = make_engine()
    again = [engine.write(obs(t, i)).node_id for i, t in enumerate(["a b", "c d"])]
    assert first == again
    engine.delete(again[1])
    third = engine.write(obs("e f", 5)).node_id
    assert engine.store.get_node(third).seq == 2


def test_write_many_returns_one_result_per_observation() -> None:
    engine = make_engine()
    results = engine.write_many([obs("Mira: one", 0), obs("Mira: two", 1), obs("Mira: three", 2)])
    assert [r.node_id for r in results] == [n.id for n in engine.store.iter_nodes()]


def test_an_observation_over_the_controllers_input_limit_is_stored_over_budget() -> None:
    backend = RuleBackend()
    engine = make_engine(backend)
    engine.write(obs("Mira: a short note about Tokyo", 0))
    backend.max_state_chars = 200  # like a local model whose sequence length 300 CJK characters exceed
    result = engine.write(obs("Mira: " + "東京" * 150, 1))  # within max_memory_chars
    node = engine.store.get_node(result.node_id)
    assert node is not None and node.types == {} and node.link_status == LinkStatus.OVER_BUDGET
    assert result.link_status == LinkStatus.OVER_BUDGET and result.edges_written == 0
    assert edges_of(engine, "temporal_next")  # deterministic edges need no controller
    assert engine.store.count_nodes() == 2 and engine.store.check() == []


@pytest.mark.parametrize(
    "bad",
    [
        Observation("text with a lone \ud800 surrogate"),  # legal in JSON ("\ud800"), not encodable as UTF-8
        Observation("fine text", speaker="Mi\udcffra"),
        Observation("fine text", source_ids=("D1:\ud83d",)),
        Observation("fine text", entities=("\ud800",)),
        Observation("fine text", metadata={"note": "\udfff"}),
        Observation("fine text", metadata={"when": T0}),  # not JSON: a persistent store could not keep it
        Observation("fine text", metadata={"score": float("nan")}),  # NaN / Infinity are not JSON either
        Observation("fine text", metadata={"score": [1.0, float("-inf")]}),
        Observation("fine text", metadata=[("topic", "work")]),  # type: ignore[arg-type]  # not an object
        Observation("fine text", observed_at=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))),
        Observation("fine text", event_time=datetime.max.replace(tzinfo=timezone(timedelta(hours=-5)))),
    ],
)
def test_observations_no_store_can_keep_are_refused_as_invalid(bad: Observation) -> None:
    engine = make_engine()
    with pytest.raises(InvalidObservationError):
        engine.write(bad)
    assert engine.store.count_nodes() == 0


def test_odd_but_valid_timestamps_are_kept() -> None:
    engine = make_engine()
    times = [datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=14))), datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59),
             datetime(2020, 2, 29, tzinfo=timezone(timedelta(hours=-12))), datetime(1, 1, 2, tzinfo=timezone.utc)]
    ids = [engine.write(Observation(f"Mira: note {i}", observed_at=t, speaker="Mira")).node_id for i, t in enumerate(times)]
    assert [engine.store.get_node(i).observed_at for i in ids] == times  # type: ignore[union-attr]


def test_one_candidate_over_the_input_limit_does_not_cost_the_other_pairs() -> None:
    backend = RuleBackend({("pair", "semantic"): lambda s: 0.9})
    engine = make_engine(backend)
    backend.max_state_chars = 200
    first = engine.write(obs("Mira: data science work", 0)).node_id
    long_id = engine.write(obs("Mira: data science " + "東京" * 150, 1)).node_id
    result = engine.write(obs("Mira: data science projects", 2))
    assert result.candidates == 2 and result.link_status == LinkStatus.ASSESSED
    assert result.unjudged == (long_id,)  # not assessed, as distinct from judged and not linked
    assert [(e.src, e.dst) for e in edges_of(engine, "semantic")] == [(result.node_id, first)]
    assert engine.last_candidates is not None and long_id in engine.last_candidates.ids


def test_the_controller_reads_whose_words_a_memory_holds() -> None:
    # An API write carries its speaker beside the text; the states used to drop it, so "I prefer short
    # contracts" read the same whether the user or their client said it.
    backend = RuleBackend()
    engine = make_engine(backend)
    engine.write(obs("I prefer short contracts.", 0, speaker="Client"))
    engine.write(obs("Caroline: I prefer short contracts too.", 1))  # the speaker already leads the text
    engine.write(obs("i prefer long ones", 2, speaker="Mira"))
    engine.query("who prefers short contracts?", k=3)
    memories = {str(r.state[key]) for r in backend.requests for key in ("memory", "memory_a", "memory_b") if key in r.state}
    assert any(m.endswith("] Client: I prefer short contracts.") for m in memories)
    assert any(m.endswith("] Caroline: I prefer short contracts too.") for m in memories)
    assert not any("Caroline: Caroline:" in m for m in memories)
    typed = [r.state["observation"] for r in backend.requests if "observation" in r.state]
    assert typed[0] == "Client: I prefer short contracts." and typed[1] == "Caroline: I prefer short contracts too."
    assert {e.content for e in engine.query("short contracts", k=3).evidence} == {
        "I prefer short contracts.", "Caroline: I prefer short contracts too.", "i prefer long ones"}  # stored as given


def test_typing_cuts_a_long_text_visibly() -> None:
    backend = RuleBackend()
    engine = make_engine(backend, max_memory_chars=200)
    engine.write(obs("Mira: " + "a long note about the garden " * 20, 0))
    typed = [r.state["observation"] for r in backend.requests if "observation" in r.state]
    assert typed and len(typed[0]) <= 200 and typed[0].endswith(" [truncated]")


@pytest.mark.parametrize("key", sorted(RESERVED_METADATA))
def test_an_observation_cannot_set_the_engines_own_metadata(key: str) -> None:
    # e.g. {"links_refused": [[a, b, "semantic"]]} in a write would stop the engine from linking it as judged
    engine = make_engine()
    with pytest.raises(InvalidObservationError, match="reserved"):
        engine.write(obs("Mira: data science work", 0, metadata={key: True}))
    assert engine.store.count_nodes() == 0
    assert REFUSALS in RESERVED_METADATA


def test_other_metadata_is_kept_as_given() -> None:
    engine = make_engine()
    node_id = engine.write(obs("Mira: data science work", 0, metadata={"topic": "work", "links": 2})).node_id
    assert engine.store.get_node(node_id).metadata == {"topic": "work", "links": 2}


def test_metadata_is_stored_as_the_json_object_every_store_reads_back(tmp_path: Any) -> None:
    # a tuple or a non-text key comes back from SQLite as JSON made it ([...], "3"): the in-memory store must agree
    from controller.client import SystemOneClient
    from controller.embedding import HashingEmbedder
    from memory.engine import Engine
    from memory.store import SQLiteStore

    given = [{"pair": (1, 2), "nested": {"t": ("a",)}}, {3: "three"}]
    sqlite = Engine(SQLiteStore(tmp_path / "m.db", dim=64), SystemOneClient(RuleBackend()), HashingEmbedder(64))
    stored = []
    for engine in (make_engine(), sqlite):
        ids = [engine.write(obs(f"Mira: data science work {i}", i, metadata=m)).node_id for i, m in enumerate(given)]
        stored.append([engine.store.get_node(i).metadata for i in ids])
    sqlite.store.close()
    assert stored[0] == stored[1] == [{"pair": [1, 2], "nested": {"t": ["a"]}}, {"3": "three"}]
