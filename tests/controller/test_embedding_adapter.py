"""An embedder with a retrieval adapter merged in (`MiniLMEmbedder(adapter=...)`, `create_embedder("minilm-tuned")`),
on the tiny BERT of conftest with a random LoRA adapter (never the real weights)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from controller import embedding
from controller.adapters import adapter_digest, quiet_peft
from controller.embedding import MiniLMEmbedder, create_embedder, is_minilm
from controller.errors import ArtifactError

pytest.importorskip("torch")
pytest.importorskip("peft")

TEXTS = ["What exercises has John done?", "John: I started a weekend yoga class", "ok"]


def _adapter(base: Path, out: Path, seed: int) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel

    torch.manual_seed(seed)
    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["query", "value"], init_lora_weights=False)  # B != 0: not a no-op
    with quiet_peft():
        get_peft_model(AutoModel.from_pretrained(str(base)), lora).save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def adapter(tiny_base_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _adapter(tiny_base_dir, tmp_path_factory.mktemp("adapter") / "a", seed=1)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("adapted-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JEVMEM_CACHE", str(path))
        yield path


def test_the_adapter_changes_the_vectors_as_a_merged_peft_model_would(tiny_base_dir: Path, adapter: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModel, AutoTokenizer

    adapted = MiniLMEmbedder(tiny_base_dir, adapter=adapter, runtime="torch").embed(TEXTS)
    base = MiniLMEmbedder(tiny_base_dir, runtime="torch").embed(TEXTS)
    assert np.abs(adapted - base).max() > 1e-3
    with quiet_peft():
        merged = PeftModel.from_pretrained(AutoModel.from_pretrained(str(tiny_base_dir)), str(adapter)).merge_and_unload().eval()
    enc = AutoTokenizer.from_pretrained(str(tiny_base_dir))(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = embedding.mean_pool(merged(**enc).last_hidden_state, enc["attention_mask"]).numpy()
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(adapted, expected, atol=1e-5)


def test_the_name_carries_the_adapter_digest(tiny_base_dir: Path, adapter: Path, tmp_path: Path) -> None:
    first = MiniLMEmbedder(tiny_base_dir, adapter=adapter, name="minilm-tuned")
    assert first.name == f"minilm-tuned:{adapter_digest(adapter)[:8]}" and is_minilm(first)
    assert MiniLMEmbedder(tiny_base_dir, adapter=adapter).name.startswith("minilm-adapted:")
    other = _adapter(tiny_base_dir, tmp_path / "b", seed=2)
    assert MiniLMEmbedder(tiny_base_dir, adapter=other, name="minilm-tuned").name != first.name
    assert MiniLMEmbedder(tiny_base_dir).name == "minilm" and not is_minilm("hashing")


def test_the_onnx_graph_of_an_adapted_model_is_its_own(tiny_base_dir: Path, adapter: Path, cache: Path) -> None:
    torch_path = MiniLMEmbedder(tiny_base_dir, adapter=adapter, runtime="torch").embed(TEXTS)
    onnx = MiniLMEmbedder(tiny_base_dir, adapter=adapter, runtime="onnx", device="cpu")
    np.testing.assert_allclose(onnx.embed(TEXTS), torch_path, atol=1e-4)
    base = MiniLMEmbedder(tiny_base_dir, runtime="onnx", device="cpu").embed(TEXTS)
    assert np.abs(base - torch_path).max() > 1e-3  # the base graph is not served for the adapted model
    assert len(list((cache / "onnx").glob("embedder-*.onnx"))) == 2


def test_a_missing_or_broken_adapter_is_an_artifact_error(tiny_base_dir: Path, adapter: Path, tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="lacks a readable adapter_config.json"):
        MiniLMEmbedder(tiny_base_dir, adapter=tmp_path / "nowhere")
    broken = tmp_path / "broken"
    shutil.copytree(adapter, broken)
    (broken / "adapter_model.safetensors").write_bytes(b"not safetensors")
    emb = MiniLMEmbedder(tiny_base_dir, adapter=broken, runtime="torch")
    with pytest.raises(ArtifactError, match="cannot apply the embedder adapter") as info:
        emb.embed(["x"])
    assert info.value.__cause__ is not None


def test_create_embedder_names(tiny_base_dir: Path, adapter: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(embedding, "TUNED_ADAPTER_DIR", adapter)
    tuned = create_embedder("minilm-tuned", model_path=tiny_base_dir, runtime="torch")
    assert tuned.name == f"minilm-tuned:{adapter_digest(adapter)[:8]}"
    # a store's recorded name selects the family; the store compares the digest
    assert create_embedder("minilm-tuned:00000000", model_path=tiny_base_dir).name == tuned.name
    with pytest.raises(ValueError, match="unknown embedder 'minilm:abc'"):
        create_embedder("minilm:abc")
    with pytest.raises(ValueError, match="minilm-tuned"):
        create_embedder("bogus")
    monkeypatch.setattr(embedding, "TUNED_ADAPTER_DIR", tmp_path / "none")
    with pytest.raises(ArtifactError, match="make train"):
        create_embedder("minilm-tuned")


def test_the_shipped_adapter_is_present_and_small() -> None:
    files = {p.name: p.stat().st_size for p in embedding.TUNED_ADAPTER_DIR.iterdir()}
    assert set(files) == {"adapter_config.json", "adapter_model.safetensors", "embedder.json"}
    assert files["adapter_model.safetensors"] < 4_000_000
    assert "/" not in (embedding.TUNED_ADAPTER_DIR / "adapter_config.json").read_text().split('"base_model_name_or_path": ')[1].split(",")[0]
