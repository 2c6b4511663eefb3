"""State conventions: how a trained controller expects the engine to render the states it judges.

A model directory may hold `states.json` beside its own files:

    {"format": "jevmem-states/1", "relevance_dated": true, "relevance_context": false}

`relevance_dated`: relevance states render the candidate `[8 May 2023] Speaker: text`, as the controller's
training data did (`python -m training all --relevance-dated`). `relevance_context`: relevance states carry
`previous`, the memory written just before the candidate (`--relevance-context`). The training pipeline records
the file from the data build it fitted on; a directory without it was trained on the defaults (both off), and
so is any controller that declares nothing (the heuristic, a remote server). The engine follows the declaration
unless its `EngineConfig` sets the field (`memory.control.Controller.state_option`).

The file is not part of `artifact_hash`: it describes the data the weights were fitted on, as the model card does.
A fitted calibration records the conventions it was fitted under (`controller.calibration.save_calibration`),
and loading refuses it once `states.json` declares others (older calibration files record none: not checked).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from controller.errors import ArtifactError
from controller.files import write_json_atomic
from controller.strict_json import unique_object

FORMAT = "jevmem-states/1"
STATES_FILE = "states.json"
SPECIALISTS_INDEX = "specialists.json"  # `controller.specialists.INDEX`: named here, where the rendering rule needs it


@dataclass(frozen=True)
class StateConventions:
    relevance_dated: bool = False
    relevance_context: bool = False

    @classmethod
    def from_rules(cls, rules: dict[str, Any]) -> StateConventions:
        """The conventions of a data build, from its `summary.json` `config.rules` (absent keys: off)."""
        return cls(**{f.name: bool(rules.get(f.name, False)) for f in fields(cls)})


def read_states(model_dir: str | Path) -> StateConventions:
    """`model_dir/states.json`, validated; the defaults when the file does not exist."""
    path = Path(model_dir) / STATES_FILE
    if not path.exists():
        return StateConventions()
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=unique_object)
    except (OSError, ValueError) as error:  # a duplicate key too (`controller.strict_json`)
        raise ArtifactError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ArtifactError(f"{path} is not a {FORMAT} file")
    known = {f.name for f in fields(StateConventions)}
    unknown = sorted(set(data) - known - {"format"})
    if unknown:
        raise ArtifactError(f"{path}: unknown state conventions {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    values = {k: data.get(k, False) for k in known}
    bad = sorted(k for k, v in values.items() if not isinstance(v, bool))
    if bad:
        raise ArtifactError(f"{path}: {', '.join(bad)} must be true or false")
    return StateConventions(**values)


def write_states(model_dir: str | Path, states: StateConventions) -> Path:
    """Write `model_dir/states.json` (atomically); returns its path."""
    path = Path(model_dir) / STATES_FILE
    write_json_atomic(path, {"format": FORMAT, **asdict(states)})
    return path


def conventions_dir(folder: str | Path) -> Path:
    """The directory whose `states.json` a model in `folder` is rendered with: its own, or, for a specialist
    listed in the specialists index of a model directory above it, that directory's (the engine renders a
    specialist's states as its parent says). An index that does not read is passed over here; loading it says why."""
    here = Path(folder).resolve()
    for parent in here.parents:
        index = parent / SPECIALISTS_INDEX
        if not index.is_file():
            continue
        try:
            families = json.loads(index.read_text(encoding="utf-8")).get("families", {})
            paths = [entry["path"] for entry in families.values()]
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            continue
        if any(isinstance(path, str) and (parent / path).resolve() == here for path in paths):
            return parent
    return Path(folder)


__all__ = ["FORMAT", "SPECIALISTS_INDEX", "STATES_FILE", "StateConventions", "conventions_dir", "read_states", "write_states"]
