"""jevmem-local's HTTP server: the TypeSafe System One wire protocol and the Jev-Mem memory API.

    from serving import Settings, create_app
    app = create_app(Settings.from_env())

`serving.server.run(host, port, controller)` starts uvicorn; `python -m serving.loadbench` measures it.
The names below resolve on first use, so `jevmem` commands that never serve do not import FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from serving.app import create_app
    from serving.settings import Settings

__all__ = ["Settings", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from serving.app import create_app

        return create_app
    if name == "Settings":
        from serving.settings import Settings

        return Settings
    raise AttributeError(f"module 'serving' has no attribute {name!r}")
