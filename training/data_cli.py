"""Data commands: `build-data` (the decision data set) and `distill` (teacher labels for it).

    python -m training build-data --locomo PATH --audit PATH --out DIR [--synthetic-per-family N] [--seed S] [--include FILE ...]
    JEVMEM_TEACHER_API_KEY=... python -m training distill --data DIR --split train --base-url URL --name NAME --out FILE

build-data writes DIR/{train,calibration,dev,test}.jsonl and DIR/summary.json and prints the summary table
and the build wall-clock; distill appends a teacher's soft answers to FILE (resumable). All logic lives in
`data.builders` and `data.teacher`; this module only parses arguments and prints.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from data.builders import BuildConfig, build_dataset, format_questions, format_table, write_build
from data.builders.dataset import DENSE_CHOICES
from data.builders.locomo import LocomoRules
from data.splits import DEV_CONVERSATIONS, SplitPlan


def add_parser(sub: Any) -> None:
    p = sub.add_parser("build-data", help="build the labelled decision data set (LoCoMo rules + synthetic generators)")
    p.add_argument("--locomo", help="LoCoMo JSON file (not bundled; omit to build synthetic data only)")
    p.add_argument("--audit", help="LoCoMo audit file with corrected evidence (optional)")
    p.add_argument("--out", required=True, help="output directory for the split files and summary.json")
    p.add_argument("--synthetic-per-family", type=int, default=1500, help="synthetic states per family (the pair family's four generators make 2.25x this)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dense", choices=DENSE_CHOICES, default="minilm", help="embedder for dense hard negatives")
    p.add_argument("--query-swaps", type=int, default=0, help="LoCoMo swapped-query relevance negatives per gold turn (train split only)")
    p.add_argument("--random-swaps", action="store_true",
                   help="with --query-swaps: draw every swapped question at random (default: the question nearest the turn first)")
    p.add_argument("--swap-target", type=float, default=0.0,
                   help="with --query-swaps: the soft relevance target of a swapped-query negative, in [0, 0.5) (default 0)")
    p.add_argument("--observation-queries", type=int, default=0,
                   help="LoCoMo observation facts per conversation used as relevance queries (train split only)")
    add_train_negatives(p)
    p.add_argument("--relevance-context", action="store_true",
                   help="LoCoMo relevance states carry the turn before the memory as state.previous")
    p.add_argument("--relevance-dated", action="store_true",
                   help="LoCoMo relevance memories carry their session date, [8 May 2023] ...")
    p.add_argument("--rename-speakers", type=float, default=0.0,
                   help="share of LoCoMo train questions whose relevance states rename the two speakers (train split only)")
    p.add_argument("--dev-conversations", type=conversation_ids, default=DEV_CONVERSATIONS,
                   help="comma-separated LoCoMo sample ids held out as the dev split (default conv-26,conv-30; empty: "
                        "none, so they may be trained on and nothing LoCoMo is held out for evaluation)")
    p.add_argument("--calibration-conversations", type=conversation_ids, default=("conv-44",),
                   help="comma-separated LoCoMo sample ids held out for calibration (default conv-44; empty: none)")
    p.add_argument("--train-conversations", type=conversation_ids, default=(),
                   help="comma-separated LoCoMo sample ids the train split may use (default: every one not held out)")
    p.add_argument("--questions", action="store_true", help="also print the per-question label balance of the train split")
    add_include(p)
    p.set_defaults(handler=run)
    d = sub.add_parser("distill", help="record a teacher's soft answers for decision examples (any wire-protocol server; never Jev)")
    d.add_argument("--data", required=True, help="directory of split files written by build-data")
    d.add_argument("--split", default="train", help="split to label")
    d.add_argument("--families", default="", help="comma-separated families to label (default: all)")
    d.add_argument("--limit", type=int, default=0, help="label at most this many examples (0: all)")
    d.add_argument("--base-url", required=True, help="teacher server, e.g. http://127.0.0.1:9000")
    d.add_argument("--name", required=True, help="teacher name recorded as source teacher:<name>")
    d.add_argument("--model", help="model name to request from the teacher server")
    d.add_argument("--api-key", help="teacher API key; prefer the JEVMEM_TEACHER_API_KEY environment variable (a key "
                                     "given here is visible to other users in the process list; default: local)")
    d.add_argument("--max-questions", type=int, default=32, help="questions per request (lower it for a slow teacher)")
    d.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    d.add_argument("--retries", type=int, default=4, help="extra attempts, with doubling backoff, for a failing server")
    d.add_argument("--out", required=True, help="JSONL file the answers are appended to")
    d.set_defaults(handler=run_distill)


def run_distill(args: argparse.Namespace) -> int:
    from data.schema import DataError, load_examples
    from data.teacher import TeacherConfig, distill

    if args.limit < 0:
        raise DataError(f"--limit must be >= 0 (0: all), got {args.limit}")
    if not (Path(args.data) / f"{args.split}.jsonl").exists():  # a typo must not label nothing and report success
        raise DataError(f"no {args.split}.jsonl under {args.data}: give a directory written by build-data and one of its splits")
    examples = load_examples(args.data, args.split)
    families = {f.strip() for f in args.families.split(",") if f.strip()}
    if families:
        missing = sorted(families - {e.family for e in examples})
        if missing:
            raise DataError(f"no {args.split} examples of families {', '.join(missing)} under {args.data}")
        examples = [e for e in examples if e.family in families]
    if args.limit:
        examples = examples[: args.limit]
    config = TeacherConfig(base_url=args.base_url, name=args.name, model=args.model, api_key=teacher_api_key(args.api_key),
                           max_questions=args.max_questions, timeout=args.timeout, retries=args.retries)
    report = distill(examples, args.out, config)
    print(f"teacher {args.name}: {report.written} written, {report.skipped} already recorded, {report.failed} refused, "
          f"{report.invalid} invalid answers, {report.requests} requests in {report.seconds:.1f}s -> {args.out}")
    if report.failed or report.invalid:
        print(f"warning: {report.failed + report.invalid} examples got no teacher label (see the warnings above); "
              "run the same command again to retry them", file=sys.stderr)
    return 0


def teacher_api_key(given: str | None) -> str:
    """--api-key, else $JEVMEM_TEACHER_API_KEY, else "local". Never $TYPESAFE_API_KEY: a TypeSafe key must not be
    sent to another server."""
    from data.teacher import TEACHER_API_KEY_ENV

    if given is not None:
        print(f"warning: --api-key is visible to other users of this machine (process list, shell history); "
              f"set {TEACHER_API_KEY_ENV} instead", file=sys.stderr)
        return given
    return os.environ.get(TEACHER_API_KEY_ENV, "").strip() or "local"


def add_train_negatives(p: argparse.ArgumentParser) -> None:
    """Relevance negative counts of the LoCoMo train split (`LocomoRules`; off by default, docs/EXPERIMENTS.md)."""
    p.add_argument("--train-hard-negatives", type=int, default=0,
                   help="this many more top BM25 and top dense relevance negatives per LoCoMo question (train split only)")
    p.add_argument("--train-bm25-negatives", type=int, default=None,
                   help="top BM25 relevance negatives per LoCoMo question in the train split (default: as in every split, 4)")
    p.add_argument("--train-dense-negatives", type=int, default=None,
                   help="top dense relevance negatives per LoCoMo question in the train split (default: as in every split, 2)")


def add_include(p: argparse.ArgumentParser) -> None:
    p.add_argument("--include", nargs="+", default=[], metavar="FILE",
                   help="decision-example JSONL files added as training data (a teacher's `distill` output, your own "
                        "labelled decisions); examples of held-out groups are dropped and counted")


def conversation_ids(text: str) -> tuple[str, ...]:
    """"conv-41, conv-42" -> ("conv-41", "conv-42"); "" -> ()."""
    return tuple(c.strip() for c in text.split(",") if c.strip())


def run(args: argparse.Namespace) -> int:
    from data.paths import unreplaceable
    from data.schema import DataError

    start = time.perf_counter()
    problem = unreplaceable(Path(args.out))
    if problem:  # found at the write, it would cost the whole build
        raise DataError(f"cannot write the decision data to {args.out}: {problem}")
    result = _build(args)
    counts = write_build(result, args.out)
    print(format_table(result.summary))
    if args.questions:
        print()
        print(format_questions(result.summary))
    print()
    steps = ", ".join(f"{k} {v:.1f}s" for k, v in result.seconds.items())
    print(f"written {sum(counts.values())} examples to {args.out} ({counts})")
    cross = ", ".join(f"{n} {split}" for split, n in sorted(result.disjoint.dropped.items())) or "none"
    print(f"dropped: {result.too_long} over-long states; for text shared across splits: {cross}")
    for path, n in result.included.items():
        other = f", {n['other_conversations_dropped']} of LoCoMo conversations outside --train-conversations dropped" \
            if n["other_conversations_dropped"] else ""
        print(f"included {path}: {n['read']} read, {n['train']} as training data, {n['held_out_dropped']} of held-out groups dropped{other}")
    print(f"build wall-clock {time.perf_counter() - start:.1f}s ({steps})")
    return 0


def _build(args: argparse.Namespace) -> Any:
    """The build the flags ask for (`build_dataset`'s result)."""
    calibration = tuple(f"locomo:{c}" for c in args.calibration_conversations)
    config = BuildConfig(
        locomo=args.locomo, audit=args.audit, synthetic_per_family=args.synthetic_per_family, seed=args.seed,
        dense=args.dense, plan=SplitPlan(dev_groups=tuple(f"locomo:{c}" for c in args.dev_conversations),
                                          calibration_groups=calibration), rules=LocomoRules(query_swaps=args.query_swaps, random_swaps=args.random_swaps, swap_target=args.swap_target, observation_queries=args.observation_queries,
                                                                                   train_hard_negatives=args.train_hard_negatives,
                                                                                   train_bm25_negatives=args.train_bm25_negatives,
                                                                                   train_dense_negatives=args.train_dense_negatives,
                                                                                   relevance_context=args.relevance_context,
                                                                                   relevance_dated=args.relevance_dated,
                                                                                   rename_speakers=args.rename_speakers),
        train_conversations=args.train_conversations, include=tuple(args.include),
    )
    return build_dataset(config)

