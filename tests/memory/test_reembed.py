"""`memory.reembed` / `jevmem reembed`: converting a SQLite store to another embedder, all or nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from controller import embedding
from controller.embedding import HashingEmbedder
from memory import Engine
from memory.reembed import reembed
from memory.store import SQLiteStore, StoreConfigError, StoreError
from memory.store.sqlite_schema import stored_embedder
from serving import cli
from tests.memory.engine_fakes import RuleBackend, obs

TEXTS = ["Mira: My old bicycle broke.", "Mira: I bought a new bicycle.", "Tom: I am learning to paint landscapes."]


class OtherEmbedder(HashingEmbedder):
    """Another weight-free model: hashing of the reversed text, so its vectors differ from `HashingEmbedder`'s."""

    name = "other"

    def __init__(self, dim: int = 384, *, fail_after: int | None = None) -> None:
        super().__init__(dim)
        self.calls = 0
        self.fail_after = fail_after

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise RuntimeError("embedder died mid-way")
        return super().embed([t[::-1] for t in texts])


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "mem.db"
    with Engine.open(path, controller=RuleBackend(), embedder="hashing", system_two=None) as engine:
        for i, text in enumerate(TEXTS):
            engine.write(obs(text, i))
    return path


def _vectors(path: Path, embedder: str) -> dict[str, np.ndarray]:
    with SQLiteStore(path, dim=384, embedder=embedder) as store:
        return {n.id: store.embedding(n.id) for n in store.iter_nodes()}  # type: ignore[misc]


def test_every_vector_is_replaced_and_the_new_name_recorded(tmp_path: Path) -> None:
    path = _store(tmp_path)
    before = _vectors(path, "hashing")
    result = reembed(path, OtherEmbedder(), batch_size=2)
    assert result.changed and result.nodes == len(before) >= 3 and (result.before, result.after) == ("hashing", "other")
    assert stored_embedder(path) == "other"
    with SQLiteStore(path, dim=384, embedder="other") as store:
        for node in store.iter_nodes():
            expected = OtherEmbedder().embed([node.content])[0]
            np.testing.assert_array_equal(store.embedding(node.id), expected)
            assert not np.array_equal(store.embedding(node.id), before[node.id])
            assert store.vector_search(expected, 1)[0][0] == node.id  # the faiss index holds the new vectors
        assert store.check() == []
    with pytest.raises(StoreConfigError, match="jevmem reembed"):
        SQLiteStore(path, dim=384, embedder="hashing")


def test_the_index_saved_on_close_is_the_new_one(tmp_path: Path) -> None:
    path = _store(tmp_path)
    reembed(path, OtherEmbedder())
    with SQLiteStore(path, dim=384, embedder="other") as store:  # loads the saved .faiss (no rebuild warning)
        node = next(store.iter_nodes())
        assert store.vector_search(OtherEmbedder().embed([node.content])[0], 1)[0][0] == node.id


def test_a_store_already_on_the_embedder_is_left_unless_forced(tmp_path: Path) -> None:
    path = _store(tmp_path)
    emb = OtherEmbedder()
    reembed(path, emb)
    calls = emb.calls
    again = reembed(path, emb)
    assert not again.changed and emb.calls == calls
    assert reembed(path, emb, force=True).changed and emb.calls > calls


def test_a_failure_mid_way_leaves_the_old_vectors_and_name(tmp_path: Path) -> None:
    path = _store(tmp_path)
    before = _vectors(path, "hashing")
    with pytest.raises(RuntimeError, match="mid-way"):
        reembed(path, OtherEmbedder(fail_after=1), batch_size=1)
    assert stored_embedder(path) == "hashing"
    after = _vectors(path, "hashing")
    assert after.keys() == before.keys() and all(np.array_equal(after[k], before[k]) for k in before)


def test_replace_embeddings_needs_one_vector_per_node(tmp_path: Path) -> None:
    path = _store(tmp_path)
    with SQLiteStore(path, dim=384) as store:
        seqs = [n.seq for n in store.iter_nodes()]
        with pytest.raises(StoreError, match="one vector per node"):
            store.replace_embeddings(seqs[:-1], np.ones((len(seqs) - 1, 384), np.float32), "other")
    assert stored_embedder(path) == "hashing"


def test_bad_targets_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no memory store"):
        reembed(tmp_path / "none.db", OtherEmbedder())
    path = _store(tmp_path)
    with pytest.raises(StoreConfigError):
        reembed(path, OtherEmbedder(dim=32))
    with pytest.raises(ValueError, match="batch_size"):
        reembed(path, OtherEmbedder(), batch_size=0)
    assert stored_embedder(path) == "hashing"


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = _store(tmp_path)
    monkeypatch.setattr(embedding, "create_embedder", lambda name: OtherEmbedder())
    assert cli.main(["reembed", "--db", str(path), "--embedder", "minilm"]) == 0
    assert "re-embedded 3 nodes" in capsys.readouterr().out and stored_embedder(path) == "other"
    assert cli.main(["reembed", "--db", str(path), "--embedder", "minilm"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert cli.main(["reembed", "--db", str(tmp_path / "none.db"), "--embedder", "minilm"]) == 2
    assert "no memory store" in capsys.readouterr().err


def test_a_store_is_opened_with_the_embedder_it_recorded_and_a_new_one_with_the_default(tmp_path: Path) -> None:
    from memory.store.sqlite_schema import DEFAULT_EMBEDDER, resolve_embedder

    path = _store(tmp_path)  # built with hashing
    assert resolve_embedder(path) == "hashing"
    assert resolve_embedder(path, "minilm") == "minilm"  # named: what was asked (the store then checks it)
    assert resolve_embedder(tmp_path / "new.db") == DEFAULT_EMBEDDER == "minilm-tuned"
    assert resolve_embedder(None) == DEFAULT_EMBEDDER  # an in-memory store
    (tmp_path / "junk.db").write_bytes(b"not a database")
    assert resolve_embedder(tmp_path / "junk.db") == DEFAULT_EMBEDDER  # the store itself refuses it on open
