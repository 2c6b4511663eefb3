"""The facade: curated exports, `Engine.open`, persistence, and an end-to-end run on the heuristic controller."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import memory
from controller.embedding import HashingEmbedder
from memory import Engine, EngineConfig, LinkStatus, MemoryEngineError, Observation
from memory.errors import ConfigError, InvalidObservationError, NodeNotFoundError
from tests.memory.engine_fakes import RuleBackend, obs


def test_exported_members_are_curated() -> None:
    public = {name for name, value in vars(memory).items() if not name.startswith("_") and not isinstance(value, ModuleType)}
    assert set(memory.__all__) == public
    assert all(hasattr(memory, name) for name in memory.__all__)
    assert memory.__all__ == sorted(memory.__all__, key=lambda n: (not n.isupper(), n))


def test_errors_share_one_root() -> None:
    from memory.store import errors as store_errors

    for error in (InvalidObservationError, NodeNotFoundError, ConfigError, store_errors.StoreError):
        assert issubclass(error, MemoryEngineError)
    missing = store_errors.NodeNotFoundError("n9")  # what a store raises: the engine's NodeNotFoundError too
    assert isinstance(missing, NodeNotFoundError) and isinstance(missing, LookupError) and missing.node_id == "n9"
    assert "MemoryError" not in memory.__all__


def test_importing_memory_loads_no_heavy_modules() -> None:
    code = "import sys, memory; bad = [m for m in ('torch', 'onnxruntime', 'transformers', 'faiss') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == "[]"


def test_open_in_memory_with_a_backend_instance_and_a_preset() -> None:
    with Engine.open(None, controller=RuleBackend(), embedder=HashingEmbedder(32), config="fast", system_two=None) as engine:
        assert engine.config.consolidation_every == 0
        engine.write(obs("Mira: hello", 0))
        assert engine.stats().nodes == 1


def test_sqlite_store_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "mem.db"
    emb = HashingEmbedder(32)
    with Engine.open(path, controller=RuleBackend(), embedder=emb, system_two=None) as engine:
        a = engine.write(obs("Mira: My old bicycle broke.", 0, source="D1:1")).node_id
        b = engine.write(obs("Mira: I bought a new bicycle because the old bicycle broke.", 60, source="D1:2")).node_id
        engine.link(b, a, "causal")
        edges_before = engine.stats().edges
    with Engine.open(path, controller=RuleBackend(), embedder=emb, system_two=None) as engine:
        assert engine.stats().edges == edges_before
        c = engine.write(obs("Mira: the bicycle is blue", 120)).node_id
        assert engine.store.get_node(c).seq == 2
        assert any(e.relation == "causal" and e.src == b for e in engine.get(a).backlinks)
        assert engine.query("bicycle broke", k=2).evidence[0].source_ids in (("D1:1",), ("D1:2",))


def test_end_to_end_on_the_heuristic_controller() -> None:
    engine = Engine.open(None, controller="heuristic", embedder=HashingEmbedder(64), system_two=None,
                         config=EngineConfig(consolidation_every=4))
    turns = [
        "Mira: My old bicycle broke on the way to work.",
        "Tom: Oh no, are you okay?",
        "Mira: I'm fine, but I need a new bicycle.",
        "Tom: The shop on Elm Street has good bikes.",
        "Mira: I bought a new bicycle yesterday because my old one broke.",
    ]
    results = engine.write_many(obs(t, i * 30, source=f"D1:{i + 1}") for i, t in enumerate(turns))
    assert results[0].link_status == LinkStatus.EMPTY_SHORTLIST
    assert all(r.link_status == LinkStatus.ASSESSED for r in results[1:])
    assert engine.stats().consolidations == 1
    result = engine.query("Why did Mira buy a new bicycle?", k=3)
    assert {"D1:5", "D1:1"} & {s for e in result.evidence for s in e.source_ids}
    assert result.controller_requests >= 3 and set(result.route) == {"semantic", "temporal", "causal", "entity", "multi_hop", "recency"}
    engine.close()


def test_engine_rejects_a_mismatched_embedder() -> None:
    from controller.client import SystemOneClient
    from memory.store import InMemoryStore

    with pytest.raises(ValueError):
        Engine(InMemoryStore(16), SystemOneClient(RuleBackend()), HashingEmbedder(32))


def test_writes_validate_before_touching_the_store() -> None:
    with Engine.open(None, controller=RuleBackend(), embedder=HashingEmbedder(32), system_two=None) as engine:
        with pytest.raises(InvalidObservationError):
            engine.write(Observation(""))
        assert engine.stats().nodes == 0 and engine.stats().writes == 0


def test_a_reopened_store_extracts_entities_as_one_long_session_would(tmp_path: Path) -> None:
    """A sentence-initial name counts when it is a known speaker; the speakers already stored are known."""
    emb = HashingEmbedder(32)
    texts = [obs("Caroline: I went hiking.", 0), obs("Melanie: Caroline told me about the hike.", 1)]
    with Engine.open(None, controller=RuleBackend(), embedder=emb, system_two=None) as engine:
        one_session = [engine.get(engine.write(o).node_id).node.entities for o in texts]
    path = tmp_path / "mem.db"
    with Engine.open(path, controller=RuleBackend(), embedder=emb, system_two=None) as engine:
        first = engine.get(engine.write(texts[0]).node_id).node.entities
    with Engine.open(path, controller=RuleBackend(), embedder=emb, system_two=None) as engine:  # a restart
        second = engine.get(engine.write(texts[1]).node_id).node.entities
    assert one_session == [first, second] and "caroline" in second
