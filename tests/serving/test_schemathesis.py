"""Schemathesis over the app's own OpenAPI schema, against a live server with the memory API on (real engine,
heuristic controller): every check, zero 5xx. The default run is bounded (3 examples per operation, no
stateful phase); the `slow` run goes further."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from serving import Settings, create_app
from serving.server import BackgroundServer

# 413 is how this server rejects an oversized body; schemathesis' default list omits it.
CONFIG = """
[checks.negative_data_rejection]
expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]
"""


@pytest.fixture(scope="module")
def memory_server() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_app(Settings(controller="heuristic", memory_db=":memory:", embedder="hashing"))) as server:
        yield server


def _schemathesis(server: BackgroundServer, tmp: Path, *, examples: int, phases: str, seed: int, timeout_s: float) -> subprocess.CompletedProcess[str]:
    config = tmp / "schemathesis.toml"
    config.write_text(CONFIG)
    cli = Path(sys.executable).with_name("schemathesis")
    command = [
        str(cli), "--config-file", str(config), "run", f"{server.url}/openapi.json",
        "--checks", "all", "--max-examples", str(examples), "--phases", phases, "--seed", str(seed),
        "--generation-database", "none", "--workers", "1", "--request-timeout", "20", "--no-color",
    ]  # fmt: skip
    return subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, "NO_COLOR": "1"})


def test_schemathesis_all_checks_pass(memory_server: BackgroundServer, tmp_path: Path) -> None:
    run = _schemathesis(memory_server, tmp_path, examples=3, phases="examples,coverage,fuzzing", seed=1, timeout_s=110)
    assert "Server error" not in run.stdout
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Tested: 17" in run.stdout  # every operation, POST /v1/memory/relink and GET /v1/memory/export included


@pytest.mark.slow
def test_schemathesis_extended(memory_server: BackgroundServer, tmp_path: Path) -> None:
    run = _schemathesis(memory_server, tmp_path, examples=25, phases="examples,coverage,fuzzing,stateful", seed=7, timeout_s=900)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
