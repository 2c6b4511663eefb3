"""The MiniLM embedder as one ONNX graph (BERT + mean pooling + L2 normalisation), run by onnxruntime.

Graph: inputs `input_ids`, `attention_mask` (int64, dynamic axes `batch`, `sequence`), output `embeddings`
(batch, hidden) float32, rows unit-norm. Built once per model with the legacy `torch.onnx.export`, checked
against the torch path (`MiniLMEmbedder(runtime="torch")`) on fixed texts, then cached as
`$JEVMEM_CACHE/onnx/embedder-<hash>-g<GRAPH_VERSION>.onnx`, hash = blake2b of config.json and the weights file
(and, for an adapted embedder, of the adapter's digest: `controller.adapters.adapter_digest`).
A graph that fails parity raises `ParityError` and is never cached. Like the controller's graph it has a `.json`
sidecar (full model hash, graph sha256; `controller.graph_cache.write_cached_record`): a truncated, damaged
or foreign graph, or one without a sidecar, is rebuilt with a logged warning. A cache that cannot be written gets
the graph built in this process's private temporary cache instead (`controller.graph_cache.with_fallback_cache`).

Running a cached graph needs only onnxruntime and `tokenizers` (the model directory's tokenizer.json): torch
and transformers are not imported on that path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from controller.errors import ArtifactError, BackendUnavailableError, ParityError
from controller.files import fsync_file
from controller.graph_cache import (
    cache_root,
    cache_write_error,
    read_cached_record,
    remove_stale_temps,
    temp_beside,
    with_fallback_cache,
    write_cached_record,
)
from controller.onnx_runtime import create_session

log = logging.getLogger(__name__)

GRAPH_VERSION = "1"  # bump whenever `export_graph` changes what it writes
OPSET = 18
DEFAULT_ATOL = 1e-4
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "embeddings"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# Fixed parity texts of different lengths (kept under ~60 tokens so tiny test models with few positions fit).
PARITY_TEXTS = (
    "ok",
    "Caroline went to the support group yesterday.",
    "Melanie: we went camping at the lake with the kids, and the kids loved it!",
    "When did Caroline move?",
    (
        "Please fix the login bug before Friday's release; customers are blocked, and the new job "
        "starts at nine with a long list of things to do, including the group meeting at the lake."
    ),
)
_BUILD_LOCK = threading.Lock()


def model_hash(model_dir: str | Path, adapter_digest: str | None = None) -> str:
    """blake2b over config.json and the weights file (and the adapter's digest when one is merged in): names the
    cached graph of exactly these weights."""
    path = Path(model_dir)
    weights = next((path / name for name in WEIGHT_FILES if (path / name).exists()), None)
    if weights is None or not (path / "config.json").exists():
        raise ArtifactError(f"{path} needs config.json and one of {', '.join(WEIGHT_FILES)}")
    digest = hashlib.blake2b(digest_size=16)
    for file in (path / "config.json", weights):
        with open(file, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    if adapter_digest is not None:
        digest.update(b"adapter:" + adapter_digest.encode())
    return digest.hexdigest()


def graph_path(model_dir: str | Path, cache: Path | None = None, adapter_digest: str | None = None) -> Path:
    return _graph_path(model_hash(model_dir, adapter_digest), cache)


def _graph_path(digest: str, cache: Path | None) -> Path:
    return (cache or cache_root()) / "onnx" / f"embedder-{digest[:24]}-g{GRAPH_VERSION}.onnx"


def hidden_size(model_dir: str | Path) -> int:
    return int(json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))["hidden_size"])


def load_tokenizer(model_dir: str | Path, max_length: int) -> Any:
    """tokenizer.json with the padding / truncation the torch path asks for (longest in batch, `max_length`).

    The shipped file bakes in fixed padding and truncation at 128; both are replaced here. A word longer than
    WordPiece reads (100 characters: a URL, a hash) is split as the controller's template splits it
    (`controller.template.split_long_words`), so its first 100 characters are read instead of one `[UNK]`.
    """
    try:
        from tokenizers import Tokenizer
    except ImportError as error:
        raise BackendUnavailableError("the ONNX embedder needs tokenizers: pip install tokenizers") from error
    file = Path(model_dir) / "tokenizer.json"
    if not file.exists():
        raise BackendUnavailableError(f"tokenizer file not found: {file}")
    tok = Tokenizer.from_file(str(file))
    pad_id = tok.token_to_id("[PAD]")
    if pad_id is None:
        raise BackendUnavailableError(f"{file} lacks the [PAD] token")
    tok.enable_truncation(max_length=max_length)
    tok.enable_padding(pad_id=pad_id, pad_token="[PAD]")  # no length: pad to the longest in the batch
    from controller.template import split_long_words

    split_long_words(tok)  # as the torch path does (`long_word_tokenizer`)
    return tok


def encode(tokenizer: Any, texts: Sequence[str]) -> dict[str, np.ndarray]:
    encodings = tokenizer.encode_batch(list(texts)) if len(texts) > 1 else [tokenizer.encode(texts[0])]
    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),  # (B, T)
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),  # (B, T)
    }


class OnnxEncoder:
    """Tokenizer + ORT session: texts -> (n, hidden) float32 rows, unit-norm. Not thread-safe by itself."""

    def __init__(self, graph: str | Path, model_dir: str | Path, *, max_length: int, threads: int | None, device: str | None = None) -> None:
        self.tokenizer = load_tokenizer(model_dir, max_length)
        self.dim = hidden_size(model_dir)
        try:
            # Idle threads sleep at once: the embedder runs short calls between the controller's, and spinning
            # pool threads of two sessions on two cores slowed both (one-text embed 7 -> 16 ms in the engine).
            self.session = create_session(graph, threads=threads, device=device, spinning=False)
        except BackendUnavailableError:
            raise
        except Exception as error:  # onnxruntime's own types: corrupt or foreign file
            raise ArtifactError(f"cannot load the embedder graph {graph}; delete it to rebuild") from error

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if "torch" in sys.modules:  # `flush_denormals` needs torch; it is free once torch is loaded anyway
            from controller.onnx_runtime import flush_denormals

            flush_denormals()
        (out,) = self.session.run([OUTPUT_NAME], encode(self.tokenizer, texts))
        return out


def ensure_graph(
    model_dir: str | Path,
    load_model: Callable[[], Any],
    reference: Callable[[Sequence[str]], np.ndarray],
    *,
    max_length: int,
    threads: int | None = None,
    cache: Path | None = None,
    atol: float = DEFAULT_ATOL,
    adapter_digest: str | None = None,
) -> Path:
    """The cached graph for the weights in `model_dir`, exported and parity-checked on first use.

    `load_model` returns the torch `BertModel` (called only when a graph must be built); `reference` embeds
    texts on the torch path. Raises `ParityError` (graph not cached) when they disagree above `atol`. `adapter_digest`:
    that of the LoRA adapter merged into the weights `load_model` returns (`controller.adapters.adapter_digest`; part
    of the cache key).
    """
    digest = model_hash(model_dir, adapter_digest)
    model: list[Any] = []  # loaded once, even when the build moves to the fallback cache

    def build(root: Path) -> Path:
        path = _graph_path(digest, root)
        with _BUILD_LOCK:
            remove_stale_temps(path)
            if read_cached_record(path, digest) is not None:
                return path
            tokenizer = load_tokenizer(model_dir, max_length)
            tmp = temp_beside(path)  # before the model: an unwritable cache is found without loading it
            try:
                if not model:
                    model.append(load_model())  # outside the `except OSError`: a model that cannot be read is not the cache's fault
                try:
                    export_graph(model[0], tmp, encode(tokenizer, PARITY_TEXTS))
                    encoder = OnnxEncoder(tmp, model_dir, max_length=max_length, threads=threads, device="cpu")
                    diff = check_parity(encoder, reference, atol=atol)
                    del encoder
                    fsync_file(tmp)
                    os.replace(tmp, path)
                except OSError as error:  # disk full while writing, a rename refused
                    raise cache_write_error(path, error) from error
            finally:
                tmp.unlink(missing_ok=True)
            write_cached_record(path, {"model_hash": digest, "max_abs_diff": diff})
        log.info("exported the embedder graph to %s (parity max |diff| %.2e)", path, diff)
        return path

    return with_fallback_cache(cache or cache_root(), build)


def check_parity(encoder: Callable[[Sequence[str]], np.ndarray], reference: Callable[[Sequence[str]], np.ndarray], *, atol: float = DEFAULT_ATOL) -> float:
    """Max |diff| over the parity texts, as one padded batch and one at a time; `ParityError` above `atol`."""
    worst = 0.0
    for texts in (list(PARITY_TEXTS), *([t] for t in PARITY_TEXTS)):
        got, ref = encoder(texts), reference(texts)
        if got.shape != ref.shape or not np.all(np.isfinite(got)):
            raise ParityError(f"the embedder graph returned {got.shape} (expected {ref.shape}) or non-finite values", max_abs_diff=float("inf"), atol=atol)
        worst = max(worst, float(np.abs(got - ref).max(initial=0.0)))
    if worst > atol:
        raise ParityError(f"the embedder graph differs from torch by {worst:.3g} (tolerance {atol:g})", max_abs_diff=worst, atol=atol)
    return worst


def export_graph(model: Any, path: Path, example: dict[str, np.ndarray]) -> None:
    """`torch.onnx.export` (legacy TorchScript exporter) of BERT + masked mean pooling + L2 normalisation.

    `example` must contain padding: the attention mask path is traced, and a mask of all ones may be
    traced away by the model's shortcuts.
    """
    import torch

    from controller.embedding import mean_pool

    class Pooled(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
            pooled = mean_pool(hidden, attention_mask)  # (B, H)
            return pooled / pooled.norm(dim=1, keepdim=True).clamp(min=1e-12)

    if bool(example["attention_mask"].all()):
        raise ValueError("the export example needs a padded row")
    # eval() on the wrapper: the exporter restores the wrapper's mode afterwards, recursively, and a fresh
    # module is in training mode, which would leave the caller's model with dropout on.
    wrapper = Pooled(model).eval()
    args = tuple(torch.from_numpy(example[name]) for name in INPUT_NAMES)
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the legacy exporter warns that it is legacy; it is chosen on purpose
        torch.onnx.export(
            wrapper,
            args,
            str(path),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes={**axes, OUTPUT_NAME: {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )
