"""metrics.json and MODEL_CARD.md for a model directory, from the pipeline's run records.

The run directory holds one JSON record per stage (`stages.json`: wall-clock + summary) and the
evaluation (`evaluation.json`); `write_report` turns them into the model directory's `metrics.json` and
`MODEL_CARD.md`. Neither file is covered by the artifact hash, so they can be rewritten after any stage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


RELEVANCE_AUROC_TARGET = 0.85
ECE_TARGET = 0.05
ECE_MIN_EXAMPLES = 200


def read_json(path: str | Path, default: Any = None) -> Any:
    """A run record, a JSON object (`default` when the file does not exist); `PipelineError` naming a file that
    is not JSON or not an object (found when it is read, not when a stage's result is recorded into it)."""
    from training.errors import PipelineError

    p = Path(path)
    if not p.exists():
        return default
    try:
        value = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # ValueError: not JSON, or not UTF-8
        raise PipelineError(f"cannot read {p}: {error}; if an older run was killed while writing it, delete it "
                            "and rerun the stages that write it") from error
    if not isinstance(value, dict):
        raise PipelineError(f"{p} is not a JSON object (it holds {type(value).__name__} JSON): it is not a record of this "
                            "pipeline; move it away, or give the command another --run-dir")
    return value


def write_json(path: str | Path, value: Any) -> None:
    """Write a record whole or not at all (a kill mid-write leaves the previous file)."""
    from data.paths import write_text_atomic

    write_text_atomic(path, json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def record_stage(run_dir: str | Path, stage: str, seconds: float, summary: dict[str, Any]) -> None:
    """Add or replace one stage's record in `run_dir/stages.json`."""
    path = Path(run_dir) / "stages.json"
    stages = read_json(path, {})
    stages[stage] = {"seconds": round(seconds, 2), **summary}
    write_json(path, stages)


def ece_passes(before: float, after: float) -> bool:
    """The issue's calibration target for one family: ECE after calibration <= ECE_TARGET and not worse than raw."""
    return after <= ECE_TARGET and after <= before + 1e-9


def _ci(interval: dict[str, Any] | None, name: str = "ci") -> dict[str, Any]:
    """{name: [lo, hi]} from a `training.intervals` entry; nothing when the evaluation has none (older runs)."""
    return {name: [interval["lo"], interval["hi"]]} if interval else {}


def acceptance(evaluation: dict[str, Any]) -> dict[str, Any]:
    """The issue's acceptance checks, computed from the held-out tables (never edited by hand)."""
    out: dict[str, Any] = {}
    per_q = evaluation.get("heldout", {}).get("per_question", {})
    intervals = evaluation.get("heldout", {}).get("intervals", {})
    for split_name, key in (("heldout", "relevance/relevant"), ("locomo_dev", "locomo:relevance/relevant"), ("synthetic_test", "synthetic:relevance/relevant")):
        row = per_q.get(key)
        if row:
            value = row["calibrated"]["auroc"]
            out[f"relevance_auroc_{split_name}"] = {"value": value, "target": RELEVANCE_AUROC_TARGET, "n": row["calibrated"]["n"],
                                                   "pass": value is not None and value >= RELEVANCE_AUROC_TARGET,
                                                   **_ci(intervals.get("relevance_auroc", {}).get(split_name))}
    ece: dict[str, Any] = {}
    for family, row in evaluation.get("heldout", {}).get("by_family", {}).items():
        if family == "all" or row["calibrated"]["n"] < ECE_MIN_EXAMPLES:
            continue
        before, after = row["raw"]["ece"], row["calibrated"]["ece"]
        ece[family] = {"n": row["calibrated"]["n"], "before": before, "after": after,
                       "pass": ece_passes(before, after), **_ci(intervals.get("ece_change", {}).get(family), "change_ci")}
    out["ece_after_calibration"] = {"target": ECE_TARGET, "min_examples": ECE_MIN_EXAMPLES, "families": ece,
                                    "pass": all(v["pass"] for v in ece.values()) if ece else False}
    return out


def build_metrics(run_dir: str | Path, model_dir: str | Path) -> dict[str, Any]:
    run, model = Path(run_dir), Path(model_dir)
    stages = read_json(run / "stages.json", {})
    evaluation = read_json(run / "evaluation.json", {})
    config = read_json(model / "config.json", {})
    calibration = read_json(model / "calibration.json", {})
    served = _served_hash(model, calibration.get("model_hash"))
    return {
        "model": {"name": config.get("name"), "version": config.get("version"), "artifact_hash": calibration.get("model_hash"),
                  "served_hash": served,
                  "base_model": config.get("base_model"), "template": config.get("template"), "encoder": config.get("encoder"),
                  "states": _states(model)},
        "stages_seconds": {k: v["seconds"] for k, v in stages.items()},
        "total_seconds": round(sum(v["seconds"] for v in stages.values()), 1),
        "data": stages.get("build_data", {}),
        "fit": stages.get("fit", {}),
        "specialist": _specialist(stages, model),
        "embedder": read_json(model / "embedder" / "embedder.json", {}),
        "calibration": {**stages.get("calibrate", {}), "temperatures": calibration.get("temperatures"),
                        "family_temperatures": calibration.get("family_temperatures"), "family_biases": calibration.get("family_biases"),
                        "fitted_on": calibration.get("fitted_on")},
        "export": stages.get("export", {}),
        "heldout": evaluation.get("heldout", {}),
        "robustness": evaluation.get("robustness", {}),
        "packed_vs_npair": evaluation.get("packed_vs_npair", {}),
        "relevance_by_negative": evaluation.get("relevance_by_negative", {}),
        "acceptance": acceptance(evaluation),
        "out_of_domain": _out_of_domain(read_json(run / "ood.json", None), served),
        "stage_changes": {k: v["config_changes"] for k, v in stages.items() if v.get("config_changes")},
    }


def _states(model: Path) -> dict[str, bool]:
    """The state conventions the model directory declares (`controller.states`; defaults without states.json)."""
    from dataclasses import asdict

    from controller.states import read_states

    return asdict(read_states(model))


def _served_hash(model: Path, main_hash: str | None) -> str | None:
    """The hash of what the directory serves (its specialists included), which out-of-domain runs record."""
    from controller.specialists import served_hash

    return None if main_hash is None else served_hash(model, main_hash)


def _specialist(stages: dict[str, Any], model: Path) -> dict[str, Any]:
    """The specialist fit's record with its calibration, when the model directory has one ({} otherwise)."""
    record = stages.get("fit_specialist") or {}
    family = record.get("family")
    if not family:
        return {}
    from controller.specialists import read_index

    entry = read_index(model).get(family)
    calibration = read_json(model / entry["path"] / "calibration.json", {}) if entry else {}
    return {**record, "calibration": {**(stages.get("calibrate", {}).get(f"specialist:{family}") or {}),
                                      "family_temperatures": calibration.get("family_temperatures"),
                                      "family_biases": calibration.get("family_biases")}}


def _out_of_domain(summary: dict[str, Any] | None, model_hash: str | None) -> dict[str, Any] | str:
    """The recorded `python -m training ood` summary when it was measured on this artifact, else why not."""
    how = "run `python -m training ood --controller local --record-run RUN_DIR`"
    if summary is None:
        return f"not measured: {how}"
    if summary.get("artifact_hash") != model_hash:
        return f"not measured on this artifact (the recorded run used {summary.get('artifact_hash')!r}): {how}"
    return summary


def write_report(run_dir: str | Path, model_dir: str | Path, command: str) -> dict[str, Any]:
    metrics = build_metrics(run_dir, model_dir)
    write_json(Path(model_dir) / "metrics.json", metrics)
    from training.card import model_card

    from data.paths import write_text_atomic

    write_text_atomic(Path(model_dir) / "MODEL_CARD.md", model_card(metrics, command))
    return metrics
