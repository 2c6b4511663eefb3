"""Misuse of the in-process clients and the backend registry: each is a domain error saying what is wrong,
raised before any backend work, never an AttributeError / ValueError / bare TypeError from deep inside."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from controller.backend import BackendRequest, BackendResult, ModelInfo, create_backend, register_backend
from controller.client import AsyncSystemOneClient, SystemOneClient
from controller.errors import BackendError, BackendOptionError, InvalidRequestError, UnknownBackendError

N = {"q": {"type": "noul", "instructions": "x"}}


class CountingBackend:
    """Answers 0.5 to everything and counts its calls: a refused request must never reach it."""

    info = ModelInfo("counting-0.1", "A test double that counts calls.", "2026-01-01")

    def __init__(self) -> None:
        self.calls = 0

    def answer(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        self.calls += 1
        return [BackendResult(tuple((0.5,) * (1 if q.kind == "noul" else q.n_options) for q in r.questions), 1) for r in requests]

    def close(self) -> None:
        pass


def _register(factory: Callable[..., Any]) -> str:
    name = f"misuse-{uuid.uuid4().hex}"  # the registry is process-wide: a fresh name per test
    register_backend(name, factory)
    return name


# ---------------------------------------------------------------------------------------------- the backend


class OnlyAnswers:
    def answer(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return []


class AnswerNotCallable(CountingBackend):
    answer = 3  # type: ignore[assignment]


NOT_BACKENDS: dict[str, tuple[object, str]] = {
    "an int": (5, "got int 5, which lacks info, answer, close"),
    "None": (None, "got NoneType None, which lacks info, answer, close"),
    "a bare object": (object(), "got object <object object at"),
    "a class, not an instance": (CountingBackend, "got CountingBackend, a class, not an instance"),
    "only answer": (OnlyAnswers(), "got OnlyAnswers <"),
    "answer not callable": (AnswerNotCallable(), "which lacks answer"),
}


@pytest.mark.parametrize("client_class", [SystemOneClient, AsyncSystemOneClient])
@pytest.mark.parametrize("case", list(NOT_BACKENDS))
def test_an_object_that_is_not_a_backend_is_refused_at_construction(client_class: type, case: str) -> None:
    value, detail = NOT_BACKENDS[case]
    with pytest.raises(UnknownBackendError, match=r"backend must be a registered name \(.*heuristic.*\) or a Backend with info, answer, close") as error:
        client_class(value)
    assert detail in str(error.value)


def test_only_answer_lacks_info_and_close() -> None:
    with pytest.raises(UnknownBackendError, match="which lacks info, close$"):
        SystemOneClient(OnlyAnswers())  # type: ignore[arg-type]


@pytest.mark.parametrize("client_class", [SystemOneClient, AsyncSystemOneClient])
def test_an_unregistered_name_is_an_unknown_backend(client_class: type) -> None:
    with pytest.raises(UnknownBackendError, match=r"unknown backend 'nope'; available: .*heuristic"):
        client_class("nope")


def test_a_name_that_is_not_a_str_is_an_unknown_backend() -> None:
    with pytest.raises(UnknownBackendError, match="a backend name must be a str, not list; available: .*heuristic"):
        create_backend([1])  # type: ignore[arg-type]


def test_the_backend_check_does_not_evaluate_a_lazy_info_property() -> None:
    class Lazy(CountingBackend):
        @property
        def info(self) -> ModelInfo:  # type: ignore[override]  # the remote backend fetches it from the server
            raise AssertionError("info was evaluated at construction")

    SystemOneClient(Lazy())
    AsyncSystemOneClient(Lazy())


def test_a_factory_that_returns_no_backend_is_a_backend_error() -> None:
    name = _register(lambda **options: 5)
    with pytest.raises(BackendError, match=f"the factory of backend '{name}' returned a int, which lacks info, answer, close"):
        SystemOneClient(name)


# ------------------------------------------------------------------------------------------ backend options


@pytest.mark.parametrize("build", [
    lambda: SystemOneClient("heuristic", bogus=1),
    lambda: AsyncSystemOneClient("heuristic", bogus=1),
    lambda: create_backend("heuristic", bogus=1),
], ids=["client", "async client", "create_backend"])
def test_an_option_the_factory_does_not_take_names_the_backend_and_the_option(build: Callable[[], object]) -> None:
    with pytest.raises(BackendOptionError) as error:
        build()
    e = error.value
    assert str(e) == ("backend 'heuristic' cannot take the keyword argument 'bogus': "
                      "HeuristicBackend.__init__() got an unexpected keyword argument 'bogus'")
    assert (e.backend, e.option) == ("heuristic", "bogus")
    assert e.detail == "HeuristicBackend.__init__() got an unexpected keyword argument 'bogus'"
    assert isinstance(e, BackendError) and isinstance(e.__cause__, TypeError) and not isinstance(e.__cause__, BackendOptionError)
    # Still a TypeError whose text says "keyword argument": serving's JEVMEM_CONTROLLER_OPTIONS check relies on both.
    assert isinstance(e, TypeError) and "keyword argument" in str(e)


def test_an_option_that_collides_with_an_argument_the_factory_sets_is_an_option_error() -> None:
    class Built(CountingBackend):
        def __init__(self, loaded: object, **options: object) -> None:
            super().__init__()

    name = _register(lambda **options: Built(object(), **options))
    with pytest.raises(BackendOptionError, match=f"backend '{name}' cannot take the keyword argument 'loaded': .*multiple values") as error:
        create_backend(name, loaded=1)
    assert error.value.option == "loaded"


def test_a_type_error_inside_a_factory_that_is_not_about_the_options_propagates() -> None:
    def buggy(**options: object) -> CountingBackend:
        return options["n"] + "x"  # type: ignore[operator,no-any-return]

    with pytest.raises(TypeError, match="unsupported operand") as error:
        create_backend(_register(buggy), n=1)
    assert not isinstance(error.value, BackendOptionError)


def test_a_bad_keyword_the_factory_itself_writes_propagates() -> None:
    def buggy(**options: object) -> CountingBackend:
        return CountingBackend(typo=1)  # type: ignore[call-arg]  # not one of the caller's options: a bug

    with pytest.raises(TypeError, match=re.escape("got an unexpected keyword argument 'typo'")) as error:
        create_backend(_register(buggy), size=1)
    assert not isinstance(error.value, BackendOptionError)


@pytest.mark.parametrize("client_class", [SystemOneClient, AsyncSystemOneClient])
def test_options_with_a_backend_instance_are_refused_not_ignored(client_class: type) -> None:
    with pytest.raises(BackendOptionError, match="a Backend instance \\(CountingBackend\\) cannot take the keyword argument 'bogus'") as error:
        client_class(CountingBackend(), bogus=1)
    assert (error.value.backend, error.value.option) == ("CountingBackend", "bogus")


# --------------------------------------------------------------------------------------------- extra_body


class Wire(BaseModel):
    model: str
    answers: dict[str, Any]
    usage: dict[str, Any]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("extra_body", [1], "extra_body must be a mapping of body fields, not list"),
        ("extra_body", [], "extra_body must be a mapping of body fields, not list"),
        ("extra_body", "state", "extra_body must be a mapping of body fields, not str"),
        ("extra_body", 3, "extra_body must be a mapping of body fields, not int"),
        ("response_model", int, "response_model must be a pydantic BaseModel subclass, not int"),
        ("response_model", "Wire", "response_model must be a pydantic BaseModel subclass, not str 'Wire'"),
        ("response_model", dict, "response_model must be a pydantic BaseModel subclass, not dict"),
    ],
)
async def test_call_options_of_the_wrong_kind_are_refused_before_the_backend_runs(option: str, value: object, message: str) -> None:
    backend = CountingBackend()
    with pytest.raises(InvalidRequestError, match=re.escape(message)) as error:
        SystemOneClient(backend).system_one("s", N, **{option: value})
    assert error.value.loc == (option,)
    with pytest.raises(InvalidRequestError, match=re.escape(message)):
        await AsyncSystemOneClient(backend).system_one("s", N, **{option: value})
    assert backend.calls == 0


def test_a_model_instance_is_no_response_model() -> None:
    with pytest.raises(InvalidRequestError, match="response_model must be a pydantic BaseModel subclass, not Wire "):
        SystemOneClient(CountingBackend()).system_one("s", N, response_model=Wire(model="m", answers={}, usage={}))  # type: ignore[arg-type]


async def test_a_mapping_extra_body_still_works() -> None:
    backend = CountingBackend()
    assert SystemOneClient(backend).system_one("other", N, extra_body={"state": "s"}).answers["q"].noul is not None
    assert (await AsyncSystemOneClient(backend).system_one("s", N, extra_body={})).answers["q"].noul is not None


# ----------------------------------------------------------------------------------------- response_model


async def test_a_pydantic_response_model_still_works() -> None:
    backend = CountingBackend()
    assert isinstance(SystemOneClient(backend).system_one("s", N, response_model=Wire), Wire)
    assert isinstance(await AsyncSystemOneClient(backend).system_one("s", N, response_model=Wire), Wire)


# ------------------------------------------------------------------------------------------------ batches

# (requests, index of the bad entry, what the message shows of it)
BAD_ENTRIES: dict[str, tuple[list[Any], int, str]] = {
    "a dict entry": ([{"observation": "x"}], 0, "dict {'observation': 'x'}"),
    "a two-key dict is not unpacked into its keys": ([{"state": "s", "questions": N}], 0, "dict {'state': 's'"),
    "a two-character string": ([("s", N), "ab"], 1, "str 'ab'"),
    "a triple": ([("s", N), ("s", N), ("s", N, None)], 2, "tuple ('s', {'q'"),
    "a single": ([("s",)], 0, "tuple ('s',)"),
    "None": ([None], 0, "NoneType None"),
}


@pytest.mark.parametrize("case", list(BAD_ENTRIES))
async def test_each_batch_entry_must_be_a_state_questions_pair(case: str) -> None:
    requests, index, shown = BAD_ENTRIES[case]
    message = re.escape(f"requests[{index}] must be a (state, questions) pair, not {shown}")
    backend = CountingBackend()
    with pytest.raises(InvalidRequestError, match=message) as error:
        SystemOneClient(backend).system_one_batch(requests)
    assert error.value.loc == (index,)
    with pytest.raises(InvalidRequestError, match=message):
        await AsyncSystemOneClient(backend).system_one_batch(requests)
    assert backend.calls == 0


@pytest.mark.parametrize(("requests", "shown"), [(None, "NoneType"), ("ab", "str"), ({"s": N}, "dict"), (5, "int")])
async def test_the_batch_must_be_a_sequence_of_pairs(requests: object, shown: str) -> None:
    message = f"requests must be a sequence of \\(state, questions\\) pairs, not {shown}"
    with pytest.raises(InvalidRequestError, match=message):
        SystemOneClient(CountingBackend()).system_one_batch(requests)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match=message):
        await AsyncSystemOneClient(CountingBackend()).system_one_batch(requests)  # type: ignore[arg-type]


async def test_well_formed_batches_still_work() -> None:
    backend = CountingBackend()
    pairs = [("s", N), ["t", N]]
    assert len(SystemOneClient(backend).system_one_batch(pairs)) == 2  # type: ignore[arg-type]
    assert len(SystemOneClient(backend).system_one_batch(p for p in pairs)) == 2  # type: ignore[arg-type]
    assert len(await AsyncSystemOneClient(backend).system_one_batch(pairs)) == 2  # type: ignore[arg-type]
    assert SystemOneClient(backend).system_one_batch([]) == []
