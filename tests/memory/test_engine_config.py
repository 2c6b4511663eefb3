"""EngineConfig: validation, JSON round trip, presets."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory.config import PRESETS, EngineConfig, preset
from memory.errors import ConfigError


def test_defaults_match_the_design() -> None:
    cfg = EngineConfig()
    assert (cfg.candidates_k, cfg.consolidation_every, cfg.tau_route, cfg.expansion_budget) == (8, 20, 0.5, 40)
    assert (cfg.min_view_budget, cfg.gamma, cfg.max_depth) == (4, 2.0, 3)
    # hybrid seeds: equal weights, k = 10 (tuned on the LoCoMo dev split; the flat RRF baseline keeps 0.5 and 60)
    assert (cfg.dense_weight, cfg.seed_rrf_k, cfg.rrf_k) == (1.0, 10, 60)
    assert cfg.admission_enabled is False
    assert cfg.tau("entity_equivalence") == 0.7 and cfg.tau("semantic") == 0.6


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"candidates_k": 0}, "candidates_k"),
        ({"tau_semantic": 1.5}, "tau_semantic"),
        ({"gamma": -1.0}, "gamma"),
        ({"n_seeds": 20, "seed_pool": 10}, "seed_pool"),
        ({"order_edges_view": "entity"}, "order_edges_view"),
        ({"order_edges_view": 1}, "order_edges_view"),
        ({"max_depth": 2.5}, "max_depth"),
        ({"speaker_entity_edges": 1}, "speaker_entity_edges"),
        ({"tau_stop": float("nan")}, "tau_stop"),
        ({"admission_enabled": True}, "admission_enabled"),
    ],
)
def test_invalid_values_are_refused_with_the_field(changes: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        EngineConfig(**changes)
    assert info.value.field == field


def test_unknown_fields_and_unknown_taus_are_refused() -> None:
    with pytest.raises(ConfigError):
        EngineConfig().with_(k_w=3)
    with pytest.raises(ConfigError):
        EngineConfig().tau("friendship")


def test_json_round_trip(tmp_path: Path) -> None:
    cfg = EngineConfig(candidates_k=5, tau_causal=0.75, speaker_entity_edges=True)
    assert EngineConfig.from_json(cfg.to_json()) == cfg
    path = tmp_path / "engine.json"
    cfg.to_json(path)
    assert EngineConfig.from_json(path) == cfg
    assert EngineConfig.from_json(str(path)) == cfg


def test_bad_json_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        EngineConfig.from_json("{not json")
    with pytest.raises(ConfigError):
        EngineConfig.from_dict([1, 2])  # type: ignore[arg-type]


def test_presets() -> None:
    assert set(PRESETS) == {"default", "fast", "thorough"}
    assert preset("fast").consolidation_every == 0
    assert preset("fast").expansion_budget < preset("default").expansion_budget < preset("thorough").expansion_budget
    with pytest.raises(ConfigError):
        preset("turbo")


def test_named_config_takes_presets_and_files_of_any_name(tmp_path: Path) -> None:
    from memory.config import named_config

    assert named_config(None) == EngineConfig() and named_config("fast") == PRESETS["fast"]
    for name in ("c.JSON", "c.conf", "c"):
        (tmp_path / name).write_text('{"n_seeds": 3}', encoding="utf-8")
        assert named_config(str(tmp_path / name)).n_seeds == 3
    with pytest.raises(ConfigError, match="no config file .*missing.json"):
        named_config(str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError, match="unknown preset 'fastest'.*default, fast, thorough"):
        named_config("fastest")
    (tmp_path / "bytes.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ConfigError, match="cannot read config file"):
        named_config(str(tmp_path / "bytes.json"))
