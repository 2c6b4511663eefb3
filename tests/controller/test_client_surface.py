"""The in-process clients' surface: invariance, determinism, response shape, models, async, SDK objects."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import typesafe_sdk as sdk

from controller import (
    AsyncSystemOneClient,
    BackendRequest,
    BackendResult,
    ModelInfo,
    SystemOneClient,
    UnknownModelError,
)
from controller.families import family_questions
from controller.questions import Question, signature


class FakeBackend:
    """Probabilities are a hash of (state, question content): any key / order / batch leak would show."""

    info = ModelInfo("fake-model-0.1", "A hash-based test double.", "2026-01-01")

    def __init__(self) -> None:
        self.calls: list[list[BackendRequest]] = []
        self.closed = False

    def answer(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        self.calls.append(list(requests))
        return [BackendResult(tuple(self._probs(r.state, q) for q in r.questions), 7 * len(r.questions)) for r in requests]

    @staticmethod
    def _probs(state: object, question: Question) -> tuple[float, ...]:
        def unit(salt: int) -> float:
            digest = hashlib.sha256(f"{state!r}|{signature(question)}|{salt}".encode()).digest()
            return (int.from_bytes(digest[:8], "little") + 1) / (2**64 + 2)

        if question.kind == "noul":
            return (unit(0),)
        return tuple(unit(i) for i in range(question.n_options))  # unnormalised on purpose

    def close(self) -> None:
        self.closed = True


PAIR_STATE = {
    "memory_a": {"id": "n2", "content": "Melanie: The kids loved the marshmallows at the lake.", "timestamp": "2023-07-10T10:05:00", "entities": ["Melanie"]},
    "memory_b": {"id": "n1", "content": "Melanie: We went camping at the lake last weekend.", "timestamp": "2023-07-10T10:00:00", "entities": ["Melanie"]},
}
GENERIC = {
    "billing": {"type": "noul", "instructions": "Is this about billing?", "criteria": {"true": "payments, refunds"}},
    "tone": {"type": "choice", "instructions": "Tone?", "criteria": {"calm": None, "angry": "upset, demanding", "excited": None}},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["Can wait", "This week", "Today"]},
}
STATE = {"message": "I was charged twice for my lake cabin booking, please refund me today!"}


@pytest.fixture(params=["heuristic", "fake"])
def client(request: pytest.FixtureRequest) -> Iterator[SystemOneClient]:
    backend = "heuristic" if request.param == "heuristic" else FakeBackend()
    with SystemOneClient(backend) as c:
        yield c


def _numbers(response: Any) -> dict[str, Any]:
    return {key: answer.model_dump(mode="json") for key, answer in response.answers.items()}


def _all_questions() -> dict[str, Any]:
    return {**GENERIC, **{f"pair_{k}": v for k, v in family_questions("pair").items()}}


def _state_for(key: str) -> Any:
    return PAIR_STATE if key.startswith("pair_") else STATE


def test_renaming_keys_changes_nothing(client: SystemOneClient) -> None:
    base = _numbers(client.system_one(PAIR_STATE, family_questions("pair")))
    renamed = _numbers(client.system_one(PAIR_STATE, {f"x-{k}-\u00e9\U0001f600": v for k, v in family_questions("pair").items()}))
    assert list(renamed) == [f"x-{k}-\u00e9\U0001f600" for k in base]  # keys echoed byte-exactly, in order
    assert list(renamed.values()) == list(base.values())


def test_reordering_duplicating_and_adding_change_nothing(client: SystemOneClient) -> None:
    questions = family_questions("pair")
    base = _numbers(client.system_one(PAIR_STATE, questions))
    reordered = dict(reversed(list(questions.items())))
    assert _numbers(client.system_one(PAIR_STATE, reordered)) == base
    duplicated = {**questions, **{f"dup_{k}": v for k, v in questions.items()}}
    got = _numbers(client.system_one(PAIR_STATE, duplicated))
    assert all(got[f"dup_{k}"] == base[k] == got[k] for k in questions)
    for key, question in questions.items():  # each question alone, and next to unrelated ones
        assert _numbers(client.system_one(PAIR_STATE, {"solo": question}))["solo"] == base[key]
        padded = {"a": GENERIC["billing"], key: question, "z": GENERIC["urgency"]}
        assert _numbers(client.system_one(PAIR_STATE, padded))[key] == base[key]


def test_batching_changes_nothing(client: SystemOneClient) -> None:
    requests = [
        (STATE, GENERIC),
        (PAIR_STATE, family_questions("pair")),
        ({"query": "When did Melanie go camping?"}, family_questions("routing")),
        ("plain text state about a refund", {"b": GENERIC["billing"]}),
    ]
    alone = [_numbers(client.system_one(s, q)) for s, q in requests]
    batched = [_numbers(r) for r in client.system_one_batch(requests)]
    assert batched == alone
    reversed_batch = [_numbers(r) for r in client.system_one_batch(list(reversed(requests)))]
    assert reversed_batch == list(reversed(alone))
    assert client.system_one_batch([]) == []


def test_deterministic(client: SystemOneClient) -> None:
    first = client.system_one(STATE, GENERIC)
    again = client.system_one(STATE, GENERIC)
    assert _numbers(first) == _numbers(again)
    assert first.usage == again.usage


def test_backend_sees_no_keys_and_no_duplicates() -> None:
    fake = FakeBackend()
    with SystemOneClient(fake) as c:
        c.system_one(STATE, {"secret-key-1": GENERIC["billing"], "secret-key-2": GENERIC["billing"], "t": GENERIC["tone"]})
    (request,) = fake.calls[-1]
    assert len(request.questions) == 2
    assert "secret-key" not in repr(request)
    assert not fake.closed  # a backend passed in belongs to the caller: the client's close leaves it open


def test_client_closes_only_a_backend_it_created() -> None:
    import asyncio

    from controller.backend import register_backend
    from controller.client import AsyncSystemOneClient

    made: list[FakeBackend] = []

    def factory(**options: object) -> FakeBackend:
        made.append(FakeBackend())
        return made[-1]

    import uuid

    name = f"fake-owned-{uuid.uuid4().hex}"  # the registry is process-wide: a fresh name per run
    register_backend(name, factory)
    with SystemOneClient(name) as c:
        c.system_one(STATE, GENERIC)
    assert made[-1].closed

    async def run() -> None:
        async with AsyncSystemOneClient(name) as a:
            await a.system_one(STATE, GENERIC)
        passed = FakeBackend()
        async with AsyncSystemOneClient(passed) as b:
            await b.system_one(STATE, GENERIC)
        assert not passed.closed

    asyncio.run(run())
    assert made[-1].closed and len(made) == 2


def test_response_shape(client: SystemOneClient) -> None:
    r = client.system_one(STATE, GENERIC)
    assert isinstance(r, sdk.SystemOneResponse)
    assert r.model == client.backend.info.name
    assert isinstance(r.usage.input_tokens, int) and r.usage.input_tokens > 0
    assert r.usage.output_tokens == 0
    assert set(r.answers) == set(GENERIC)
    assert set(r.nouls) == {"billing"} and set(r.choices) == {"tone"} and set(r.scores) == {"urgency"}
    assert 0.0 <= r.nouls["billing"].noul <= 1.0
    tone = r.choices["tone"]
    assert list(tone.probabilities) == ["calm", "angry", "excited"]
    assert tone.choice == max(tone.probabilities, key=lambda k: tone.probabilities[k])
    assert math.fsum(tone.probabilities.values()) == pytest.approx(1.0, abs=1e-9)
    urgency = r.scores["urgency"]
    assert list(urgency.legend) == [0, 1, 2] and list(urgency.probabilities) == [0, 1, 2]
    assert urgency.legend == {0: "Can wait", 1: "This week", 2: "Today"}
    assert math.fsum(urgency.probabilities.values()) == pytest.approx(1.0, abs=1e-9)
    assert urgency.score == pytest.approx(math.fsum(i * p for i, p in urgency.probabilities.items()))
    with pytest.raises(sdk.TypeSafeError):
        _ = r.request_id  # no HTTP response in process, as with the SDK's model_construct responses


def test_no_nan_anywhere(client: SystemOneClient) -> None:
    states: list[Any] = [STATE, "", [], {}, PAIR_STATE, {"query": ""}, {"memory_a": None, "memory_b": 3}]
    for state in states:
        r = client.system_one(state, _all_questions())
        for answer in r.answers.values():
            dumped = answer.model_dump(mode="json")
            values = [dumped.get("noul"), dumped.get("confidence"), dumped.get("score"), *dumped.get("probabilities", {}).values()]
            assert all(v is None or (math.isfinite(v) and 0.0 <= v <= 10.0) for v in values)
            if "probabilities" in dumped:
                assert math.fsum(dumped["probabilities"].values()) == pytest.approx(1.0, abs=1e-9)
                assert 0.0 <= dumped["confidence"] <= 1.0


def test_sdk_objects_and_dicts_agree(client: SystemOneClient) -> None:
    objects = {
        "billing": sdk.Noul(instructions="Is this about billing?", criteria={"true": "payments, refunds"}),
        "tone": sdk.Choice(instructions="Tone?", criteria={"calm": None, "angry": "upset, demanding", "excited": None}),
        "urgency": sdk.Score(instructions="How urgent?", criteria=("Can wait", "This week", "Today")),
    }
    assert _numbers(client.system_one(STATE, objects)) == _numbers(client.system_one(STATE, GENERIC))
    mixed = {"billing": objects["billing"], "tone": GENERIC["tone"], "urgency": objects["urgency"]}
    assert _numbers(client.system_one(STATE, mixed)) == _numbers(client.system_one(STATE, GENERIC))


def test_noul_criteria_spelling_is_content_not_form(client: SystemOneClient) -> None:
    a = client.system_one(STATE, {"q": {"type": "noul", "instructions": "x", "criteria": {"true": "yes"}}})
    b = client.system_one(STATE, {"q": {"type": "noul", "instructions": "x", "criteria": {"true": "yes", "false": None}}})
    assert _numbers(a) == _numbers(b)


def test_models_list(client: SystemOneClient) -> None:
    listed = client.models.list()
    assert isinstance(listed, sdk.ListModelsResponse)
    names = [m.name for m in listed.models]
    assert names[0] == client.backend.info.name
    assert {"jev-latest", "jev-preview"} <= set(names)
    assert all(len(m.release_date) == 10 and m.description for m in listed.models)


def test_model_names(client: SystemOneClient) -> None:
    concrete = client.backend.info.name
    for alias in ("jev-latest", "jev-preview", None):
        assert client.system_one(STATE, {"b": GENERIC["billing"]}, model=alias).model == concrete
    assert client.system_one(STATE, {"b": GENERIC["billing"]}, model=concrete).model == concrete
    with pytest.raises(UnknownModelError):
        client.system_one(STATE, {"b": GENERIC["billing"]}, model=concrete + "-nope")


def test_client_default_model_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TYPESAFE_DEFAULT_MODEL", "nope-model")
    with SystemOneClient(FakeBackend()) as c, pytest.raises(UnknownModelError):
        c.system_one(STATE, {"b": GENERIC["billing"]})


def test_response_model(client: SystemOneClient) -> None:
    from pydantic import BaseModel

    class Billing(BaseModel):
        model: str
        answers: dict[str, dict[str, Any]]

    r = client.system_one(STATE, {"b": GENERIC["billing"], "u": GENERIC["urgency"]}, response_model=Billing)
    assert isinstance(r, Billing)
    assert r.answers["b"]["type"] == "noul"
    assert set(r.answers["u"]["legend"]) == {"0", "1", "2"}  # the wire form: string keys


@pytest.mark.parametrize("backend", ["heuristic", "fake"])
async def test_async_client_matches_sync(backend: str) -> None:
    make = (lambda: "heuristic") if backend == "heuristic" else FakeBackend
    with SystemOneClient(make()) as sync_client:
        expected = _numbers(sync_client.system_one(PAIR_STATE, family_questions("pair")))
        expected_batch = [_numbers(r) for r in sync_client.system_one_batch([(STATE, GENERIC), (PAIR_STATE, family_questions("pair"))])]
    async with AsyncSystemOneClient(make()) as client:
        r = await client.system_one(PAIR_STATE, family_questions("pair"))
        assert _numbers(r) == expected
        batch = await client.system_one_batch([(STATE, GENERIC), (PAIR_STATE, family_questions("pair"))])
        assert [_numbers(x) for x in batch] == expected_batch
        listed = await client.models.list()
        assert {"jev-latest", "jev-preview"} <= {m.name for m in listed.models}
        with pytest.raises(UnknownModelError):
            await client.system_one(STATE, GENERIC, model="nope")


def test_reordered_choice_keeps_its_own_option_order(client: SystemOneClient) -> None:
    forward = {"type": "choice", "criteria": {"calm": None, "angry": None}}
    backward = {"type": "choice", "criteria": {"angry": None, "calm": None}}
    r = client.system_one(STATE, {"f": forward, "b": backward})
    assert list(r.choices["f"].probabilities) == ["calm", "angry"]
    assert list(r.choices["b"].probabilities) == ["angry", "calm"]
    alone = client.system_one(STATE, {"b": backward})
    assert _numbers(alone)["b"] == _numbers(r)["b"]


def test_heuristic_is_option_order_invariant() -> None:
    with SystemOneClient("heuristic") as client:
        tone = GENERIC["tone"]
        flipped = {**tone, "criteria": dict(reversed(list(tone["criteria"].items())))}
        a = client.system_one(STATE, {"t": tone}).choices["t"].probabilities
        b = client.system_one(STATE, {"t": flipped}).choices["t"].probabilities
        assert a == pytest.approx(b, abs=1e-12)
