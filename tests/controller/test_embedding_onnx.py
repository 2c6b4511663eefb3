"""`MiniLMEmbedder(runtime="onnx")` against the torch path, on the tiny BERT of conftest (never the real weights)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller import embedding_onnx
from controller.embedding import MiniLMEmbedder, _normalise
from controller.errors import ArtifactError, ParityError

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

TEXTS = [
    "ok",
    "Melanie: we went camping at the lake with the kids.",
    "Caroline went to the LGBTQ support group on 7 May 2023 and felt welcome.",
    "When did Caroline move to Sweden, and who helped her pack?",
    " ".join(["the kids loved the lake"] * 70),  # > 256 tokens: truncated
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("embedder-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JEVMEM_CACHE", str(path))
        yield path


@pytest.fixture(scope="module")
def torch_embedder(tiny_base_dir: Path) -> MiniLMEmbedder:
    return MiniLMEmbedder(tiny_base_dir, runtime="torch")


@pytest.fixture(scope="module")
def onnx_embedder(tiny_base_dir: Path, cache: Path) -> MiniLMEmbedder:
    emb = MiniLMEmbedder(tiny_base_dir, runtime="onnx", threads=2, device="cpu")
    emb.embed(["build the graph"])
    return emb


def test_onnx_matches_torch_on_a_mixed_batch_and_single_texts(onnx_embedder: MiniLMEmbedder, torch_embedder: MiniLMEmbedder) -> None:
    got, ref = onnx_embedder.embed(TEXTS), torch_embedder.embed(TEXTS)
    assert got.shape == ref.shape == (len(TEXTS), 32) and got.dtype == np.float32
    assert float(np.abs(got - ref).max()) <= 1e-4
    for text in TEXTS:
        assert float(np.abs(onnx_embedder.embed([text]) - torch_embedder.embed([text])).max()) <= 1e-4
    assert onnx_embedder.name == torch_embedder.name == "minilm"


def test_rows_are_unit_norm_and_keep_input_order(onnx_embedder: MiniLMEmbedder) -> None:
    out = onnx_embedder.embed(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    order = [3, 0, 4, 2, 1]
    shuffled = onnx_embedder.embed([TEXTS[i] for i in order])
    np.testing.assert_allclose(shuffled, out[order], atol=1e-5)
    singles = np.concatenate([onnx_embedder.embed([t]) for t in TEXTS])
    np.testing.assert_allclose(singles, out, atol=1e-5)
    assert float(np.abs(out[0] - out[1]).max()) > 1e-3  # distinct texts, distinct rows


def test_batches_larger_than_batch_size_are_chunked(tiny_base_dir: Path, cache: Path, onnx_embedder: MiniLMEmbedder) -> None:
    small = MiniLMEmbedder(tiny_base_dir, runtime="onnx", batch_size=2)
    np.testing.assert_allclose(small.embed(TEXTS), onnx_embedder.embed(TEXTS), atol=1e-5)


def test_empty_input_gives_zero_rows(onnx_embedder: MiniLMEmbedder) -> None:
    out = onnx_embedder.embed([])
    assert out.shape == (0, 32) and out.dtype == np.float32


def test_cached_graph_is_reused_without_export_or_torch_model(tiny_base_dir: Path, cache: Path, onnx_embedder: MiniLMEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    (graph,) = (cache / "onnx").glob("embedder-*-g1.onnx")
    assert graph == embedding_onnx.graph_path(tiny_base_dir)
    mtime = graph.stat().st_mtime_ns

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached graph must not be rebuilt")

    monkeypatch.setattr(embedding_onnx, "export_graph", refuse)
    monkeypatch.setattr(MiniLMEmbedder, "_load_torch", refuse)
    again = MiniLMEmbedder(tiny_base_dir, runtime="onnx")
    np.testing.assert_array_equal(again.embed(TEXTS), onnx_embedder.embed(TEXTS))
    assert graph.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in (cache / "onnx").iterdir()) == sorted([graph.name, graph.with_suffix(".json").name])  # no temp files


def test_cached_path_imports_neither_torch_nor_transformers(tiny_base_dir: Path, cache: Path, onnx_embedder: MiniLMEmbedder) -> None:
    code = (
        "import sys\nfrom controller.embedding import MiniLMEmbedder\n"
        f"out = MiniLMEmbedder({str(tiny_base_dir)!r}, runtime='onnx').embed(['a short text', 'and another one'])\n"
        "assert out.shape == (2, 32), out.shape\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    env = {**os.environ, "JEVMEM_CACHE": str(cache)}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_graph_failing_parity_raises_and_is_not_cached(tiny_base_dir: Path, tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (model_dir / name).write_bytes((tiny_base_dir / name).read_bytes())
    (model_dir / "config.json").write_text((tiny_base_dir / "config.json").read_text() + "\n")  # another hash
    reference = MiniLMEmbedder(model_dir, runtime="torch")

    def load_model() -> object:
        reference._load_torch()
        return reference._model

    def off_by_a_bit(texts: object) -> np.ndarray:
        return _normalise(reference._embed_torch(texts)) + 1e-3  # type: ignore[arg-type]

    with pytest.raises(ParityError) as info:
        embedding_onnx.ensure_graph(model_dir, load_model, off_by_a_bit, max_length=256, cache=tmp_path / "cache")
    assert info.value.max_abs_diff > 1e-4
    assert list((tmp_path / "cache" / "onnx").iterdir()) == []


def test_auto_picks_onnx_when_installed_else_torch(tiny_base_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert MiniLMEmbedder(tiny_base_dir).runtime == "onnx"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnx" else real(name, *a))
    assert MiniLMEmbedder(tiny_base_dir, runtime="auto").runtime == "torch"
    assert MiniLMEmbedder(tiny_base_dir, runtime="onnx").runtime == "onnx"


def test_unknown_runtime_is_refused() -> None:
    with pytest.raises(ValueError, match="bogus"):
        MiniLMEmbedder(runtime="bogus")  # type: ignore[arg-type]


def _fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("JEVMEM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _assert_matches_torch(tiny_base_dir: Path, torch_embedder: MiniLMEmbedder) -> None:
    got = MiniLMEmbedder(tiny_base_dir, runtime="onnx").embed(TEXTS)
    assert float(np.abs(got - torch_embedder.embed(TEXTS)).max()) <= 1e-4


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_cached_graph_is_rebuilt_with_a_warning(
    tiny_base_dir: Path, torch_embedder: MiniLMEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    _fresh_cache(monkeypatch, tmp_path)
    MiniLMEmbedder(tiny_base_dir, runtime="onnx").embed(["build it"])
    graph = embedding_onnx.graph_path(tiny_base_dir)
    whole = graph.read_bytes()
    graph.write_bytes(whole[: len(whole) // 2] if damage == "truncated" else b"not a graph")  # a copy cut short, a bad disk
    with caplog.at_level("WARNING", logger="controller.onnx_runtime"):
        _assert_matches_torch(tiny_base_dir, torch_embedder)
    assert any("rebuilding the cached graph" in r.getMessage() and graph.name in r.getMessage() for r in caplog.records)
    assert len(graph.read_bytes()) == len(whole)


def test_a_graph_without_its_sidecar_is_rebuilt_with_a_warning(
    tiny_base_dir: Path, torch_embedder: MiniLMEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _fresh_cache(monkeypatch, tmp_path)
    graph = embedding_onnx.graph_path(tiny_base_dir)
    graph.parent.mkdir(parents=True)
    graph.write_bytes(b"not a graph")  # e.g. left by an older version, which kept no sidecar
    with caplog.at_level("WARNING", logger="controller.onnx_runtime"):
        _assert_matches_torch(tiny_base_dir, torch_embedder)
    assert any("rebuilding the cached graph" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("copy_sidecar", [False, True])
def test_another_models_graph_under_this_name_is_rebuilt(
    tiny_base_dir: Path, tiny_config: Any, torch_embedder: MiniLMEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy_sidecar: bool
) -> None:
    import torch
    from transformers import BertModel

    _fresh_cache(monkeypatch, tmp_path)
    other_dir = tmp_path / "other-model"
    torch.manual_seed(2)
    BertModel(tiny_config, add_pooling_layer=False).save_pretrained(str(other_dir))
    shutil.copy(tiny_base_dir / "tokenizer.json", other_dir / "tokenizer.json")
    MiniLMEmbedder(tiny_base_dir, runtime="onnx").embed(["build it"])
    MiniLMEmbedder(other_dir, runtime="onnx").embed(["build it"])
    graph, other = embedding_onnx.graph_path(tiny_base_dir), embedding_onnx.graph_path(other_dir)
    shutil.copyfile(other, graph)  # a stale or swapped file: it loads fine but embeds like another model
    if copy_sidecar:
        shutil.copyfile(other.with_suffix(".json"), graph.with_suffix(".json"))
    _assert_matches_torch(tiny_base_dir, torch_embedder)


def test_a_graph_onnxruntime_cannot_load_is_an_artifact_error(tiny_base_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib
    import json

    _fresh_cache(monkeypatch, tmp_path)
    MiniLMEmbedder(tiny_base_dir, runtime="onnx").embed(["build it"])
    graph = embedding_onnx.graph_path(tiny_base_dir)
    garbage = b"not a graph"
    graph.write_bytes(garbage)  # what an onnxruntime of another version may make of a graph that passed parity
    sidecar = graph.with_suffix(".json")
    record = json.loads(sidecar.read_text(encoding="utf-8"))
    sidecar.write_text(json.dumps({**record, "sha256": hashlib.sha256(garbage).hexdigest()}), encoding="utf-8")
    with pytest.raises(ArtifactError, match="delete it to rebuild"):
        MiniLMEmbedder(tiny_base_dir, runtime="onnx").embed(["x"])


def test_stale_temporaries_of_a_killed_build_are_removed(tiny_base_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fresh_cache(monkeypatch, tmp_path)
    graph = embedding_onnx.graph_path(tiny_base_dir)
    graph.parent.mkdir(parents=True)
    stale, live = graph.with_name(graph.stem + ".k1ll3d.tmp"), graph.with_name(graph.stem + ".l1ve.tmp")
    other = graph.with_name("embedder-0123456789abcdef01234567-g1.0ther.tmp")  # another entry's: not ours to judge
    for file in (stale, live, other):
        file.write_bytes(b"half an export")
    old = time.time() - 2 * 24 * 3600
    for file in (stale, other):
        os.utime(file, (old, old))
    MiniLMEmbedder(tiny_base_dir, runtime="onnx").embed(["build it"])
    assert not stale.exists() and live.exists() and other.exists()
    live_time = time.time() - 2 * 24 * 3600
    os.utime(live, (live_time, live_time))  # the next run, days later, finds the entry cached: still swept
    MiniLMEmbedder(tiny_base_dir, runtime="onnx").embed(["again"])
    assert not live.exists() and other.exists()


def test_a_word_longer_than_wordpiece_reads_is_embedded_from_its_characters_on_both_paths(
    onnx_embedder: MiniLMEmbedder, torch_embedder: MiniLMEmbedder
) -> None:
    long_word = "lake" * 40  # 160 characters: past WordPiece's 100, one [UNK] without the split
    other_long = "kids" * 40
    texts = [f"we met at {long_word} today", f"we met at {other_long} today"]
    tok = onnx_embedder._onnx.tokenizer
    unk = tok.token_to_id("[UNK]")
    ids = tok.encode(texts[0]).ids
    assert unk not in ids and len(ids) > 8  # the first 100 characters as pieces, the rest too (within the limit)
    assert torch_embedder._tokenizer(texts[0])["input_ids"] == ids  # both paths tokenize alike
    got, ref = onnx_embedder.embed(texts), torch_embedder.embed(texts)
    assert float(np.abs(got - ref).max()) <= 1e-4
    assert float(np.abs(got[0] - got[1]).max()) > 1e-3  # two different long words no longer embed as the same [UNK]
