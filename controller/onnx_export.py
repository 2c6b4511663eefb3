"""Torch -> ONNX for `PackedCrossEncoder`, always followed by a parity run that raises `ParityError`.

Two builders of the same function (inputs: the seven `controller.packing.INPUT_NAMES`, output `logits`
(batch, markers); dynamic axes `batch`, `sequence`, `markers`; opset 18):

- `fused` (default): the graph written directly with onnxruntime's fused CPU/CUDA kernels
  (`com.microsoft.Attention` with an `attention_bias` built in-graph from the branch ids,
  `SkipLayerNormalization`, `BiasGelu`, `MultiHeadAttention` for the marker-only last layer). ORT's
  transformer optimizer cannot fuse attention behind a custom mask, so this is how the packed graph gets
  the fused attention kernel.
- `torch`: `torch.onnx.export(..., dynamo=False)` of the forward itself (generic MatMul/Softmax graph).

`python -m controller.bench` measures both. Weights must be merged (no LoRA layers) before export.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from controller.errors import ArtifactError, ParityError
from controller.files import atomic_file
from controller.packing import INPUT_NAMES, PackedBatch

if TYPE_CHECKING:
    import onnx

    from controller.torch_model import PackedCrossEncoder

log = logging.getLogger(__name__)

OPSET = 18
ExportMethod = Literal["fused", "torch"]
DEFAULT_ATOL = 1e-4
_DYNAMIC_AXES: dict[str, dict[int, str]] = {
    **{name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES[:5]},
    "marker_positions": {0: "batch", 1: "markers"},
    "marker_kinds": {0: "batch", 1: "markers"},
    "logits": {0: "batch", 1: "markers"},
}


@dataclass(frozen=True)
class ExportReport:
    path: str
    method: str
    max_abs_diff: float
    atol: float


def export_onnx(
    model: PackedCrossEncoder,
    path: str | Path,
    parity_inputs: Sequence[PackedBatch],
    *,
    method: ExportMethod = "fused",
    atol: float = DEFAULT_ATOL,
) -> ExportReport:
    """Write the graph beside `path`, compare it with torch on `parity_inputs` (raises `ParityError`), and only
    then rename it onto `path` (`controller.files.atomic_file`): a graph that failed, or a cut one, never lands."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if any("lora" in name for name in model.state_dict()):
        raise ArtifactError("merge the LoRA adapter into the base weights before exporting")
    if method not in ("fused", "torch"):
        raise ValueError(f"unknown export method {method!r}; choose 'fused' or 'torch'")
    with atomic_file(path) as tmp:
        if method == "fused":
            import onnx

            onnx.save(build_fused_graph(model), str(tmp))
        else:
            _export_torch(model, tmp, parity_inputs[0])
        diff = check_parity(str(tmp), model, parity_inputs, atol=atol)
    log.info("exported %s graph to %s (parity max |diff| %.2e)", method, path, diff)
    return ExportReport(str(path), method, diff, atol)


def check_parity(graph: str | bytes | Any, model: PackedCrossEncoder, inputs: Sequence[PackedBatch], *, atol: float = DEFAULT_ATOL) -> float:
    """Max |logit diff| between an ORT session (or a graph path) and torch; `ParityError` above `atol`."""
    import torch

    from controller.torch_model import to_tensors

    session = graph if hasattr(graph, "run") else _plain_session(graph)
    worst = 0.0
    for batch in inputs:
        with torch.inference_mode():
            ref = model(**to_tensors(batch.arrays())).float().numpy()
        (got,) = session.run(["logits"], batch.arrays())
        if not np.all(np.isfinite(got)):
            raise ParityError("the exported graph produced non-finite logits", max_abs_diff=float("inf"), atol=atol)
        valid = batch.valid_markers()
        worst = max(worst, float(np.abs(got - ref)[valid].max(initial=0.0)))
    if worst > atol:
        raise ParityError(f"exported graph differs from torch by {worst:.3g} (tolerance {atol:g})", max_abs_diff=worst, atol=atol)
    return worst


def _plain_session(graph: str | bytes) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.log_severity_level = 3
    return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])


def _export_torch(model: PackedCrossEncoder, path: Path, example: PackedBatch) -> None:
    import torch

    from controller.torch_model import to_tensors

    tensors = to_tensors(example.arrays())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter warns that it is legacy; it is chosen on purpose
        torch.onnx.export(
            model.eval(),
            tuple(tensors[name] for name in INPUT_NAMES),
            str(path),
            input_names=list(INPUT_NAMES),
            output_names=["logits"],
            dynamic_axes=_DYNAMIC_AXES,
            opset_version=OPSET,
            dynamo=False,
        )


def build_fused_graph(model: PackedCrossEncoder) -> onnx.ModelProto:
    """The packed forward as an ONNX graph on onnxruntime's fused transformer kernels."""
    from onnx import TensorProto, helper

    g = _GraphBuilder({k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()})
    cfg = model.config
    n_heads, eps, n_layers = int(cfg.num_attention_heads), float(cfg.layer_norm_eps), int(cfg.num_hidden_layers)
    low = float(np.finfo(np.float32).min)

    e = "bert.embeddings."
    emb = g.op("Add", g.op("Gather", g.w(e + "word_embeddings.weight"), "input_ids"), g.op("Gather", g.w(e + "position_embeddings.weight"), "position_ids"))
    emb = g.op("Add", emb, g.op("Gather", g.w(e + "token_type_embeddings.weight"), "token_type_ids"))
    hidden = g.op("LayerNormalization", emb, g.w(e + "LayerNorm.weight"), g.w(e + "LayerNorm.bias"), axis=-1, epsilon=eps)

    zero = g.const("zero_i64", np.array(0, dtype=np.int64))
    axis1, axis2 = g.const("ax1", np.array([1], np.int64)), g.const("ax2", np.array([2], np.int64))
    q_j, o_j = g.op("Unsqueeze", "question_ids", axis1), g.op("Unsqueeze", "option_ids", axis1)

    def bias_for(q_rows: str, o_rows: str) -> str:  # (B, R) ids of the attending rows -> (B, 1, R, L)
        q_i, o_i = g.op("Unsqueeze", q_rows, axis2), g.op("Unsqueeze", o_rows, axis2)
        see_q = g.op("Or", g.op("Equal", q_j, zero), g.op("Equal", q_j, q_i))
        see_o = g.op("Or", g.op("Equal", o_j, zero), g.op("Equal", o_j, o_i))
        values = g.op("Where", g.op("And", see_q, see_o), g.const("zero_f", np.array(0.0, np.float32)), g.const("low_f", np.array(low, np.float32)))
        return g.op("Unsqueeze", values, axis1)

    full_bias = bias_for("question_ids", "option_ids")
    for i in range(n_layers):
        p = f"bert.encoder.layer.{i}."
        qkv_w = np.concatenate([g.sd[p + f"attention.self.{n}.weight"].T for n in ("query", "key", "value")], axis=1)
        qkv_b = np.concatenate([g.sd[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")])
        if i < n_layers - 1:
            # inputs: x, packed QKV weight / bias, no mask_index, no past, the additive bias (B, 1, L, L)
            ctx = g.op("Attention", hidden, g.const(p + "qkv_w", qkv_w), g.const(p + "qkv_b", qkv_b), "", "", full_bias,
                       domain="com.microsoft", num_heads=n_heads)
            query_in = hidden
        else:  # last layer: queries (and everything after attention) only at the markers
            hidden_size = g.op("Slice", g.op("Shape", hidden), g.const("minus1", np.array([-1], np.int64)), g.const("big", np.array([9], np.int64)))
            index_shape = g.op("Concat", g.const("ones2", np.array([1, 1], np.int64)), hidden_size, axis=0)  # [1, 1, H]
            rows = g.op("Expand", g.op("Unsqueeze", "marker_positions", axis2), index_shape)  # (B, M, H)
            query_in = g.op("GatherElements", hidden, rows, axis=1)  # (B, M, H)
            q_m = g.op("GatherElements", "question_ids", "marker_positions", axis=1)
            o_m = g.op("GatherElements", "option_ids", "marker_positions", axis=1)
            size = qkv_w.shape[0]
            q = g.linear(query_in, p + "q_w", qkv_w[:, :size])
            kv = g.linear(hidden, p + "kv_w", qkv_w[:, size:])
            k, v = g.op("Split", kv, g.const("split2", np.array([size, size], np.int64)), axis=2, outputs=2)
            ctx = g.op("MultiHeadAttention", q, k, v, g.const(p + "qkv_b", qkv_b), "", bias_for(q_m, o_m), domain="com.microsoft", num_heads=n_heads)
        attn_out = g.linear(ctx, p + "o_w", g.sd[p + "attention.output.dense.weight"].T)
        h1 = g.op(
            "SkipLayerNormalization", attn_out, query_in, g.w(p + "attention.output.LayerNorm.weight"), g.w(p + "attention.output.LayerNorm.bias"),
            g.w(p + "attention.output.dense.bias"), domain="com.microsoft", epsilon=eps,
        )
        inner = g.op("BiasGelu", g.linear(h1, p + "ffn1_w", g.sd[p + "intermediate.dense.weight"].T), g.w(p + "intermediate.dense.bias"), domain="com.microsoft")
        hidden = g.op(
            "SkipLayerNormalization", g.linear(inner, p + "ffn2_w", g.sd[p + "output.dense.weight"].T), h1, g.w(p + "output.LayerNorm.weight"),
            g.w(p + "output.LayerNorm.bias"), g.w(p + "output.dense.bias"), domain="com.microsoft", epsilon=eps,
        )
    scores = g.op("Add", g.op("MatMul", hidden, g.wt("heads.weight")), g.w("heads.bias"))  # (B, M, 3)
    picked = g.op("GatherElements", scores, g.op("Unsqueeze", "marker_kinds", axis2), axis=2)
    g.op("Squeeze", picked, axis2, out="logits")

    ints = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "markers" if name.startswith("marker") else "sequence"]) for name in INPUT_NAMES]
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "markers"])
    graph = helper.make_graph(g.nodes, "packed_cross_encoder", ints, [logits], initializer=g.initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)], producer_name="jevmem-local")
    proto.ir_version = 9
    return proto


class _GraphBuilder:
    """Tiny helper: named initializers from a state dict and auto-named nodes."""

    def __init__(self, state_dict: dict[str, np.ndarray]) -> None:
        self.sd = state_dict
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._names: set[str] = set()
        self._count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        if name not in self._names:
            self._names.add(name)
            self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def w(self, key: str) -> str:
        return self.const(key, self.sd[key])

    def wt(self, key: str) -> str:
        """A Linear weight transposed to (in, out) for MatMul."""
        return self.const(key + ".T", self.sd[key].T)

    def linear(self, x: str, name: str, weight: np.ndarray) -> str:
        """x @ weight, weight laid out (in, out)."""
        return self.op("MatMul", x, self.const(name, weight))

    def op(self, op_type: str, *inputs: str, out: str | None = None, outputs: int = 1, domain: str = "", **attrs: Any) -> Any:
        from onnx import helper

        self._count += 1
        names = [out or f"{op_type.lower()}_{self._count}_{j}" for j in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=f"{op_type}_{self._count}", domain=domain, **attrs))
        return names[0] if outputs == 1 else tuple(names)
