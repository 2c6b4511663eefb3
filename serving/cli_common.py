"""What the `jevmem` command modules share (`serving.cli`, `serving.cli_eval`): the usage error and the checks of
paths given on the command line, so that a bad one is a one-line error, not a traceback."""

from __future__ import annotations

from typing import Any


class UsageError(ValueError):
    """A command line that cannot be carried out as written."""


class CommandError(Exception):
    """A command that was carried out and failed for a reason its message gives (and the user can act on)."""


def load_locomo_file(path: str, **options: Any) -> list[Any]:
    """`data.locomo.load_locomo`, with a file of another shape as a usage error naming it."""
    from data.locomo import load_locomo

    try:
        return load_locomo(path, **options)
    except (KeyError, TypeError, AttributeError, IndexError) as error:
        raise UsageError(f"{path} (or its audit file) does not look like LoCoMo data: {type(error).__name__} {error}") from error


def checked_adapter(folder: str) -> str:
    """An adapter directory given on the command line, checked before any run: a usage error, not a traceback."""
    from controller.adapters import adapter_digest

    adapter_digest(folder)  # ArtifactError (a user error) naming the missing file
    return str(folder)


__all__ = ["CommandError", "UsageError", "checked_adapter", "load_locomo_file"]
