from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from training.predict import predict
from training.sampling import BalancedSampler, cap_states, collate, noul_as_choice, prepare_requests


def test_requests_pack_every_question_of_a_state(toy_examples, tokenizer) -> None:  # type: ignore[no-untyped-def]
    train = [e for e in toy_examples if e.split == "train"]
    requests, report = prepare_requests(train, tokenizer)
    assert report.labels == len(train) and report.requests == len({e.state_key for e in train})
    assert all(len(r.labels) == len(r.tokenized.questions) for r in requests)
    choice = next(label for r in requests for label in r.labels if label.kind == "choice")
    assert len(choice.options) == len(choice.target) and abs(sum(choice.target) - 1) < 1e-6


def test_labels_carry_the_calibration_key_serving_uses(toy_examples, tokenizer) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    from controller.families import calibration_key, state_family
    from controller.questions import normalize_questions

    train = [e for e in toy_examples if e.split == "train" and e.family == "routing"][:4]
    assert train and state_family(train[0].state) == "routing"
    custom = dataclasses.replace(train[0], id=train[0].id + ":custom", question_name="custom",
                                 question={**train[0].question, "instructions": "Does state.query ask about a time?"})
    requests, _ = prepare_requests([*train, custom], tokenizer)
    labels = {label.example_id: label for r in requests for label in r.labels}
    assert labels[custom.id].catalogue == "routing"  # other wording: the state's family, as `LocalBackend` keys it
    for e in train:
        question = next(iter(normalize_questions({"q": e.question}).values()))
        assert labels[e.id].catalogue == calibration_key(question, e.state) is not None


def test_noul_as_choice_keeps_the_answer() -> None:
    from controller.questions import NoulQuestion

    q = NoulQuestion("Is it so?", "it is", "it is not")
    choice, target = noul_as_choice(q, 0.8, yes_first=False)
    assert choice.labels == ("no", "yes") and np.allclose(target, (0.2, 0.8))
    assert dict(choice.options) == {"yes": "it is", "no": "it is not"}


def test_sampler_is_deterministic_and_family_balanced(toy_examples, tokenizer) -> None:  # type: ignore[no-untyped-def]
    train = [e for e in toy_examples if e.split == "train"]
    requests, _ = prepare_requests(train, tokenizer)
    # make one family rare: keep 4 typing states only
    rare = [r for r in requests if r.family == "typing"][:4] + [r for r in requests if r.family != "typing"]
    balanced = BalancedSampler(rare, tokens_per_step=2000, power=0.0, seed=1)
    natural = BalancedSampler(rare, tokens_per_step=2000, power=1.0, seed=1)
    assert balanced.indices(5) == BalancedSampler(rare, tokens_per_step=2000, power=0.0, seed=1).indices(5)
    assert balanced.indices(5) != balanced.indices(6)
    draws = Counter(rare[i].family for s in range(40) for i in balanced.indices(s))
    nat = Counter(rare[i].family for s in range(40) for i in natural.indices(s))
    assert draws["typing"] / sum(draws.values()) > 0.2 > nat["typing"] / sum(nat.values())
    assert sum(rare[i].tokens for i in balanced.indices(3)) >= 2000


def test_boost_tilts_a_family_share(toy_examples, tokenizer) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from training.trainer import FitConfig, boost_factors

    requests, _ = prepare_requests([e for e in toy_examples if e.split == "train"], tokenizer)
    plain = BalancedSampler(requests, tokens_per_step=2000, power=1.0, seed=1)
    boosted = BalancedSampler(requests, tokens_per_step=2000, power=1.0, seed=1, boost={"typing": 3.0})
    family = "typing"
    a, b = plain.family_share[family], boosted.family_share[family]
    assert b > a and abs(b / (1 - b) - 3 * a / (1 - a)) < 1e-9  # the odds of drawing the family triple
    assert abs(sum(boosted.family_share.values()) - 1) < 1e-9
    with pytest.raises(ValueError, match="without requests"):
        BalancedSampler(requests, boost={"no_such_family": 2.0})
    with pytest.raises(ValueError, match="> 0"):
        BalancedSampler(requests, boost={"typing": 0.0})
    assert boost_factors("relevance=1.7, pair=1.2") == {"relevance": 1.7, "pair": 1.2} and boost_factors("") == {}
    for bad in ("relevance", "relevance=x", "=2", "relevance=-1", "relevance=inf"):
        with pytest.raises(ValueError):
            FitConfig(family_boost=bad)


def test_collated_indices_point_at_each_labels_logits(tiny_model, toy_examples, tokenizer) -> None:  # type: ignore[no-untyped-def]
    requests, _ = prepare_requests([e for e in toy_examples if e.split == "test"], tokenizer)
    requests = requests[:12]
    step = collate(requests, encodings=["packed", "npair"] * 6, max_batch_tokens=600)
    assert len(step.batches) > 1
    with torch.inference_mode():
        flat = torch.cat([tiny_model(**{k: torch.from_numpy(v) for k, v in b.arrays().items()}).reshape(-1) for b in step.batches]).numpy()
    packed = {p.label.example_id: p.logits for p in predict(tiny_model, requests[0::2]).predictions}
    npair = {p.label.example_id: p.logits for p in predict(tiny_model, requests[1::2], encoding="npair").predictions}
    expected_noul = [(packed | npair)[label.example_id][0] for r in requests[0::2] + requests[1::2] for label in r.labels if label.kind == "noul"]
    assert np.allclose(flat[step.noul[0]], expected_noul, atol=1e-5)
    index, mask, _, _ = step.choice
    expected_choice = [(packed | npair)[label.example_id] for r in requests[0::2] + requests[1::2] for label in r.labels if label.kind == "choice"]
    for row, want in zip(range(index.shape[0]), expected_choice):
        assert np.allclose(flat[index[row][mask[row]]], want, atol=1e-5)


def test_cap_states_bounds_each_family(toy_examples) -> None:  # type: ignore[no-untyped-def]
    capped = cap_states(toy_examples, 3, seed=0)
    per_family = Counter()
    for family in {e.family for e in capped}:
        per_family[family] = len({e.state_key for e in capped if e.family == family})
    assert per_family and max(per_family.values()) <= 3
    assert cap_states(toy_examples, 3, seed=0) == capped and cap_states(toy_examples, 0) == list(toy_examples)
    states = {e.state_key for e in capped}
    assert all(e in capped for e in toy_examples if e.state_key in states and e.family in per_family)
