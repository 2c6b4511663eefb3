"""`FirstTime`: which keys this process has met before, for messages logged once per key (a cache, a model
directory) however many threads or loads meet it."""

from __future__ import annotations

import threading


class FirstTime:
    """`first(key)` is True the first time `key` is asked about in this process, False after (thread-safe)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, key: str) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True


__all__ = ["FirstTime"]
