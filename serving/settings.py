"""Server settings: one frozen dataclass, read from `JEVMEM_*` environment variables in one place.

    JEVMEM_CONTROLLER          backend name (heuristic | local | remote)           default heuristic
    JEVMEM_CONTROLLER_OPTIONS  JSON object of backend factory options              default {}
    JEVMEM_API_KEY             bearer key; unset = auth off (set but blank: refused) default unset
    JEVMEM_HOST / JEVMEM_PORT  where `serving.server.run` listens                   127.0.0.1 / 8000
    JEVMEM_MAX_BODY_BYTES      request body limit, on the wire and decompressed     4 MiB
    JEVMEM_BATCHING            cross-request micro-batching on / off                on
    JEVMEM_MAX_BATCH_SIZE      requests per backend call                            32
    JEVMEM_MAX_WAIT_MS         how long a batch may wait for company                2
    JEVMEM_QUEUE_SIZE          queued requests before 429 (memory calls too)        256
    JEVMEM_REQUEST_TIMEOUT_S   per-request deadline, from arrival (then 503); a      8
                               memory call not started by then is dropped unrun
                               (503), and a relink starts no node after it
    JEVMEM_MEMORY_DB           SQLite path of the memory engine; unset = no memory API
    JEVMEM_EMBEDDER            memory embedder (hashing | minilm | minilm-tuned)    the store's own, else minilm-tuned
    JEVMEM_TOKEN_BUDGET        max packed input tokens per request, checked before queueing
                               with the model's tokenizer; unset = the backend's own limit only
    JEVMEM_DRAIN_TIMEOUT_S     graceful shutdown: how long queued requests may finish  10
    JEVMEM_WARMUP              one tiny request before /readyz says ready            on

An empty variable keeps the default, except JEVMEM_API_KEY: a key that is set but blank (a secret that did not
render) is refused rather than read as "auth off". A bad value is a SettingsError naming the variable.

The request timeout stays below the SDK's 10 s default, so a slow answer becomes a retryable 503 the client
sees instead of a client-side timeout.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from serving.errors import SettingsError

ENV_PREFIX = "JEVMEM_"


@dataclass(frozen=True)
class Settings:
    controller: str = "heuristic"
    controller_options: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = None  # None: auth off (the SDK's Authorization header is ignored)
    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = 4 * 1024 * 1024
    batching: bool = True
    max_batch_size: int = 32
    max_wait_ms: float = 2.0
    queue_size: int = 256
    request_timeout_s: float = 8.0
    memory_db: str | None = None  # None: the memory API is not mounted
    embedder: str | None = None  # None: the embedder the store was built with, else minilm-tuned (a new store)
    token_budget: int | None = None
    drain_timeout_s: float = 10.0  # graceful shutdown: how long queued requests may still finish
    warmup: bool = True  # run one tiny request in lifespan before /readyz says ready

    def __post_init__(self) -> None:
        if not self.controller:
            raise SettingsError("controller must be a backend name", field="controller", value=self.controller)
        if not isinstance(self.controller_options, dict):
            raise SettingsError("controller_options must be a JSON object", field="controller_options", value=self.controller_options)
        if self.api_key is not None and (not self.api_key or not self.api_key.isascii() or not self.api_key.isprintable() or " " in self.api_key):
            raise SettingsError("api_key must be non-empty printable ASCII without spaces", field="api_key", value="<redacted>")
        if not isinstance(self.host, str) or not self.host or any(c.isspace() for c in self.host):
            # "" would make uvicorn listen on every interface
            raise SettingsError("host must be a host name or address (not empty, no spaces)", field="host", value=self.host)
        if self.memory_db is not None and not str(self.memory_db).strip():
            raise SettingsError("memory_db must be a file path (or :memory:)", field="memory_db", value=self.memory_db)
        if not 0 <= self.port <= 65535:
            raise SettingsError("port must be in 0..65535", field="port", value=self.port)
        for name in ("max_body_bytes", "max_batch_size", "queue_size"):
            if getattr(self, name) < 1:
                raise SettingsError(f"{name} must be at least 1", field=name, value=getattr(self, name))
        for name in ("max_wait_ms", "request_timeout_s", "drain_timeout_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0 or (name == "request_timeout_s" and value == 0):
                raise SettingsError(f"{name} must be a finite, non-negative number", field=name, value=value)
        if self.batching and self.max_wait_ms >= 1000.0 * self.request_timeout_s:
            # a batch waiting for company that long would let every request under concurrent traffic time out
            raise SettingsError(f"max_wait_ms ({self.max_wait_ms:g}) must be below request_timeout_s "
                                f"({self.request_timeout_s:g} s)", field="max_wait_ms", value=self.max_wait_ms)
        if self.token_budget is not None and self.token_budget < 1:
            raise SettingsError("token_budget must be at least 1", field="token_budget", value=self.token_budget)
        from controller.embedding import EMBEDDERS, embedder_family

        if self.embedder is not None and embedder_family(self.embedder) not in EMBEDDERS:
            raise SettingsError(f"embedder must be one of {', '.join(EMBEDDERS)}", field="embedder", value=self.embedder)

    @property
    def effective_batch_size(self) -> int:
        """Batching off is the same pipeline with batches of one and no waiting."""
        return self.max_batch_size if self.batching else 1

    @property
    def effective_max_wait_s(self) -> float:
        return self.max_wait_ms / 1000.0 if self.batching else 0.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from `JEVMEM_*` variables (unset or empty ones keep the default), then `overrides`."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            var = ENV_PREFIX + f.name.upper()
            raw = env.get(var, "").strip()
            if raw:
                values[f.name] = _parse(f.name, raw)
            elif f.name == "api_key" and var in env and "api_key" not in overrides:
                raise SettingsError(f"{var} is set but blank; give the key, or unset it to serve without auth",
                                    field="api_key", value="<redacted>")
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise SettingsError(f"unknown setting(s): {', '.join(sorted(unknown))}", field=sorted(unknown)[0])
        from_env = set(values) - set(overrides)
        values.update(overrides)
        try:
            return cls(**values)
        except SettingsError as error:
            name = error.field
            if name is None or name not in from_env:
                raise
            var = ENV_PREFIX + name.upper()
            shown = "<redacted>" if name == "api_key" else repr(env[var].strip())
            raise SettingsError(f"{var}={shown}: {error}", field=name, value=error.value) from error

    def with_overrides(self, **overrides: Any) -> Settings:
        return replace(self, **overrides)


_INTS = {"port", "max_body_bytes", "max_batch_size", "queue_size", "token_budget"}
_FLOATS = {"max_wait_ms", "request_timeout_s", "drain_timeout_s"}
_BOOLS = {"batching", "warmup"}


def _parse(name: str, raw: str) -> Any:
    var = ENV_PREFIX + name.upper()
    try:
        if name in _INTS:
            if not raw.lstrip("+-").isdigit() or not raw.isascii():
                raise ValueError(f"expected a whole number, got {raw!r}")
            return int(raw)
        if name in _FLOATS:
            try:
                return float(raw)
            except ValueError:
                raise ValueError(f"expected a number, got {raw!r}") from None
        if name in _BOOLS:
            low = raw.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"expected on/off, got {raw!r}")
        if name == "controller_options":
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError("expected a JSON object")
            return value
    except ValueError as error:
        raise SettingsError(f"{var}: {error}", field=name, value=raw if name != "api_key" else "<redacted>") from error
    return raw


def controller_options_error(settings: Settings, error: TypeError) -> SettingsError | None:
    """`error`, raised by creating or checking the controller backend, as the setting it is about: a
    `BackendOptionError` (a TypeError whose message says "keyword argument") is JEVMEM_CONTROLLER_OPTIONS; any other
    TypeError is a bug (None)."""
    if "keyword argument" not in str(error):
        return None
    return SettingsError(f"JEVMEM_CONTROLLER_OPTIONS does not suit the {settings.controller!r} backend: {error}",
                         field="controller_options", value=settings.controller_options)
