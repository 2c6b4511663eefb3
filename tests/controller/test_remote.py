"""The remote backend against fake servers on `httpx2.MockTransport` (no sockets)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import pytest
import typesafe_sdk as sdk
from backports.zstd import decompress

from controller import (
    BackendError,
    BackendRequest,
    BackendUnavailableError,
    InvalidRequestError,
    SystemOneClient,
    create_backend,
)
from controller.client import wire_payload
from controller.families import family_questions
from controller.heuristic import HeuristicBackend
from controller.questions import normalize_questions
from controller.remote import RemoteBackend, RemoteInvalidRequestError

NO_RETRY = sdk.RetryPolicy(max_retries=0)
GENERIC = {
    "billing": {"type": "noul", "instructions": "Is this about billing?", "criteria": {"true": "payments, refunds"}},
    "tone": {"type": "choice", "instructions": "Tone?", "criteria": {"calm": None, "angry": "upset, demanding"}},
    "urgency": {"type": "score", "criteria": ["Can wait", "This week", "Today"]},
}
STATE = {"message": "I was charged twice, refund me today!"}


class FakeServer:
    """A System One server in process: the heuristic backend behind the wire protocol."""

    def __init__(self) -> None:
        self.inner = SystemOneClient(HeuristicBackend())
        self.bodies: list[dict[str, Any]] = []
        self.requests: list[httpx2.Request] = []
        self.override: Callable[[httpx2.Request], httpx2.Response] | None = None

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if self.override is not None:
            return self.override(request)
        headers = {"x-typesafe-request-id": f"req-{len(self.requests)}"}
        if request.method == "GET" and request.url.path == "/v1/models":
            listed = self.inner.models.list()
            models = [m.model_dump(mode="json") for m in listed.models]
            models.insert(0, models.pop())  # an alias first: the backend must skip it
            return httpx2.Response(200, json={"models": models}, headers=headers)
        assert request.method == "POST" and request.url.path == "/v1/systemone"
        raw = request.content
        if request.headers.get("content-encoding") == "zstd":
            raw = decompress(raw)
        body = json.loads(raw)
        self.bodies.append(body)
        try:
            r = self.inner.system_one(body["state"], body["questions"], model=body.get("model"))
        except InvalidRequestError as error:
            return httpx2.Response(422, json={"detail": [{"loc": ["body", "questions"], "msg": error.message, "type": "value_error"}]}, headers=headers)
        return httpx2.Response(200, json=wire_payload(r.model, r.answers, r.usage), headers=headers)


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
def remote(server: FakeServer) -> Iterator[RemoteBackend]:
    backend = RemoteBackend(base_url="http://fake", api_key="k", transport=httpx2.MockTransport(server), retry=NO_RETRY)
    yield backend
    backend.close()


def _numbers(response: Any) -> dict[str, Any]:
    return {key: answer.model_dump(mode="json") for key, answer in response.answers.items()}


def test_answers_match_the_backend_behind_the_server(remote: RemoteBackend, server: FakeServer) -> None:
    local = SystemOneClient(HeuristicBackend())
    with SystemOneClient(remote) as client:
        for state, questions in ((STATE, GENERIC), ({"memory_a": "we hiked", "memory_b": "we swam"}, family_questions("pair"))):
            via_remote = client.system_one(state, questions)
            direct = local.system_one(state, questions)
            assert _numbers(via_remote) == _numbers(direct)
            assert via_remote.usage.input_tokens == direct.usage.input_tokens
            assert via_remote.model == direct.model == "jevmem-heuristic-1.0.0"


def test_caller_keys_never_leave_the_process(remote: RemoteBackend, server: FakeServer) -> None:
    with SystemOneClient(remote) as client:
        client.system_one(STATE, {"secret-name": GENERIC["billing"], "other-secret": GENERIC["tone"], "dup": GENERIC["billing"]})
    (body,) = server.bodies
    assert list(body["questions"]) == ["q0", "q1"]
    assert "secret" not in json.dumps(body)
    assert body["model"] == "jevmem-heuristic-1.0.0"
    assert server.requests[-1].headers["authorization"] == "Bearer k"


def test_probabilities_come_back_in_option_order(remote: RemoteBackend) -> None:
    questions = tuple(normalize_questions(GENERIC).values())
    (result,) = remote.answer([BackendRequest(STATE, questions)])
    direct = HeuristicBackend().answer([BackendRequest(STATE, questions)])[0]
    assert [len(p) for p in result.probabilities] == [1, 2, 3]
    for got, expected in zip(result.probabilities, direct.probabilities):
        assert got == pytest.approx(expected, abs=1e-12)


def test_info_is_the_first_listed_concrete_model(remote: RemoteBackend, server: FakeServer) -> None:
    assert remote.info.name == "jevmem-heuristic-1.0.0"
    assert remote.info.release_date == "2026-11-29"
    remote.info  # noqa: B018 - cached: one listing only
    assert sum(r.url.path == "/v1/models" for r in server.requests) == 1


def test_pinned_model(server: FakeServer) -> None:
    backend = RemoteBackend(base_url="http://fake", api_key="k", model="jevmem-heuristic-1.0.0",
                            transport=httpx2.MockTransport(server), retry=NO_RETRY)
    with SystemOneClient(backend) as client:
        r = client.system_one(STATE, GENERIC, model="jevmem-heuristic-1.0.0")
    assert r.model == "jevmem-heuristic-1.0.0"
    assert server.bodies[-1]["model"] == "jevmem-heuristic-1.0.0"
    assert backend.info.description.startswith("Deterministic")  # metadata taken from the server's list


def test_pinned_model_without_a_model_list(server: FakeServer) -> None:
    def no_models(request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/v1/models":
            return httpx2.Response(404, json={"detail": "Not Found"})
        return FakeServer.__call__(server, request)

    backend = RemoteBackend(base_url="http://fake", api_key="k", model="jev-latest", transport=httpx2.MockTransport(no_models), retry=NO_RETRY)
    assert backend.info.name == "jev-latest"
    with SystemOneClient(backend) as client:
        assert client.system_one(STATE, GENERIC).model == "jev-latest"
    assert server.bodies[-1]["model"] == "jev-latest"


def test_environment_is_honoured(monkeypatch: pytest.MonkeyPatch, server: FakeServer) -> None:
    monkeypatch.setenv("TYPESAFE_BASE_URL", "http://from-env:9999/")
    monkeypatch.setenv("TYPESAFE_API_KEY", "env-key")
    backend = create_backend("remote", transport=httpx2.MockTransport(server), retry=NO_RETRY)
    assert isinstance(backend, RemoteBackend)
    with SystemOneClient(backend) as client:
        client.system_one(STATE, {"b": GENERIC["billing"]})
    assert str(server.requests[-1].url) == "http://from-env:9999/v1/systemone"
    assert server.requests[-1].headers["authorization"] == "Bearer env-key"


def test_missing_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TYPESAFE_API_KEY", raising=False)
    with pytest.raises(BackendUnavailableError, match="API key") as info:
        RemoteBackend(base_url="http://fake")
    assert isinstance(info.value.__cause__, sdk.TypeSafeError)


def test_large_bodies_are_zstd_compressed(remote: RemoteBackend, server: FakeServer) -> None:
    big = {"message": "refund " * 400}
    with SystemOneClient(remote) as client:
        r = client.system_one(big, GENERIC)
    assert server.requests[-1].headers.get("content-encoding") == "zstd"
    assert server.bodies[-1]["state"] == big
    assert _numbers(r) == _numbers(SystemOneClient(HeuristicBackend()).system_one(big, GENERIC))


def test_compression_can_be_turned_off(server: FakeServer) -> None:
    backend = RemoteBackend(base_url="http://fake", api_key="k", model="jevmem-heuristic-1.0.0",
                            transport=httpx2.MockTransport(server), retry=NO_RETRY, compression=False)
    big = {"message": "refund " * 400}
    (result,) = backend.answer([BackendRequest(big, tuple(normalize_questions(GENERIC).values()))])
    assert "content-encoding" not in server.requests[-1].headers
    assert json.loads(server.requests[-1].content)["state"] == big
    assert len(result.probabilities) == 3


@pytest.mark.parametrize("exc", [httpx2.ConnectError("refused"), httpx2.ReadTimeout("slow")])
def test_transport_failures_are_unavailable(server: FakeServer, exc: Exception) -> None:
    def fail(request: httpx2.Request) -> httpx2.Response:
        raise exc

    backend = RemoteBackend(base_url="http://fake", api_key="k", model="m", transport=httpx2.MockTransport(fail), retry=NO_RETRY)
    questions = tuple(normalize_questions(GENERIC).values())
    with pytest.raises(BackendUnavailableError) as info:
        backend.answer([BackendRequest(STATE, questions)])
    assert isinstance(info.value.__cause__, sdk.TypeSafeAPIConnectionError)
    with pytest.raises(BackendUnavailableError):
        RemoteBackend(base_url="http://fake", api_key="k", transport=httpx2.MockTransport(fail), retry=NO_RETRY).info  # noqa: B018


@pytest.mark.parametrize(
    ("status", "body", "error", "message"),
    [
        (422, {"detail": [{"loc": ["body", "questions", "q0"], "msg": "too many options", "type": "value_error"}]}, RemoteInvalidRequestError, "questions.q0: too many options"),
        (400, {"detail": {"error_type": "api_usage_error", "message": "Unknown model 'x'"}}, RemoteInvalidRequestError, "Unknown model 'x'"),
        (413, {"detail": {"error_type": "too_long", "message": "input has 900 tokens; the limit is 512"}}, RemoteInvalidRequestError, "900 tokens"),
        (401, {"detail": {"error_type": "authentication_error", "message": "bad key"}}, BackendUnavailableError, "bad key"),
        (429, {"detail": {"error_type": "overloaded", "message": "busy"}}, BackendUnavailableError, "busy"),
        (503, {"detail": {"error_type": "overloaded", "message": "model loading"}}, BackendUnavailableError, "model loading"),
    ],
)
def test_http_errors(server: FakeServer, status: int, body: dict[str, Any], error: type[Exception], message: str) -> None:
    server.override = lambda request: httpx2.Response(status, json=body, headers={"x-typesafe-request-id": "r"})
    backend = RemoteBackend(base_url="http://fake", api_key="k", model="m", transport=httpx2.MockTransport(server), retry=NO_RETRY)
    questions = tuple(normalize_questions(GENERIC).values())
    with pytest.raises(error) as info:
        backend.answer([BackendRequest(STATE, questions)])
    assert message in str(info.value)
    assert isinstance(info.value.__cause__, sdk.TypeSafeAPIError)
    if isinstance(info.value, RemoteInvalidRequestError):
        assert info.value.status == status
        assert isinstance(info.value, InvalidRequestError) and isinstance(info.value, sdk.TypeSafeError)


@pytest.mark.parametrize(
    "answers",
    [
        {},  # no answers at all
        {"q0": {"type": "choice", "choice": "a", "confidence": 0.0, "probabilities": {"a": 1.0}}},  # wrong type
        {"q0": {"type": "noul", "noul": 0.5}, "q1": {"type": "choice", "choice": "calm", "confidence": 0.0, "probabilities": {"calm": 1.0}}},
    ],
)
def test_answers_that_do_not_fit_are_backend_errors(server: FakeServer, answers: dict[str, Any]) -> None:
    payload = {"model": "m", "answers": answers, "usage": {"input_tokens": 3, "output_tokens": 0}}
    server.override = lambda request: httpx2.Response(200, json=payload, headers={"x-typesafe-request-id": "r"})
    backend = RemoteBackend(base_url="http://fake", api_key="k", model="m", transport=httpx2.MockTransport(server), retry=NO_RETRY)
    questions = tuple(normalize_questions({"b": GENERIC["billing"], "t": GENERIC["tone"]}).values())
    with pytest.raises(BackendError):
        backend.answer([BackendRequest(STATE, questions)])


def test_malformed_body_is_a_backend_error(server: FakeServer) -> None:
    server.override = lambda request: httpx2.Response(200, json={"answers": "nope"}, headers={"x-typesafe-request-id": "r"})
    backend = RemoteBackend(base_url="http://fake", api_key="k", model="m", transport=httpx2.MockTransport(server), retry=NO_RETRY)
    with pytest.raises(BackendError) as info:
        backend.answer([BackendRequest(STATE, tuple(normalize_questions({"b": GENERIC["billing"]}).values()))])
    assert isinstance(info.value.__cause__, sdk.TypeSafeAPIResponseValidationError)


def test_batch_is_answered_in_order(remote: RemoteBackend, server: FakeServer) -> None:
    requests = [
        BackendRequest(STATE, tuple(normalize_questions(GENERIC).values())),
        BackendRequest({"query": "When did we hike?"}, tuple(normalize_questions(family_questions("routing")).values())),
    ]
    got = remote.answer(requests)
    assert got == HeuristicBackend().answer(requests)
    assert [b["state"] for b in server.bodies] == [STATE, {"query": "When did we hike?"}]


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_a_server_problem_not_a_bad_request(server: FakeServer, status: int) -> None:
    # e.g. a base URL on http:// that the server redirects to https://: no rewording of the request helps
    server.override = lambda request: httpx2.Response(status, headers={"location": "https://elsewhere/v1/systemone", "x-typesafe-request-id": "r"})
    backend = RemoteBackend(base_url="http://fake", api_key="k", model="m", transport=httpx2.MockTransport(server), retry=NO_RETRY)
    with pytest.raises(BackendUnavailableError, match=str(status)) as info:
        backend.answer([BackendRequest(STATE, tuple(normalize_questions({"b": GENERIC["billing"]}).values()))])
    assert not isinstance(info.value, InvalidRequestError)


_TONE = {"type": "choice", "choice": "angry", "confidence": 0.6, "probabilities": {"calm": 0.2, "angry": 0.8}}
_URGENCY = {"type": "score", "score": 1.7, "confidence": 0.5, "legend": {"0": "Can wait", "1": "This week", "2": "Today"},
            "probabilities": {"0": 0.1, "1": 0.1, "2": 0.8}}


@pytest.mark.parametrize(
    ("answers", "field"),
    [
        ({"q0": {"type": "noul", "noul": 1.5}}, "q0.noul"),
        ({"q0": {"type": "noul", "noul": -0.25}}, "q0.noul"),
        ({"q0": {"type": "noul", "noul": "NaN"}}, "q0.noul"),
        ({"q1": {**_TONE, "probabilities": {"calm": -0.2, "angry": 1.2}}}, "q1.probabilities.calm"),
        ({"q1": {**_TONE, "probabilities": {"calm": 0.2, "angry": 0.3}}}, "q1.probabilities"),  # sums to 0.5
        ({"q1": {**_TONE, "probabilities": {"calm": 2.0, "angry": 8.0}}}, "q1.probabilities.calm"),  # logits, not probabilities
        ({"q1": {**_TONE, "choice": "excited"}}, "q1.choice"),
        ({"q1": {**_TONE, "probabilities": {"calm": 0.2, "angry": 0.3, "excited": 0.5}}}, "q1.probabilities.excited"),
        ({"q2": {**_URGENCY, "probabilities": {"0": 0.1, "1": 0.1, "2": 0.1}}}, "q2.probabilities"),
        ({"q2": {**_URGENCY, "probabilities": {"0": 0.1, "1": 0.1, "2": 0.7, "3": 0.1}}}, "q2.probabilities.3"),
    ],
)
def test_out_of_range_answers_are_backend_errors_naming_the_field(server: FakeServer, answers: dict[str, Any], field: str) -> None:
    valid = {"q0": {"type": "noul", "noul": 0.5}, "q1": _TONE, "q2": _URGENCY}
    payload = {"model": "m", "answers": {**valid, **answers}, "usage": {"input_tokens": 3, "output_tokens": 0}}
    raw = json.dumps(payload).replace('"NaN"', "NaN")  # JSON as a careless server writes it
    server.override = lambda request: httpx2.Response(200, content=raw.encode(), headers={"content-type": "application/json", "x-typesafe-request-id": "r"})
    backend = RemoteBackend(base_url="http://fake", api_key="k", model="m", transport=httpx2.MockTransport(server), retry=NO_RETRY)
    with pytest.raises(BackendError, match=field.replace(".", r"\.")) as info:
        backend.answer([BackendRequest(STATE, tuple(normalize_questions(GENERIC).values()))])
    assert not isinstance(info.value, BackendUnavailableError)


def test_valid_answers_pass_unchanged(server: FakeServer) -> None:
    # rounded by the server (sum 0.999), a tie named as the choice: the probabilities come back as sent
    tone = {**_TONE, "choice": "calm", "probabilities": {"calm": 0.5, "angry": 0.5}}
    urgency = {**_URGENCY, "probabilities": {"0": 0.333, "1": 0.333, "2": 0.333}}
    payload = {"model": "m", "answers": {"q0": {"type": "noul", "noul": 1.0}, "q1": tone, "q2": urgency}, "usage": {"input_tokens": 3, "output_tokens": 0}}
    server.override = lambda request: httpx2.Response(200, json=payload, headers={"x-typesafe-request-id": "r"})
    backend = RemoteBackend(base_url="http://fake", api_key="k", model="m", transport=httpx2.MockTransport(server), retry=NO_RETRY)
    (result,) = backend.answer([BackendRequest(STATE, tuple(normalize_questions(GENERIC).values()))])
    assert result.probabilities == ((1.0,), (0.5, 0.5), (0.333, 0.333, 0.333))
