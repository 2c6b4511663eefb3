"""LoCoMo label rules on a tiny LoCoMo-shaped fixture written here (the real data is never read by tests)."""

from __future__ import annotations

from collections import Counter

import json
import random
import re
from pathlib import Path

import pytest

from controller.families import FAMILIES, split_memory_text
from data.builders.locomo import LocomoRules, build_locomo
from data.locomo import load_locomo
from data.schema import DataError, DecisionExample
from data.splits import SplitPlan, state_strings

TOPICS = (
    ("pottery", "clay", "kiln"), ("hiking", "trail", "summit"), ("garden", "tomatoes", "compost"),
    ("guitar", "chords", "band"), ("marathon", "training", "sneakers"), ("painting", "canvas", "sunset"),
)
CONVERSATIONS = {  # sample id -> speakers, a word that makes its texts unique
    "conv-26": ("Alma", "Berit", "lighthouse"),
    "conv-30": ("Cosmo", "Dagny", "orchard"),
    "conv-41": ("Edda", "Fritjof", "glacier"),
    "conv-44": ("Greta", "Hjalmar", "vineyard"),
}


def _conversation(sample_id: str, a: str, b: str, word: str, seed: int) -> dict:
    rng = random.Random(seed)
    conv: dict = {"speaker_a": a, "speaker_b": b}
    observation: dict = {}
    for s in (1, 2, 3):
        conv[f"session_{s}_date_time"] = f"1:56 pm on {5 * s} May, 2023"
        topic = TOPICS[(seed + s) % len(TOPICS)]
        turns = []
        for t in range(1, 9):
            speaker = a if t % 2 else b
            w = topic[t % 3]
            text = f"{speaker} talks about the {w} near the {word} in session {s}, part {t} ({rng.randint(0, 999)})."
            if t == 1:
                text = f"Hey {b if speaker == a else a}! Good to see you by the {word} ({s})."
            turn = {"speaker": speaker, "dia_id": f"D{s}:{t}", "text": text}
            if t == 4:
                turn["blip_caption"] = f"a photo of a {w} by the {word}"
            turns.append(turn)
        conv[f"session_{s}"] = turns
        observation[f"session_{s}_observation"] = {
            a: [[f"{a} enjoys the {topic[0]} {topic[1]} near the {word}.", f"D{s}:3"]],
            b: [[f"{b} bought {topic[0]} {topic[2]} supplies near the {word}.", f"D{s}:4"]],
        }
    qa = [
        {"question": f"When did {a} talk about the {TOPICS[(seed + 1) % 6][0]}?", "answer": "5 May 2023", "evidence": ["D1:3"], "category": 2},
        {"question": f"What activities does {a} do near the {word}?", "answer": "x", "evidence": ["D1:3", "D2:5"], "category": 1},
        {"question": f"What did {b} say about the {word} in session 2?", "answer": "x", "evidence": ["D2:4"], "category": 4},
        {"question": f"Would {a} enjoy a museum about the {word}?", "answer": "x", "evidence": ["D1:3"], "category": 3},
        {"question": f"What did {b} make near the {word}?", "adversarial_answer": "x", "evidence": ["D1:3"], "category": 5},
        {"question": f"Why did {a} go back to the {word}?", "answer": "x", "evidence": ["D3:1; D3:2"], "category": 1},
        {"question": f"Where is the {word} now?", "answer": "x", "evidence": [], "category": 4},
    ]
    return {"sample_id": sample_id, "conversation": conv, "qa": qa, "observation": observation,
            "event_summary": {}, "session_summary": {}}


def write_locomo_fixture(directory: Path) -> tuple[Path, Path]:
    """A 4-conversation LoCoMo-shaped file (3 sessions x 8 turns each) and an audit file."""
    samples = [_conversation(sid, a, b, w, i) for i, (sid, (a, b, w)) in enumerate(CONVERSATIONS.items())]
    path = directory / "locomo_fixture.json"
    path.write_text(json.dumps(samples), encoding="utf-8")
    audit = [{"question_id": "locomo_0_qa3", "question": samples[0]["qa"][2]["question"], "correct_evidence": ["D2:6"]}]
    audit_path = directory / "audit_fixture.json"
    audit_path.write_text(json.dumps(audit), encoding="utf-8")
    return path, audit_path


@pytest.fixture(scope="module")
def locomo(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, list[DecisionExample]]:
    path, audit = write_locomo_fixture(tmp_path_factory.mktemp("locomo"))
    conversations = load_locomo(path, audit=audit)
    examples = build_locomo(conversations, SplitPlan(), rules=LocomoRules(pairs_random=30, pairs_same_session=20))
    return conversations, examples


def _by(examples: list[DecisionExample], family: str, name: str) -> list[DecisionExample]:
    return [e for e in examples if e.family == family and e.question_name == name]


def test_splits_follow_conversations(locomo: tuple) -> None:
    _, examples = locomo
    split = {e.group: e.split for e in examples}
    assert split == {"locomo:conv-26": "dev", "locomo:conv-30": "dev", "locomo:conv-41": "train", "locomo:conv-44": "calibration"}
    assert {e.source for e in examples} == {"locomo"}


def test_relevance_gold_is_positive_and_negatives_avoid_gold(locomo: tuple) -> None:
    conversations, examples = locomo
    conv = conversations[2]  # conv-41
    texts = {t.dia_id: t.memory_text() for t in conv.turns}
    q = conv.questions[1]  # multi-hop, evidence D1:3 + D2:5
    rel = [e for e in _by(examples, "relevance", "relevant") if e.state["query"] == q.question]
    positives = {e.state["memory"] for e in rel if e.target == 1.0}
    assert positives == {texts["D1:3"], texts["D2:5"]}
    blocked = {texts[d] for d in ("D1:2", "D1:3", "D1:4", "D2:4", "D2:5", "D2:6")}
    assert all(e.state["memory"] not in blocked for e in rel if e.target == 0.0)
    assert sum(e.target == 0.0 for e in rel) >= 4
    bridges = [e for e in _by(examples, "relevance", "bridge") if e.state["query"] == q.question and e.notes == "locomo:gold"]
    assert bridges and all(e.target == 1.0 for e in bridges)  # two gold turns: each a step toward the other


def test_swapped_queries_pair_gold_turns_with_other_questions_in_train_only(locomo: tuple) -> None:
    conversations, _ = locomo
    rules = LocomoRules(pairs_random=30, pairs_same_session=20, query_swaps=2)
    examples = build_locomo(conversations, SplitPlan(), rules=rules)
    swaps = [e for e in examples if e.notes == "locomo:swap"]
    assert swaps and {e.split for e in swaps} == {"train"}
    assert all(e.question_name == "relevant" and e.target == 0.0 for e in swaps)
    assert not [e for e in examples if e.notes == "locomo:swap" and e.question_name == "bridge"]
    conv = conversations[2]  # conv-41, the train conversation
    texts = {t.dia_id: t.memory_text() for t in conv.turns}
    position = {t.dia_id: i for i, t in enumerate(conv.turns)}
    near = {q.question: {texts[t.dia_id] for t in conv.turns for d in q.evidence if abs(position[t.dia_id] - position[d]) <= 1}
            for q in conv.questions if q.evidence}
    gold_texts = {texts[d] for q in conv.questions if q.category in (1, 2, 3, 4) for d in q.evidence}
    for e in swaps:
        assert e.state["memory"] in gold_texts  # a gold turn of some question
        assert e.state["memory"] not in near[e.state["query"]]  # never near the gold of the question it is shown with
    per_turn = Counter(e.state["memory"] for e in swaps)
    gold_count = Counter(texts[d] for q in conv.questions if q.category in (1, 2, 3, 4) for d in q.evidence)
    assert all(per_turn[m] <= rules.query_swaps * gold_count[m] for m in per_turn)
    without = {e.id for e in examples if e.notes != "locomo:swap"}
    assert without == {e.id for e in build_locomo(conversations, SplitPlan(), rules=LocomoRules(pairs_random=30, pairs_same_session=20))}


def test_random_swaps_keep_the_rule_but_not_the_nearest_question(locomo: tuple) -> None:
    conversations, _ = locomo
    base = {"pairs_random": 30, "pairs_same_session": 20, "query_swaps": 1}
    nearest = [e for e in build_locomo(conversations, SplitPlan(), rules=LocomoRules(**base)) if e.notes == "locomo:swap"]
    drawn = [e for e in build_locomo(conversations, SplitPlan(), rules=LocomoRules(**base, random_swaps=True)) if e.notes == "locomo:swap"]
    again = [e for e in build_locomo(conversations, SplitPlan(), rules=LocomoRules(**base, random_swaps=True)) if e.notes == "locomo:swap"]
    pairs = lambda examples: [(e.state["memory"], e.state["query"]) for e in examples]  # noqa: E731
    assert len(drawn) == len(nearest) and {e.split for e in drawn} == {"train"}  # one swap per gold turn either way
    assert sorted(m for m, _ in pairs(drawn)) == sorted(m for m, _ in pairs(nearest))  # the same gold turns
    assert pairs(drawn) != pairs(nearest) and pairs(drawn) == pairs(again)  # other questions, drawn reproducibly


def test_swapped_queries_are_off_by_default(locomo: tuple) -> None:
    _, examples = locomo
    assert LocomoRules().query_swaps == 0 and not [e for e in examples if e.notes == "locomo:swap"]


def test_observation_queries_pair_facts_with_their_cited_turn_in_train_only(locomo: tuple) -> None:
    conversations, _ = locomo
    base = LocomoRules(pairs_random=30, pairs_same_session=20)
    rules = LocomoRules(pairs_random=30, pairs_same_session=20, observation_queries=4)
    examples = build_locomo(conversations, SplitPlan(), rules=rules)
    observed = [e for e in examples if e.notes in ("locomo:observation-query", "locomo:observation-query-negative")]
    assert observed and {e.split for e in observed} == {"train"}
    assert all(e.family == "relevance" and e.question_name == "relevant" and e.weight == 0.7 for e in observed)
    conv = conversations[2]  # conv-41, the train conversation
    texts = {t.dia_id: t.memory_text() for t in conv.turns}
    position = {t.dia_id: i for i, t in enumerate(conv.turns)}
    facts = {fact: dia for session in conv.observations.values() for fact, dia in session}
    positives = [e for e in observed if e.notes == "locomo:observation-query"]
    assert len(positives) == min(rules.observation_queries, len(facts)) and len({e.state["query"] for e in positives}) == len(positives)
    for e in positives:
        assert e.target == 1.0 and e.state["memory"] == texts[facts[e.state["query"]]]
    for e in observed:
        if e.notes == "locomo:observation-query-negative":
            gold = position[facts[e.state["query"]]]
            assert e.target == 0.0 and all(abs(position[d] - gold) > rules.adjacency for d, t in texts.items() if t == e.state["memory"])
    per_query = Counter(e.state["query"] for e in observed if e.notes == "locomo:observation-query-negative")
    assert set(per_query.values()) == {rules.observation_bm25_negatives + rules.observation_random_negatives}
    rest = {e.id for e in examples if e not in observed}
    assert rest == {e.id for e in build_locomo(conversations, SplitPlan(), rules=base)}  # the other rules draw the same


def test_observation_queries_are_off_by_default_and_zero_means_off(locomo: tuple) -> None:
    _, examples = locomo
    assert LocomoRules().observation_queries == 0
    assert not [e for e in examples if e.notes.startswith("locomo:observation-query")]


def test_relevance_context_adds_the_turn_before_within_its_session(locomo: tuple) -> None:
    conversations, plain = locomo
    rules = LocomoRules(pairs_random=30, pairs_same_session=20, relevance_context=True)
    examples = build_locomo(conversations, SplitPlan(), rules=rules)
    relevance = [e for e in examples if e.family == "relevance"]
    texts = {t.memory_text(): t for c in conversations for t in c.turns}
    before = {t.memory_text(): c.turns[i - 1] for c in conversations for i, t in enumerate(c.turns) if i > 0}
    with_previous = [e for e in relevance if "previous" in e.state]
    assert with_previous and len(with_previous) < len(relevance)  # a session's first turn has none
    for e in relevance:
        turn = texts[e.state["memory"]]
        prev = before.get(e.state["memory"])
        if prev is not None and prev.session == turn.session:
            assert tuple(e.state) == ("query", "memory", "previous") and e.state["previous"] == prev.memory_text()
        else:
            assert tuple(e.state) == ("query", "memory")
    # everything else is unchanged, relevance labels included
    strip = [{k: v for k, v in e.state.items() if k != "previous"} for e in examples]
    assert [(e.id, e.target, s) for e, s in zip(examples, strip)] == [(e.id, e.target, e.state) for e in plain]


def test_relevance_dated_renders_each_memory_with_its_session_date(locomo: tuple) -> None:
    conversations, plain = locomo
    rules = LocomoRules(pairs_random=30, pairs_same_session=20, relevance_dated=True)
    examples = build_locomo(conversations, SplitPlan(), rules=rules)
    assert [(e.id, e.target, e.family) for e in examples] == [(e.id, e.target, e.family) for e in plain]
    changed = 0
    for e, p in zip(examples, plain):
        if e.family != "relevance":
            assert e.state == p.state
            continue
        when, text = split_memory_text(e.state["memory"])
        assert text == p.state["memory"] and e.state["query"] == p.state["query"]
        turn = next(t for c in conversations for t in c.turns if t.memory_text() == text)
        assert when == (turn.date.replace(hour=0, minute=0) if turn.date else None)
        changed += when is not None
    assert changed > 0
    assert not any(split_memory_text(e.state["memory"])[0] for e in plain if e.family == "relevance")  # off by default


def test_adversarial_and_evidence_free_questions_get_no_relevance(locomo: tuple) -> None:
    conversations, examples = locomo
    queries = {e.state["query"] for e in examples if e.family in ("relevance", "stopping")}
    for conv in conversations:
        assert conv.questions[4].question not in queries  # category 5
        assert conv.questions[6].question not in queries  # no evidence


def test_audit_correction_is_applied(locomo: tuple) -> None:
    conversations, examples = locomo
    conv = conversations[0]
    q = conv.questions[2]
    assert q.evidence == ("D2:6",)
    gold = {e.state["memory"] for e in _by(examples, "relevance", "relevant") if e.state["query"] == q.question and e.target == 1.0}
    assert gold == {conv.turn_by_id()["D2:6"].memory_text()}


def test_stopping_sets_match_their_labels(locomo: tuple) -> None:
    conversations, examples = locomo
    conv = conversations[2]
    by_id = conv.turn_by_id()
    checked = {0.0: 0, 1.0: 0}
    for e in _by(examples, "stopping", "evidence_sufficient"):
        if e.group != "locomo:conv-41":
            continue
        checked[e.target] += 1  # type: ignore[index]
        q = next(q for q in conv.questions if q.question == e.state["query"])
        items = [re.sub(r"^\[[^\]]+\] ", "", s) for s in e.state["evidence"]]
        has_all = all(by_id[d].memory_text() in items for d in q.evidence)
        assert has_all == (e.target == 1.0)
        assert all(s.startswith("[") for s in e.state["evidence"])  # dated items
        assert 1 <= len(items) <= 5 and isinstance(e.state["depth"], int)
    assert checked[0.0] >= 4 and checked[1.0] >= 4


def test_routing_rules(locomo: tuple) -> None:
    conversations, examples = locomo
    labels = {(e.state["query"], e.question_name): e.target for e in examples if e.family == "routing"}
    conv = conversations[2]
    assert labels[(conv.questions[0].question, "temporal")] == 1.0  # category 2
    assert labels[(conv.questions[1].question, "multi_hop")] == 1.0  # category 1
    assert labels[(conv.questions[2].question, "multi_hop")] == 0.0  # single-hop, one turn
    assert labels[(conv.questions[5].question, "causal")] == 1.0  # why-question
    assert labels[(conv.questions[6].question, "recency")] == 1.0  # "now"
    assert labels[(conv.questions[2].question, "causal")] == 0.0


def test_pair_labels_agree_with_sessions_and_dates(locomo: tuple) -> None:
    conversations, examples = locomo
    session = {t.memory_text(): t.session for c in conversations for t in c.turns}

    def strip(text: str) -> str:
        return re.sub(r"^\[[^\]]+\] ", "", text)

    pairs = [e for e in examples if e.family == "pair"]
    assert {e.question_name for e in pairs} >= {"same_episode", "semantic", "temporal"}
    seen = {"dated": 0, "undated": 0, "episode": 0}
    for e in pairs:
        a, b = strip(e.state["memory_a"]), strip(e.state["memory_b"])
        dated = e.state["memory_a"].startswith("[")
        if e.question_name == "same_episode" and e.target == 1.0:
            assert session[a] == session[b]
            seen["episode"] += 1
        if e.question_name == "temporal":
            label = max(e.target, key=e.target.get)  # type: ignore[union-attr, arg-type]
            assert session[a] != session[b]
            if dated:
                assert label == ("before" if session[a] < session[b] else "after")
            else:
                assert label == "unknown"
            seen["dated" if dated else "undated"] += 1
    assert min(seen.values()) >= 5


def test_states_hold_no_labels_or_observations(locomo: tuple) -> None:
    conversations, examples = locomo
    facts = {f.lower() for c in conversations for v in c.observations.values() for f, _ in v}
    for e in examples:
        strings = state_strings(e.state)
        assert not strings & facts
        assert "category" not in json.dumps(e.state)
        assert tuple(e.state) == FAMILIES[e.family].state_fields  # "previous" only with LocomoRules.relevance_context


def test_dense_vectors_stay_aligned_after_length_sorting(tmp_path: Path) -> None:
    from controller.embedding import HashingEmbedder
    from data.builders.locomo import attach_dense, index_conversation

    path, audit = write_locomo_fixture(tmp_path)
    conv = load_locomo(path, audit=audit)[0]
    ix = index_conversation(conv, LocomoRules())
    embedder = HashingEmbedder(dim=64)
    attach_dense([ix], embedder)
    turn = conv.turns[5]
    direct = embedder.embed([f"[5 May 2023] {turn.speaker}: {turn.text}"])[0]
    assert (ix.turn_vectors[5] == direct).all()
    q = conv.questions[2]
    assert (ix.query_vectors[q.qid] == embedder.embed([q.question])[0]).all()
    assert ix.dense_rank(q.qid)[:1] and len(set(ix.dense_rank(q.qid))) == len(ix.dense_rank(q.qid))


def test_malformed_observation_facts_are_skipped_not_fatal(tmp_path: Path) -> None:
    sample = _conversation("conv-47", "Ann", "Bo", "harbour", 3)
    sample["observation"]["session_1_observation"]["Ann"] += [
        "a bare string", ["fact with two citations", ["D1:2", "D1:5"]], ["too", "many", "parts"], [7, "D1:1"]]
    sample["observation"]["session_2_observation"] = ["not a mapping"]
    del sample["conversation"]["session_1"][3]["text"]  # an image-only turn (it has a caption)
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    (conv,) = load_locomo(path)
    facts = conv.observations["session_1_observation"]
    assert ("fact with two citations", "['D1:2', 'D1:5']") in facts and len(facts) == 3  # Ann's good one, it, Bo's
    assert conv.observations["session_2_observation"] == [] and len(conv.observations["session_3_observation"]) == 2
    assert conv.turns[3].text == "" and conv.turns[3].caption and "a photo of" in conv.turns[3].memory_text()


def test_train_hard_negatives_add_top_ranked_negatives_to_train_only(locomo: tuple) -> None:
    conversations, _ = locomo
    base = LocomoRules(pairs_random=30, pairs_same_session=20)
    plain = build_locomo(conversations, SplitPlan(), rules=base)
    more = build_locomo(conversations, SplitPlan(), rules=LocomoRules(**{**base.__dict__, "train_hard_negatives": 2}))
    held = lambda xs: sorted(e.to_json() for e in xs if e.split != "train")  # noqa: E731
    assert held(more) == held(plain)  # dev and calibration labels untouched
    rel = lambda xs: [e for e in xs if e.split == "train" and e.question_name == "relevant"]  # noqa: E731
    extra = len(rel(more)) - len(rel(plain))
    assert 0 < extra <= 4 * len([q for q in conversations[2].questions if q.evidence])  # 2 BM25 + 2 dense per question
    conv = conversations[2]  # conv-41, the train conversation
    texts = {t.dia_id: t.memory_text() for t in conv.turns}
    position = {t.dia_id: i for i, t in enumerate(conv.turns)}
    for q in conv.questions:
        near = {texts[t.dia_id] for t in conv.turns for d in q.evidence if abs(position[t.dia_id] - position[d]) <= 1}
        negatives = [e.state["memory"] for e in rel(more) if e.state["query"] == q.question and e.target == 0.0]
        assert len(negatives) == len(set(negatives)) and not set(negatives) & near  # each turn once, never near gold


def test_train_negative_counts_change_the_train_split_only(locomo: tuple) -> None:
    conversations, _ = locomo
    base = LocomoRules(pairs_random=30, pairs_same_session=20)
    plain = build_locomo(conversations, SplitPlan(), rules=base)
    fewer = build_locomo(conversations, SplitPlan(), rules=LocomoRules(**{**base.__dict__, "train_bm25_negatives": 1,
                                                                          "train_dense_negatives": 0}))
    held = lambda xs: sorted(e.to_json() for e in xs if e.split != "train")  # noqa: E731
    assert held(fewer) == held(plain)
    kinds = lambda xs: Counter(e.notes for e in xs if e.split == "train" and e.question_name == "relevant")  # noqa: E731
    answerable = len([q for q in conversations[2].questions if q.evidence and q.category in (1, 2, 3, 4)])
    assert kinds(fewer)["locomo:bm25"] == answerable and kinds(fewer)["locomo:dense"] == 0
    assert kinds(plain)["locomo:bm25"] == base.bm25_negatives * answerable
    with pytest.raises(DataError, match="must be >= 0"):
        LocomoRules(train_bm25_negatives=-1)


def test_records_not_shaped_like_locomo_are_a_data_error_naming_the_record(tmp_path: Path) -> None:
    from data.locomo import LocomoError

    path, audit = write_locomo_fixture(tmp_path)
    samples = json.loads(path.read_text(encoding="utf-8"))
    for change, message in (
        (lambda s: s[1]["qa"][2].pop("category"), r"sample 1 \(conv-30\): qa 2: category must be one of \[1, 2, 3, 4, 5\], got None"),
        (lambda s: s[0]["qa"][0].update(category=0), "qa 0: category must be one of"),  # a shifted numbering
        (lambda s: s[2]["conversation"]["session_2"][3].pop("speaker"), r"sample 2 \(conv-41\): missing 'speaker'"),
    ):
        broken = json.loads(json.dumps(samples))
        change(broken)
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(broken), encoding="utf-8")
        with pytest.raises(LocomoError, match=message) as info:
            load_locomo(bad)
        assert isinstance(info.value, DataError) and isinstance(info.value, ValueError)
    (tmp_path / "dict.json").write_text(json.dumps({"conv-26": samples[0]}), encoding="utf-8")
    with pytest.raises(LocomoError, match="a JSON list of objects"):
        load_locomo(tmp_path / "dict.json")
    with pytest.raises(LocomoError, match="cannot read LoCoMo file .*missing.json"):
        load_locomo(tmp_path / "missing.json")
    (tmp_path / "audit.json").write_text(json.dumps([{"question": "q"}]), encoding="utf-8")
    with pytest.raises(LocomoError, match="audit entry 0: missing 'question_id'"):
        load_locomo(path, audit=tmp_path / "audit.json")
    assert len(load_locomo(path, audit=audit)) == 4  # the well-formed fixture still loads


def test_rename_speakers_renames_whole_questions_in_the_train_split_only(locomo: tuple) -> None:
    conversations, _ = locomo
    base = LocomoRules(pairs_random=30, pairs_same_session=20)
    plain = build_locomo(conversations, SplitPlan(), rules=base)
    renamed = build_locomo(conversations, SplitPlan(), rules=LocomoRules(**{**base.__dict__, "rename_speakers": 1.0}))
    assert [(e.id, e.target, e.notes) for e in renamed] == [(e.id, e.target, e.notes) for e in plain]  # labels kept
    speakers = set(conversations[2].speakers)  # conv-41, the train conversation: Edda and Fritjof
    mapping_of: dict[str, set[tuple[str, str]]] = {}
    for e, p in zip(renamed, plain):
        if e.split != "train" or e.family != "relevance":
            assert e.state == p.state  # held-out splits and the other families are untouched
            continue
        assert e.state.keys() == p.state.keys()
        pairs = mapping_of.setdefault(p.state["query"], set())
        for key in p.state:
            old, new = re.findall(r"\w+|\W+", p.state[key]), re.findall(r"\w+|\W+", e.state[key])
            assert len(old) == len(new)  # whole words replaced by whole words, nothing else changed
            pairs.update((a, b) for a, b in zip(old, new) if a != b)
    assert mapping_of
    for pairs in mapping_of.values():  # one renaming per question, shared by its gold turns and negatives
        assert {a for a, _ in pairs} <= speakers and len(pairs) == len(dict(pairs))
        assert not {b for _, b in pairs} & speakers and len({b for _, b in pairs}) == len(pairs)
    assert any(pairs for pairs in mapping_of.values())
    off = build_locomo(conversations, SplitPlan(), rules=LocomoRules(**{**base.__dict__, "rename_speakers": 0.0}))
    assert [e.to_json() for e in off] == [e.to_json() for e in plain]  # 0 is off
    with pytest.raises(DataError, match="share"):
        LocomoRules(rename_speakers=1.5)


def test_a_swap_target_softens_only_the_swapped_negatives(locomo: tuple) -> None:
    conversations, _ = locomo
    base = {"pairs_random": 30, "pairs_same_session": 20, "query_swaps": 1, "random_swaps": True}
    hard = build_locomo(conversations, SplitPlan(), rules=LocomoRules(**base))
    soft = build_locomo(conversations, SplitPlan(), rules=LocomoRules(**base, swap_target=0.15))
    assert len(hard) == len(soft) and any(e.notes == "locomo:swap" for e in soft)
    for h, s in zip(hard, soft):
        assert (h.id, h.state) == (s.id, s.state)  # the same draw: only the target moves
        assert s.target == (0.15 if s.notes == "locomo:swap" else h.target)
    with pytest.raises(DataError, match="swap_target"):
        LocomoRules(swap_target=0.5)


def test_conversations_the_rules_cannot_label_are_refused_naming_the_record(tmp_path: Path) -> None:
    # each of these loaded silently and then either crashed a builder with a traceback (no turns, a question
    # or speaker that is not text) or wrote a build whose example ids repeat (the same sample twice)
    from data.locomo import LocomoError

    path, audit = write_locomo_fixture(tmp_path)
    samples = json.loads(path.read_text(encoding="utf-8"))

    def drop_sessions(s: list) -> None:
        conv = s[1]["conversation"]
        for key in [k for k in conv if k.startswith("session_")]:
            del conv[key]

    for change, message in (
        (lambda s: s.append(json.loads(json.dumps(s[0]))), r"sample 4 \(conv-26\): sample_id conv-26 appears more than once"),
        (drop_sessions, r"sample 1 \(conv-30\): no session turns"),
        (lambda s: s[0]["qa"][3].update(question=None), r"sample 0 \(conv-26\): qa 3: question must be a string, got None"),
        (lambda s: s[2]["conversation"].update(speaker_a=7), r"sample 2 \(conv-41\): speaker_a must be a string, got 7"),
        (lambda s: s[0]["conversation"]["session_2"][1].update(speaker=None), r"session_2 turn 1: speaker must be a string"),
        (lambda s: s[0]["conversation"]["session_1"][2].update(dia_id=3), r"session_1 turn 2: dia_id must be a string, got 3"),
        # evidence names turns by dia_id: the second turn took the first one's evidence labels
        (lambda s: s[1]["conversation"]["session_2"][3].update(dia_id="D1:4"), r"sample 1 \(conv-30\): dia_id 'D1:4' names more than one turn"),
    ):
        broken = json.loads(json.dumps(samples))
        change(broken)
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(broken), encoding="utf-8")
        with pytest.raises(LocomoError, match=message):
            load_locomo(bad)
    (tmp_path / "empty.json").write_text("[]", encoding="utf-8")
    with pytest.raises(LocomoError, match="empty.json holds no conversations"):
        load_locomo(tmp_path / "empty.json")
    assert len(load_locomo(path, audit=audit)) == 4


def test_audit_entries_that_cannot_name_a_question_are_refused(tmp_path: Path) -> None:
    from data.locomo import LocomoError

    path, _ = write_locomo_fixture(tmp_path)
    question = json.loads(path.read_text(encoding="utf-8"))[0]["qa"][2]["question"]
    for entry, message in (
        ({"question_id": "locomo_0_qa3", "question": ["not", "text"], "correct_evidence": ["D2:6"]}, "audit entry 0: question must be a string"),
        # -1 silently named the last conversation of locomo10.json (conv-50)
        ({"question_id": "locomo_-1_qa3", "question": question, "correct_evidence": ["D2:6"]}, "audit entry 0: .*locomo_-1_qa3"),
        # past the end of locomo10.json: the correction was dropped without a word
        ({"question_id": "locomo_10_qa3", "question": question, "correct_evidence": ["D2:6"]}, "audit entry 0: .*locomo_10_qa3"),
        # a question conv-26 does not ask (another release, edited text): its correction was ignored
        ({"question_id": "locomo_0_qa3", "question": question + " today", "correct_evidence": ["D2:6"]},
         r"corrects 1 question\(s\) the LoCoMo file does not ask: conv-26: .* today'"),
    ):
        audit = tmp_path / "audit.json"
        audit.write_text(json.dumps([entry]), encoding="utf-8")
        with pytest.raises(LocomoError, match=message):
            load_locomo(path, audit=audit)
    # a correction for a conversation that is not loaded is no sign of a wrong audit
    audit.write_text(json.dumps([{"question_id": "locomo_0_qa3", "question": question + " today", "correct_evidence": ["D2:6"]}]), encoding="utf-8")
    assert [c.sample_id for c in load_locomo(path, audit=audit, conversations=("conv-30",))] == ["conv-30"]


@pytest.mark.parametrize("name", ["rename_speakers", "swap_target"])
def test_rule_shares_that_are_not_numbers_are_refused(name: str) -> None:
    # NaN passed every range check: rename_speakers=nan renamed nothing, swap_target=nan labelled negatives nan
    with pytest.raises(DataError, match=f"LocomoRules.{name} must be a finite number, got nan"):
        LocomoRules(**{name: float("nan")})


@pytest.mark.parametrize("sample_id", [None, 26, "", "   ", ["conv-30"]])
def test_a_sample_id_that_is_not_text_is_refused_naming_the_file_and_the_entry(tmp_path: Path, sample_id: object) -> None:
    from data.locomo import LocomoError

    path, _ = write_locomo_fixture(tmp_path)
    samples = json.loads(path.read_text(encoding="utf-8"))
    samples[1]["sample_id"] = sample_id
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(samples), encoding="utf-8")
    expected = rf"{re.escape(str(bad))} does not look like LoCoMo data: sample 1: sample_id must be a non-empty string, got {re.escape(repr(sample_id))}"
    for selection in (None, ("conv-26", "conv-41")):  # refused even when the bad entry is not among those asked for
        with pytest.raises(LocomoError, match=expected):
            load_locomo(bad, conversations=selection)


def _audit_file(tmp_path: Path, content: str) -> Path:
    audit = tmp_path / "audit.json"
    audit.write_text(content, encoding="utf-8")
    return audit


def test_errors_in_the_audit_file_name_the_audit_file_not_the_locomo_file(tmp_path: Path) -> None:
    from data.locomo import LocomoError

    path, _ = write_locomo_fixture(tmp_path)
    for content, message in (
        ("{not json", r"^cannot read the --audit file .*audit\.json: "),
        (json.dumps({"question_id": "locomo_0_qa3"}), r"^the --audit file .*audit\.json is not a LoCoMo audit: expected a JSON list of objects$"),
        (json.dumps([{"question": "q"}]), r"^the --audit file .*audit\.json is not a LoCoMo audit: audit entry 0: missing 'question_id'$"),
    ):
        with pytest.raises(LocomoError, match=message) as info:
            load_locomo(path, audit=_audit_file(tmp_path, content))
        assert "LoCoMo file" not in str(info.value) and "LoCoMo data" not in str(info.value)
    with pytest.raises(LocomoError, match=r"^cannot read the --audit file .*missing\.json"):
        load_locomo(path, audit=tmp_path / "missing.json")


@pytest.mark.parametrize("evidence", [7, "D2:6", [7], ["D2:6", None], {"D2:6": True}])
def test_a_correct_evidence_that_is_not_a_list_of_dia_ids_is_refused(tmp_path: Path, evidence: object) -> None:
    from data.locomo import LocomoError

    path, _ = write_locomo_fixture(tmp_path)
    question = json.loads(path.read_text(encoding="utf-8"))[0]["qa"][2]["question"]
    entries = [{"question_id": "locomo_0_qa1", "question": question, "correct_evidence": ["D2:6"]},
               {"question_id": "locomo_0_qa3", "question": question, "correct_evidence": evidence}]
    audit = _audit_file(tmp_path, json.dumps(entries))
    expected = (rf"^the --audit file {re.escape(str(audit))} is not a LoCoMo audit: audit entry 1: "
                rf"correct_evidence must be a list of dia_id strings, got {re.escape(repr(evidence))}$")
    with pytest.raises(LocomoError, match=expected):
        load_locomo(path, audit=audit)
    for fine in (None, []):  # no correction: the question keeps its own evidence
        entries[1]["correct_evidence"] = fine
        conversation = load_locomo(path, audit=_audit_file(tmp_path, json.dumps(entries)))[0]
        assert conversation.questions[2].evidence == ("D2:6",)  # the entry 0 correction (same question text) holds
