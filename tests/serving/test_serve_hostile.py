"""`jevmem serve` and its settings against careless configuration: one line and a non-zero exit, never a traceback,
and never a server that loaded its model and store only to find it cannot listen."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from serving import cli
from serving.errors import SettingsError
from serving.server import preflight
from serving.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_app(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Records create_app calls: a server that cannot listen must not build (and load) its app at all."""
    import serving.server

    built: list[Any] = []
    monkeypatch.setattr(serving.server, "create_app", lambda *a, **k: built.append((a, k)) or pytest.fail("app built"))
    return built


def test_a_port_in_use_is_one_line_before_anything_is_loaded(capsys: pytest.CaptureFixture[str], no_app: list[Any]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run(capsys, "serve", "--port", str(port))
    assert code == 2 and f"cannot listen on 127.0.0.1:{port}" in err and "in use" in err and err.count("\n") == 1
    assert no_app == []


def test_a_host_that_does_not_resolve_is_one_line(capsys: pytest.CaptureFixture[str], no_app: list[Any]) -> None:
    code, _, err = run(capsys, "serve", "--host", "no-such-host.invalid", "--port", "0")
    assert code == 2 and "cannot listen on no-such-host.invalid:0" in err and "does not resolve" in err and no_app == []


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--host", ""], {}, "host must be a host name"),  # "" listened on every interface
        (["--db", ""], {}, "memory_db must be a file path"),
        ([], {"JEVMEM_API_KEY": "   "}, "JEVMEM_API_KEY is set but blank"),  # read as "auth off" before
        ([], {"JEVMEM_API_KEY": ""}, "JEVMEM_API_KEY is set but blank"),
        ([], {"JEVMEM_MAX_BODY_BYTES": "-1"}, "JEVMEM_MAX_BODY_BYTES='-1': max_body_bytes must be at least 1"),
        ([], {"JEVMEM_MAX_WAIT_MS": "9000"}, "max_wait_ms (9000) must be below request_timeout_s (8 s)"),
        ([], {"JEVMEM_CONTROLLER_OPTIONS": '{"bogus": 1}'}, "does not suit the 'heuristic' backend"),
        ([], {"JEVMEM_CONTROLLER": "local", "JEVMEM_CONTROLLER_OPTIONS": '{"threads": "2"}'},
         "does not suit the 'local' backend: backend 'local' cannot use the keyword argument threads='2'"),
        ([], {"JEVMEM_CONTROLLER": "local", "JEVMEM_CONTROLLER_OPTIONS": '{"quantize": "false"}'}, "quantize must be true or false"),
        ([], {"JEVMEM_CONTROLLER": "local", "JEVMEM_CONTROLLER_OPTIONS": '{"treads": 2}'},
         "backend 'local' cannot take the keyword argument 'treads'"),
    ],
)
def test_bad_settings_are_refused_before_serving(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_app: list[Any],
    argv: list[str], env: dict[str, str], message: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, _, err = run(capsys, "serve", "--port", "0", *argv)
    assert code == 2 and message in err and err.count("\n") == 1 and no_app == []


@pytest.mark.parametrize(("backend_name", "options"), [("heuristic", {}), ("local", {"runtime": "torch"}),
                                                    ("remote", {"base_url": "http://127.0.0.1:9"})])
def test_a_token_budget_below_the_warm_up_request_is_refused_before_listening(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_app: list[Any], backend_name: str, options: dict[str, Any],
) -> None:
    """It was checked only once the controller had loaded, after uvicorn's start-up lines. The budget is counted with
    the base tokenizer for every controller, so the check needs no backend: no weights, no socket, no app."""
    import controller.artifacts as artifacts
    import serving.server

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("loaded or listened before the token budget was checked")

    for name in ("load_artifact", "load_untrained", "_base_model", "_full_model", "_with_adapter", "_load_heads"):
        monkeypatch.setattr(artifacts, name, refuse)
    monkeypatch.setattr(serving.server, "listen", refuse)
    monkeypatch.setenv("JEVMEM_CONTROLLER", backend_name)
    monkeypatch.setenv("JEVMEM_CONTROLLER_OPTIONS", json.dumps(options))
    monkeypatch.setenv("JEVMEM_TOKEN_BUDGET", "3")
    code, _, err = run(capsys, "serve", "--port", "0")
    assert code == 2 and err.count("\n") == 1 and no_app == [], err
    assert err.startswith("jevmem serve: error: JEVMEM_TOKEN_BUDGET=3 is below the ") and "set it to at least " in err
    minimum = int(err.rsplit("at least ", 1)[1].split()[0])
    settings = Settings.from_env(controller=backend_name, controller_options=options)
    preflight(settings.with_overrides(token_budget=minimum))  # the minimum named is enough
    preflight(settings.with_overrides(token_budget=1, warmup=False))  # no warm-up: nothing to check
    with pytest.raises(SettingsError, match=f"JEVMEM_TOKEN_BUDGET={minimum - 1} is below") as error:
        preflight(settings.with_overrides(token_budget=minimum - 1))
    assert error.value.field == "token_budget" and error.value.value == minimum - 1


def test_a_token_budget_above_the_local_controllers_own_limit_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    # the local controller refuses a request over its max_request_tokens first, so a larger budget never acts
    base = Settings.from_env(controller="local", controller_options={"runtime": "torch", "max_request_tokens": 2000})
    with caplog.at_level(logging.WARNING, logger="serving.server"):
        preflight(base.with_overrides(token_budget=2000))
        assert not caplog.records
        preflight(base.with_overrides(token_budget=2001))
    assert [r.getMessage() for r in caplog.records] == [
        "JEVMEM_TOKEN_BUDGET=2001 is above the local controller's max_request_tokens (2000), which refuses a larger "
        "request first: the budget has no effect past 2000"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="serving.server"):
        preflight(Settings.from_env(controller="heuristic", token_budget=100_000))  # no limit of its own: quiet
    assert not caplog.records


def test_a_blank_key_given_by_the_caller_is_still_refused_and_batching_off_ignores_the_wait() -> None:
    with pytest.raises(SettingsError, match="api_key"):
        Settings.from_env({}, api_key="")
    assert Settings.from_env({"JEVMEM_BATCHING": "off", "JEVMEM_MAX_WAIT_MS": "9000"}).effective_max_wait_s == 0.0


async def test_controller_options_the_backend_does_not_take_are_a_settings_error() -> None:
    from serving.runtime import Runtime

    runtime = Runtime(Settings.from_env({"JEVMEM_CONTROLLER_OPTIONS": '{"bogus": 1}'}))
    with pytest.raises(SettingsError, match="JEVMEM_CONTROLLER_OPTIONS does not suit the 'heuristic' backend") as error:
        await runtime.start()
    assert error.value.field == "controller_options"


def _serve(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    environment = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "serving", "serve", *argv], cwd=REPO, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--db", "{tmp}", "--embedder", "hashing"], {}, "is a directory; name the store's file"),  # checked before it listens
        ([], {"JEVMEM_CONTROLLER": "nope"}, "unknown controller 'nope'"),  # checked before it listens
        ([], {"JEVMEM_TOKEN_BUDGET": "3"}, "JEVMEM_TOKEN_BUDGET=3 is below"),  # checked before it listens
        ([], {"JEVMEM_CONTROLLER": "local", "JEVMEM_TOKEN_BUDGET": "3"}, "JEVMEM_TOKEN_BUDGET=3 is below"),  # nothing loaded
    ],
)
def test_a_failed_start_up_is_one_error_line_not_a_traceback(tmp_path: Path, argv: list[str], env: dict[str, str], message: str) -> None:
    proc = _serve("--port", "0", *(a.format(tmp=tmp_path) for a in argv), env=env)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert "Traceback" not in err and message in err
    assert [line for line in err.splitlines() if line.startswith("jevmem serve: error:")] == [err.splitlines()[-1]]
    assert len(err.splitlines()) == 1, err  # each is checked before it listens: no uvicorn start-up log before the error


def test_the_server_still_serves_on_the_socket_it_bound_and_stops_on_sigint() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = _serve("--port", str(port), "--controller", "heuristic")
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            assert time.monotonic() < deadline, "not ready in time"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"Uvicorn running on http://127.0.0.1:{port}" in err and "Traceback" not in err


def test_serve_embedder_without_a_store_is_a_usage_error(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                          no_app: list[Any]) -> None:
    monkeypatch.delenv("JEVMEM_MEMORY_DB", raising=False)
    code, _, err = run(capsys, "serve", "--port", "0", "--embedder", "hashing")
    assert code == 2 and "--embedder is the memory store's embedder: it goes with --db" in err


@pytest.mark.parametrize(("env", "message"), [({"JEVMEM_PORT": "80.0"}, "JEVMEM_PORT: expected a whole number, got '80.0'"),
                                              ({"JEVMEM_PORT": "８０"}, "expected a whole number"),
                                              ({"JEVMEM_MAX_WAIT_MS": "soon"}, "JEVMEM_MAX_WAIT_MS: expected a number, got 'soon'")])
def test_numbers_from_the_environment_say_what_was_expected(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)
