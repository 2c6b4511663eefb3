"""The cross-encoder in torch: BERT weights, a mask built from compact branch ids, and a 3-way marker head.

`PackedCrossEncoder.forward(**batch) -> logits (B, M)` is the one function training, export and inference
share. It reimplements BERT's forward over `BertModel`'s own submodules (so peft LoRA layers injected into
query / key / value / dense take part) for two reasons: the attention bias is computed from the compact
`question_ids` / `option_ids` columns (see `controller.packing`), never shipped as an (L, L) tensor; and the
last layer only runs its query, output and feed-forward projections on the marker tokens, since nothing
else is read out (the keys and values still come from every token). `bert_reference_check` tests the
forward against `BertModel` itself.

Head layout: one `Linear(hidden, 3)` over the marker's final hidden state; column 0 scores a Noul (its
logit), column 1 a Choice option, column 2 a Score level; `marker_kinds` selects the column.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn import functional as F

if TYPE_CHECKING:
    from transformers import BertConfig, BertModel

HEAD_LAYOUT = "linear3:noul,choice,score"
N_KINDS = 3


def attention_bias(question_ids: torch.Tensor, option_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask (B, 1, L, L): 0 where token i may attend to token j, dtype-min elsewhere."""
    qi, qj = question_ids.unsqueeze(2), question_ids.unsqueeze(1)  # (B, L, 1), (B, 1, L)
    oi, oj = option_ids.unsqueeze(2), option_ids.unsqueeze(1)
    visible = ((qj == 0) | (qj == qi)) & ((oj == 0) | (oj == oi))  # (B, L, L)
    zero = torch.zeros((), dtype=dtype, device=question_ids.device)
    low = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=question_ids.device)
    return torch.where(visible, zero, low).unsqueeze(1)


def _heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    b, length, hidden = x.shape
    return x.view(b, length, n_heads, hidden // n_heads).transpose(1, 2)  # (B, nh, L, hd)


def _layer(layer: Any, hidden: torch.Tensor, bias: torch.Tensor, n_heads: int, p_attn: float, rows: torch.Tensor | None) -> torch.Tensor:
    """One BertLayer. With `rows` (B, M) only those positions are computed (keys / values use all tokens)."""
    attn = layer.attention
    if rows is None:
        query_in = hidden
    else:
        index = rows.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])  # (B, M, H)
        query_in = hidden.gather(1, index)
        bias = bias.gather(2, rows[:, None, :, None].expand(-1, 1, -1, bias.shape[-1]))  # (B, 1, M, L)
    q = _heads(attn.self.query(query_in), n_heads)
    k = _heads(attn.self.key(hidden), n_heads)
    v = _heads(attn.self.value(hidden), n_heads)
    ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p_attn)  # (B, nh, Lq, hd)
    ctx = ctx.transpose(1, 2).reshape(query_in.shape)
    out = attn.output.LayerNorm(attn.output.dropout(attn.output.dense(ctx)) + query_in)
    inner = layer.intermediate.intermediate_act_fn(layer.intermediate.dense(out))
    return layer.output.LayerNorm(layer.output.dropout(layer.output.dense(inner)) + out)


def encode(
    bert: BertModel,
    input_ids: torch.Tensor,
    token_type_ids: torch.Tensor,
    position_ids: torch.Tensor,
    question_ids: torch.Tensor,
    option_ids: torch.Tensor,
    marker_positions: torch.Tensor,
) -> torch.Tensor:
    """Final hidden states of the marker tokens, (B, M, H)."""
    emb = bert.embeddings
    hidden = emb.word_embeddings(input_ids) + emb.position_embeddings(position_ids) + emb.token_type_embeddings(token_type_ids)
    hidden = emb.dropout(emb.LayerNorm(hidden))  # (B, L, H)
    bias = attention_bias(question_ids, option_ids, hidden.dtype)
    n_heads = bert.config.num_attention_heads
    p_attn = bert.config.attention_probs_dropout_prob if bert.training else 0.0
    layers = bert.encoder.layer
    for i, layer in enumerate(layers):
        last = i == len(layers) - 1
        hidden = _layer(layer, hidden, bias, n_heads, p_attn, marker_positions if last else None)
    return hidden


class PackedCrossEncoder(nn.Module):
    """BertModel (no pooler) + `heads = Linear(hidden, 3)`. The same weights serve packed and N-pair rows."""

    def __init__(self, bert: BertModel) -> None:
        super().__init__()
        self.bert = bert
        self.heads = nn.Linear(bert.config.hidden_size, N_KINDS)

    @property
    def config(self) -> BertConfig:
        return self.bert.config

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, L) int64
        token_type_ids: torch.Tensor,  # (B, L)
        position_ids: torch.Tensor,  # (B, L)
        question_ids: torch.Tensor,  # (B, L)
        option_ids: torch.Tensor,  # (B, L)
        marker_positions: torch.Tensor,  # (B, M)
        marker_kinds: torch.Tensor,  # (B, M)
    ) -> torch.Tensor:
        """Logits (B, M): one per readout marker (unused marker slots hold meaningless values)."""
        markers = encode(self.bert, input_ids, token_type_ids, position_ids, question_ids, option_ids, marker_positions)
        scores = self.heads(markers)  # (B, M, 3)
        return scores.gather(2, marker_kinds.unsqueeze(-1)).squeeze(-1)

    @classmethod
    def from_config(cls, config: BertConfig, *, seed: int = 0) -> PackedCrossEncoder:
        """Random weights (tests): BERT and heads initialised from `seed`."""
        from transformers import BertModel

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = cls(BertModel(config, add_pooling_layer=False))
            init_heads(model, seed=seed)
        return model.eval()

    @classmethod
    def from_base(cls, path: str | Path | None = None, *, seed: int = 0) -> PackedCrossEncoder:
        """Pretrained BERT weights from `path` (default: the installed base model) with fresh heads."""
        from transformers import BertConfig

        if path is None:
            from controller.embedding import base_model_path

            path = base_model_path()
        config = BertConfig.from_json_file(str(Path(path) / "config.json"))
        return cls.from_weights(config, Path(path) / "model.safetensors", seed=seed)

    @classmethod
    def from_weights(cls, config: BertConfig, weights: str | Path, *, seed: int = 0) -> PackedCrossEncoder:
        """BERT weights from a safetensors file (with or without a `bert.` prefix) and fixed-seed heads."""
        from safetensors.torch import load_file

        model = cls.from_config(config, seed=seed)
        # Checkpoints may carry the pooler (unused here) and the `position_ids` buffer (rebuilt by BertModel).
        skip = ("pooler.", "embeddings.position_ids")
        state = {k.removeprefix("bert."): v for k, v in load_file(str(weights)).items() if not k.removeprefix("bert.").startswith(skip)}
        reference = model.bert.state_dict()
        for key, tensor in state.items():  # load_state_dict would raise a bare RuntimeError, or cast ints silently
            ref = reference.get(key)
            if ref is not None and tuple(tensor.shape) != tuple(ref.shape):
                raise ValueError(f"{weights}: {key} has shape {tuple(tensor.shape)}, the BERT config expects {tuple(ref.shape)}")
            if ref is not None and ref.is_floating_point() and not tensor.is_floating_point():
                raise ValueError(f"{weights}: {key} is {str(tensor.dtype).removeprefix('torch.')}, not floating point")
        missing, unexpected = model.bert.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(f"{weights} does not fit the BERT config: missing {missing[:5]}, unexpected {unexpected[:5]}")
        return model.eval()


def init_heads(model: PackedCrossEncoder, *, seed: int = 0) -> None:
    """Deterministic head initialisation (BERT's: normal(0, initializer_range), zero bias)."""
    gen = torch.Generator().manual_seed(seed)
    std = float(getattr(model.config, "initializer_range", 0.02))
    with torch.no_grad():
        model.heads.weight.copy_(torch.randn(model.heads.weight.shape, generator=gen) * std)
        model.heads.bias.zero_()


def torch_device(name: str | None = None) -> torch.device:
    """`name` as a torch device; None (or "auto") is CUDA when torch sees a GPU, else the CPU. Asking for CUDA
    without one raises `BackendUnavailableError`."""
    from controller.errors import BackendUnavailableError

    if name is None or name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise BackendUnavailableError(f"device {name!r} requested but torch sees no CUDA GPU")
    return torch.device(name)


def to_tensors(arrays: dict[str, Any], device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """numpy batch arrays -> torch tensors (shared memory on CPU)."""
    return {name: torch.from_numpy(value).to(device) if device else torch.from_numpy(value) for name, value in arrays.items()}


def bert_reference_check(model: PackedCrossEncoder, input_ids: torch.Tensor) -> float:
    """Max |diff| between `encode` with full attention and `BertModel` itself on (B, L) `input_ids`."""
    b, length = input_ids.shape
    zeros = torch.zeros_like(input_ids)
    positions = torch.arange(length).expand(b, length)
    all_positions = positions.contiguous()
    with torch.no_grad():
        ours = encode(model.bert, input_ids, zeros, positions, zeros, zeros, all_positions)
        ref = model.bert(input_ids=input_ids, token_type_ids=zeros, position_ids=positions).last_hidden_state
    return float((ours - ref).abs().max())

