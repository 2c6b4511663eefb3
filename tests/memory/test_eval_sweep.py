from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from controller.client import SystemOneClient
from controller.embedding import HashingEmbedder
from data.locomo import Conversation
from memory.config import EngineConfig
from memory.errors import ConfigError
from memory.evaluation import EvalConfig, run_locomo
from memory.evaluation.sweep import READ_PATH_FIELDS, MemoController, sweep, sweep_read_configs, sweep_table, variant_configs
from serving.cli import main


def test_read_path_fields_are_config_fields() -> None:
    assert READ_PATH_FIELDS <= {f.name for f in fields(EngineConfig)}
    assert "relevance_weight" in READ_PATH_FIELDS and "candidates_k" not in READ_PATH_FIELDS


def test_variants_may_change_only_the_read_path() -> None:
    configs = variant_configs(EngineConfig(), {"as is": {}, "w1": {"relevance_weight": 1.0, "center_relevance": False}})
    assert configs["as is"] == EngineConfig() and configs["w1"].relevance_weight == 1.0
    with pytest.raises(ConfigError, match="write-path fields \\(candidates_k\\)"):
        variant_configs(EngineConfig(), {"k2": {"candidates_k": 2}})
    with pytest.raises(ConfigError, match="unknown config fields"):
        variant_configs(EngineConfig(), {"typo": {"relevance_wieght": 1.0}})
    with pytest.raises(ConfigError):
        variant_configs(EngineConfig(), {})


def test_memo_controller_sends_a_repeated_request_once() -> None:
    memo = MemoController(SystemOneClient("heuristic"))
    state = {"query": "where is the studio", "memory": "Jon: the dance studio opened downtown"}
    questions = {"r": {"type": "noul", "instructions": "Does state.memory help answer state.query?"}}
    first = memo.ask(state, questions)
    assert memo.ask(state, questions) is first and memo.usage().requests == 1
    batch = memo.ask_batch([(state, questions), ({**state, "query": "who came"}, questions)])
    assert batch[0] is first and memo.usage().requests == 2
    assert memo.asked().requests == 4 and memo.asked().questions == 4 and memo.asked().calls == 3


def test_the_unchanged_variant_reproduces_the_harness(convs: list[Conversation]) -> None:
    embedder = HashingEmbedder()
    report = run_locomo(convs, EvalConfig(systems=("jevmem-heuristic",), bootstrap_draws=10, write_quality=False),
                        embedder=embedder)
    expected = {(s.conversation, s.qid): s.values["R_frac@10"] for s in report.systems["jevmem-heuristic"].scores}
    results = sweep_read_configs(convs, SystemOneClient("heuristic"), embedder, EngineConfig(),
                                 {"as is": {}, "no relevance": {"relevance_weight": 0.0}})
    assert list(results) == ["as is", "no relevance"]
    got = {(s.conversation, s.qid): s.values["R_frac@10"] for s in results["as is"]}
    assert got == expected and len(results["no relevance"]) == len(expected)
    table = sweep_table(results)
    assert table.splitlines()[2].startswith("| as is |") and "| +0.000 |" in table
    # the other variant: its paired difference from the first, question by question, with an interval
    first = {(s.conversation, s.qid): s.values["R_frac@10"] for s in results["as is"]}
    diff = sum(s.values["R_frac@10"] - first[(s.conversation, s.qid)] for s in results["no relevance"]) / len(first)
    row = table.splitlines()[3]
    assert row.startswith("| no relevance |") and f"| {diff:+.3f} [" in row
    low, high = (float(x) for x in row.split(f"| {diff:+.3f} [")[1].split("]")[0].split(", "))
    assert low <= diff + 1e-9 and diff - 1e-9 <= high


def test_the_sweep_counts_what_each_variant_asks(convs: list[Conversation]) -> None:
    result = sweep(convs, SystemOneClient("heuristic"), HashingEmbedder(), EngineConfig(),
                   {"as is": {}, "no stop": {"ask_stop": False}})
    asked, stopped = result.questions, result.stopped
    # answers from the memo count as asked: each variant's cost does not depend on which variant ran first
    reversed_order = sweep(convs, SystemOneClient("heuristic"), HashingEmbedder(), EngineConfig(),
                           {"no stop": {"ask_stop": False}, "as is": {}})
    assert reversed_order.questions == asked and reversed_order.stopped == stopped
    n = len(result.scores["as is"])
    assert len(asked["as is"]) == len(asked["no stop"]) == n > 0
    assert sum(asked["no stop"]) != sum(asked["as is"])
    assert sum(stopped["as is"].values()) == sum(stopped["no stop"].values()) == n
    assert not {"sufficient", "not_useful"} & set(stopped["no stop"])
    table = sweep_table(result.scores, cost=result)
    assert "controller questions / query" in table.splitlines()[0]
    row = next(line for line in table.splitlines() if line.startswith("| no stop |"))
    assert f"| {sum(asked['no stop']) / n:.1f} |" in row
    assert "controller questions" not in sweep_table(result.scores)


def test_cli_sweep_prints_the_table_and_refuses_write_path_variants(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    data = str(files[0])
    assert main(["eval", "sweep", "--data", data, "--embedder", "hashing", "--variants", '{"a": {}, "b": {"n_seeds": 2}}']) == 0
    out = capsys.readouterr().out
    assert "| a |" in out and "| b |" in out and "rounds ended by" in out
    assert main(["eval", "sweep", "--data", data, "--embedder", "hashing", "--variants", '{"a": {"candidates_k": 2}}']) == 2
    assert "write-path fields" in capsys.readouterr().err
    assert main(["eval", "sweep", "--data", data, "--embedder", "hashing", "--variants", "[1]"]) == 2
    assert main(["eval", "sweep", "--data", data, "--conversations", "conv-99", "--variants", '{"a": {}}']) == 2
    assert "conv-99" in capsys.readouterr().err
