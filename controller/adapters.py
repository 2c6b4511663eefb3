"""Small helpers shared by every loader of peft LoRA adapters (controller, specialists, retrieval embedder).

    with quiet_peft(): ...            # peft's known deprecation noise silenced
    canonical_adapter_config(file)    # peft's adapter_config.json in a stable byte form
    adapter_digest(folder)            # blake2b of the adapter's config and weights
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from controller.errors import ArtifactError
from controller.files import write_json_atomic

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


@contextmanager
def quiet_peft() -> Iterator[None]:
    # peft 0.21 still calls transformers' deprecated `is_gradient_checkpointing`; nothing we can act on.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def canonical_adapter_config(path: str | Path) -> None:
    """Rewrite peft's adapter_config.json with sorted keys and a sorted `target_modules`: peft writes that set
    in the process's hash-seed order, so two runs with bit-identical weights would otherwise differ in hash."""
    p = Path(path)
    data = json.loads(p.read_text(encoding="utf-8"))
    if isinstance(data.get("target_modules"), list):
        data["target_modules"] = sorted(data["target_modules"])
    write_json_atomic(p, data)


def adapter_digest(adapter: str | Path) -> str:
    """blake2b over the adapter's config and weights: names what the adapter makes (store names, graph cache)."""
    folder = Path(adapter)
    digest = hashlib.blake2b(digest_size=16)
    for file_name in ADAPTER_FILES:
        try:
            digest.update((folder / file_name).read_bytes())
        except OSError as error:
            raise ArtifactError(f"adapter {folder} lacks a readable {file_name}: {error}") from error
    return digest.hexdigest()
