"""MODEL_CARD.md: the model card `training.report.write_report` writes beside `metrics.json`, rendered from the
metrics alone (data provenance, the fit, calibration, held-out figures, acceptance, limits).

    text = model_card(build_metrics(run_dir, model_dir), "make train")
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data.splits import DEV_CONVERSATIONS


def _prior_lines(calibration: dict[str, Any]) -> list[str]:
    """The Noul prior shifts of `--calibration-prior pooled` / `fitted`, the main model's and each specialist's."""
    prior = calibration.get("prior")
    if prior not in ("pooled", "fitted"):
        return []
    shifts = {"main": calibration.get("prior_shifts") or {}}
    shifts.update({k.partition(":")[2]: v.get("prior_shifts") or {} for k, v in calibration.items()
                   if k.startswith("specialist:") and isinstance(v, dict)})
    where = "; only where its calibration level was fitted, a level left at the raw logits keeps none" if prior == "fitted" else ""
    return [f"- Noul prior shifts (`--calibration-prior {prior}`: log-odds from a catalogue question's label rate on the "
            f"calibration split to its rate over the training and calibration splits, per source{where}): "
            + "; ".join(f"{name} {json.dumps(v)}" for name, v in shifts.items())]


def _stage_changes_lines(changes: dict[str, dict[str, Any]]) -> list[str]:
    """Card lines for the stages run again alone with settings other than the recipe's (`config_changes`)."""
    out = []
    for stage, diff in changes.items():
        settings = ", ".join(f"`{k}` = {json.dumps(v)}" for k, v in sorted(diff.items()) if k != "command")
        how = f" (`{diff['command']}`)" if "command" in diff else ""
        out.append(f"- the {stage} stage was run again alone{how}, with settings that differ from the recipe above: "
                   f"{settings or 'none but the command'}")
    return out


def _repeatable_text(fits: dict[str, dict[str, Any]]) -> str:
    """Whether a rerun of the recipe computes these weights: only if every fit ran all its planned steps (a step is a
    function of seed and step; a fit stopped by its minute cap stops elsewhere on a faster or slower machine)."""
    short = [f"{name} stopped by its minute cap at step {fit.get('steps_done')} of {(fit.get('config') or {}).get('steps')}"
             for name, fit in fits.items() if fit.get("completed") is False]
    if short:
        return ("- repeatable: no, " + "; ".join(short) + ", so a rerun on a machine of another speed fits other weights")
    return ("- repeatable: every fit ran all its planned steps, and a step depends only on the seed and the step, so a rerun "
            "of the recipe fits the same weights on the same torch build and CPU kind (other kernels round differently)")


def _states_text(states: dict[str, bool]) -> str:
    """The card's line on how states must be rendered for this model."""
    on = [{"relevance_dated": "relevance memories carry their date, `[8 May 2023] Speaker: text`",
           "relevance_context": "relevance states carry `previous`, the memory written just before"}.get(k, k)
          for k, v in sorted(states.items()) if v]
    if not on:
        return "- state conventions (`states.json`): the defaults (relevance memories undated, no `previous`)"
    return (f"- state conventions (`states.json`): {'; '.join(on)}. The Jev-Mem engine renders states so for this model "
            "unless its `EngineConfig` says otherwise; a client that calls the controller directly must do the same, "
            "as training did")


def _sources_text(spec: dict[str, Any]) -> str:
    counts = spec.get("examples_by_source") or {}
    return f" ({', '.join(f'{n:,} {k}' for k, n in counts.items())} training examples)" if counts else ""


def _specialist_lines(spec: dict[str, Any]) -> list[str]:
    if not spec:
        return []
    config = spec.get("config") or {}
    return [
        f"- **{spec['family']} specialist** (`specialists/{spec['family']}`, hash `{str(spec.get('artifact_hash'))[:12]}`): a second "
        f"adapter ({_lora_text(config)}) and heads fitted on the {spec['family']} family alone{_sources_text(spec)}, {spec.get('steps_done')} steps "
        f"(planned {config.get('steps')}), {spec.get('labels_seen')} labels seen, calibrated on that family's calibration split "
        f"(temperatures {json.dumps((spec.get('calibration') or {}).get('family_temperatures'))}, Noul biases "
        f"{json.dumps((spec.get('calibration') or {}).get('family_biases') or {})}){_fit_extras_text(config)}. Every request whose "
        f"questions all belong to the {spec['family']} family (in the catalogue's wording, or in other wording about a "
        f"{spec['family']} state) is answered by it; the held-out {spec['family']} figures below are its own, and the "
        "robustness and packed-vs-N-pair checks run each model on the families it serves.",
    ]


def _embedder_lines(emb: dict[str, Any]) -> list[str]:
    """The retrieval embedder's adapter (`embedder/`, `training.embedder`), from its `embedder.json`."""
    if not emb:
        return []
    config, losses = emb.get("config") or {}, emb.get("epoch_loss") or []
    hard = config.get("hard_negatives") or 0
    mined = (f" and {hard} hard negative{'s' if hard > 1 else ''} per pair drawn from the BM25 top {config.get('mine_depth')} "
             "turns of the question's own conversation") if hard else ""
    return [
        f"- **retrieval embedder** (`embedder/`, the engine's `--embedder minilm-tuned`): a LoRA adapter (rank "
        f"{config.get('lora_r')}, alpha {config.get('lora_alpha')}, on {', '.join(config.get('targets') or [])}) on the base "
        f"MiniLM's mean-pooled embedding, fitted with in-batch negatives{mined} (cosine x {config.get('scale')}, a question's "
        f"other gold turns masked) on {emb.get('pairs')} (question, gold turn) pairs of {', '.join(emb.get('conversations') or ['?'])}, "
        f"{config.get('epochs')} epochs, batch {config.get('batch_size')}, lr {config.get('lr')}, seed {config.get('seed')}; "
        f"mean loss per epoch {', '.join(f'{v:.3f}' for v in losses)}; {emb.get('seconds')} s. It is separate from the "
        "controller: no calibration, no ONNX graph here (the engine builds and caches its own).",
    ]


def ood_lines(ood: dict[str, Any]) -> list[str]:
    """Model card lines: sys1bench RAG relevance against its references, jevbench coherence."""
    config = ood.get("config", {})
    lines = [f"sys1bench `rag_relevance` ({config.get('items')} items, K={config.get('cardinality')}, seed {config.get('seed')}), "
             "beside `uniform` (1/K) and `base_rate` (the class prior fitted on these labels):", "",
             "| model | question | accuracy | ECE | NLL |", "|---|---|---|---|---|"]
    for row in ood.get("sys1bench", []):
        m = row["metrics"]
        lines.append(f"| {row['model']} | {row['question']} | {_fmt(m.get('accuracy'))} | {_fmt(m.get('ece15'))} | {_fmt(m.get('nll'))} |")
    lines += [""] if ood.get("jevbench") else []
    for row in ood.get("jevbench", []):
        dims = ", ".join(f"{k} {_fmt(v)}" for k, v in row["dimensions"].items())
        overall = "not scored (a dimension lacks answers)" if row["overall"] is None else _fmt(row["overall"])
        lines.append(f"- jevbench coherence, {row['model']}: overall {overall}; {dims}; {row['requests']} requests, {row['errors']} refused or failed"
                     f" (over-long states: {config.get('overflow', 'refuse')})")
    return lines


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def family_table(table: dict[str, Any]) -> str:
    head = ("| family | n | acc | AUROC | NLL raw | NLL cal | Brier cal | ECE raw | ECE cal | MCE cal | acc base-rate | NLL base-rate "
            "| ECE base-rate | NLL uniform |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, row in table.items():
        r, c, b, u = row["raw"], row["calibrated"], row["base_rate"], row["uniform"]
        cells = [name, c["n"], c["accuracy"], c["auroc"], r["nll"], c["nll"], c["brier"], r["ece"], c["ece"], c["mce"],
                 b["accuracy"], b["nll"], b["ece"], u["nll"]]
        lines.append("| " + " | ".join(_fmt(x) for x in cells) + " |")
    return "\n".join(lines)


def _acceptance_lines(acc: dict[str, Any]) -> list[str]:
    lines = []
    for key, value in acc.items():
        if key.startswith("relevance_auroc"):
            ci = f", 95% CI [{_fmt(value['ci'][0])}, {_fmt(value['ci'][1])}]" if "ci" in value else ""
            lines.append(f"- {key}: {_fmt(value['value'])}{ci} (target >= {value['target']}, n={value['n']}): {'PASS' if value['pass'] else 'MISS'}")
    ece = acc.get("ece_after_calibration", {})
    for family, v in ece.get("families", {}).items():
        ci = ""
        if "change_ci" in v:
            ci = f"; change {v['after'] - v['before']:+.3f}, 95% CI [{v['change_ci'][0]:+.3f}, {v['change_ci'][1]:+.3f}]"
        lines.append(f"- ECE {family} (n={v['n']}): {_fmt(v['before'])} -> {_fmt(v['after'])}{ci} (target <= {ece['target']}, not worse): "
                     f"{'PASS' if v['pass'] else 'MISS'}")
    return lines


def _fit_extras_text(config: dict[str, Any]) -> str:
    """`; each step drew ... listwise loss ...` when the fit added the listwise relevance loss, and `; forward
    passes under bfloat16 autocast ...` when it trained in bf16; else ""."""
    weight = float(config.get("listwise_weight") or 0.0)
    listwise = (f"; each step drew a query's candidates together and added {weight:g} x the listwise loss of `relevance.relevant` "
                "(training.losses.ListwiseLoss)") if weight else ""
    bf16 = "; forward passes under bfloat16 autocast (weights, optimizer state and loss in float32)" if config.get("precision") == "bf16" else ""
    return listwise + bf16


def _lora_text(config: dict[str, Any]) -> str:
    """The adapter as the fit configured it (`FitConfig` defaults for what the record lacks): rank, alpha,
    dropout, modules and the layers it covers."""
    from training.trainer import FitConfig

    fit = FitConfig.from_json(config)
    where = f"the top {fit.lora_layers} layers' query/key/value/dense" if fit.lora_layers else "query/key/value/dense"
    return f"r={fit.lora_r}, alpha={fit.lora_alpha}, dropout {fit.lora_dropout} on {where}"


def model_card(metrics: dict[str, Any], command: str) -> str:
    from training.relevance_report import relevance_table

    m, fit, data = metrics["model"], metrics.get("fit", {}), metrics.get("data", {})
    held = metrics.get("heldout", {})
    temps = {**(metrics.get("calibration", {}).get("temperatures") or {}), **(metrics.get("calibration", {}).get("family_temperatures") or {})}
    npair = metrics.get("packed_vs_npair", {})
    folds = {"group": "groups: conversations, generator shards"}.get(metrics.get("calibration", {}).get("folds", "source"), "data sources")
    parts = [
        f"# {m.get('name')} {m.get('version')}",
        "",
        "Local System One controller for Jev-Mem: the packed MiniLM-L6 cross-encoder (sentence-transformers/all-MiniLM-L6-v2, "
        f"6 layers, 384 hidden) with a LoRA adapter ({_lora_text(fit.get('config') or {})}) and a fully fine-tuned (not LoRA) "
        "3-way readout head (Noul / Choice option / Score level; the Score output sees no catalogue data, see Limits), temperature-calibrated per question kind and option count, "
        "with a temperature of its own for each Jev-Mem catalogue family, and each catalogue question, that has enough "
        f"calibration data (a question's own only where it beats its family's across {folds}), and a Noul bias "
        "(Platt) at each level where that cross-validation keeps it"
        + ("; a group's, family's or question's calibration is kept only where it also beats the raw logits out of fold "
           "(elsewhere it stays at T = 1)." if metrics.get("calibration", {}).get("keep_raw") else "."),
        "",
        f"- artifact hash: `{m.get('artifact_hash')}`",
        *([f"- served hash (with the specialists; `LocalBackend.model_hash`): `{m.get('served_hash')}`"]
          if m.get("served_hash") not in (None, m.get("artifact_hash")) else []),
        f"- base weights sha256: `{(m.get('base_model') or {}).get('sha256')}`",
        f"- template: `{(m.get('template') or {}).get('template_version')}`",
        _states_text(m.get("states") or {}),
        f"- reproduce: `{command}` on 2 shared CPU cores; wall-clock per stage: {_stage_times(metrics.get('stages_seconds') or {})}",
        *_stage_changes_lines(metrics.get("stage_changes") or {}),
        _repeatable_text({"the main fit": fit, "the specialist's fit": metrics.get("specialist") or {}}),
        "",
        "## Training data (provenance)",
        "",
        _locomo_line(data),
        "- **Synthetic generators** (`data/synthetic/`): template states over word banks with exact labels, 10 shards per "
        "generator; shard 8 is calibration, shard 9 held-out test. Source text never appears in two splits (checked).",
        *_included_lines(data),
        f"- Examples per split: {_split_counts(data)}.",
        "",
        "## Training",
        "",
        f"- steps {fit.get('steps_done')} (planned {(fit.get('config') or {}).get('steps')}), tokens seen {fit.get('tokens_seen')}, "
        f"labels seen {fit.get('labels_seen')}, trainable parameters {fit.get('trainable_parameters')} of {fit.get('total_parameters')}",
        f"- loss: first 50 steps {_fmt(fit.get('first_loss'))}, last 50 steps {_fmt(fit.get('final_loss'))}",
        "- losses: BCE (Noul), cross-entropy to soft targets (Choice), cross-entropy + ranked probability score (Score); "
        f"family-balanced sampling; AdamW, linear warmup/decay, gradient clipping{_fit_extras_text((fit.get('config') or {}))}.",
        f"- temperatures: {json.dumps(temps)}",
        *_specialist_lines(metrics.get("specialist") or {}),
        *_embedder_lines(metrics.get("embedder") or {}),
        *([f"- Noul biases (Platt, cross-validated; `--no-calibration-bias` leaves them out): {json.dumps(metrics['calibration']['family_biases'])}"]
          if metrics.get("calibration", {}).get("family_biases") else []),
        *_prior_lines(metrics.get("calibration") or {}),
        "",
        f"## Held-out results ({_heldout_sources(data)})",
        "",
        "Noul ECE is the calibration of P(true); Choice ECE uses top-label confidence; 15 bins. `raw` = T=1, `cal` = calibrated. "
        "A family's AUROC pools its Noul questions, so it also rewards knowing which question has the higher base rate; "
        "the per-question AUROC (metrics.json, `heldout.per_question`) is the one that measures judgment of the state.",
        "",
        family_table(held.get("by_family", {})) if held.get("by_family") else "(no evaluation recorded)",
        "",
        "### Acceptance",
        "",
        *(["Intervals: cluster bootstrap over the held-out questions (a relevance query's candidates, else one state, "
           "resampled together; 1,000 draws, `training/intervals.py`); an ECE change is calibrated minus raw on the same draws.", ""]
          if held.get("intervals") else []),
        *_acceptance_lines(metrics.get("acceptance", {})),
        "",
        *(["### Candidate relevance by negative kind (LoCoMo dev, `relevant`)", "",
            "Gold evidence turns against each kind of mined negative; `cosine` is the zero-shot bi-encoder that mined the dense "
            "negatives (`training/relevance_report.py`).", "", relevance_table(metrics["relevance_by_negative"]), ""]
          if metrics.get("relevance_by_negative") else []),
        "### Packed vs N-pair (same weights, held-out sample, raw probabilities)",
        "",
    ]
    for owner, table in (("", npair), *((f" ({k.partition(':')[2]} specialist)", v) for k, v in npair.items() if k.startswith("specialist:"))):
        for enc in ("packed", "npair"):
            row = (table.get(enc) or {}).get("metrics", {}).get("all")
            if row:
                parts.append(f"- {enc}{owner}: accuracy {_fmt(row['accuracy'])}, AUROC {_fmt(row['auroc'])}, NLL {_fmt(row['nll'])}, "
                             f"{table[enc]['seconds']} s for {table[enc]['requests']} requests ({table[enc]['tokens']} tokens)")
    parts += [
        "",
        "## Out of domain",
        "",
        *(ood_lines(metrics["out_of_domain"]) if isinstance(metrics.get("out_of_domain"), dict) else [f"- {metrics.get('out_of_domain')}"]),
        "",
        "## Limits",
        "",
        "- LoCoMo-derived labels are noisy by construction (incomplete gold evidence, keyword rules); synthetic states are "
        "template text and easier than real conversations. Scores on real agent memories will be lower than the synthetic figures.",
        "- Typing, causal and entity-equivalence judgments are learnt from synthetic data only.",
        "- The catalogue has no Score questions, so the Score head is untrained beyond its initialisation on this data.",
        "- The state is encoded without seeing the question (packed encoding); see the N-pair comparison above.",
        *measured_limits(metrics),
        "- English only; inputs over 512 positions per branch are refused by default (the opt-in `truncate_state` "
        "overflow policy cuts the state instead and reports the cut).",
        "",
        "Full figures: `metrics.json` (per question, per split, robustness, stage wall-clock); reliability diagrams: "
        "`reliability.png`, written here by the evaluate stage (not committed).",
        "",
    ]
    return "\n".join(parts)


def _stage_times(seconds: dict[str, float]) -> str:
    """`build_data 46 s, fit 50.3 min, ...` in pipeline order (`not recorded` when empty)."""
    from training.pipeline_config import STAGES

    keys = [k for k in STAGES if k in seconds] + sorted(set(seconds) - set(STAGES))
    parts = [f"{k} {seconds[k] / 60:.1f} min" if seconds[k] >= 600 else f"{k} {seconds[k]:.0f} s" for k in keys]
    return (", ".join(parts) + f"; {sum(seconds.values()) / 60:.1f} min in all") if parts else "not recorded"


def _locomo_use(data: dict[str, Any]) -> str:
    """Which LoCoMo conversations each split used, from the build-data record (older records: the default plan)."""
    used = data.get("locomo_conversations")
    if not used:
        return ("Training used conv-41/42/43, calibration conv-44; the dev pair conv-26 + conv-30 was never trained or "
                "calibrated on. The four remaining conversations were not used at all.")
    names = {"train": "Training used", "calibration": "calibration", "dev": "held-out dev (never trained or calibrated on)"}
    order = [k for k in names if k in used] + sorted(set(used) - set(names))
    parts = [f"{names.get(split, split)} {', '.join(used[split])}" for split in order if used[split]]
    calibrated = "" if used.get("calibration") else " No LoCoMo conversation was held out for calibration: the LoCoMo questions were calibrated on synthetic data alone."
    return "; ".join(parts) + f". The other LoCoMo conversations were not used at all.{calibrated}"


def _locomo_line(data: dict[str, Any]) -> str:
    """The provenance line for LoCoMo: its conversations and licence, or that the build read no LoCoMo file."""
    if data.get("locomo") is False:
        return "- **LoCoMo**: not used (the data build read no LoCoMo file), so no CC BY-NC labels are in this model."
    return ("- **LoCoMo** (Maharana et al., ACL 2024; CC BY-NC 4.0): decision labels *derived by rules* from 6 of its 10 conversations "
            "(relevance, stopping, routing, pair judgments; see `data/builders/locomo.py` for every rule and its noise). "
            f"{_locomo_use(data)} **The model was trained on labels derived from a CC BY-NC dataset**: treat the weights "
            "as subject to its non-commercial terms. No LoCoMo text is shipped in this directory.")


def _included_lines(data: dict[str, Any]) -> list[str]:
    """The Jev line, and the files `--include` added as training data: their labels are not the builders'."""
    included = data.get("included") or {}
    if not included:
        return ["- No outputs of Jev (or any other hosted model) were used as labels or inputs."]
    files = "; ".join(f"`{Path(path).name}` {n.get('train', 0)} of {n.get('read', 0)}" for path, n in sorted(included.items()))
    return [f"- **Included decision examples** (`--include`, training split only; calibration and held-out figures read the "
            f"builders' labels alone): {files}. Their labels are as their files recorded them (`teacher:<name>` records are "
            "a teacher server's answers, `python -m training distill`, which refuses Jev); no Jev output was used by the builders."]


def _heldout_sources(data: dict[str, Any]) -> str:
    """`LoCoMo dev conv-26, conv-30 + synthetic test shard` from the build-data record (older records: the default plan)."""
    if data.get("locomo") is False:
        return "synthetic test shard only: the data build read no LoCoMo file"
    used = data.get("locomo_conversations")
    dev = (used.get("dev") or []) if used else list(DEV_CONVERSATIONS)
    return f"LoCoMo dev {', '.join(dev)} + synthetic test shard" if dev else "synthetic test shard only: no LoCoMo conversation was held out"


def _split_counts(data: dict[str, Any]) -> str:
    """`train 56144, calibration 10292, ... (after dropping N for leakage)` from the build-data record."""
    counts = data.get("counts") or {}
    order = [k for k in ("train", "calibration", "dev", "test") if k in counts] + sorted(set(counts) - {"train", "calibration", "dev", "test"})
    text = ", ".join(f"{k} {counts[k]}" for k in order) or "not recorded"
    dropped = sum((data.get("dropped_for_leakage") or {}).values())
    return f"{text} (after dropping {dropped} for leakage)" if dropped else text


CHANCE_AUROC = 0.6  # a held-out AUROC below this is reported as a limit: the answers barely depend on the state


def measured_limits(metrics: dict[str, Any]) -> list[str]:
    """Limits read off this model's own held-out figures: questions answered near chance, and relevance
    judgments that hardly depend on the query."""
    lines = []
    per_q = metrics.get("heldout", {}).get("per_question", {})
    weak = sorted((name, row["raw"]["auroc"]) for name, row in per_q.items()
                  if ":" not in name and row.get("raw", {}).get("auroc") is not None and row["raw"]["auroc"] < CHANCE_AUROC)
    if weak:
        listed = ", ".join(f"{name} {value:.3f}" for name, value in weak)
        lines.append(f"- Held-out AUROC below {CHANCE_AUROC} (near chance): {listed}. Engines should not act on these answers "
                     "(for the stopping questions: `ask_stop=False`, or thresholds the calibrated answers never reach).")
    same = metrics.get("relevance_by_negative", {}).get("same_memory", {})
    if same.get("within_share") is not None:
        lines.append(f"- Candidate relevance depends on the query only in part: for LoCoMo memories judged under several queries, "
                     f"{same['within_share']:.2f} of the logit's variance lies within a memory (0 would mean the memory alone decides).")
    return lines


__all__ = ["CHANCE_AUROC", "family_table", "measured_limits", "model_card", "ood_lines"]
