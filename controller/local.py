"""The trained local controller as a `Backend`: template -> packed batches -> ONNX (or torch) -> calibration.

    backend = LocalBackend.load()                       # controller/models/jevmem-minilm, else UNTRAINED base
    backend = LocalBackend.load(dir, runtime="torch", encoding="npair")
    backend = LocalBackend.load(overflow="truncate_state")  # cut an over-long state to fit, reported per result

A model directory with family specialists (`controller.specialists`) loads each as a sub-backend with the same
options; a request whose questions all belong to a specialist's family is answered by it.

All requests of one `answer` call are tokenized, split into rows, sorted by length and run as padded
micro-batches; the masking makes every answer independent of that grouping. `input_tokens` is the number of
tokens the model read for the request (padding excluded; for `npair` the state is counted once per row).
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from controller.artifacts import DEFAULT_MODEL_DIR, LoadedModel, load_artifact, load_untrained
from controller.backend import BackendRequest, BackendResult, ModelInfo
from controller.errors import ArtifactError, BackendError, BackendOptionValueError, BackendUnavailableError
from controller.families import FAMILIES, calibration_key
from controller.local_options import check_local_options, check_path_option
from controller.packing import Encoding, PackedBatch, make_batches, rows_tokens
from controller.specialists import combined_hash, load_specialists, request_family
from controller.states import StateConventions
from controller.template import (
    DEFAULT_MAX_REQUEST_TOKENS,
    DEFAULT_MAX_SEQUENCE_TOKENS,
    MAX_POSITIONS,
    Overflow,
    get_tokenizer,
    tokenize_request,
)

log = logging.getLogger(__name__)

Runtime = Literal["onnx", "torch"]


class LocalBackend:
    """Answers with the local cross-encoder. Build it with `LocalBackend.load(...)`."""

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        runtime: Runtime = "onnx",
        encoding: Encoding = "packed",
        quantize: bool = False,
        threads: int | None = None,
        device: str | None = None,
        export_method: str = "fused",
        max_request_tokens: int = DEFAULT_MAX_REQUEST_TOKENS,
        max_sequence_tokens: int = DEFAULT_MAX_SEQUENCE_TOKENS,
        max_batch_tokens: int = 8192,
        max_padding: float = 0.1,
        spinning: bool = True,
        overflow: Overflow = "refuse",
        specialists: Mapping[str, LoadedModel] | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        options = {"runtime": runtime, "encoding": encoding, "quantize": quantize, "threads": threads, "device": device,
                   "export_method": export_method, "max_request_tokens": max_request_tokens, "max_sequence_tokens": max_sequence_tokens,
                   "max_batch_tokens": max_batch_tokens, "max_padding": max_padding, "spinning": spinning, "overflow": overflow}
        check_local_options(options)
        _check_internal(specialists, lock)
        self._loaded = loaded
        self.runtime, self.encoding, self.quantized = runtime, encoding, False
        self._tokenizer = get_tokenizer(loaded.tokenizer_dir)
        # A base encoder with fewer position embeddings than the template allows bounds every branch itself.
        positions = min(MAX_POSITIONS, int(getattr(loaded.model.config, "max_position_embeddings", MAX_POSITIONS)))
        self._limits: dict[str, Any] = {"max_positions": positions, "max_request_tokens": max_request_tokens, "overflow": overflow}
        self._batching = {"max_sequence_tokens": max_sequence_tokens, "max_batch_tokens": max_batch_tokens, "max_padding": max_padding}
        self._lock = lock or threading.Lock()  # shared with the specialists: one inference at a time in all
        self.graph: Any = None
        if runtime == "torch":
            self._run = self._torch_runner(threads, device)
        else:
            self._run = self._onnx_runner(threads, device, quantize, export_method, spinning)
        self._specialists = {family: LocalBackend(sub, lock=self._lock, **options) for family, sub in (specialists or {}).items()}
        self._hash = combined_hash(loaded.model_hash, {f: s._loaded.model_hash for f, s in self._specialists.items()})
        extra = "".join(f" +{family} specialist" for family in sorted(self._specialists))
        suffix = f" [{runtime}/{encoding}{'/int8' if self.quantized else ''}{extra}]"
        self._info = ModelInfo(loaded.info.name, loaded.info.description + suffix, loaded.info.release_date)

    @classmethod
    def check_load_options(cls, model_dir: Any = None, *, base_path: Any = None, **options: Any) -> None:
        """`load`'s arguments checked without loading anything: an unknown keyword is the TypeError `create_backend`
        reports, a value it cannot use a `BackendOptionValueError`."""
        check_path_option("model_dir", model_dir)
        check_path_option("base_path", base_path)
        if "loaded" in options:  # the constructor's own argument: `load` builds it from model_dir
            raise TypeError("LocalBackend.load() got an unexpected keyword argument 'loaded'")
        bound = inspect.signature(cls).bind(None, **options)
        bound.apply_defaults()
        check_local_options({name: value for name, value in bound.arguments.items() if name not in ("loaded", "specialists", "lock")})
        _check_internal(options.get("specialists"), options.get("lock"))

    @classmethod
    def load(
        cls,
        model_dir: str | Path | None = None,
        *,
        runtime: Runtime = "onnx",
        encoding: Encoding = "packed",
        quantize: bool = False,
        threads: int | None = None,
        device: str | None = None,
        base_path: str | Path | None = None,
        **options: Any,
    ) -> LocalBackend:
        """Load `model_dir` (default: the committed model; the untrained base model when there is none)."""
        cls.check_load_options(model_dir, runtime=runtime, encoding=encoding, quantize=quantize, threads=threads, device=device,
                               base_path=base_path, **options)
        if model_dir is None and (DEFAULT_MODEL_DIR / "config.json").exists():
            model_dir = DEFAULT_MODEL_DIR
        if model_dir is None:
            log.warning(
                "NO TRAINED CONTROLLER: %s does not exist, so the local backend runs the UNTRAINED base encoder with "
                "random heads. Its probabilities are meaningless; train a model or pass model_dir.",
                DEFAULT_MODEL_DIR,
            )
            loaded = load_untrained(base_path)
        else:
            loaded = load_artifact(model_dir, base_path=base_path)
            options.setdefault("specialists", load_specialists(model_dir, base_path=base_path))
        return cls(loaded, runtime=runtime, encoding=encoding, quantize=quantize, threads=threads, device=device, **options)

    @property
    def info(self) -> ModelInfo:
        return self._info

    @property
    def model_hash(self) -> str:
        """The artifact hash, combined with the specialists' when there are any."""
        return self._hash

    @property
    def specialists(self) -> tuple[str, ...]:
        """The families answered by a specialist."""
        return tuple(sorted(self._specialists))

    @property
    def state_conventions(self) -> StateConventions:
        """How the engine should render states for this model (its directory's `states.json`)."""
        return self._loaded.states

    @property
    def trained(self) -> bool:
        return self._loaded.trained

    def answer(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        """Calibrated probabilities per question; raises `InputTooLongError` for a request over the limits
        (unless the `truncate_state` overflow policy can cut its state to fit: `truncated_tokens` says so)."""
        if not requests:
            return []
        if not self._specialists:
            return self._answer_own(requests)
        routes: dict[str | None, list[int]] = {}
        for i, request in enumerate(requests):
            family = request_family(request.questions, request.state)
            routes.setdefault(family if family in self._specialists else None, []).append(i)
        results: list[BackendResult | None] = [None] * len(requests)
        for family, indices in routes.items():
            backend = self if family is None else self._specialists[family]
            for i, result in zip(indices, backend._answer_own([requests[i] for i in indices])):
                results[i] = result
        return [r for r in results if r is not None]

    def _answer_own(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        tokenized = [tokenize_request(r, self._tokenizer, **self._limits) for r in requests]
        batches, readout = make_batches(tokenized, encoding=self.encoding, **self._batching)
        logits = [self._run(b) for b in batches]
        per_request = readout.gather(logits)
        calibration = self._loaded.calibration
        results = []
        for i, (request, tok, values) in enumerate(zip(requests, tokenized, per_request)):
            if not all(np.isfinite(z).all() for z in values):  # calibrated, they would read as a coin flip
                raise BackendError(
                    f"{self._info.name} produced non-finite logits for request {i + 1} of {len(requests)}: "
                    "its weights are damaged or overflow on this input"
                )
            probs = tuple(calibration.probabilities(q.kind, z, calibration_key(q, request.state)) for q, z in zip(request.questions, values))
            tokens = rows_tokens(tok, self.encoding, self._batching["max_sequence_tokens"])
            results.append(BackendResult(probs, tokens, tok.truncated))
        return results

    def logits(self, batch: PackedBatch) -> np.ndarray:
        """Raw (B, M) logits of one batch (benchmarks, tests)."""
        return self._run(batch)

    def close(self) -> None:
        for specialist in self._specialists.values():
            specialist.close()
        self._run = _closed
        self.graph = None

    # ------------------------------------------------------------------------------------------ runners
    def _torch_runner(self, threads: int | None, device: str | None) -> Any:
        import torch

        from controller.onnx_runtime import flush_denormals
        from controller.torch_model import to_tensors, torch_device

        if threads:
            torch.set_num_threads(threads)
        device = torch_device(device)
        model = self._loaded.model.to(device).eval()

        def run(batch: PackedBatch) -> np.ndarray:
            flush_denormals()
            with torch.inference_mode():
                return model(**to_tensors(batch.arrays(), device)).float().cpu().numpy()

        self._check_finite(run)
        return run

    def _check_finite(self, run: Any) -> None:
        """The torch path's counterpart of the ONNX graph's parity run: weights that give NaN or infinite logits
        on the fixed parity requests (a damaged artifact) are refused at load, not served as coin flips."""
        from controller.onnx_runtime import parity_batches

        for batch in parity_batches(self._tokenizer):
            if not np.isfinite(run(batch)[batch.valid_markers()]).all():
                raise ArtifactError(f"{self._loaded.info.name} gives non-finite logits on the fixed parity requests: its weights are damaged")

    def _onnx_runner(self, threads: int | None, device: str | None, quantize: bool, method: str, spinning: bool) -> Any:
        from controller.errors import ParityError
        from controller.onnx_runtime import create_session, ensure_graph, flush_denormals

        loaded = self._loaded
        graph = ensure_graph(loaded.model, loaded.model_hash, self._tokenizer, method=method)  # type: ignore[arg-type]
        if quantize:
            try:
                graph = ensure_graph(loaded.model, loaded.model_hash, self._tokenizer, method=method, precision="int8")  # type: ignore[arg-type]
                self.quantized = True
            except ParityError as error:
                log.warning("int8 quantisation refused, serving fp32 instead: %s", error)
        self.graph = graph
        try:
            session = create_session(graph.path, threads=threads or 2, device=device, spinning=spinning)
        except BackendUnavailableError:
            raise
        except Exception as error:  # onnxruntime's own types: a graph this onnxruntime cannot read
            raise ArtifactError(f"cannot load the controller graph {graph.path}; delete it to rebuild") from error
        lock = self._lock

        def run(batch: PackedBatch) -> np.ndarray:
            flush_denormals()
            with lock:  # one inference at a time: the session's threads are already all the cores we use
                return session.run(["logits"], batch.arrays())[0]

        return run


def _check_internal(specialists: Any, lock: Any) -> None:
    """The constructor's own arguments, which a factory's caller can also reach (`specialists={}` turns them off)."""
    if specialists is not None and not (isinstance(specialists, Mapping) and all(
            family in FAMILIES and isinstance(sub, LoadedModel) for family, sub in specialists.items())):
        raise BackendOptionValueError(f"backend 'local' cannot use the keyword argument specialists={specialists!r}: it must map "
                                      "family names to loaded models (load_specialists), or be {} for none",
                                      backend="local", option="specialists", detail="not a family -> LoadedModel mapping")
    if lock is not None and not (callable(getattr(lock, "acquire", None)) and callable(getattr(lock, "release", None))):
        raise BackendOptionValueError(f"backend 'local' cannot use the keyword argument lock={lock!r}: it must be a threading.Lock",
                                      backend="local", option="lock", detail="not a lock")


def _closed(batch: PackedBatch) -> np.ndarray:
    raise BackendUnavailableError("this backend was closed")
