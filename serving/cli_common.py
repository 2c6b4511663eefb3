"""What the `jevmem` command modules share (`serving.cli`, `serving.cli_eval`, `serving.cli_ingest`): the usage
error, the checks of paths given on the command line (so that a bad one is a one-line error, not a traceback), opening
the engine over `--db`, and the progress bar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


class UsageError(ValueError):
    """A command line that cannot be carried out as written."""


class CommandError(Exception):
    """A command that was carried out and failed for a reason its message gives (and the user can act on)."""


def checked_db(value: str) -> Path:
    """`--db`: a file path (an empty one would name the current directory; a directory is not a store)."""
    if not value.strip():
        raise UsageError("--db needs a file path (the SQLite memory store)")
    if Path(value).is_dir():
        raise UsageError(f"--db {value} is a directory; name the store's file (e.g. {Path(value) / 'memory.db'})")
    return Path(value)


def engine_config(value: str | None) -> Any:
    """`--config`: a preset name or the path of a JSON config file (`memory.config.named_config`); None for the
    default."""
    if value is None:
        return None
    from memory.config import named_config

    return named_config(value)


def open_engine(args: argparse.Namespace, *, create: bool = False, db: Path | None = None) -> Any:
    """The engine over `args.db` (`db`: that path, already checked with `checked_db`). Without `create`, a store
    that does not exist yet is a usage error."""
    from memory.engine import Engine
    from memory.store.sqlite_schema import resolve_embedder

    db = checked_db(args.db) if db is None else db
    if not create:
        existing_store(db)
    embedder = resolve_embedder(db, args.embedder)
    options = {"spinning": False} if args.controller == "local" and args.no_spin else {}
    return Engine.open(db, controller=args.controller, embedder=embedder, config=engine_config(args.config), **options)


def existing_store(db: Path) -> None:
    """A command that reads a store (`query`, `stats`, `show`, `relink`, `reembed`) never creates one: no file, or an
    empty database file, is a usage error that leaves the file as it was."""
    from memory.store.sqlite_schema import is_empty_database

    hint = f"(create one with `jevmem ingest --db {db} ...`)"
    if not db.is_file():
        raise UsageError(f"no memory store at {db} {hint}")
    if is_empty_database(db):
        raise UsageError(f"no memory store at {db}: the file is an empty database {hint}")


def progress_bar(total: int, desc: str, *, initial: int = 0, unit: str = "obs") -> Any:
    """A tqdm bar on stderr when it is a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=not sys.stderr.isatty(), leave=False)


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


__all__ = ["CommandError", "UsageError", "checked_adapter", "checked_db", "engine_config", "existing_store", "load_locomo_file",
           "open_engine", "progress_bar"]
