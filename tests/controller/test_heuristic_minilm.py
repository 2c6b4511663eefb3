"""The heuristic backend's "minilm" embedder option, on a tiny BERT built in the test (never the real weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import SystemOneClient
from controller.families import family_questions
from controller.heuristic import HeuristicBackend

WORDS = "the a i we to of and went camping lake kids melanie caroline support group yesterday job new at with".split()


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("tiny-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, ".", ",", ":", "!"]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt")).save_pretrained(str(path))
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
        max_position_embeddings=128,
    )
    transformers.BertModel(config).save_pretrained(str(path))
    return path


def test_minilm_option_is_exact_and_invariant(tiny_bert_dir: Path) -> None:
    state = {
        "memory_a": {"content": "Melanie: we went camping at the lake with the kids.", "timestamp": "2023-07-10"},
        "memory_b": {"content": "Caroline: I went to the support group yesterday.", "timestamp": "2023-07-01"},
    }
    backend = HeuristicBackend("minilm", model_path=str(tiny_bert_dir))
    assert "MiniLM" in type(backend._embedder).__name__
    with SystemOneClient(backend) as client:
        first = client.system_one(state, family_questions("pair")).model_dump(mode="json")["answers"]
        backend.close()  # empties the embedding cache: texts are embedded again, in another order
        swapped = {"memory_b": state["memory_b"], "memory_a": state["memory_a"]}
        again = client.system_one(swapped, dict(reversed(family_questions("pair").items())))
        assert again.model_dump(mode="json")["answers"] == first
    assert 0.0 <= backend.similarity("we went camping", "the kids at the lake") <= 1.0
