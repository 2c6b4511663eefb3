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


register_backend("heuristic", _heuristic)
register_backend("local", _local)
register_backend("remote", _remote)
