"""Settings from the environment, /healthz, /readyz and the hand-written Prometheus /metrics."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from serving.errors import SettingsError
from serving.metrics import Counter, Histogram
from serving.settings import Settings
from tests.serving.conftest import body, serving
from tests.serving.fakes import FakeBackend


def test_settings_from_env_in_one_place() -> None:
    env = {
        "JEVMEM_CONTROLLER": "local",
        "JEVMEM_CONTROLLER_OPTIONS": '{"model_dir": "/models/x", "threads": 2}',
        "JEVMEM_API_KEY": "k",
        "JEVMEM_PORT": "9001",
        "JEVMEM_BATCHING": "off",
        "JEVMEM_MAX_BATCH_SIZE": "16",
        "JEVMEM_MAX_WAIT_MS": "1.5",
        "JEVMEM_QUEUE_SIZE": "10",
        "JEVMEM_REQUEST_TIMEOUT_S": "3",
        "JEVMEM_MEMORY_DB": "/tmp/m.db",
        "JEVMEM_TOKEN_BUDGET": "2048",
        "JEVMEM_HOST": " ",  # empty keeps the default
    }
    s = Settings.from_env(env, port=9002)
    assert (s.controller, s.controller_options, s.api_key, s.port) == ("local", {"model_dir": "/models/x", "threads": 2}, "k", 9002)
    assert (s.batching, s.effective_batch_size, s.effective_max_wait_s) == (False, 1, 0.0)
    assert (s.max_batch_size, s.max_wait_ms, s.queue_size, s.request_timeout_s) == (16, 1.5, 10, 3.0)
    assert (s.memory_db, s.token_budget, s.host) == ("/tmp/m.db", 2048, "127.0.0.1")


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"JEVMEM_PORT": "eighty"}, "port"),
        ({"JEVMEM_BATCHING": "maybe"}, "batching"),
        ({"JEVMEM_CONTROLLER_OPTIONS": "[1]"}, "controller_options"),
        ({"JEVMEM_MAX_BATCH_SIZE": "0"}, "max_batch_size"),
        ({"JEVMEM_REQUEST_TIMEOUT_S": "nan"}, "request_timeout_s"),
        ({"JEVMEM_API_KEY": "has space"}, "api_key"),
        ({"JEVMEM_EMBEDDER": "bert"}, "embedder"),
    ],
)
def test_bad_settings_name_the_field(env: dict[str, str], field: str) -> None:
    with pytest.raises(SettingsError) as error:
        Settings.from_env(env)
    assert error.value.field == field


def test_unknown_override_is_refused() -> None:
    with pytest.raises(SettingsError):
        Settings.from_env({}, batch=3)


async def test_health_and_readiness(client: Any) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = (await client.get("/readyz")).json()
    assert ready["status"] == "ready" and ready["model"] == "fake-1.0.0"


async def test_warm_up_runs_one_request_in_lifespan(make_app: Any) -> None:
    backend = FakeBackend()
    async with serving(make_app(backend=backend)) as client:
        assert backend.calls == [1]
        assert (await client.get("/readyz")).status_code == 200


async def test_not_ready_until_the_backend_answers(make_app: Any) -> None:
    class Down(FakeBackend):
        up = False

        def answer(self, requests: Any) -> Any:
            if not self.up:
                from controller.errors import BackendUnavailableError

                raise BackendUnavailableError("still loading")
            return super().answer(requests)

    backend = Down()
    async with serving(make_app(backend=backend)) as client:
        r = await client.get("/readyz")
        assert r.status_code == 503 and "retry-after" in r.headers
        assert (await client.post("/v1/systemone", json=body())).status_code == 503
        backend.up = True
        await asyncio.sleep(1.05)  # readiness re-probes at most once a second
        assert (await client.get("/readyz")).status_code == 200


async def test_a_token_budget_below_the_warm_up_request_is_refused_at_start_up(make_app: Any) -> None:
    """A budget the server's own warm-up request does not fit used to start a server whose /readyz stayed 503
    forever, its body saying only "not ready". `jevmem serve` refuses it before it listens (`preflight`, see
    test_serve_hostile); an app started otherwise still refuses it in its lifespan."""
    with pytest.raises(SettingsError, match=r"JEVMEM_TOKEN_BUDGET=1 is below .* set it to at least \d+") as error:
        async with serving(make_app(token_budget=1)):
            pass
    assert error.value.field == "token_budget" and error.value.value == 1
    minimum = int(str(error.value).rsplit("at least ", 1)[1].split()[0])
    async with serving(make_app(token_budget=minimum)) as client:  # the minimum named is enough
        assert (await client.get("/readyz")).status_code == 200
    with pytest.raises(SettingsError):
        async with serving(make_app(token_budget=minimum - 1)):
            pass
    async with serving(make_app(token_budget=1, warmup=False)) as client:  # no warm-up: nothing to check
        assert (await client.get("/readyz")).status_code == 200


def test_the_budget_checked_without_a_backend_is_the_warm_up_request_sent(fake: FakeBackend) -> None:
    """`preflight` counts `warmup_request()` before any backend exists: it must be the request `warm_up` plans."""
    from controller.client import plan_request
    from controller.template import render_request
    from serving.runtime import WARMUP_QUESTIONS, WARMUP_STATE, warmup_request

    planned = plan_request(fake, WARMUP_STATE, WARMUP_QUESTIONS, model=None).request
    assert render_request(warmup_request()) == render_request(planned) and len(planned.questions) == 1


@pytest.mark.parametrize(
    ("path", "key", "status"),
    [("/healthz", None, 200), ("/readyz", None, 200), ("/metrics", None, 200),
     ("/v1/models", "k", 200), ("/v1/models", None, 403), ("/v1/models", "wrong", 401)],
)
async def test_head_answers_like_get(make_app: Any, path: str, key: str | None, status: int) -> None:
    """Load balancers and uptime checks send HEAD; FastAPI's API routes used to answer it 405. The health
    endpoints stay open and /v1/models keeps its key; the body is the server's to drop (see the live test)."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    async with serving(make_app(api_key="k")) as client:
        get, head = await client.get(path, headers=headers), await client.head(path, headers=headers)
    assert get.status_code == head.status_code == status, head.text
    assert head.headers["content-type"] == get.headers["content-type"]
    if path != "/metrics":  # the metrics page grows with every request
        assert head.headers["content-length"] == get.headers["content-length"]


async def test_head_on_readyz_is_503_while_not_ready(make_app: Any) -> None:
    class Down(FakeBackend):
        def answer(self, requests: Any) -> Any:
            from controller.errors import BackendUnavailableError

            raise BackendUnavailableError("still loading")

    async with serving(make_app(backend=Down())) as client:
        r = await client.head("/readyz")
    assert r.status_code == 503 and "retry-after" in r.headers


def test_head_over_a_socket_has_no_body(live_server: Any) -> None:
    import httpx2

    with httpx2.Client(base_url=live_server.url, timeout=10) as http:
        for path in ("/healthz", "/readyz", "/v1/models"):
            get, head = http.get(path), http.head(path)
            assert (head.status_code, head.content) == (get.status_code, b"") and get.content
            assert head.headers["content-length"] == get.headers["content-length"]


def _sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
            if all(found.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name} {labels}")


async def test_metrics_count_routes_statuses_batches_and_errors(client: Any) -> None:
    await client.post("/v1/systemone", json=body())
    await client.post("/v1/systemone", json=body(model="nope"))
    await client.post("/v1/systemone", content=b"{")
    await client.get("/v1/memory/nodes/x")  # not mounted: unmatched
    text = (await client.get("/metrics")).text
    assert _sample(text, "jevmem_http_requests_total", route="/v1/systemone", method="POST", status="200") == 1
    assert _sample(text, "jevmem_http_requests_total", route="/v1/systemone", status="400") == 1
    assert _sample(text, "jevmem_http_requests_total", route="unmatched", status="404") == 1
    assert _sample(text, "jevmem_errors_total", error_type="api_usage_error") == 1
    assert _sample(text, "jevmem_errors_total", error_type="validation_error") == 1
    assert _sample(text, "jevmem_http_request_duration_seconds_count", route="/v1/systemone") == 3
    assert _sample(text, "jevmem_batch_size_count") == 2  # warm-up + one request
    assert _sample(text, "jevmem_batch_size_bucket", le="+Inf") == 2
    assert _sample(text, "jevmem_queue_depth") == 0
    assert _sample(text, "jevmem_batch_cap") == 2  # slow start: the tuner begins with pairs
    assert "# TYPE jevmem_http_request_duration_seconds histogram" in text


def test_metric_primitives() -> None:
    c = Counter("c_total", "help", ("a",))
    c.inc(a='x"y\n')
    assert 'c_total{a="x\\"y\\n"} 1' in "\n".join(c.render())
    with pytest.raises(ValueError):
        c.inc(-1, a="x")
    h = Histogram("h", "help", (1, 2))
    for v in (0.5, 1.5, 3):
        h.observe(v)
    lines = h.render()
    assert 'h_bucket{le="1"} 1' in lines and 'h_bucket{le="2"} 2' in lines and 'h_bucket{le="+Inf"} 3' in lines
    assert "h_sum 5" in lines and "h_count 3" in lines


def test_public_api_is_curated() -> None:
    import serving

    assert serving.__all__ == ["Settings", "create_app"]
    from serving.server import BackgroundServer, run

    assert callable(run) and callable(BackgroundServer)


def test_importing_serving_loads_no_model_runtime() -> None:
    import subprocess
    import sys

    code = "import sys, serving, serving.app, serving.loadbench; print(sorted(m for m in ('torch', 'onnxruntime', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "[]"


def test_batch_ceiling_times_singles_against_one_batched_call() -> None:
    from serving.loadbench import batch_ceiling

    ratios = batch_ceiling("heuristic", {}, n=4, trials=3)
    assert len(ratios) == 3 and all(r > 0 for r in ratios)


async def test_metric_labels_stay_bounded_whatever_the_client_sends(client: Any) -> None:
    """Any HTTP token is a legal method on the wire; each one used to become its own series (unbounded memory,
    an ever-growing /metrics page) for any client, even an unauthenticated one."""
    for i in range(40):
        r = await client.request(f"X-PROBE-{i}", "/v1/systemone")
        assert r.status_code == 405
    text = (await client.get("/metrics")).text
    series = [line for line in text.splitlines() if line.startswith("jevmem_http_requests_total{")]
    assert len(series) <= 3, series
    assert _sample(text, "jevmem_http_requests_total", method="other", status="405") == 40


async def test_a_client_that_hangs_up_mid_body_is_no_server_error(make_app: Any) -> None:
    """A client gone before its whole body arrived gets no response; that used to be counted as a 500 (and an
    `http_500` error), so every aborted upload looked like a server fault on a 5xx dashboard."""
    app = make_app()
    messages = iter([{"type": "http.request", "body": b'{"model": "jev-', "more_body": True}, {"type": "http.disconnect"}])
    sent: list[Any] = []

    async def receive() -> Any:
        return next(messages)

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http", "path": "/v1/systemone",
             "raw_path": b"/v1/systemone", "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json")],
             "client": ("127.0.0.1", 1), "server": ("local", 80)}  # fmt: skip
    async with serving(app) as client:
        await app(scope, receive, send)
        text = (await client.get("/metrics")).text
    assert sent == []
    assert not [line for line in text.splitlines() if line.startswith("jevmem_http_requests_total{") and 'status="5' in line]
    assert not [line for line in text.splitlines() if line.startswith("jevmem_errors_total{")]
    assert _sample(text, "jevmem_http_requests_total", method="POST", status="499") == 1
