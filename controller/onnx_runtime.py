"""Build-once ONNX graphs (cached by artifact hash outside the repo) and onnxruntime sessions.

Cache: `$JEVMEM_CACHE` (default `~/.cache/jevmem`) / `onnx/<hash>-<method>-g<GRAPH_VERSION>-<precision>.onnx`
plus a `.json` sidecar with its parity result, the full model hash and the graph file's sha256; a graph is only
cached after it passed parity. Writes (graph and sidecar) go to a temporary file renamed into place, so
concurrent builders never leave a half-written file; an entry whose sidecar is missing, unreadable or names
another model, or whose graph no longer has the recorded sha256 (truncated, edited, swapped), is rebuilt.
The file-system side (sidecars, temporaries, the fallback) is `controller.graph_cache`, shared with the
embedder's graph (`controller.embedding_onnx`). Cached files get the permissions of any new file (the umask's),
so a cache built by one account (an image build) is readable by the service that runs it. A read-only cache that
already holds a valid graph is served as it is; one that cannot be written (a read-only directory, a file in the
way, a full disk) and lacks the graph gets it built into a private temporary directory instead (one per process,
removed at exit, a warning naming the cache logged once), so every process rebuilds it until the cache is
writable. Only when that directory cannot be written either is it `BackendUnavailableError` naming the cache.

int8 (`quantize_dynamic`, weights int8 per channel, activations quantized per tensor at run time) is only
used after two checks on fixed requests: logits within `int8_atol` of the fp32 graph, and answers independent
of what else is in the sequence or the batch (within `invariance_atol`). A per-tensor activation scale is
shared by every token of a batch, so the second check is expected to fail; `ParityError` reports by how much.
(Per-token scales do not rescue it: fp32 noise of 1e-7 from a different sequence length still flips roundings,
measured 6e-3 on the logits, and the extra quantise ops ate the speed-up.)
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from controller.errors import BackendUnavailableError, ParityError
from controller.families import family_questions
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
from controller.onnx_export import DEFAULT_ATOL, ExportMethod, check_parity, export_onnx
from controller.packing import PackedBatch, invariance_max_diff, make_batches
from controller.questions import normalize_questions
from controller.template import TemplateTokenizer, TokenizedRequest, tokenize_request

if TYPE_CHECKING:
    from controller.torch_model import PackedCrossEncoder

log = logging.getLogger(__name__)

GRAPH_VERSION = "1"  # bump whenever a graph builder changes what it writes
Precision = Literal["fp32", "int8"]
_BUILD_LOCK = threading.RLock()


@dataclass(frozen=True)
class GraphInfo:
    path: str
    method: str
    precision: str
    max_abs_diff: float  # vs torch (fp32) or vs the fp32 graph (int8)
    invariance_diff: float | None = None  # int8 only: max logit change from packing / batching


def parity_requests(tokenizer: TemplateTokenizer) -> list[TokenizedRequest]:
    """Fixed requests of different lengths and all three kinds (used for parity and invariance checks)."""
    from controller.backend import BackendRequest

    def req(state: Any, wire: dict[str, Any]) -> TokenizedRequest:
        return tokenize_request(BackendRequest(state, tuple(normalize_questions(wire).values())), tokenizer)

    score = {"urgency": {"type": "score", "instructions": "How urgent is it?", "criteria": ["Can wait", "This week", "Today"]}}
    return [
        req({"observation": "I go hiking in the Alps every summer with my sister."}, family_questions("typing")),
        req({"memory_a": {"content": "Mel painted a sunset on 3 May."}, "memory_b": {"content": "Mel took up painting to relax."}}, family_questions("pair")),
        req("Please fix the login bug before Friday's release, customers are blocked.", score),
        req({"query": "When did Caroline move?"}, family_questions("routing", ("temporal", "multi_hop"))),
    ]


def parity_batches(tokenizer: TemplateTokenizer) -> list[PackedBatch]:
    requests = parity_requests(tokenizer)
    packed, _ = make_batches(requests, encoding="packed")
    npair, _ = make_batches(requests[:1], encoding="npair")
    return packed + npair


def graph_path(model_hash: str, method: str, precision: str, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / "onnx" / f"{model_hash[:24]}-{method}-g{GRAPH_VERSION}-{precision}.onnx"


def ensure_graph(
    model: PackedCrossEncoder,
    model_hash: str,
    tokenizer: TemplateTokenizer,
    *,
    method: ExportMethod = "fused",
    precision: Precision = "fp32",
    cache: Path | None = None,
    atol: float = DEFAULT_ATOL,
    int8_atol: float = 0.05,
    invariance_atol: float = 1e-5,
) -> GraphInfo:
    """The cached graph for this model, built and checked on first use. Raises `ParityError` on failure.

    A cache that cannot be written gets the graph built in a private temporary one (`with_fallback_cache`)."""
    options = {"method": method, "atol": atol, "int8_atol": int8_atol, "invariance_atol": invariance_atol}
    return with_fallback_cache(cache or cache_root(), lambda root: _ensure_graph(model, model_hash, tokenizer, precision, root, **options))


def _ensure_graph(
    model: PackedCrossEncoder,
    model_hash: str,
    tokenizer: TemplateTokenizer,
    precision: Precision,
    cache: Path,
    *,
    method: ExportMethod,
    atol: float,
    int8_atol: float,
    invariance_atol: float,
) -> GraphInfo:
    path = graph_path(model_hash, method, precision, cache)
    with _BUILD_LOCK:
        remove_stale_temps(path)
        record = read_cached_record(path, model_hash, ("method", "precision", "max_abs_diff"))
        if record is not None:
            return GraphInfo(str(path), record["method"], record["precision"], record["max_abs_diff"], record.get("invariance_diff"))
        inputs = parity_batches(tokenizer)
        if precision == "fp32":
            tmp = temp_beside(path)
            try:
                report = export_onnx(model, tmp, inputs, method=method, atol=atol)  # flushed to disk
                os.replace(tmp, path)
            except OSError as error:  # disk full while writing, a rename refused
                raise cache_write_error(path, error) from error
            finally:
                tmp.unlink(missing_ok=True)
            info = GraphInfo(str(path), method, precision, report.max_abs_diff)
        else:
            fp32 = _ensure_graph(model, model_hash, tokenizer, "fp32", cache, method=method, atol=atol, int8_atol=int8_atol,
                                 invariance_atol=invariance_atol)
            info = _build_int8(tokenizer, path, Path(fp32.path), method, int8_atol, invariance_atol)
        write_cached_record(path, {**asdict(info), "model_hash": model_hash})
        return info


def _build_int8(tokenizer: TemplateTokenizer, path: Path, fp32_path: Path, method: str, int8_atol: float, invariance_atol: float) -> GraphInfo:
    tmp = temp_beside(path)
    try:
        try:
            _quantize(fp32_path, tmp)
        except OSError as error:
            raise cache_write_error(path, error) from error
        int8 = create_session(tmp, threads=2, device="cpu")
        ref = create_session(fp32_path, threads=2, device="cpu")
        diff = max(float(np.abs(_run(int8, b) - _run(ref, b))[b.valid_markers()].max(initial=0.0)) for b in parity_batches(tokenizer))
        inv = invariance_max_diff(lambda b: _run(int8, b), parity_requests(tokenizer), "packed")
        if diff > int8_atol or inv > invariance_atol:
            raise ParityError(
                f"int8 graph refused: logits differ from fp32 by up to {diff:.3g} (tolerance {int8_atol:g}) and change by up to "
                f"{inv:.3g} when the same question is packed or batched differently (tolerance {invariance_atol:g})",
                max_abs_diff=max(diff, inv),
                atol=min(int8_atol, invariance_atol),
            )
        try:
            fsync_file(tmp)
            os.replace(tmp, path)
        except OSError as error:
            raise cache_write_error(path, error) from error
    finally:
        tmp.unlink(missing_ok=True)
    return GraphInfo(str(path), method, "int8", diff, inv)


def quantize_unchecked(model_hash: str, method: str, cache: Path | None = None) -> Path:
    """The int8 graph without the acceptance checks (for the benchmark's report only, never for serving)."""
    fp32_path = graph_path(model_hash, method, "fp32", cache)
    out = fp32_path.with_name(fp32_path.stem.replace("fp32", "int8-unchecked") + ".onnx")
    remove_stale_temps(out)
    if not out.exists():
        tmp = temp_beside(out)
        try:
            _quantize(fp32_path, tmp)
            fsync_file(tmp)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    return out


def _quantize(fp32_path: Path, out: Path) -> None:
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # Contrib ops (Attention, SkipLayerNormalization) defeat ONNX shape inference; their outputs are float.
    extra = {"DefaultTensorType": TensorProto.FLOAT}
    quantize_dynamic(str(fp32_path), str(out), per_channel=True, weight_type=QuantType.QInt8, extra_options=extra)


def create_session(path: str | Path, *, threads: int | None = 2, device: str | None = None, spinning: bool = True) -> Any:
    """An ORT session: CUDA first when available (or asked for), CPU otherwise; all graph optimisations.

    `spinning=False` lets idle intra-op threads sleep at once: slower on an idle machine, but fair to other
    work in the same process (the benchmark interleaves torch and onnxruntime).
    """
    try:
        import onnxruntime as ort
    except ImportError as error:
        raise BackendUnavailableError("the ONNX runtime needs onnxruntime: pip install onnxruntime") from error
    available = ort.get_available_providers()
    if device == "cuda" and "CUDAExecutionProvider" not in available:
        raise BackendUnavailableError("device='cuda' was requested but onnxruntime has no CUDAExecutionProvider")
    providers = ["CPUExecutionProvider"]
    if device != "cpu" and "CUDAExecutionProvider" in available:
        providers.insert(0, "CUDAExecutionProvider")
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(threads or 0)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # Masked attention entries underflow to denormals; on x86 they slow the Attention kernel down about 2x.
    # This flushes them to zero on ORT's own threads and the creating thread (see `flush_denormals`).
    options.add_session_config_entry("session.set_denormal_as_zero", "1")
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=providers)


_FLUSHED = threading.local()


def flush_denormals() -> None:
    """Flush-to-zero / denormals-are-zero on the calling thread (MXCSR is per thread), once per thread.

    onnxruntime sets it for its pool threads, but the thread that calls `run` does part of the work too.
    Denormals this small (< 1.2e-38) never change a probability.
    """
    if not getattr(_FLUSHED, "done", False):
        import torch

        torch.set_flush_denormal(True)
        _FLUSHED.done = True


def verify_session(session: Any, model: PackedCrossEncoder, tokenizer: TemplateTokenizer, atol: float = DEFAULT_ATOL) -> float:
    """Parity of a (cached) graph against the torch model it claims to be; `ParityError` above `atol`."""
    return check_parity(session, model, parity_batches(tokenizer), atol=atol)


def _run(session: Any, batch: PackedBatch) -> np.ndarray:
    return session.run(["logits"], batch.arrays())[0]
