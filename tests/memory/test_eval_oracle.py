from __future__ import annotations

import re

import random
from pathlib import Path

import pytest

from controller.client import SystemOneClient
from controller.embedding import HashingEmbedder
from data.locomo import Conversation
from memory.config import EngineConfig
from memory.control import keyed
from memory.evaluation.metrics import auroc
from memory.evaluation.oracle import GoldRelevance, RelevanceOracle, make_oracle, oracle_probability, parse_levels, separation
from memory.evaluation.sweep import MemoController, sweep, sweep_read_configs, sweep_table
from serving.cli import main


@pytest.mark.parametrize("target", [0.6, 0.75, 0.85, 0.95])
def test_an_oracle_reaches_its_auroc_and_is_calibrated(target: float) -> None:
    rng = random.Random(1)
    labels = [rng.random() < 0.1 for _ in range(6000)]
    p = [oracle_probability(y, target, prior=0.1, key=f"pair-{i}") for i, y in enumerate(labels)]
    assert auroc(p, labels) == pytest.approx(target, abs=0.02)
    # calibrated: the mean answer matches the gold rate within each half of the answers
    ranked = sorted(zip(p, labels))
    for part in (ranked[: len(ranked) // 2], ranked[len(ranked) // 2 :]):
        mean_p = sum(q for q, _ in part) / len(part)
        rate = sum(y for _, y in part) / len(part)
        assert mean_p == pytest.approx(rate, abs=0.02)


def test_oracle_answers_are_deterministic_and_the_perfect_one_is_exact() -> None:
    assert oracle_probability(True, 0.8, prior=0.1, key="k") == oracle_probability(True, 0.8, prior=0.1, key="k")
    assert oracle_probability(True, 0.8, prior=0.1, key="k") != oracle_probability(True, 0.8, prior=0.1, key="k2")
    assert (oracle_probability(True, 1.0, prior=0.1, key="k"), oracle_probability(False, 1.0, prior=0.1, key="k")) == (1.0, 0.0)
    assert separation(0.5) == 0.0
    for bad in (0.4, 1.01):
        with pytest.raises(ValueError, match="AUROC"):
            separation(bad)
    with pytest.raises(ValueError, match="prior"):
        oracle_probability(True, 0.8, prior=1.0, key="k")


def test_parse_levels() -> None:
    assert parse_levels("own, 0.85,1,heuristic,mean") == [None, 0.85, 1.0, "heuristic", "mean"]
    for bad in ("", "0.3", "best"):
        with pytest.raises(ValueError):
            parse_levels(bad)


def test_gold_relevance_matches_turn_texts_and_cut_texts(convs: list[Conversation]) -> None:
    conv = convs[0]
    gold = GoldRelevance.from_conversation(conv)
    q = next(q for q in conv.questions if q.question.startswith("When did Caroline adopt"))
    text = {t.dia_id: t.memory_text() for t in conv.turns}
    assert gold.is_gold(q.question, text["D2:1"])
    assert not gold.is_gold(q.question, text["D2:2"]) and not gold.is_gold("another query", text["D2:1"])
    assert gold.is_gold(q.question, text["D2:1"][:20] + " [truncated]")
    assert gold.is_gold(q.question, "[8 May 2023] " + text["D2:1"])  # a dated relevance state (EngineConfig.relevance_dated)
    assert not gold.is_gold(q.question, "[8 May 2023] " + text["D2:2"])


def test_the_oracle_replaces_only_the_read_path_relevant_answer(convs: list[Conversation]) -> None:
    conv = convs[0]
    gold = GoldRelevance.from_conversation(conv)
    text = {t.dia_id: t.memory_text() for t in conv.turns}
    query = "When did Caroline adopt Oscar?"
    memo = MemoController(SystemOneClient("heuristic"))
    requests = [({"query": query, "memory": text[d]}, keyed(f"c{i}_", "relevance", ("relevant", "bridge"))) for i, d in enumerate(("D2:1", "D1:2"))]
    own = memo.ask_batch(requests)
    perfect = RelevanceOracle(memo, gold, 1.0)
    given = perfect.ask_batch(requests)
    assert (given[0]["c0_relevant"].noul, given[1]["c1_relevant"].noul) == (1.0, 0.0)
    assert given[0]["c0_bridge"] is own[0]["c0_bridge"]  # only `relevant` is replaced
    assert perfect.measured_auroc() == 1.0 and perfect.measured_auroc(own=True) is not None
    with_context = [({**state, "previous": "an earlier turn"}, questions) for state, questions in requests]
    assert [a["c0_relevant" if i == 0 else "c1_relevant"].noul for i, a in enumerate(perfect.ask_batch(with_context))] == [1.0, 0.0]
    passthrough = RelevanceOracle(memo, gold, None)
    assert passthrough.ask_batch(requests)[0]["c0_relevant"].noul == own[0]["c0_relevant"].noul
    other = ({"query": query, "evidence": [text["D2:1"]], "depth": 0}, keyed("", "stopping", ("evidence_sufficient",)))
    assert perfect.ask(*other) is memo.ask(*other)  # other states pass through untouched
    assert perfect.usage() == memo.usage()


def test_a_judge_controller_gives_or_mixes_the_relevant_answer(convs: list[Conversation]) -> None:
    conv = convs[0]
    gold = GoldRelevance.from_conversation(conv)
    text = {t.dia_id: t.memory_text() for t in conv.turns}
    query = "When did Caroline adopt Oscar?"
    requests = [({"query": query, "memory": text[d]}, keyed(f"c{i}_", "relevance", ("relevant", "bridge"))) for i, d in enumerate(("D2:1", "D1:2"))]
    inner = MemoController(SystemOneClient("heuristic"))

    class Constant(MemoController):  # a judge that always answers 0.9
        def ask_batch(self, reqs):  # type: ignore[no-untyped-def]
            from typesafe_sdk import NoulAnswer

            return [{"r": NoulAnswer(type="noul", noul=0.9)} for _ in reqs]

    judge = Constant(SystemOneClient("heuristic"))
    own = inner.ask_batch(requests)
    given = make_oracle(inner, gold, "heuristic", judge=judge).ask_batch(requests)
    assert [given[i][f"c{i}_relevant"].noul for i in range(2)] == [0.9, 0.9]
    mixed = make_oracle(inner, gold, "mean", judge=judge).ask_batch(requests)
    assert mixed[1]["c1_relevant"].noul == pytest.approx(0.5 * 0.9 + 0.5 * own[1]["c1_relevant"].noul)
    with pytest.raises(ValueError, match="judge"):
        make_oracle(inner, gold, "mean")


def test_an_oracle_sweep_names_levels_and_reports_their_auroc(convs: list[Conversation]) -> None:
    embedder = HashingEmbedder()
    plain = sweep_read_configs(convs, SystemOneClient("heuristic"), embedder, EngineConfig(), {"as is": {}})
    result = sweep(convs, SystemOneClient("heuristic"), embedder, EngineConfig(), {"as is": {}, "w1": {"relevance_weight": 1.0}},
                   oracle_levels=[None, 1.0, "heuristic"])
    assert list(result.scores) == ["as is | own relevance", "w1 | own relevance", "as is | oracle AUROC 1.00", "w1 | oracle AUROC 1.00",
                                   "as is | heuristic relevance", "w1 | heuristic relevance"]
    # the heuristic judging for the heuristic controller changes nothing
    assert {(s.conversation, s.qid): s.values for s in result.scores["as is | heuristic relevance"]} == {
        (s.conversation, s.qid): s.values for s in plain["as is"]}
    own = {(s.conversation, s.qid): s.values for s in result.scores["as is | own relevance"]}
    assert own == {(s.conversation, s.qid): s.values for s in plain["as is"]}  # the pass-through changes nothing
    given, _ = result.relevance_auroc["as is | oracle AUROC 1.00"]
    assert given == 1.0
    mean = {name: sum(s.values["R_frac@10"] for s in scores) / len(scores) for name, scores in result.scores.items()}
    assert mean["w1 | oracle AUROC 1.00"] >= mean["w1 | own relevance"]
    table = sweep_table(result.scores, result.relevance_auroc)
    assert "relevance AUROC" in table.splitlines()[0] and "| 1.000 / " in table
    # every row has the header's cells (the judge was a cell the header lacked, so each figure sat one column right)
    cells = [len(re.split(r"(?<!\\)\|", line)) for line in table.splitlines()]
    assert len(set(cells)) == 1, table
    header = [c.strip() for c in table.splitlines()[0].split("|")]
    row = [c.strip() for c in table.splitlines()[2].split("|")]
    assert header[1:3] == ["variant", "relevance judge"] and row[1:3] == ["as is", "own relevance"]
    assert float(row[header.index("R_frac@10")]) == pytest.approx(mean["as is | own relevance"], abs=5e-4)
    piped = sweep_table({"a|b | own relevance": result.scores["as is | own relevance"]}, result.relevance_auroc)
    assert "| a\\|b | own relevance |" in piped and len({len(re.split(r"(?<!\\)\|", line)) for line in piped.splitlines()}) == 1
    plain = sweep_table({"as is": result.scores["as is | own relevance"]})
    assert len({line.count("|") for line in plain.splitlines()}) == 1 and "relevance judge" not in plain


def test_cli_sweep_takes_oracle_levels(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    data = str(files[0])
    assert main(["eval", "sweep", "--data", data, "--embedder", "hashing", "--variants", '{"a": {}}', "--oracle-relevance", "own,0.9"]) == 0
    out = capsys.readouterr().out
    assert "| a | own relevance |" in out and "| a | oracle AUROC 0.90 |" in out
    assert main(["eval", "sweep", "--data", data, "--embedder", "hashing", "--variants", '{"a": {}}', "--oracle-relevance", "0.2"]) == 2
    assert "--oracle-relevance" in capsys.readouterr().err
