"""What `controller.artifacts.load_artifact` checks in a model directory before it trusts a file, so a damaged or
hostile directory fails with an `ArtifactError` that names the file and the fault (never a bare KeyError or torch's
RuntimeError, never weights cast or filled in silently).

    encoder = check_config(root, config)     # config.json's encoder / base_model / bert_config fields
    check_heads(state, path, hidden)          # heads.safetensors: exactly weight (3, H) and bias (3,), float, finite
    check_adapter(peft_model, adapter_dir)    # adapter_model.safetensors holds exactly the LoRA tensors peft expects

The encoder must sit where `save_artifact` puts it (`ENCODER_PATHS`): `artifact_hash` covers those names only, so a
config.json pointing elsewhere (`../other.safetensors`, an absolute path) would serve weights the calibration's
pinned hash never saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.errors import ArtifactError

if TYPE_CHECKING:
    import torch

ENCODER_PATHS = {"lora": "adapter", "full": "encoder.safetensors"}  # kind -> the one path `artifact_hash` covers
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def check_config(root: Path, config: Mapping[str, Any]) -> dict[str, str]:
    """config.json's `encoder` object (validated), after the fields loading it needs: `bert_config` for full
    weights, `base_model` with the base weights' sha256 for a LoRA adapter."""
    path = root / "config.json"
    encoder = config.get("encoder")
    if not isinstance(encoder, dict) or encoder.get("kind") not in ENCODER_PATHS:
        kind = encoder.get("kind") if isinstance(encoder, dict) else encoder
        raise ArtifactError(f"{path}: unknown encoder kind {kind!r} (known: {', '.join(ENCODER_PATHS)})")
    kind, expected = encoder["kind"], ENCODER_PATHS[encoder["kind"]]
    if encoder.get("path") != expected:
        raise ArtifactError(f"{path}: a {kind!r} encoder must be at {expected!r}, not {encoder.get('path')!r} "
                            "(only that path is covered by the artifact hash the calibration pins)")
    if kind == "full" and not isinstance(config.get("bert_config"), dict):
        raise ArtifactError(f"{path}: full encoder weights need a 'bert_config' object, got {config.get('bert_config')!r}")
    if kind == "full":
        _check_bert_sizes(path, config["bert_config"])
    base = config.get("base_model")
    if kind == "lora" and not (isinstance(base, dict) and isinstance(base.get("sha256"), str)):
        raise ArtifactError(f"{path}: a LoRA adapter needs a 'base_model' object with the base weights' 'sha256', got {base!r}")
    return {"kind": kind, "path": expected}


# Bounds on a full encoder's `bert_config` sizes: the model is built from them before its weights are read, so a
# hostile config.json (hidden_size 10**9) would allocate without bound first. Far above any small cross-encoder.
BERT_SIZE_LIMITS = {"hidden_size": 4096, "num_hidden_layers": 64, "num_attention_heads": 128, "intermediate_size": 32768,
                    "vocab_size": 1_000_000, "max_position_embeddings": 8192, "type_vocab_size": 64}


def _check_bert_sizes(path: Path, bert_config: Mapping[str, Any]) -> None:
    for name, limit in BERT_SIZE_LIMITS.items():
        if name not in bert_config:
            continue  # transformers' default applies
        value = bert_config[name]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise ArtifactError(f"{path}: bert_config.{name} must be a whole number in [1, {limit}], got {value!r}")


def check_heads(state: Mapping[str, torch.Tensor], path: Path, hidden: int) -> dict[str, torch.Tensor]:
    """The heads' state dict (`heads.` prefix removed), or an `ArtifactError` naming `path`: exactly `weight`
    (N_KINDS, hidden) and `bias` (N_KINDS,), floating point and finite."""
    from controller.torch_model import N_KINDS

    heads = {k.removeprefix("heads."): v for k, v in state.items()}
    shapes = {"weight": (N_KINDS, hidden), "bias": (N_KINDS,)}
    if set(heads) != set(shapes):
        raise ArtifactError(f"{path} holds {sorted(state)}, expected exactly heads.weight and heads.bias")
    for name, shape in shapes.items():
        tensor = heads[name]
        if tuple(tensor.shape) != shape:
            raise ArtifactError(f"{path}: heads.{name} has shape {tuple(tensor.shape)}, expected {shape} (hidden size {hidden})")
        _check_float(tensor, f"heads.{name}", path)
        if not bool(tensor.isfinite().all()):
            raise ArtifactError(f"{path}: heads.{name} holds NaN or infinite values")
    return heads


def check_adapter(peft_model: Any, adapter_dir: Path) -> None:
    """`ArtifactError` unless the adapter's weights file holds exactly the LoRA tensors `peft_model` expects, all
    floating point (peft only warns about missing ones and leaves them at their random initialisation)."""
    from peft.utils import get_peft_model_state_dict
    from safetensors import safe_open

    path = adapter_dir / ADAPTER_WEIGHTS
    # save_embedding_layers=False: "auto" would look the base model's config up on the hub (our LoRA never adapts embeddings)
    expected = set(get_peft_model_state_dict(peft_model, save_embedding_layers=False))
    with safe_open(str(path), "pt") as fh:
        saved = {key: fh.get_slice(key).get_dtype() for key in fh.keys()}  # noqa: SIM118 (safe_open is no dict)
    missing, unexpected = sorted(expected - set(saved)), sorted(set(saved) - expected)
    if missing or unexpected:
        raise ArtifactError(f"{path} does not fit adapter_config.json and the base model: missing {missing[:3]}"
                            f"{' ...' if len(missing) > 3 else ''}, unexpected {unexpected[:3]}{' ...' if len(unexpected) > 3 else ''}")
    not_float = sorted(key for key, dtype in saved.items() if dtype not in ("F16", "BF16", "F32", "F64"))
    if not_float:
        raise ArtifactError(f"{path}: {not_float[0]} is {saved[not_float[0]]}, not floating point")


def _check_float(tensor: torch.Tensor, name: str, path: Path) -> None:
    if not tensor.is_floating_point():
        raise ArtifactError(f"{path}: {name} is {str(tensor.dtype).removeprefix('torch.')}, not floating point")


__all__ = ["ADAPTER_WEIGHTS", "ENCODER_PATHS", "check_adapter", "check_config", "check_heads"]
