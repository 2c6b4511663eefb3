"""Seconds per fit step, two fit configurations against each other in the same run.

    python -m training.fit_bench --data-dir runs/jevmem-minilm/data --steps 12 --rounds 3
    python -m training.fit_bench --variants '{"as is": {}, "rank 16": {"lora_r": 16}}'   # any FitConfig fields

Each round fits every variant for `--steps` steps from the same base weights and seed, in turn (so drift
on a shared machine touches all of them); the first `--warm` steps of each fit are not timed. The table
shows the median seconds per step and packed tokens per second of each variant, and the per-round median
ratio against the first variant. Without a data directory, a small synthetic set is generated.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

DEFAULT_VARIANTS = '{"torch dropout": {"dropout": "torch"}, "fast dropout": {"dropout": "fast"}}'


def _requests(data_dir: str, seed: int, limit: int) -> list[Any]:
    from controller.template import get_tokenizer
    from training.sampling import prepare_requests

    if data_dir:
        from data.schema import load_examples

        examples = load_examples(Path(data_dir), "train")
    else:
        from data.splits import SplitPlan
        from data.synthetic import SyntheticConfig, generate

        examples = [e for e in generate(SyntheticConfig(per_family=60, seed=seed), SplitPlan()) if e.split == "train"]
    if limit:
        examples = examples[:limit]
    requests, _ = prepare_requests(examples, get_tokenizer(), noul_as_choice_rate=0.05, seed=seed)
    return requests


def run(variants: dict[str, dict[str, Any]], *, data_dir: str = "", steps: int = 12, rounds: int = 3, warm: int = 2,
        threads: int = 2, seed: int = 0, limit: int = 0) -> list[dict[str, Any]]:
    """Per variant: median s/step, tokens/s and the median per-round ratio of s/step to the first variant."""
    import copy

    from controller.torch_model import PackedCrossEncoder
    from training.fit_log import read_log
    from training.trainer import FitConfig, fit

    if steps <= warm:
        raise ValueError(f"--steps ({steps}) must exceed --warm ({warm})")
    requests = _requests(data_dir, seed, limit)
    base = PackedCrossEncoder.from_base(seed=seed)
    configs = {name: replace(FitConfig(steps=steps, threads=threads, seed=seed, checkpoint_every=steps), **over)
               for name, over in variants.items()}
    per_step: dict[str, list[float]] = {name: [] for name in configs}
    tokens: dict[str, list[float]] = {name: [] for name in configs}
    rounds_s: dict[str, list[float]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for v, (name, config) in enumerate(configs.items()):
                run_dir = Path(tmp) / f"round{r}-variant{v}"
                fit(copy.deepcopy(base), requests, config, run_dir, progress=False)
                timed = read_log(run_dir / "train_log.jsonl")[warm:]
                seconds = [e["seconds"] for e in timed]
                per_step[name] += seconds
                tokens[name] += [e["tokens"] / e["seconds"] for e in timed]
                rounds_s[name].append(statistics.median(seconds))
    first = next(iter(configs))
    return [{"variant": name, "s_per_step_p50": statistics.median(per_step[name]), "tokens_per_s_p50": statistics.median(tokens[name]),
             "ratio_p50": statistics.median(a / b for a, b in zip(rounds_s[name], rounds_s[first])), "steps_timed": len(per_step[name])}
            for name in configs]


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| variant | s/step p50 | tokens/s p50 | s/step vs first (median over rounds) | steps timed |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['variant']} | {row['s_per_step_p50']:.3f} | {row['tokens_per_s_p50']:.0f} | {row['ratio_p50']:.2f}x | {row['steps_timed']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.fit_bench", description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default="", help="decision data (train.jsonl); default: a small synthetic set")
    p.add_argument("--variants", default=DEFAULT_VARIANTS, help="JSON: name -> FitConfig fields overriding the defaults")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warm", type=int, default=2, help="untimed steps at the start of each fit")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=0, help="use only the first N training examples (0: all)")
    args = p.parse_args(argv)
    try:
        variants = json.loads(args.variants)
        if not isinstance(variants, dict) or not variants or not all(isinstance(v, dict) for v in variants.values()):
            raise ValueError("--variants wants a JSON object of name -> object")
        rows = run(variants, data_dir=args.data_dir, steps=args.steps, rounds=args.rounds, warm=args.warm, threads=args.threads,
                   seed=args.seed, limit=args.limit)
    except (ValueError, TypeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
