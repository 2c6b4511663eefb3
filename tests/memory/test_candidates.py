"""Write-time candidate discovery: channels, weighted RRF, the K_w cut."""

from __future__ import annotations

import pytest

from controller.embedding import HashingEmbedder
from memory.candidates import discover_candidates, fuse
from memory.config import EngineConfig
from memory.store import InMemoryStore
from memory.types import LinkStatus, Node
from memory.write_path import fingerprint

EMB = HashingEmbedder(64)


def node(i: int, text: str, entities: tuple[str, ...] = (), kind: str = "observation", speaker: str | None = None) -> Node:
    return Node(f"n{i}", text, None, None, speaker, (), entities, {}, fingerprint(text), i, LinkStatus.ASSESSED, kind=kind)


def filled(texts: list[tuple[str, tuple[str, ...]]]) -> InMemoryStore:
    store = InMemoryStore(64)
    for i, (text, ents) in enumerate(texts):
        store.add_node(node(i, text, ents), EMB.embed([text])[0])
    return store


def test_fuse_is_weighted_rrf_with_stable_ties() -> None:
    scores = fuse({"a": ["x", "y"], "b": ["y", "z"], "c": ["q"]}, {"a": 1.0, "b": 0.5, "c": 0.0}, 60)
    assert list(scores) == ["y", "x", "z"]
    assert scores["y"] == pytest.approx(1 / 62 + 0.5 / 61)
    assert scores["x"] == pytest.approx(1 / 61)
    assert "q" not in scores  # zero weight: the channel does not vote


def test_channels_are_reported_and_fused() -> None:
    store = filled([
        ("the garden has tomatoes", ()),
        ("weather was rainy", ("paris",)),
        ("my tomatoes in the garden grew", ()),
        ("unrelated chat about cars", ()),
        ("last thing said", ()),
    ])
    text = "tomatoes from the garden"
    cs = discover_candidates(store, content=text, embedding=EMB.embed([text])[0], entities=("paris",), seq=5,
                             config=EngineConfig(temporal_window=2))
    assert set(cs.channels) == {"vector", "lexical", "entity", "temporal", "speaker"}
    assert cs.channels["speaker"] == ()  # no speaker given
    assert cs.channels["lexical"][:2] in (("n0", "n2"), ("n2", "n0"))
    assert cs.channels["entity"] == ("n1",)
    assert cs.channels["temporal"] == ("n4", "n3")
    assert set(cs.ids) <= set(cs.pool)
    assert cs.found_by("n1")["entity"] and not cs.found_by("n1")["lexical"]
    assert cs.found_by("n0")["shortlist"]


def test_shortlist_is_capped_at_k_w_and_skips_self_and_summaries() -> None:
    store = filled([(f"garden note number {i}", ("garden",)) for i in range(12)])
    store.add_node(node(12, "garden summary", ("garden",), kind="summary"), EMB.embed(["garden summary"])[0])
    text = "garden note number 3"
    cs = discover_candidates(store, content=text, embedding=EMB.embed([text])[0], entities=("garden",), seq=3,
                             config=EngineConfig(candidates_k=4), exclude={"n3"})
    assert len(cs.ids) == 4
    assert "n3" not in cs.pool
    assert "n12" not in cs.ids
    assert all(n.kind == "observation" for n in cs.nodes)


def test_speaker_entity_alone_does_not_make_entity_candidates() -> None:
    store = filled([("hello there", ("mira",)), ("another", ("mira", "bike"))])
    text = "new words"
    cfg = EngineConfig(w_temporal=0.0)
    cs = discover_candidates(store, content=text, embedding=EMB.embed([text])[0], entities=("mira",), seq=2,
                             config=cfg, speaker="Mira")
    assert cs.channels["entity"] == ()
    cs = discover_candidates(store, content=text, embedding=EMB.embed([text])[0], entities=("mira",), seq=2,
                             config=cfg.with_(speaker_entity_edges=True), speaker="Mira")
    assert set(cs.channels["entity"]) == {"n0", "n1"}


def test_empty_store_gives_an_empty_set() -> None:
    cs = discover_candidates(InMemoryStore(64), content="x", embedding=EMB.embed(["x"])[0], entities=(), seq=0,
                             config=EngineConfig())
    assert cs.ids == () and cs.pool == ()


def test_the_engine_exposes_the_candidates_of_its_latest_write() -> None:
    from tests.memory.engine_fakes import make_engine, obs

    engine = make_engine(consolidation_every=0)
    first = engine.write(obs("Mira: tomatoes in the garden", 0)).node_id
    engine.write(obs("Mira: the garden tomatoes are ripe", 1))
    cands = engine.last_candidates
    assert cands is not None and cands.ids == (first,)
    assert cands.found_by(first)["lexical"] and cands.found_by(first)["temporal"]


def test_speaker_channel_keeps_the_same_speakers_vector_and_lexical_hits() -> None:
    store = InMemoryStore(64)
    texts = [("Mira", "my garden tomatoes"), ("Noor", "garden tomatoes at the market"), ("Mira", "the garden needs rain"),
             ("Noor", "cars and trains"), ("Mira", "chess club tonight")]
    for i, (who, text) in enumerate(texts):
        store.add_node(node(i, f"{who}: {text}", speaker=who), EMB.embed([f"{who}: {text}"])[0])
    text = "Mira: tomatoes from the garden"
    cs = discover_candidates(store, content=text, embedding=EMB.embed([text])[0], entities=(), seq=5,
                             config=EngineConfig(temporal_window=0), speaker="mira")
    assert set(cs.channels["speaker"]) <= {"n0", "n2", "n4"} and cs.channels["speaker"][0] == "n0"
    assert cs.found_by("n0")["speaker"] and not cs.found_by("n1")["speaker"]
    off = discover_candidates(store, content=text, embedding=EMB.embed([text])[0], entities=(), seq=5,
                              config=EngineConfig(temporal_window=0, w_speaker=0.0), speaker="mira")
    assert off.channels["speaker"] == ()
    assert cs.scores["n0"] > off.scores["n0"]  # the channel votes in the fusion
