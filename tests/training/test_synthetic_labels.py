"""Synthetic labels are exact by construction: properties read back from the generated text, the same bytes
under any hash seed, and wording drawn independently of the label."""

from __future__ import annotations

import hashlib
import os
import random
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from controller.families import FAMILIES
from data.synthetic import GENERATORS, Emitter, QuestionStyle, causal, entities, near_miss, retrieval, temporal
from data.synthetic import banks as b
from data.synthetic.emit import TargetSpec

ROOT = Path(__file__).resolve().parents[2]
_HASH = """
import hashlib
from data.splits import SplitPlan
from data.synthetic import SyntheticConfig, generate
h = hashlib.sha256()
for e in generate(SyntheticConfig(per_family=30, seed=5), SplitPlan()):
    h.update(e.to_json().encode())
print(h.hexdigest())
"""


def _emitter(seed: int, cls: type[Emitter] = Emitter) -> Emitter:
    return cls(source="synthetic:t", group="synthetic:t:0:0", split="train", rng=random.Random(seed), id_prefix="t", style=QuestionStyle())


def _run(name: str, n: int, seed: int = 0, cls: type[Emitter] = Emitter) -> Emitter:
    emit = _emitter(seed, cls)
    GENERATORS[name].fn(emit.rng, emit, n)
    return emit


def test_generators_make_the_same_bytes_under_any_hash_seed() -> None:
    # str hashing is salted per process; a set or dict iterated over strings would reorder draws between runs
    digests = set()
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run([sys.executable, "-c", _HASH], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True)
        digests.add(result.stdout.strip())
    assert len(digests) == 1 and len(next(iter(digests))) == 64


class _Flipped(Emitter):
    """Emits every state with the opposite labels: the wording drawn must not change."""

    def emit(self, family: str, state: Any, targets: Mapping[str, TargetSpec], **kw: Any) -> int:
        return super().emit(family, state, {name: _flip(family, name, spec) for name, spec in targets.items()}, **kw)


def _flip(family: str, name: str, spec: TargetSpec) -> TargetSpec:
    question = FAMILIES[family].questions[name]
    if question["type"] == "noul":
        return 1.0 - float(spec)  # type: ignore[arg-type]
    options = list(question["criteria"])
    if isinstance(spec, str):
        return options[(options.index(spec) + 1) % len(options)]
    assert isinstance(spec, Mapping)
    return {options[(options.index(k) + 1) % len(options)]: v for k, v in spec.items()}


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_the_wording_of_a_question_does_not_depend_on_its_label(name: str) -> None:
    # a paraphrase, a dropped criteria or an option order chosen with the label would let a model answer from
    # the instruction alone; with every label flipped, every question must come out word for word the same
    plain, flipped = _run(name, 40, 11), _run(name, 40, 11, _Flipped)
    assert [e.question for e in plain.examples] == [e.question for e in flipped.examples]
    assert [e.state for e in plain.examples] == [e.state for e in flipped.examples]
    assert [e.target for e in plain.examples] != [e.target for e in flipped.examples]


def _pattern(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{\w+\\\}", "(.+)", re.escape(template)) + "$")


def _pair_index(text: str, side: int) -> set[int]:
    return {i for i, pair in enumerate(causal.PAIRS) if _pattern(pair[side]).match(text)}


def test_a_causal_pair_keeps_its_direction_and_its_person() -> None:
    emit = _run("causal", 400, 4)
    cases = {e.notes for e in emit.examples}
    assert cases == {"causal:forward", "causal:reverse", "causal:unrelated", "causal:other_person"}
    for e in emit.examples:
        a, bb = e.state["memory_a"], e.state["memory_b"]
        case = e.notes.split(":")[1]
        if case == "forward":  # b is the cause of a, from the same (cause, effect) pair
            assert _pair_index(bb, 0) & _pair_index(a, 1), e.state
        elif case == "reverse":  # a is the cause and b its effect: b did not cause a
            assert _pair_index(a, 0) & _pair_index(bb, 1), e.state
        elif case == "other_person":  # the same pair, but the cause happened to someone else
            assert _pair_index(bb, 0) & _pair_index(a, 1)
            assert not {w for w in re.findall(r"[A-Z][a-z]+", a) if w in b.FEMALE + b.MALE} & set(re.findall(r"[A-Z][a-z]+", bb))
        else:  # two different pairs
            pairs_a = _pair_index(a, 0) | _pair_index(a, 1)
            pairs_b = _pair_index(bb, 0) | _pair_index(bb, 1)
            assert pairs_a and pairs_b and not pairs_a & pairs_b, e.state
        positive = case == "forward"
        assert e.target == float(positive if e.question_name == "causal" else case in ("forward", "reverse"))


def test_an_entity_trap_names_two_different_entities_and_an_alias_one() -> None:
    emit = _run("entities", 600, 8)
    seen = set()
    for e in emit.examples:
        a, bb = e.state["memory_a"], e.state["memory_b"]
        case = e.notes.split(":")[1]
        seen.add(case)
        words = (a.split(), bb.split())
        if case == "same_first":  # "<First> <Surname1> ..." / "<First> <Surname2> ...": same first name, other surname
            (f1, l1), (f2, l2) = (w[:2] for w in words)
            assert f1 == f2 and l1.strip(",") != l2.strip(","), e.state
        elif case == "nick_trap":  # a full name and its nickname, but other surnames and cities
            full, nick = sorted(words, key=lambda w: w[0] not in b.NICKNAMES)
            assert b.NICKNAMES[full[0]] == nick[0] and full[1] != nick[1], e.state
        elif case == "same_surname":  # one surname, but another gender or role
            assert ("Mr." in a + bb and any(w in b.FEMALE for w in a.split() + bb.split())) or "the plumber" in a + bb, e.state
        elif case == "same_job":  # two different people in one job
            names = [" ".join(w[:2]) for w in words]
            assert names[0] != names[1] and "also works as" in a + bb
        elif case == "place_trap":  # two places that share a name ("Portland, Maine" / "Portland, Oregon")
            assert any((x in a and y in bb) or (y in a and x in bb) for x, y in entities.SAME_NAME_PLACES), e.state
        elif case == "place":  # a short and a long name of one place
            assert any(s in a + bb and l in a + bb for s, l in b.PLACE_ALIASES), e.state
        elif case == "title":  # "Dr. <Surname>" and the full name with that surname
            surname = re.search(r"Dr\. (\w+)", a + " " + bb).group(1)  # type: ignore[union-attr]
            assert f"{surname}," in a + bb
        elif case == "nickname":  # a nickname of the full name, at the same team and company
            full = next(n for n in b.NICKNAMES if re.search(rf"\b{n}\b", a + " " + bb))
            assert re.search(rf"\b{b.NICKNAMES[full]}\b", a + " " + bb)
            assert next(c for c in b.COMPANIES if c in a) == next(c for c in b.COMPANIES if c in bb)
        assert e.target == float(case in ("nickname", "title", "description", "place")), e.state
    assert seen == {m.__name__.strip("_") for m, _ in entities.MAKERS}


def _interval(text: str) -> temporal.Interval:
    start, end = re.match(r"From (\w+) to (\w+),", text).groups()  # type: ignore[union-attr]
    return temporal.Interval(30 * b.MONTHS.index(start), 30 * b.MONTHS.index(end) + 29)


def test_temporal_month_and_relative_labels_match_the_text() -> None:
    emit = _run("temporal", 600, 9)
    months = [e for e in emit.examples if e.notes == "temporal:months"]
    relative = [e for e in emit.examples if e.notes == "temporal:relative"]
    assert len(months) > 30 and len(relative) > 30
    for e in months:
        label = max(e.target, key=e.target.__getitem__)  # type: ignore[union-attr, arg-type]
        assert label == temporal.relation(_interval(e.state["memory_a"]), _interval(e.state["memory_b"])), e.state
    for e in relative:
        label = max(e.target, key=e.target.__getitem__)  # type: ignore[union-attr, arg-type]
        dated_a = any(f" {p} " in e.state["memory_a"] for p, _ in temporal.BEFORE_GAPS + temporal.AFTER_GAPS) or "same day" in e.state["memory_a"]
        text = e.state["memory_a"] if dated_a else e.state["memory_b"]
        own = "before" if any(f" {p} " in text for p, _ in temporal.BEFORE_GAPS) else "after" if any(
            f" {p} " in text for p, _ in temporal.AFTER_GAPS) else "same_time"
        assert label == (own if dated_a else temporal.MIRROR[own]), e.state


def test_near_miss_pair_and_consolidation_labels_agree() -> None:
    emit = _run("near_miss", 400, 10)
    by_state: dict[str, dict[str, Any]] = {}
    for e in emit.examples:
        by_state.setdefault(f"{e.family}:{e.state['memory_a']}|{e.state['memory_b']}", {})[e.question_name] = e.target
    pairs = {k.split(":", 1)[1]: v for k, v in by_state.items() if k.startswith("pair:")}
    for key, cons in ((k.split(":", 1)[1], v) for k, v in by_state.items() if k.startswith("consolidation:")):
        pair = pairs[key]
        supersede = max(cons["representation"], key=cons["representation"].__getitem__) == "supersede"
        assert pair.get("update") == cons["obsolete"] == float(supersede), key  # an update makes the older memory obsolete
        if pair.get("semantic") == 0.0:
            assert cons["link_useful"] == 0.0, key


def test_a_conflicting_fact_really_conflicts() -> None:
    """retrieval._event once drew the conflicting fact's date equal to the needed fact's (d1 == d2), so a
    consistent, sufficient evidence set was labelled contradiction 1 (syn:stopping:0:6:00136 in the shipped
    artifact's data build)."""
    rng = random.Random(12)
    for _ in range(6000):
        need = retrieval._need(rng)
        assert need.conflict not in need.facts
        dated = re.match(r"On (\d+ \w+), (.+)\.$", need.facts[-1])
        if dated:
            assert f" on {dated.group(1)}, not earlier." not in need.conflict, need
