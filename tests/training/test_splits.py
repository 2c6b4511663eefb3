"""Split discipline: groups stay whole, the dev pair is never trained on, no source text is in two splits."""

from __future__ import annotations

from pathlib import Path

import pytest

from data.builders import BuildConfig, build_dataset
from data.schema import DecisionExample, SplitError
from data.splits import SplitPlan, apply_plan, check_disjoint, enforce_disjoint, find_leaks, state_strings
from tests.training.test_data_locomo import write_locomo_fixture

NOUL = {"type": "noul", "instructions": "Does state.memory help answer state.query?"}


def _ex(i: int, split: str, state: dict, group: str = "g") -> DecisionExample:
    return DecisionExample(f"e{i}", "relevance", "relevant", state, NOUL, 1.0, "locomo", group, split)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    path, audit = write_locomo_fixture(tmp_path_factory.mktemp("splits"))
    return build_dataset(BuildConfig(locomo=str(path), audit=str(audit), synthetic_per_family=80, dense="hashing"))


def test_no_source_text_in_two_splits(built) -> None:  # noqa: ANN001
    examples = built.examples
    assert {e.split for e in examples} == {"train", "calibration", "dev", "test"}
    assert find_leaks(examples) == []
    owners: dict[str, set[str]] = {}
    for e in examples:
        for text in state_strings(e.state):
            owners.setdefault(text, set()).add(e.split)
    assert owners and all(len(splits) == 1 for splits in owners.values())


def test_dev_pair_is_never_trained_on(built) -> None:  # noqa: ANN001
    dev_groups = {e.group for e in built.examples if e.split == "dev"}
    assert dev_groups == {"locomo:conv-26", "locomo:conv-30"}
    train_groups = {e.group for e in built.examples if e.split == "train"}
    assert not train_groups & {"locomo:conv-26", "locomo:conv-30", "locomo:conv-44"}
    assert "locomo:conv-41" in train_groups
    test_sources = {e.source.split(":")[0] for e in built.examples if e.split == "test"}
    assert test_sources == {"synthetic"}


def test_enforce_disjoint_drops_lower_priority_copies() -> None:
    shared = {"query": "Where is the key?", "memory": "Ann: the key is under the mat."}
    examples = [
        _ex(0, "train", shared),
        _ex(1, "dev", {"query": "What did Ann say?", "memory": shared["memory"]}),
        _ex(2, "calibration", {"query": "Where is the key?", "memory": "Ben: no idea."}),
        _ex(3, "train", {"query": "Other?", "memory": "Cleo: something else."}),
    ]
    with pytest.raises(SplitError):
        check_disjoint(examples)
    kept, report = enforce_disjoint(examples)
    assert [e.id for e in kept] == ["e1", "e2", "e3"]
    assert report.dropped == {"train": 1}
    check_disjoint(kept)
    # calibration outranks train: e2 shares the query text with e0, which is gone already
    kept2, _ = enforce_disjoint([examples[0], examples[2]])
    assert [e.id for e in kept2] == ["e2"]


def test_strings_are_normalised_and_keys_ignored() -> None:
    assert state_strings({"query": "  Where   IS it? ", "evidence": ["A", "a ", ""], "depth": 2}) == {"where is it?", "a"}


def test_plan_validation_and_apply() -> None:
    with pytest.raises(SplitError):
        SplitPlan(dev_groups=("locomo:conv-26",), calibration_groups=("locomo:conv-26",))
    with pytest.raises(SplitError):
        SplitPlan(shards=2, calibration_shards=(0,), test_shards=(1,))
    with pytest.raises(SplitError):
        SplitPlan(test_shards=(12,))
    plan = SplitPlan(calibration_groups=())
    moved = apply_plan([_ex(0, "calibration", {"query": "q", "memory": "m"}, group="locomo:conv-44")], plan)
    assert moved[0].split == "train"
    assert apply_plan([_ex(1, "train", {"query": "q", "memory": "m"}, group="locomo:conv-30")], plan)[0].split == "dev"


def test_build_reports_drops_and_timings(built, tmp_path: Path) -> None:  # noqa: ANN001
    assert built.too_long == 0
    assert set(built.seconds) >= {"locomo", "synthetic", "splits", "total"}
    assert sum(t["examples"] for t in built.summary.totals.values()) == len(built.examples)
