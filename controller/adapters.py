"""Small helpers shared by every loader of peft LoRA adapters (controller, specialists, retrieval embedder).

    with quiet_peft(): ...            # peft's known deprecation noise silenced
    adapter_digest(folder)            # blake2b of the adapter's config and weights
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from controller.errors import ArtifactError

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


@contextmanager
def quiet_peft() -> Iterator[None]:
    # peft 0.21 still calls transformers' deprecated `is_gradient_checkpointing`; nothing we can act on.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


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
