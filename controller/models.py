"""Model names: the aliases the SDK uses and the concrete names backends report."""

from __future__ import annotations

from controller.backend import ModelInfo
from controller.errors import UnknownModelError

ALIASES: tuple[str, ...] = ("jev-latest", "jev-preview")
DEFAULT_MODEL = "jev-latest"


def resolve_model(requested: str | None, info: ModelInfo) -> str:
    """The concrete model name to answer with: aliases map to the served model, a pinned name is echoed."""
    name = DEFAULT_MODEL if requested is None else requested
    if not isinstance(name, str):
        raise UnknownModelError("model must be a string", loc=("model",))
    if name in ALIASES or name == info.name:
        return info.name
    raise UnknownModelError(
        f"Unknown model {name!r}; this server serves {info.name!r} (aliases: {', '.join(ALIASES)}).", loc=("model",)
    )


def listed_models(info: ModelInfo) -> list[ModelInfo]:
    """What `models.list()` / `GET /v1/models` report: the concrete model and its aliases."""
    return [
        info,
        *(ModelInfo(name=a, description=f"Alias of {info.name}. {info.description}", release_date=info.release_date) for a in ALIASES),
    ]
