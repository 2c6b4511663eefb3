"""The LoCoMo harness on a tiny synthetic file: loader, baselines, a fake engine, the real engine, reports."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.embedding import HashingEmbedder
from controller.errors import BackendUnavailableError
from data.locomo import Conversation, load_locomo
from memory.evaluation import EvalConfig, run_locomo, to_markdown, write_report
from memory.evaluation.baselines import Ranking, bm25_rank, bm25_text, dense_rank, dense_text, rrf_fuse
from memory.evaluation.cache import CachedEmbedder
from memory.evaluation.harness import _score, scored_questions, truncate
from memory.evaluation.jevmem import evidence_pairs
from memory.evaluation.metrics import Item
from memory.types import Evidence, LinkStatus, Observation, QueryResult, TraceStep, WriteResult


def test_loader_cleans_evidence_and_applies_the_audit(files: tuple[Path, Path], convs: list[Conversation]) -> None:
    c26, c30 = convs
    assert [t.dia_id for t in c26.turns][:5] == ["D1:1", "D1:2", "D1:3", "D1:4", "D2:1"]
    assert c26.turns[4].date == datetime(2023, 6, 27, 10, 37)
    assert c26.questions[3].evidence == ("D1:2", "D1:4")  # "D1:2; D1:4"
    assert c30.questions[0].evidence == ("D1:1", "D2:2")  # "D:1:1"
    assert c26.questions[4].answer == "a lake sunrise"  # adversarial_answer
    assert len(scored_questions(c26)) == 5 and len(scored_questions(c30)) == 3  # one has no evidence
    audited = load_locomo(files[0], audit=files[1])
    assert audited[0].questions[0].evidence == ("D1:2", "D2:4")
    assert audited[1].questions == c30.questions


def test_turn_texts_follow_the_reference_format(convs: list[Conversation]) -> None:
    turn = convs[0].turns[1]
    assert bm25_text(turn) == ("[1:56 pm on 8 May, 2023] Melanie: That sounds great! I just finished a painting of a lake "
                               "sunrise. [shares a photo of a painting of a sunrise over a lake]")
    assert dense_text(turn) == "[1:56 pm on 8 May, 2023] Melanie: That sounds great! I just finished a painting of a lake sunrise."
    assert bm25_text(turn, "iso").startswith("[2023-05-08] Melanie:")
    with pytest.raises(ValueError, match="date style"):
        bm25_text(turn, "nope")


def test_bm25_and_dense_rank_every_turn(convs: list[Conversation]) -> None:
    turns = convs[0].turns
    (bm25,) = bm25_rank(turns, ["Who adopted the puppy Oscar?"])
    assert sorted(bm25.order) == list(range(len(turns)))
    assert turns[bm25.order[0]].dia_id == "D2:1"
    (dense,) = dense_rank(turns, ["puppy named Oscar adopted"], HashingEmbedder())
    assert sorted(dense.order) == list(range(len(turns)))
    assert turns[dense.order[0]].dia_id == "D2:1"


def test_stemmed_bm25_matches_inflections_the_reference_misses(convs: list[Conversation]) -> None:
    turns = convs[0].turns
    painting = next(i for i, t in enumerate(turns) if "painting" in bm25_text(t).lower())
    query = ["who paints?"]
    (plain,) = bm25_rank(turns, query)
    (stemmed,) = bm25_rank(turns, query, stemmed=True)
    assert sorted(stemmed.order) == list(range(len(turns)))
    assert stemmed.order[0] == painting and plain.order == tuple(range(len(turns)))  # plain: no shared term


def test_stemmed_baselines_run_beside_the_reference_ones(convs: list[Conversation]) -> None:
    config = EvalConfig(systems=("bm25", "rrf", "bm25-stemmed", "rrf-stemmed"), query_k=20, bootstrap_draws=20,
                        budgets=(10,), baseline_embedder="hashing")
    report = run_locomo(convs, config)
    n = sum(len(scored_questions(c)) for c in convs)
    assert all(len(report.systems[s].scores) == n for s in config.systems)
    assert report.systems["rrf-stemmed"].costs["index_and_rank_s"] >= report.systems["bm25-stemmed"].costs["index_and_rank_s"]


def test_rrf_weights_the_lists() -> None:
    a, b = Ranking((0, 1, 2)), Ranking((2, 1, 0))
    assert rrf_fuse([a, b], [1.0, 0.5], k=60).order == (0, 1, 2)
    assert rrf_fuse([a, b], [0.5, 1.0], k=60).order == (2, 1, 0)
    with pytest.raises(ValueError):
        rrf_fuse([a], [1.0, 0.5])


def test_evidence_pairs_are_ordered_and_deduplicated(convs: list[Conversation]) -> None:
    c26 = convs[0]
    q = c26.questions[2]
    assert evidence_pairs(c26, [q, q]) == [("D1:3", "D2:3")]


def test_cached_embedder_embeds_each_text_once(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    class Counting(HashingEmbedder):
        def embed(self, texts: Any) -> np.ndarray:
            calls.append(list(texts))
            return super().embed(texts)

    first = CachedEmbedder(Counting(), tmp_path, key="counting")
    a = first.embed(["one", "two", "one"])
    assert calls == [["one", "two"]] or calls == [["two", "one"]]
    assert np.array_equal(first.embed(["two"])[0], a[1]) and len(calls) == 1
    first.flush()
    second = CachedEmbedder(Counting(), tmp_path, key="counting")
    assert np.array_equal(second.embed(["one", "two"]), a[:2])
    assert len(calls) == 1 and second.hits == 2 and second.misses == 0
    assert second.embed([]).shape == (0, 384)


class FakeEngine:
    """Returns every stored turn, the latest first; records what it was shown."""

    seen: list[Observation]

    def __init__(self) -> None:
        self.seen = []

    def write(self, obs: Observation) -> WriteResult:
        self.seen.append(obs)
        return WriteResult(f"n{len(self.seen)}", 2, 1, 9, LinkStatus.ASSESSED, {"embedding": 1.0, "judgment": 3.0})

    def query(self, text: str, *, k: int = 10, budget: int | None = None, answer: bool = False) -> QueryResult:
        evidence = tuple(
            Evidence(f"n{i}", o.content, 1.0, o.source_ids, o.observed_at, o.speaker, "seed:bm25", 0)
            for i, o in reversed(list(enumerate(self.seen, start=1)))
        )[:k]
        route = {"temporal": 0.9 if text.startswith("When") else 0.1, "multi_hop": 0.5}
        trace = (TraceStep("route", {}, 2.0), TraceStep("judge", {}, 5.0), TraceStep("judge", {}, 1.0))
        return QueryResult(text, evidence, route, ("semantic",), "sufficient", trace, 1, 6)

    def close(self) -> None:
        pass


def test_fake_engine_run_scores_and_sees_only_turns(convs: list[Conversation]) -> None:
    engines: list[FakeEngine] = []

    def factory() -> FakeEngine:
        engines.append(FakeEngine())
        return engines[-1]

    config = EvalConfig(systems=("bm25", "jevmem-fake"), query_k=20, bootstrap_draws=50, budgets=(10,))
    report = run_locomo(convs, config, engine_factories={"jevmem-fake": factory})
    assert len(engines) == 2  # a fresh engine per conversation
    seen = engines[0].seen
    assert [o.source_ids for o in seen] == [(t.dia_id,) for t in convs[0].turns]
    assert seen[1].content == convs[0].turns[1].memory_text() and seen[1].event_time == datetime(2023, 5, 8, 13, 56)
    # turns only, in order: no qa, observation or summary text, and nothing about categories
    assert [o.content for o in seen] == [t.memory_text() for t in convs[0].turns]
    assert all(not o.metadata and o.entities is None for o in seen)
    fake = report.systems["jevmem-fake"]
    assert fake.error is None and report.questions == 8
    # the fake returns every turn, so R@20 is perfect; at 10 tokens only the latest turn fits
    assert fake.table is not None and fake.table.means["1-5"]["R_all@20"] == 1.0
    first = next(s for s in fake.scores if s.qid == "locomo_0_qa1")  # evidence D2:1, 4th from the end
    assert first.values["MRR"] == pytest.approx(1 / 4) and first.gold_ranks == {"D2:1": 4}
    cut = _score(convs[0], replace(convs[0].questions[1], evidence=("D2:1", "D1:1")), [Item(("D2:1",))], config, False)
    assert cut.gold_ranks == {"D2:1": 1, "D1:1": None}  # a gold turn not returned has no rank
    assert first.values["items@ret"] == 8.0
    assert fake.costs["writes"] == 14 and fake.costs["controller_questions_per_write"] == 9
    assert fake.costs["write_phases"]["judgment"]["total_s"] == pytest.approx(14 * 3.0 / 1000)
    phases = fake.costs["query_phases"]  # from each query's trace: both judge rounds summed, absent phases 0
    assert phases["judge"]["total_s"] == pytest.approx(8 * 6.0 / 1000) and phases["judge"]["p50_ms"] == pytest.approx(6.0)
    assert phases["route"]["p95_ms"] == pytest.approx(2.0) and phases["seed"]["total_s"] == 0.0
    assert "Query phases, total s" in to_markdown(report)
    assert fake.router["auroc_temporal_cat2"] == 1.0
    assert fake.write_quality["pairs"] == 2 and fake.write_quality["pairs_inspected"] == 0
    assert "jevmem-fake" in to_markdown(report)


def test_a_failing_system_is_reported_not_raised(convs: list[Conversation]) -> None:
    def broken() -> Any:
        raise BackendUnavailableError("no trained model")

    config = EvalConfig(systems=("bm25", "jevmem-local"), bootstrap_draws=10, reference_system="bm25")
    report = run_locomo(convs, config, engine_factories={"jevmem-local": broken})
    assert report.systems["bm25"].error is None
    assert "no trained model" in (report.systems["jevmem-local"].error or "")
    assert "did not run" in to_markdown(report)


def test_real_engine_with_heuristic_controller(convs: list[Conversation], tmp_path: Path) -> None:
    config = EvalConfig(systems=("bm25", "dense", "rrf", "jevmem-heuristic"), bootstrap_draws=100, store="sqlite")
    report = run_locomo(convs, config, embedder=HashingEmbedder())
    engine = report.systems["jevmem-heuristic"]
    assert engine.error is None, engine.error
    assert engine.costs["writes"] == 14 and engine.costs["queries"] == 8
    assert engine.costs["controller_questions_per_write"] > 0
    assert engine.write_quality["pairs"] == 2 and engine.write_quality["pairs_inspected"] == 2
    assert set(engine.write_quality["candidate_recall"]) >= {"vector", "lexical", "entity", "temporal", "shortlist"}
    assert 0.0 <= engine.write_quality["edge_recall_any"] <= 1.0
    assert "auroc_multi_hop_cat1" in engine.router
    assert all(engine.costs["query_phases"][p]["total_s"] > 0 for p in ("route", "seed", "judge"))
    rrf = report.systems["rrf"]
    assert rrf.paired == {} and set(engine.paired) == set(engine.intervals)
    assert set(engine.question_intervals) == set(engine.intervals) and set(engine.question_paired) == set(engine.paired)
    assert rrf.question_paired == {}
    markdown = to_markdown(report)
    assert "## Question bootstrap within conversations" in markdown
    assert f"With {len(convs)} conversations, these intervals are about the range" in markdown  # fewer than 5
    paths = write_report(report, tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    assert data["questions"] == 8 and list(data["systems"]) == ["bm25", "dense", "rrf", "jevmem-heuristic"]
    assert data["systems"]["bm25"]["groups"]["1-5"]["R_any@10"] == report.systems["bm25"].table.means["1-5"]["R_any@10"]
    assert set(data["systems"]["jevmem-heuristic"]["question_paired_vs_reference"]) == set(engine.paired)
    rows = paths["questions"].read_text().splitlines()
    assert len(rows) == 4 * 8
    assert "| jevmem-heuristic |" in paths["markdown"].read_text()


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="unknown system"):
        EvalConfig(systems=("bm25", "graph"))
    with pytest.raises(ValueError, match="query_k"):
        EvalConfig(query_k=5)
    with pytest.raises(ValueError, match="store"):
        EvalConfig(store="postgres")
    with pytest.raises(ValueError, match="no conversations"):
        run_locomo([], EvalConfig(systems=("bm25",)))


def test_max_turns_keeps_the_questions_the_prefix_answers(convs: list[Conversation]) -> None:
    short = truncate(convs[0], 4)
    assert [t.dia_id for t in short.turns] == ["D1:1", "D1:2", "D1:3", "D1:4"]
    assert [q.question for q in short.questions] == ["What did Melanie paint?", "Would Caroline enjoy the pottery class?",
                                                    "What did Caroline paint?"]
    report = run_locomo(convs, EvalConfig(systems=("bm25",), max_turns=4, bootstrap_draws=10))
    assert report.questions == 4  # 3 in conv-26, 1 in conv-30 ("Why did Jon ..." needs D2:2: dropped)
    assert "Only the first 4 turns" in to_markdown(report)


def test_a_question_without_text_is_not_scored_and_does_not_stop_the_engine(convs: list[Conversation]) -> None:
    first = convs[0]
    blank = replace(first.questions[0], qid="blank", question="  ")
    conv = replace(first, questions=(*first.questions, blank))
    assert blank.evidence and blank not in scored_questions(conv) and len(scored_questions(conv)) == len(scored_questions(first))
    report = run_locomo([conv], EvalConfig(systems=("bm25", "jevmem-heuristic"), bootstrap_draws=10), embedder=HashingEmbedder())
    assert report.systems["jevmem-heuristic"].error is None and report.questions == len(scored_questions(first))
