"""Registers the built-in backends by name. Each factory imports its implementation on first use."""

from __future__ import annotations

from typing import Any

from controller.backend import Backend, register_backend


def _heuristic(**options: Any) -> Backend:
    from controller.heuristic import HeuristicBackend

    return HeuristicBackend(**options)


def _local(**options: Any) -> Backend:
    from controller.local import LocalBackend

    return LocalBackend.load(**options)


def _remote(**options: Any) -> Backend:
    from controller.remote import RemoteBackend

    return RemoteBackend(**options)


def _check_local(**options: Any) -> None:
    from controller.local import LocalBackend

    LocalBackend.check_load_options(**options)


def _check_names(cls_path: str) -> Any:
    """A check that the options bind to the constructor's keywords (the values are checked when it runs)."""

    def check(**options: Any) -> None:
        import importlib
        import inspect

        module, _, name = cls_path.rpartition(".")
        inspect.signature(getattr(importlib.import_module(module), name)).bind_partial(**options)

    return check


register_backend("heuristic", _heuristic, check=_check_names("controller.heuristic.HeuristicBackend"))
register_backend("local", _local, check=_check_local)
register_backend("remote", _remote, check=_check_names("controller.remote.RemoteBackend"))
