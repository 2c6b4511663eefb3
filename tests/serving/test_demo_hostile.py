"""`python -m serving.demo` as a careless user runs it: piped into `head`, or without what it needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_piped_into_head_stops_quietly() -> None:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "serving.demo", "--controller", "heuristic", "--embedder", "hashing"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"controller: heuristic")
    proc.stdout.close()  # what `| head -1` does after its line
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in err and b"BrokenPipeError" not in err, err


def test_a_demo_that_cannot_open_its_engine_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from controller.errors import ArtifactError
    from memory import Engine
    from serving import demo

    def missing(*args: Any, **kwargs: Any) -> Engine:
        raise ArtifactError("cannot read controller/models/jevmem-minilm/config.json")

    monkeypatch.setattr(Engine, "open", missing)
    assert demo.main(["--controller", "local", "--embedder", "hashing"]) == 2
    err = capsys.readouterr().err
    assert err == "demo: error: cannot read controller/models/jevmem-minilm/config.json\n"
