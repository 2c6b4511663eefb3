"""`Engine.open` closes everything it opened when a later step fails (an SQLite store would keep its file open)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controller.client import SystemOneClient
from memory.engine import Engine
from memory.errors import SystemTwoError
from memory.store import SQLiteStore
from memory.system_two import SystemTwo
from tests.memory.engine_fakes import RuleBackend


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the resources closed, in order (the real close still runs)."""
    seen: list[str] = []
    for name, cls in (("store", SQLiteStore), ("client", SystemOneClient)):
        real = cls.close

        def spy(self: Any, _real: Any = real, _name: str = name) -> None:
            seen.append(_name)
            _real(self)

        monkeypatch.setattr(cls, "close", spy)
    return seen


def test_a_failing_system_two_setting_closes_the_store_and_the_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed: list[str]
) -> None:
    def broken(cls: Any, *args: Any, **kwargs: Any) -> None:
        raise SystemTwoError("bad JEVMEM_LLM_* settings")

    monkeypatch.setattr(SystemTwo, "from_settings", classmethod(broken))
    path = tmp_path / "m.db"
    with pytest.raises(SystemTwoError, match="bad JEVMEM_LLM"):
        Engine.open(path, controller=RuleBackend(), embedder="hashing")
    assert closed == ["store", "client"]
    assert not path.with_name("m.db-wal").exists()  # the last connection closed: SQLite checkpointed the WAL away
    with Engine.open(path, controller=RuleBackend(), embedder="hashing", system_two=None) as engine:
        assert engine.stats().nodes == 0  # the file opens again


def test_a_failing_engine_closes_the_system_two_it_read_from_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed: list[str]
) -> None:
    made: list[SystemTwo] = []
    s2_closed: list[bool] = []

    def from_env(cls: Any, *args: Any, **kwargs: Any) -> SystemTwo:
        made.append(SystemTwo("http://127.0.0.1:9", "m"))
        monkeypatch.setattr(made[-1], "close", lambda: s2_closed.append(True))
        return made[-1]

    def failing_init(self: Any, *args: Any, **kwargs: Any) -> None:
        raise ValueError("engine construction failed")

    monkeypatch.setattr(SystemTwo, "from_settings", classmethod(from_env))
    monkeypatch.setattr(Engine, "__init__", failing_init)
    with pytest.raises(ValueError, match="construction failed"):
        Engine.open(tmp_path / "m.db", controller=RuleBackend(), embedder="hashing")
    assert made and s2_closed == [True] and closed == ["store", "client"]
