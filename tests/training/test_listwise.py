"""The listwise relevance loss: its value, which labels form a list, how lists are drawn, and a fit with it."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch

from training.errors import LossInputError
from training.losses import DecisionLoss, ListwiseLoss
from training.sampling import BalancedSampler, collate, label_tensors, prepare_requests
from training.trainer import FitConfig, fit


@pytest.fixture(scope="module")
def relevance_requests(tokenizer):  # type: ignore[no-untyped-def]
    from data.splits import SplitPlan
    from data.synthetic import SyntheticConfig, generate

    examples = generate(SyntheticConfig(per_family=40, seed=5), SplitPlan(), names=["relevance", "typing"])
    requests, _ = prepare_requests([e for e in examples if e.split == "train"], tokenizer)
    return requests


def test_listwise_loss_is_each_positive_against_its_lists_negatives() -> None:
    logits = torch.tensor([2.0, 0.5, -1.0, 1.0, 3.0, 0.0, 4.0])
    targets = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    lists = torch.tensor([0, 0, 0, 0, 1, -1, 2])  # list 1 has no negative, list 2 no positive, -1 is outside
    total, count = ListwiseLoss()(logits, targets, lists)
    negatives = [0.5, -1.0]
    expected = sum(math.log(math.exp(p) + sum(math.exp(n) for n in negatives)) - p for p in (2.0, 1.0))
    assert count == 2 and float(total) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(LossInputError):
        ListwiseLoss()(logits, targets, lists[:3])


def test_decision_loss_adds_the_listwise_term_only_when_weighted(relevance_requests) -> None:  # type: ignore[no-untyped-def]
    requests = [r for r in relevance_requests if r.list_key][:30]
    step = collate(requests)
    labels = label_tensors(step)
    flat = torch.randn(int(labels.noul_index.max()) + 1, generator=torch.Generator().manual_seed(0))
    plain = DecisionLoss()(flat, labels)
    weighted = DecisionLoss(listwise_weight=0.5)(flat, labels)
    summed, count = ListwiseLoss()(flat[labels.noul_index], labels.noul_target, labels.noul_list)
    assert count > 0 and "list" not in plain.parts and weighted.parts["list"] == pytest.approx(float(summed / count), rel=1e-5)
    assert float(weighted.total) == pytest.approx(float(plain.total) + 0.5 * float(summed / count), rel=1e-5)
    with pytest.raises(LossInputError):
        DecisionLoss(listwise_weight=-1.0)


def test_only_relevant_questions_of_one_query_share_a_list(relevance_requests) -> None:  # type: ignore[no-untyped-def]
    assert {r.family for r in relevance_requests if r.list_key} == {"relevance"}
    assert all(not r.list_key for r in relevance_requests if r.family != "relevance")
    chosen = relevance_requests[:40]
    step = collate(chosen)
    nouls = [(r.list_key, label) for r in chosen for label in r.labels if label.kind == "noul"]
    ids = step.noul_list.tolist()
    assert len(ids) == len(nouls) and max(ids) > 0
    keys: dict[int, set[str]] = {}
    for (key, label), i in zip(nouls, ids):
        assert (i >= 0) == (label.family == "relevance" and label.question_name == "relevant")
        if i >= 0:
            keys.setdefault(i, set()).add(key)
    assert all(len(v) == 1 for v in keys.values()) and len({k for v in keys.values() for k in v}) == len(keys)  # id <-> query


def test_the_sampler_draws_whole_lists_and_is_unchanged_without_them(relevance_requests) -> None:  # type: ignore[no-untyped-def]
    plain = BalancedSampler(relevance_requests, tokens_per_step=1500, seed=2)
    assert plain.indices(4) == BalancedSampler(relevance_requests, tokens_per_step=1500, seed=2, lists=False).indices(4)
    listed = BalancedSampler(relevance_requests, tokens_per_step=1500, seed=2, lists=True, list_size=4)
    drawn = listed.indices(4)
    assert drawn == BalancedSampler(relevance_requests, tokens_per_step=1500, seed=2, lists=True, list_size=4).indices(4)
    sizes = Counter(Counter(relevance_requests[i].list_key for i in drawn if relevance_requests[i].list_key).values())
    full = {k: min(4, len(v)) for k, v in listed.lists.items()}
    assert max(sizes) > 1 and all(n <= 4 for n in sizes)
    keys = Counter(relevance_requests[i].list_key for i in drawn if relevance_requests[i].list_key)
    assert all(keys[k] % full[k] == 0 for k in keys)  # a list comes whole (up to list_size), possibly twice


def test_a_fit_with_the_listwise_term_logs_it(_tiny_model, relevance_requests, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import copy

    config = FitConfig(steps=3, checkpoint_every=3, threads=1, tokens_per_step=1500, listwise_weight=1.0, npair_fraction=0.0)
    _, result = fit(copy.deepcopy(_tiny_model), relevance_requests, config, tmp_path, progress=False)
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert result.steps_done == 3 and all("list" in e for e in log)
    with pytest.raises(ValueError, match="listwise_weight"):
        FitConfig(listwise_weight=-0.1)
