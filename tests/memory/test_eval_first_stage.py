"""First-stage recall (`memory.evaluation.first_stage`) and `jevmem eval first-stage` on the tiny LoCoMo fixture,
with weight-free embedders."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from controller.embedding import HashingEmbedder
from data.locomo import Conversation, load_locomo
from memory.evaluation.first_stage import FirstStageReport, first_stage_questions, first_stage_recall, format_table
from serving import cli
from tests.memory.eval_fixtures import write_locomo

KS = (1, 2, 10)  # the fixture's conversations have 6 and 8 turns: only small cut-offs can miss


class BlindEmbedder:
    """A vector per text from a hash of the whole text: deterministic, and blind to what the text says."""

    name = "blind"
    dim = 32

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = [np.random.default_rng(int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little"))
                .standard_normal(self.dim) for t in texts]
        out = np.array(rows, dtype=np.float32).reshape(len(texts), self.dim)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


class OracleEmbedder(HashingEmbedder):
    """Embeds each question as the text of its first gold turn: the dense ranking puts that turn first."""

    name = "oracle"

    def __init__(self, conversations: Sequence[Conversation]) -> None:
        super().__init__()
        self.swap = {q.question: c.turn_by_id()[q.evidence[0]].memory_text()
                     for c in conversations for q in first_stage_questions(c)}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return super().embed([self.swap.get(t, t) for t in texts])


@pytest.fixture(scope="module")
def convs(tmp_path_factory: pytest.TempPathFactory) -> list[Conversation]:
    data, audit = write_locomo(tmp_path_factory.mktemp("locomo"))
    return load_locomo(data, audit=audit)


@pytest.fixture(scope="module")
def hashing(convs: list[Conversation]) -> FirstStageReport:
    return first_stage_recall(convs, HashingEmbedder(), ks=KS)


def test_counts_are_the_answerable_questions_with_evidence(convs: list[Conversation], hashing: FirstStageReport) -> None:
    expected = [q for c in convs for q in c.questions if q.category in (1, 2, 3, 4) and q.evidence]
    assert hashing.counts["all"] == len(expected) == len(hashing.questions) == 7
    assert [q.qid for q in hashing.questions] == [q.qid for q in expected]
    assert hashing.counts["multi-hop"] == sum(q.category == 1 for q in expected) == 2
    assert hashing.conversations == ("conv-26", "conv-30") and hashing.embedder == "hashing"


def test_values_are_fractions_and_means_agree(hashing: FirstStageReport) -> None:
    for q in hashing.questions:
        assert set(q.recall) == {(r, k) for r in ("dense", "fused") for k in KS}
        assert all(0.0 <= v <= 1.0 and (v * q.gold).is_integer() for v in q.recall.values())
        assert q.recall[("fused", 1)] <= q.recall[("fused", 2)] <= q.recall[("fused", 10)] == 1.0  # 10 > every turn
    for ranking in ("dense", "fused"):
        for k in KS:
            for group in ("all", "multi-hop"):
                values = hashing.values(ranking, k, group)
                assert hashing.mean(ranking, k, group) == pytest.approx(sum(values) / len(values))
    assert len(hashing.values("fused", 2, "multi-hop")) == 2
    with pytest.raises(KeyError):
        hashing.mean("fused", 30)


def test_oracle_embedder_puts_a_gold_turn_first(convs: list[Conversation]) -> None:
    report = first_stage_recall(convs, OracleEmbedder(convs), ks=KS)
    for q in report.questions:
        assert q.recall[("dense", 1)] == pytest.approx(1.0 / q.gold)
    assert report.mean("dense", 1) > first_stage_recall(convs, BlindEmbedder(), ks=KS).mean("dense", 1)


def test_deterministic_and_rows_differ_by_embedder(convs: list[Conversation], hashing: FirstStageReport) -> None:
    assert first_stage_recall(convs, HashingEmbedder(), ks=KS) == hashing
    blind = first_stage_recall(convs, BlindEmbedder(), ks=KS)
    assert blind.values("dense", 1) != hashing.values("dense", 1)
    table = format_table({"hashing": hashing, "blind": blind}).splitlines()
    assert table[0].startswith("| embedder | dense@1 | dense@2 | dense@10 | fused@1 |") and "multi-hop fused@10" in table[0]
    assert len(table) == 4 and table[2].startswith("| hashing |") and table[3].startswith("| blind |")
    assert table[2].split("|")[2:] != table[3].split("|")[2:]
    assert table[2].endswith("| 7 | 2 |")


def test_empty_multi_hop_group_reads_as_a_dash(convs: list[Conversation]) -> None:
    no_multi_hop = replace(convs[0], questions=convs[0].questions[:2])  # single-hop and temporal
    single = first_stage_recall([no_multi_hop], HashingEmbedder(), ks=(1,))
    assert single.counts == {"all": 2, "multi-hop": 0} and ("fused", 1, "multi-hop") not in single.means
    assert math.isnan(single.mean("fused", 1, "multi-hop")) and single.values("fused", 1, "multi-hop") == []
    assert format_table({"x": single}).splitlines()[2].endswith("| - | 2 | 0 |")


def test_bad_ks_and_mismatched_tables_are_refused(convs: list[Conversation], hashing: FirstStageReport) -> None:
    with pytest.raises(ValueError, match="ks"):
        first_stage_recall(convs, HashingEmbedder(), ks=(0, 10))
    other = first_stage_recall(convs[:1], HashingEmbedder(), ks=(3,))
    with pytest.raises(ValueError, match="ks"):
        format_table({"a": hashing, "b": other})


def test_cli_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, audit = write_locomo(tmp_path)
    code = cli.main(["eval", "first-stage", "--data", str(data), "--audit", str(audit), "--conversations", "conv-26",
                     "--embedder", "hashing", "--ks", "1", "10"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert "conv-26" in lines[0]
    assert lines[1].startswith("| embedder | dense@1 | dense@10 | fused@1 | fused@10 |")
    assert lines[3].startswith("| hashing |") and lines[3].endswith("| 4 | 1 |") and len(lines) == 4


@pytest.mark.parametrize("extra, message", [
    (["--conversations", "conv-99"], "conv-99"),
    (["--adapter", "no-such-dir"], "no-such-dir"),
    (["--ks", "0"], "ks"),
])
def test_cli_user_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str) -> None:
    data, _ = write_locomo(tmp_path)
    code = cli.main(["eval", "first-stage", "--data", str(data), "--embedder", "hashing", *extra])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.startswith("jevmem eval: error:") and message in err and len(err.strip().splitlines()) == 1


def test_cli_missing_data_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["eval", "first-stage", "--data", str(tmp_path / "missing.json"), "--embedder", "hashing"])
    assert code == 2 and "missing.json" in capsys.readouterr().err
