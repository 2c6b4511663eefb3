"""Family specialists: separately trained artifacts that answer one decision family in place of the main model.

A model directory may hold `specialists.json` beside its own files:

    {"format": "jevmem-specialists/1",
     "families": {"relevance": {"path": "specialists/relevance", "artifact_hash": "2902ce1c..."}}}

Each entry is a complete model directory (adapter, heads, its own calibration) under the main one. A request
whose questions all belong to a specialist's family is answered by that specialist (a question outside the
catalogue belongs to the family whose state shape the request has, `request_family`); every other request,
and any request that mixes families, goes to the main model. One family's questions then no longer compete with
the others' for the same LoRA weights during training (the relevance plateau in the model card).

The main model's files, hash and calibration are unchanged by adding a specialist: the recorded
`artifact_hash` pins each specialist, and `combined_hash` identifies the pair.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller.artifacts import LoadedModel, artifact_hash, load_artifact
from controller.errors import ArtifactError
from controller.families import FAMILIES, calibration_key
from controller.files import write_json_atomic
from controller.states import SPECIALISTS_INDEX, read_states
from controller.strict_json import unique_object

FORMAT = "jevmem-specialists/1"
INDEX = SPECIALISTS_INDEX


def read_index(model_dir: str | Path) -> dict[str, dict[str, str]]:
    """The `families` table of `model_dir/specialists.json` ({} when there is none), validated."""
    root = Path(model_dir)
    path = root / INDEX
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=unique_object)
    except (OSError, ValueError) as error:  # a duplicate key too (`controller.strict_json`)
        raise ArtifactError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("families"), dict):
        raise ArtifactError(f"{path} is not a {FORMAT} index")
    families: dict[str, dict[str, str]] = {}
    for family, entry in data["families"].items():
        if family not in FAMILIES:
            raise ArtifactError(f"{path}: unknown family {family!r} (known: {', '.join(FAMILIES)})")
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or not isinstance(entry.get("artifact_hash"), str):
            raise ArtifactError(f"{path}: the {family!r} entry needs a 'path' and an 'artifact_hash'")
        try:
            sub = (root / entry["path"]).resolve()
        except (OSError, ValueError) as error:  # a NUL byte, a symlink loop
            raise ArtifactError(f"{path}: the {family!r} entry's path {entry['path']!r} is not a usable folder name: {error}") from error
        if not sub.is_relative_to(root.resolve()) or sub == root.resolve():
            raise ArtifactError(f"{path}: the {family!r} specialist must live in a folder under {root}")
        families[family] = {"path": entry["path"], "artifact_hash": entry["artifact_hash"]}
    return families


def load_specialists(model_dir: str | Path, *, base_path: str | Path | None = None, allow_uncalibrated: bool = False) -> dict[str, LoadedModel]:
    """Every specialist of `model_dir`, loaded and checked against its recorded hash (`allow_uncalibrated`: as
    for `load_artifact`, for the stage that fits their calibrations)."""
    root = Path(model_dir)
    states = read_states(root)  # a specialist is rendered as its parent directory says
    loaded: dict[str, LoadedModel] = {}
    for family, entry in read_index(root).items():
        sub = root / entry["path"]
        if (sub / INDEX).exists():
            raise ArtifactError(f"{sub}: a specialist cannot have specialists of its own")
        digest = artifact_hash(sub)
        if digest != entry["artifact_hash"]:
            raise ArtifactError(f"{sub} has hash {digest[:12]}..., but {root / INDEX} records {entry['artifact_hash'][:12]}...")
        loaded[family] = load_artifact(sub, base_path=base_path, allow_uncalibrated=allow_uncalibrated, states=states)
    return loaded


def write_index(model_dir: str | Path, paths: Mapping[str, str]) -> dict[str, Any]:
    """Record specialists (family -> folder under `model_dir`, already written) in `specialists.json`;
    an empty mapping removes the index. Returns what was written."""
    root = Path(model_dir)
    families = {family: {"path": rel, "artifact_hash": artifact_hash(root / rel)} for family, rel in sorted(paths.items())}
    index = {"format": FORMAT, "families": families}
    if not families:
        (root / INDEX).unlink(missing_ok=True)
        return index
    write_json_atomic(root / INDEX, index)
    read_index(root)  # the same checks a reader applies
    return index


def combined_hash(main_hash: str, specialists: Mapping[str, str]) -> str:
    """The main model's hash alone, or one hash over it and every specialist's (family, hash)."""
    if not specialists:
        return main_hash
    h = hashlib.sha256(main_hash.encode())
    for family in sorted(specialists):
        h.update(f"\0{family}\0{specialists[family]}".encode())
    return h.hexdigest()


def served_hash(model_dir: str | Path, main_hash: str) -> str:
    """`main_hash` combined with the specialist hashes the directory's index records."""
    return combined_hash(main_hash, {f: e["artifact_hash"] for f, e in read_index(model_dir).items()})


def directory_hash(model_dir: str | Path) -> str:
    """The identity of what a model directory serves: its artifact hash combined with its specialists' recorded
    hashes (what `LocalBackend.model_hash` reports once they are loaded and checked)."""
    return served_hash(model_dir, artifact_hash(model_dir))


def request_family(questions: Any, state: Any = None) -> str | None:
    """The family a request belongs to, or None (mixed families, or nothing to tell): the one catalogue family
    of all `questions`; a question outside the catalogue (a paraphrase, a client's own wording) counts as the
    family whose state shape `state` has, when exactly one has it. Without that fallback a paraphrased
    relevance question reached the main model, which is not trained on relevance when a specialist is, and
    answered at chance (LoCoMo dev, docs/EXPERIMENTS.md)."""
    families = set()
    for question in questions:
        key = calibration_key(question, state)  # `family.question`, or the state's family
        if key is None:
            return None
        families.add(key.partition(".")[0])
    return families.pop() if len(families) == 1 else None
