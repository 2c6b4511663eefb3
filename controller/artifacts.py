"""Model directories: save, hash and load a trained controller (base + LoRA adapter + heads).

    <model_dir>/
      config.json         format, name/version, base model id + sha256, template config, head layout, encoder
      adapter/            peft LoRA adapter (adapter_config.json, adapter_model.safetensors)   - or -
      encoder.safetensors full encoder weights (small test models, full fine-tuning)
      heads.safetensors   heads.weight (3, H), heads.bias (3,)
      calibration.json    temperatures + the artifact hash they were fitted on (+ the state conventions)
      metrics.json, MODEL_CARD.md
      states.json         how the engine renders states for it (`controller.states`; absent: the defaults)

`artifact_hash` covers config.json, the adapter / encoder and the heads (not calibration, metrics or the card,
which refer to it). A trained directory loads only with a calibration.json fitted on that hash (and, where the
file records them, on the conventions states.json declares): `allow_uncalibrated` is for the calibrate stage. Loading merges the adapter into the base weights; the base weights file must have the
sha256 recorded in config.json. Without a trained model, `load_untrained` gives the base encoder with fixed-seed
heads, clearly named as untrained.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.backend import ModelInfo
from controller.calibration import Calibration, identity, load_calibration, save_calibration
from controller.errors import ArtifactError
from controller.adapters import canonical_adapter_config, quiet_peft
from controller.artifact_checks import ENCODER_PATHS, check_adapter, check_config, check_heads
from controller.files import atomic_directory, atomic_file, write_json_atomic, write_text_atomic
from controller.once import FirstTime
from controller.states import StateConventions, read_states
from controller.strict_json import unique_object
from controller.template import TEMPLATE_VERSION, template_config

if TYPE_CHECKING:
    from controller.torch_model import PackedCrossEncoder

log = logging.getLogger(__name__)

FORMAT = "jevmem-controller/1"
BASE_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
BASE_WEIGHTS = "model.safetensors"
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent / "models" / "jevmem-minilm"
LORA_TARGETS = ("query", "key", "value", "dense")
_HASHED = ("config.json", "heads.safetensors", "encoder.safetensors", "adapter")


@dataclass(frozen=True)
class ArtifactMeta:
    name: str = "jevmem-minilm"
    version: str = "1.0.0"
    description: str = "Local System One controller: MiniLM-L6 packed cross-encoder with LoRA, calibrated."
    release_date: str = "2025-01-01"  # YYYY-MM-DD


@dataclass(frozen=True)
class LoadedModel:
    """A ready-to-run model: merged torch weights, calibration, identity."""

    model: PackedCrossEncoder
    model_hash: str
    calibration: Calibration
    info: ModelInfo
    tokenizer_dir: Path
    config: dict[str, Any]
    trained: bool
    states: StateConventions = StateConventions()


def add_lora(model: PackedCrossEncoder, *, r: int = 8, alpha: int = 16, dropout: float = 0.05, top_layers: int = 0) -> PackedCrossEncoder:
    """Wrap the encoder with a peft LoRA adapter on query / key / value / dense (heads stay plain modules).

    `top_layers` > 0 adapts only the top that many encoder layers: nothing below them needs a gradient, so a
    training step skips their backward pass (0: every layer, and the pooler's dense if the encoder has one)."""
    from peft import LoraConfig, get_peft_model

    n_layers = int(model.bert.config.num_hidden_layers)
    if not 0 <= top_layers <= n_layers:
        raise ValueError(f"top_layers must lie in [0, {n_layers}], got {top_layers}")
    layers = {"layers_to_transform": list(range(n_layers - top_layers, n_layers)), "layers_pattern": "layer"} if top_layers else {}
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(LORA_TARGETS), bias="none", **layers)
    with quiet_peft():
        model.bert = get_peft_model(model.bert, config)
    return model


def save_artifact(
    model: PackedCrossEncoder,
    out_dir: str | Path,
    meta: ArtifactMeta = ArtifactMeta(),
    *,
    base_path: str | Path | None = None,
    calibration: Calibration | None = None,
    metrics: dict[str, Any] | None = None,
    model_card: str | None = None,
) -> str:
    """Write a model directory; returns its `artifact_hash`. A peft-wrapped encoder is saved as an adapter.

    Every file is written atomically (`controller.files`) and the adapter folder is renamed into place whole:
    a save killed midway leaves no cut file, and a mix of old and new files no longer hashes to what the
    calibration records, so `load_artifact` refuses it."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    has_adapter = hasattr(model.bert, "peft_config")
    base = Path(base_path) if base_path is not None else _default_base()
    config: dict[str, Any] = {
        "format": FORMAT,
        "name": meta.name,
        "version": meta.version,
        "description": meta.description,
        "release_date": meta.release_date,
        "template": template_config(),
        "head_layout": _head_layout(),
        "bert_config": _bert_config(model),
    }
    # a previous save of the other kind, and an old adapter folder (the new one is renamed into its place whole;
    # full weights replace the old file atomically, so a save killed before that leaves the old ones)
    for stale in (out / "encoder.safetensors", out / "adapter") if has_adapter else (out / "adapter",):
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    if has_adapter:
        with atomic_directory(out / "adapter") as adapter, quiet_peft():
            # save_embedding_layers=False: "auto" asks the hub whether the base has a config (a network call at
            # save time, unless HF_HUB_OFFLINE is set); this LoRA never adapts the embeddings, so the files are the same
            model.bert.save_pretrained(str(adapter), save_embedding_layers=False)
            canonical_adapter_config(adapter / "adapter_config.json")
            (adapter / "README.md").unlink(missing_ok=True)  # peft's template card: MODEL_CARD.md is the artifact's
        config["encoder"] = {"kind": "lora", "path": ENCODER_PATHS["lora"]}
        config["base_model"] = {"id": BASE_MODEL_ID, "file": BASE_WEIGHTS, "sha256": file_sha256(base / BASE_WEIGHTS)}
    else:
        weights = {k: v.detach().contiguous().cpu() for k, v in model.bert.state_dict().items()}
        with atomic_file(out / "encoder.safetensors") as tmp:
            save_file(weights, str(tmp))
        config["encoder"] = {"kind": "full", "path": ENCODER_PATHS["full"]}
    heads = {k: v.detach().contiguous().cpu() for k, v in model.heads.state_dict().items()}
    with atomic_file(out / "heads.safetensors") as tmp:
        save_file({f"heads.{k}": v for k, v in heads.items()}, str(tmp))
    write_json_atomic(out / "config.json", config)
    digest = artifact_hash(out)
    cal = calibration or identity(digest)
    save_calibration(replace(cal, model_hash=digest), out / "calibration.json")  # all of it, bound to this hash
    write_json_atomic(out / "metrics.json", metrics or {})
    write_text_atomic(out / "MODEL_CARD.md", model_card or _default_card(config, digest))
    return digest


def artifact_hash(model_dir: str | Path) -> str:
    """sha256 over the weight and config files (relative path + bytes, sorted)."""
    root = Path(model_dir)
    files: list[Path] = []
    for name in _HASHED:
        p = root / name
        if p.is_dir():  # the adapter: its config and weights (not the README peft writes beside them)
            files.extend(sorted(x for x in p.rglob("*") if x.is_file() and x.suffix in (".json", ".safetensors")))
        elif p.exists():
            files.append(p)
    if not (root / "config.json").exists():
        raise ArtifactError(f"{root} is not a model directory (no config.json)")
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        try:
            h.update(hashlib.sha256(f.read_bytes()).digest())
        except OSError as error:  # unreadable (another account's file, an I/O error)
            raise ArtifactError(f"cannot read {f} to hash the model directory: {error}") from error
    return h.hexdigest()


_SHA_CACHE: dict[tuple[str, int, int], str] = {}
_SHA_LOCK = threading.Lock()


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, cached per (path, size, mtime) for this process."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as error:
        raise ArtifactError(f"cannot read {p}: {error}") from error
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    with _SHA_LOCK:
        if key not in _SHA_CACHE:
            h = hashlib.sha256()
            try:
                with p.open("rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
            except OSError as error:  # a directory in its place, no read permission
                raise ArtifactError(f"cannot read {p}: {error}") from error
            _SHA_CACHE[key] = h.hexdigest()
        return _SHA_CACHE[key]


def load_artifact(model_dir: str | Path, *, base_path: str | Path | None = None, allow_uncalibrated: bool = False,
                  states: StateConventions | None = None) -> LoadedModel:
    """Load a model directory: base encoder (+ merged adapter) + heads + calibration for this hash.

    A directory without calibration.json is refused (`ArtifactError`): it would serve raw probabilities as if
    calibrated. `allow_uncalibrated=True` loads it with the identity calibration instead, for the code that
    fits the calibration (it needs the model before the file exists). `states` overrides the directory's own
    `states.json`: a specialist is rendered with its parent's conventions (`controller.specialists`)."""
    root = Path(model_dir)
    try:
        config = json.loads((root / "config.json").read_text(encoding="utf-8"), object_pairs_hook=unique_object)
    except (OSError, ValueError) as error:  # a duplicate key too (`controller.strict_json`)
        raise ArtifactError(f"cannot read {root / 'config.json'}: {error}") from error
    if not isinstance(config, dict):
        raise ArtifactError(f"{root / 'config.json'} is not a JSON object")
    if config.get("format") != FORMAT:
        raise ArtifactError(f"{root} has format {config.get('format')!r}, expected {FORMAT!r}")
    template = config.get("template")
    if not isinstance(template, dict) or template.get("template_version") != TEMPLATE_VERSION:
        raise ArtifactError(f"{root} was trained with template {template!r}; this code renders {TEMPLATE_VERSION!r}")
    if config.get("head_layout") != _head_layout():
        raise ArtifactError(f"{root} has head layout {config.get('head_layout')!r}, expected {_head_layout()!r}")
    encoder = config.get("encoder")
    named = all(isinstance(config.get(key), str) for key in ("name", "version"))
    if not named or not isinstance(encoder, dict) or not isinstance(encoder.get("path"), str):
        raise ArtifactError(f"{root / 'config.json'} lacks a string name and version or an encoder object with a path")
    encoder = check_config(root, config)
    missing = [name for name in _weight_files(encoder) if not (root / name).is_file()]
    if missing:
        raise ArtifactError(f"{root} lacks {', '.join(missing)}: the model directory is incomplete")
    cal_path = root / "calibration.json"
    if not cal_path.exists() and not allow_uncalibrated:
        raise ArtifactError(
            f"{cal_path} is missing: this trained model would serve uncalibrated probabilities. Restore the file, "
            f"or fit it with `python -m training calibrate --model-dir {root}` (with the data options of the fit)"
        )
    digest = artifact_hash(root)
    base = Path(base_path) if base_path is not None else _default_base()
    try:
        if encoder["kind"] == "lora":
            expected = config["base_model"]["sha256"]
            actual = file_sha256(base / BASE_WEIGHTS)
            if expected != actual:
                raise ArtifactError(f"base weights {base / BASE_WEIGHTS} have sha256 {actual[:12]}..., the adapter was trained on {str(expected)[:12]}...")
            model = _with_adapter(_base_model(base), root / encoder["path"])
        else:
            model = _full_model(config["bert_config"], root / encoder["path"])
        _load_heads(model, root / "heads.safetensors")
    except ArtifactError:
        raise
    except Exception as error:  # safetensors, peft and torch raise their own types for corrupt files
        raise ArtifactError(f"cannot load the model in {root}: {error}") from error
    states = read_states(root) if states is None else states
    if cal_path.exists():
        calibration = load_calibration(cal_path, digest, states)
    else:
        _note_uncalibrated(root)
        calibration = identity(digest)
    name = f"{config['name']}-{config['version']}"
    info = ModelInfo(name=name, description=str(config.get("description", "")), release_date=str(config.get("release_date", "")))
    return LoadedModel(model.eval(), digest, calibration, info, base, config, trained=True, states=states)


_UNCALIBRATED_NOTED = FirstTime()


def _note_uncalibrated(root: Path) -> None:
    """Log that `root` was loaded without calibration.json. Only `allow_uncalibrated=True` gets here (the calibrate
    stage, which loads the model and its specialists, often more than once): that is what the caller asked for, so
    INFO, once per directory and process, then DEBUG. Loading a trained model uncalibrated unasked is an error."""
    log.log(logging.INFO if _UNCALIBRATED_NOTED(str(root.resolve())) else logging.DEBUG, "%s has no calibration.json: loaded uncalibrated, as asked", root)


def load_untrained(base_path: str | Path | None = None, *, seed: int = 0) -> LoadedModel:
    """The base encoder with freshly initialised heads (fixed seed). Its answers carry no trained signal."""
    from controller.torch_model import HEAD_LAYOUT

    base = Path(base_path) if base_path is not None else _default_base()
    model = _base_model(base, seed=seed)
    ident = {"untrained": True, "base_sha256": file_sha256(base / BASE_WEIGHTS), "seed": seed, "template": TEMPLATE_VERSION, "heads": HEAD_LAYOUT}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()
    info = ModelInfo(
        name="jevmem-minilm-untrained",
        description="UNTRAINED: MiniLM-L6 base encoder with randomly initialised heads; answers are not meaningful. "
        "Train a controller (training/) and load its model directory.",
        release_date="1970-01-01",
    )
    return LoadedModel(model, digest, identity(digest), info, base, {"name": info.name, "template": template_config()}, trained=False)


def _weight_files(encoder: dict[str, Any]) -> list[str]:
    """The files `load_artifact` reads besides config.json, relative to the model directory."""
    path = encoder["path"]
    weights = [f"{path}/adapter_config.json", f"{path}/adapter_model.safetensors"] if encoder.get("kind") == "lora" else [path]
    return [*weights, "heads.safetensors"]


def _default_base() -> Path:
    from controller.embedding import base_model_path

    return base_model_path()


def _head_layout() -> str:
    from controller.torch_model import HEAD_LAYOUT

    return HEAD_LAYOUT


def _bert_config(model: PackedCrossEncoder) -> dict[str, Any]:
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
            "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id", "initializer_range")
    return {k: getattr(model.config, k) for k in keys}


def _base_model(base: Path, *, seed: int = 0) -> PackedCrossEncoder:
    """BertModel from `base` (config.json + model.safetensors, pooler dropped) with fixed-seed heads."""
    from controller.torch_model import PackedCrossEncoder

    try:
        return PackedCrossEncoder.from_base(base, seed=seed)
    except Exception as error:  # OSError, ValueError, and safetensors' own type for a cut weights file
        raise ArtifactError(f"cannot load the base model in {base}: {error}") from error


def _full_model(bert_config: dict[str, Any], weights: Path) -> PackedCrossEncoder:
    from transformers import BertConfig

    from controller.torch_model import PackedCrossEncoder

    try:
        return PackedCrossEncoder.from_weights(BertConfig(**bert_config), weights)
    except ValueError as error:  # names the file and the tensor already
        raise ArtifactError(str(error)) from error
    except Exception as error:  # safetensors' own type for a cut or foreign file, transformers' for a bad config
        raise ArtifactError(f"cannot load the encoder weights {weights}: {error}") from error


def _with_adapter(model: PackedCrossEncoder, adapter_dir: Path) -> PackedCrossEncoder:
    from peft import PeftModel

    with _naming(adapter_dir, "the LoRA adapter"), quiet_peft(), warnings.catch_warnings():
        # peft leaves a LoRA tensor missing from the file at its random init with only a warning: `check_adapter` refuses it
        warnings.filterwarnings("ignore", message="Found missing adapter keys", category=UserWarning)
        peft_model = PeftModel.from_pretrained(model.bert, str(adapter_dir))
        check_adapter(peft_model, adapter_dir)
        model.bert = peft_model.merge_and_unload()
    return model


def _load_heads(model: PackedCrossEncoder, path: Path) -> None:
    from safetensors.torch import load_file

    with _naming(path, "the heads"):
        state = load_file(str(path))
    model.heads.load_state_dict(check_heads(state, path, int(model.config.hidden_size)), strict=True)


@contextmanager
def _naming(path: Path, what: str) -> Iterator[None]:
    """Any error but an `ArtifactError` (which names its file already) becomes one naming `path`."""
    try:
        yield
    except ArtifactError:
        raise
    except Exception as error:  # safetensors, peft and torch raise their own types for corrupt files
        detail = " ".join(str(error).split())  # torch lists every mismatched tensor on a line of its own
        detail = detail if len(detail) <= 400 else detail[:400] + " ..."
        raise ArtifactError(f"cannot load {what} in {path}: {detail}") from error


def _default_card(config: dict[str, Any], digest: str) -> str:
    return (
        f"# {config['name']} {config['version']}\n\n{config['description']}\n\n"
        f"- artifact hash: `{digest}`\n- template: `{config['template']['template_version']}`\n"
        f"- head layout: `{config['head_layout']}`\n- encoder: {config['encoder']['kind']}\n"
        "- metrics: see metrics.json; calibration: calibration.json\n"
    )
