"""jevmem-local's HTTP server: the TypeSafe System One wire protocol and the Jev-Mem memory API.

    from serving import Settings, create_app
    app = create_app(Settings.from_env())

`serving.server.run(host, port, controller)` starts uvicorn; `python -m serving.loadbench` measures it.
"""

from serving.app import create_app
from serving.settings import Settings

__all__ = ["Settings", "create_app"]
