"""The heuristic backend: documented family rules point the right way, the generic rule answers anything."""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import pytest

from controller import BackendRequest, SystemOneClient, create_backend
from controller import heuristic as heuristic_module
from controller.families import FAMILIES, family_questions
from controller.heuristic import INFO, P_MAX, P_MIN, HeuristicBackend
from controller.questions import ChoiceQuestion, NoulQuestion, normalize_questions


@pytest.fixture(scope="module")
def backend() -> HeuristicBackend:
    return HeuristicBackend()


def ask(backend: HeuristicBackend, family: str, state: Any) -> dict[str, Any]:
    """Family answers by question name: a float for a Noul, {label: p} for a Choice."""
    out: dict[str, Any] = {}
    for name, question in normalize_questions(family_questions(family)).items():
        probs = backend.probabilities(state, question)
        out[name] = probs[0] if isinstance(question, NoulQuestion) else dict(zip(question.labels, probs))  # type: ignore[union-attr]
    return out


def mem(content: str, timestamp: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "n", "content": content, "timestamp": timestamp, "entities": [], **extra}


def argmax(dist: dict[str, float]) -> str:
    return max(dist, key=lambda k: dist[k])


def test_info_and_registry() -> None:
    created = create_backend("heuristic")
    assert isinstance(created, HeuristicBackend)
    assert created.info.name == INFO.name == "jevmem-heuristic-1.0.0"
    assert created.info.release_date == "2026-11-29"
    with pytest.raises(ValueError, match="unknown embedder"):
        HeuristicBackend("word2vec")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Caroline: I went to the LGBTQ support group yesterday and it was powerful.", "episodic"),
        ("Jon works as a banker and lives in Boston.", "semantic"),
        ("To make the glaze, first mix the slip, then add water and stir.", "procedural"),
        ("Melanie: I love painting sunsets, it's my favorite thing.", "preference"),
    ],
)
def test_typing_cues(backend: HeuristicBackend, text: str, expected: str) -> None:
    got = ask(backend, "typing", {"observation": text})
    assert argmax(got) == expected
    assert got[expected] > 0.6
    assert all(p < 0.5 for name, p in got.items() if name != expected)


def test_pair_relations(backend: HeuristicBackend) -> None:
    camping = mem("Melanie: We went camping at the lake with the kids.", "2023-07-10T10:00:00")
    marshmallows = mem("Melanie: The kids loved roasting marshmallows at the lake camping trip.", "2023-07-10T10:05:00")
    job = mem("Caroline: I started a new job at the counseling center.", "2023-09-20T10:00:00")
    related = ask(backend, "pair", {"memory_a": marshmallows, "memory_b": camping})
    unrelated = ask(backend, "pair", {"memory_a": job, "memory_b": camping})
    assert related["semantic"] > 0.6 > 0.2 > unrelated["semantic"]
    assert related["same_episode"] > 0.7 and unrelated["same_episode"] < 0.2
    assert unrelated["update"] < 0.3  # change cues alone do not make an update without a shared subject
    assert argmax(unrelated["temporal"]) == "after"  # job (September) after camping (July)
    assert argmax(ask(backend, "pair", {"memory_a": camping, "memory_b": job})["temporal"]) == "before"
    assert argmax(related["temporal"]) == "same_time"  # five minutes apart, same session
    undated = ask(backend, "pair", {"memory_a": mem("We hiked."), "memory_b": mem("We swam.")})
    assert argmax(undated["temporal"]) == "unknown"
    shifted = ask(backend, "pair", {"memory_a": mem("I ran a marathon last month.", "2023-07-10"), "memory_b": mem("I bought shoes.", "2023-07-01")})
    assert argmax(shifted["temporal"]) == "before"  # "last month" moves the event before the other one


def test_pair_causal_and_update(backend: HeuristicBackend) -> None:
    because = ask(backend, "pair", {
        "memory_a": mem("I started volunteering at the shelter because the support group helped me so much.", "2023-08-01"),
        "memory_b": mem("The support group helped me a lot when I was struggling.", "2023-06-01"),
    })
    plain = ask(backend, "pair", {
        "memory_a": mem("I painted a sunset over the lake.", "2023-08-01"),
        "memory_b": mem("My car needs new tires.", "2023-06-01"),
    })
    assert because["causal"] > 0.5 > plain["causal"]
    newer = {"memory_a": mem("I now work at Google as an engineer.", "2024-01-01", speaker="Jon"),
             "memory_b": mem("I work at Microsoft as an engineer.", "2022-01-01", speaker="Jon")}
    older = {"memory_a": newer["memory_b"], "memory_b": newer["memory_a"]}
    assert ask(backend, "pair", newer)["update"] > 0.5 > ask(backend, "pair", older)["update"]


def test_entity_equivalence(backend: HeuristicBackend) -> None:
    alias = ask(backend, "pair", {"memory_a": mem("Mel took the kids hiking."), "memory_b": mem("Melanie has two kids.")})
    nickname = ask(backend, "pair", {"memory_a": mem("Bob fixed the fence."), "memory_b": mem("Robert bought a hammer.")})
    different = ask(backend, "pair", {"memory_a": mem("Caroline went hiking."), "memory_b": mem("Melanie has two kids.")})
    assert alias["entity_equivalence"] > 0.6
    assert nickname["entity_equivalence"] > 0.6
    assert different["entity_equivalence"] < 0.3


def test_consolidation(backend: HeuristicBackend) -> None:
    a = mem("Melanie: We went camping at the lake with the kids last weekend.", "2023-07-10")
    same = ask(backend, "consolidation", {"memory_a": a, "memory_b": a})
    assert same["redundant"] > 0.9 and argmax(same["representation"]) == "merge_summary"
    contra = ask(backend, "consolidation", {"memory_a": mem("I do not like coffee at all."), "memory_b": mem("I like coffee a lot.")})
    assert contra["contradiction"] > 0.5 and contra["redundant"] < 0.5
    moved = ask(backend, "consolidation", {
        "memory_a": mem("I now work at Google as an engineer.", "2024-01-01", speaker="Jon"),
        "memory_b": mem("I work at Microsoft as an engineer.", "2022-01-01", speaker="Jon"),
    })
    assert moved["obsolete"] > 0.5 and argmax(moved["representation"]) == "supersede"
    apart = ask(backend, "consolidation", {"memory_a": mem("Caroline started a counseling course."), "memory_b": a})
    assert apart["link_useful"] < 0.3 and argmax(apart["representation"]) == "keep_separate"
    assert apart["contradiction"] < 0.1 and apart["redundant"] < 0.1


@pytest.mark.parametrize(
    ("query", "high"),
    [
        ("When did Caroline go to the LGBTQ support group?", {"temporal", "entity", "semantic"}),
        ("Why did Melanie start painting?", {"causal", "semantic"}),
        ("What activities has Melanie done with her kids?", {"multi_hop", "semantic"}),
        ("What is Caroline's current job?", {"recency", "semantic"}),
        ("Would Caroline and Melanie both enjoy camping?", {"multi_hop", "entity", "semantic"}),
    ],
)
def test_routing(backend: HeuristicBackend, query: str, high: set[str]) -> None:
    got = ask(backend, "routing", {"query": query})
    assert {name for name, p in got.items() if p >= 0.6} >= high
    for name in {"temporal", "causal", "recency"} - high:
        assert got[name] < 0.3, name


def test_relevance(backend: HeuristicBackend) -> None:
    query = "When did Caroline go to the LGBTQ support group?"
    hit = ask(backend, "relevance", {"query": query, "memory": "Caroline: I went to the LGBTQ support group yesterday."})
    miss = ask(backend, "relevance", {"query": query, "memory": {"content": "Melanie: The kids loved the lake.", "speaker": "Melanie"}})
    bridge = ask(backend, "relevance", {"query": "What did Melanie's friend from the yoga class give her?",
                                        "memory": "Caroline: Melanie and I talked for hours on the phone."})
    assert hit["relevant"] > 0.8 > 0.1 > miss["relevant"]
    assert bridge["bridge"] > miss["bridge"] and bridge["bridge"] > hit["bridge"]


def test_stopping(backend: HeuristicBackend) -> None:
    query = "When did Caroline go to the LGBTQ support group?"
    found = ask(backend, "stopping", {"query": query, "evidence": ["Caroline: I went to the LGBTQ support group yesterday."], "depth": 1})
    lacking = ask(backend, "stopping", {"query": query, "evidence": [{"content": "Melanie: The kids loved the lake."}], "depth": 0})
    assert found["evidence_sufficient"] > 0.7 > 0.2 > lacking["evidence_sufficient"]
    assert found["missing_evidence"] < 0.3 < 0.7 < lacking["missing_evidence"]
    assert lacking["continue_useful"] > 0.5 > found["continue_useful"]
    by_depth = [ask(backend, "stopping", {"query": query, "evidence": [], "depth": d})["continue_useful"] for d in range(5)]
    assert by_depth == sorted(by_depth, reverse=True) and by_depth[0] > by_depth[-1]
    conflict = ask(backend, "stopping", {"query": "Does Jon have a dog?", "evidence": ["Jon has a dog named Rex.", "Jon does not have a dog."], "depth": 2})
    assert conflict["contradiction"] > 0.5 > found["contradiction"]


def test_every_family_answer_is_clipped_and_finite(backend: HeuristicBackend) -> None:
    states = {
        "typing": [{"observation": ""}, {"observation": "yesterday " * 50}],
        "pair": [{"memory_a": {}, "memory_b": {}}, {"memory_a": mem("x", "not a date"), "memory_b": "plain text"}],
        "consolidation": [{"memory_a": None, "memory_b": None}, {"memory_a": mem("a", "2023-01-01"), "memory_b": mem("a", "2023-01-01")}],
        "routing": [{"query": ""}, {"query": ["when", "why", "now"]}],
        "relevance": [{"query": "", "memory": ""}, {"query": "x", "memory": 5}],
        "stopping": [{"query": "", "evidence": None, "depth": "deep"}, {"query": "q", "evidence": "one text", "depth": -3}],
    }
    for family, cases in states.items():
        for state in cases:
            for name, question in normalize_questions(family_questions(family)).items():
                probs = backend.probabilities(state, question)
                assert all(math.isfinite(p) for p in probs), (family, name)
                if isinstance(question, NoulQuestion):
                    assert P_MIN <= probs[0] <= P_MAX
                else:
                    assert math.fsum(probs) == pytest.approx(1.0)


def test_family_rule_needs_the_family_shape(backend: HeuristicBackend) -> None:
    question = normalize_questions(family_questions("typing", ("episodic",)))["episodic"]
    assert backend.probabilities("I went there yesterday", question) == backend._generic("I went there yesterday", question)
    assert backend.probabilities({"text": "I went there yesterday"}, question) == backend._generic({"text": "I went there yesterday"}, question)


def test_temporal_choice_with_other_labels(backend: HeuristicBackend) -> None:
    wire = family_questions("pair", ("temporal",))["temporal"]
    state = {"memory_a": mem("We hiked.", "2023-01-01"), "memory_b": mem("We swam.", "2023-06-01")}
    base = dict(zip(wire["criteria"], backend.probabilities(state, _choice(wire["criteria"], wire["instructions"]))))
    reordered = list(reversed(list(wire["criteria"])))
    again = dict(zip(reordered, backend.probabilities(state, _choice({k: wire["criteria"][k] for k in reordered}, wire["instructions"]))))
    assert again == pytest.approx(base)  # option order does not matter
    extra = {**wire["criteria"], "sometime": None}
    with_extra = dict(zip(extra, backend.probabilities(state, _choice(extra, wire["instructions"]))))
    assert with_extra["sometime"] < min(with_extra[k] for k in wire["criteria"])
    foreign = _choice({"yes": None, "no": None}, wire["instructions"])
    assert backend.probabilities(state, foreign) == backend._generic(state, foreign)


def _choice(criteria: dict[str, Any], instructions: str) -> ChoiceQuestion:
    return ChoiceQuestion(instructions, tuple(criteria.items()))


def test_generic_rule_follows_the_state(backend: HeuristicBackend) -> None:
    billing = NoulQuestion("Is the message about a refund for a double charge?", "It asks for money back.", "It does not.")
    assert backend.probabilities("Please refund the double charge on my card", billing)[0] > backend.probabilities("The weather is lovely today", billing)[0]
    tone = ChoiceQuestion("Which topic?", (("gardening", "plants, soil, flowers"), ("cooking", "recipes, ovens, food")))
    probs = backend.probabilities({"note": "I planted tulips and flowers in fresh soil"}, tone)
    assert probs[0] > 0.7
    levels = backend.probabilities("extremely urgent emergency", _score(["not urgent", "somewhat urgent", "extremely urgent emergency"]))
    assert levels.index(max(levels)) == 2


def _score(levels: list[str]) -> Any:
    from controller.questions import ScoreQuestion

    return ScoreQuestion(None, tuple(levels))


def test_generic_with_json_content(backend: HeuristicBackend) -> None:
    question = NoulQuestion({"ask": "refund requested?"}, ["money", "back"], None)
    (p,) = backend.probabilities({"messages": [{"text": "I want my money back, refund please"}]}, question)
    assert P_MIN <= p <= P_MAX


class ConstantEmbedder:
    name = "constant"
    dim = 4

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.tile(np.array([[0.5, 0.5, 0.5, 0.5]], dtype=np.float32), (len(texts), 1))


def test_custom_embedder_is_used_one_text_at_a_time() -> None:
    embedder = ConstantEmbedder()
    backend = HeuristicBackend(embedder)
    assert backend.similarity("alpha beta", "gamma delta") == pytest.approx(1.0)
    backend.similarity("alpha beta", "epsilon")  # cached text is not embedded again
    assert embedder.calls == [["alpha beta"], ["gamma delta"], ["epsilon"]]
    assert "constant" in backend.info.description


def test_usage_counts_tokens(backend: HeuristicBackend) -> None:
    questions = tuple(normalize_questions(family_questions("pair")).values())
    short = BackendRequest({"memory_a": "a", "memory_b": "b"}, questions)
    long_ = BackendRequest({"memory_a": "a " * 300, "memory_b": "b"}, questions)
    (r_short, r_long) = backend.answer([short, long_])
    assert 0 < r_short.input_tokens < r_long.input_tokens
    assert r_long.input_tokens - r_short.input_tokens >= 290  # never truncated while counting
    from controller.template import count_input_tokens

    assert r_short.input_tokens == count_input_tokens(short)  # the template's count when the model could read it


def test_over_long_requests_are_answered(backend: HeuristicBackend) -> None:
    from controller.errors import InputTooLongError
    from controller.template import count_input_tokens

    questions = tuple(normalize_questions(family_questions("stopping")).values())
    request = BackendRequest({"query": "When did we hike?", "evidence": ["we hiked in the hills"] * 200, "depth": 1}, questions)
    with pytest.raises(InputTooLongError):
        count_input_tokens(request)  # the local model would refuse it
    (result,) = backend.answer([request])
    assert result.input_tokens > 1000
    assert all(P_MIN <= p[0] <= P_MAX for p in result.probabilities)


def test_token_counter_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "controller.template", None)  # import fails as if the module were missing
    counter = heuristic_module._resolve_counter()
    request = BackendRequest("hello world", (NoulQuestion("Is it a greeting?"),))
    from tokenizers import Tokenizer

    from controller.embedding import base_model_path

    tok = Tokenizer.from_file(str(base_model_path() / "tokenizer.json"))
    tok.no_padding()
    n = lambda text: len(tok.encode(text, add_special_tokens=False).ids)  # noqa: E731
    assert counter(request) == 2 + n("hello world") + 1 + n("Is it a greeting?")  # [CLS] state [SEP] marker question

    def missing() -> None:
        raise RuntimeError("no base model here")

    monkeypatch.setattr("controller.embedding.base_model_path", missing)
    words = heuristic_module._resolve_counter()(request)
    assert words > 0


def test_client_over_heuristic_end_to_end() -> None:
    with SystemOneClient("heuristic") as client:
        for family in FAMILIES:
            fields = {f: "Caroline went to the support group yesterday" for f in FAMILIES[family].state_fields}
            r = client.system_one(fields, family_questions(family))
            assert set(r.answers) == set(FAMILIES[family].questions)
