"""`jevmem eval ...`: the LoCoMo benchmarks of the command line (`locomo`, `sweep`, `compare`, `first-stage`).
`serving.cli` adds them to its parser with `add_eval_parser`; each command imports what it runs when it runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from serving.cli_common import UsageError, checked_adapter, load_locomo_file

SWEEP_SCORED_AT = 10  # `sweep.sweep_table` reports R_frac@10, R_all@10 and nDCG@10: a sweep's --k must reach 10


def add_eval_parser(sub: Any) -> None:
    """The `eval` command and its benchmarks, on the subparsers `sub` of the `jevmem` parser."""
    from controller.embedding import EMBEDDERS

    p = sub.add_parser("eval", help="benchmarks")
    bench = p.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")

    def locomo_source(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data", required=True, help="LoCoMo JSON file")
        p.add_argument("--audit", help="audit file with corrected evidence")
        p.add_argument("--conversations", nargs="+", metavar="ID", help="sample ids (default: all in the file)")

    p = bench.add_parser("locomo", help="retrieval on LoCoMo: flat baselines and Jev-Mem in one run")
    locomo_source(p)
    p.add_argument("--controller", nargs="+", help="Jev-Mem controllers to run beside the baselines (default: heuristic)")
    p.add_argument("--systems", help="comma list of bm25, dense, rrf, bm25-stemmed, rrf-stemmed, jevmem-<controller>")
    p.add_argument("--out", help="directory for report.json, questions.jsonl and report.md (one that holds any of "
                                 "them from an earlier run is refused, unless --force)")
    p.add_argument("--force", action="store_true", help="with --out: overwrite the report files of an earlier run")
    p.add_argument("--k", type=int, default=20,
                   help="items per question for every system (default 20; not below the largest recall cut-off the report scores)")
    p.add_argument("--embedder", choices=EMBEDDERS, default="minilm-tuned", help="the engine's embedder (default minilm-tuned)")
    p.add_argument("--embedder-adapter", default=None, metavar="DIR",
                   help="the engine embeds with this LoRA retrieval adapter merged into the base MiniLM (instead of --embedder)")
    p.add_argument("--baseline-embedder", choices=EMBEDDERS, default="minilm", help="the dense baseline's embedder (default minilm)")
    p.add_argument("--config", default=None, help="engine preset or JSON config file")
    p.add_argument("--store", choices=("memory", "sqlite"), default="memory", help="fresh store per conversation")
    p.add_argument("--date-style", default="locomo", help="date prefix of the baselines' turn texts")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap draws, at least 1 (default 1000)")
    p.add_argument("--reference", default=None, help="paired differences are taken against this system (default rrf, when run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-write-quality", action="store_true", help="skip candidate / edge recall")
    p.add_argument("--no-cache", action="store_true", help="no on-disk embedding cache for the dense baseline")
    p.add_argument("--engine-cache", action="store_true", help="cache the engine's embeddings too (hides their cost)")
    p.add_argument("--threads", type=int, default=1, help="torch / onnxruntime threads (default 1)")
    p.add_argument("--model-dir", default=None, help="the local controller's model directory (default: the committed model)")
    p.add_argument("--no-spin", action="store_true",
                   help="the local controller's onnxruntime threads sleep between calls instead of spinning (they then leave "
                        "the cores to embedding and retrieval)")
    p.add_argument("--max-turns", type=int, default=None,
                   help="quick / timing runs: first N turns per conversation and the questions they answer")
    p.set_defaults(func=cmd_eval)

    p = bench.add_parser("sweep", help="read-path variants on LoCoMo: each conversation written once, queried per variant")
    locomo_source(p)
    p.add_argument("--controller", default="heuristic", help="controller backend: heuristic (default) or local")
    p.add_argument("--config", default=None, help="base engine preset or JSON config file (the writes use it)")
    p.add_argument("--variants", required=True,
                   help='JSON object or file: variant name -> read-path overrides, e.g. {"as is": {}, "w2": {"relevance_weight": 2}}')
    p.add_argument("--k", type=int, default=20,
                   help=f"items per question, at least {SWEEP_SCORED_AT}: the table is scored @{SWEEP_SCORED_AT} (default 20)")
    p.add_argument("--embedder", choices=EMBEDDERS, default="minilm-tuned", help="the engine's embedder (cached on disk)")
    p.add_argument("--embedder-adapter", default=None, metavar="DIR",
                   help="the engine embeds with this LoRA retrieval adapter merged into the base MiniLM (instead of --embedder)")
    p.add_argument("--threads", type=int, default=1, help="torch / onnxruntime threads (default 1)")
    p.add_argument("--model-dir", default=None, help="the local controller's model directory (default: the committed model)")
    p.add_argument("--oracle-relevance", default="",
                   help="comma-separated relevance judges crossed with the variants: 'own' (the controller's answers), 'heuristic' "
                        "(the heuristic controller's), 'mean' (their average) or an oracle's AUROC in [0.5, 1] "
                        "(memory/evaluation/oracle.py; an evaluation instrument that reads gold)")
    p.set_defaults(func=cmd_sweep)

    p = bench.add_parser("compare", help="paired differences from saved `eval locomo --out` runs, against any system")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or their questions.jsonl), each given once")
    p.add_argument("--reference", required=True,
                   help="the system subtracted; a name met in several runs is NAME@RUN, RUN the run directory's name, with "
                        "as many parent directories as tell two runs apart (rrf@a/run and rrf@b/run for a/run and b/run)")
    p.add_argument("--draws", type=int, default=1000, help="bootstrap draws, at least 1 (default 1000, as `eval locomo`)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed, at least 0 (default 0, as `eval locomo`)")
    p.set_defaults(func=cmd_compare)

    p = bench.add_parser("first-stage", help="first-stage recall on LoCoMo per embedder: dense and fused seed rankings, no judge")
    locomo_source(p)
    p.add_argument("--embedder", nargs="+", choices=EMBEDDERS, default=["minilm", "minilm-tuned"],
                   help="embedders, one row each (default: minilm minilm-tuned)")
    p.add_argument("--adapter", nargs="+", action="extend", metavar="DIR",
                   help="a MiniLM retrieval adapter directory (`training.embedder`): one more row each")
    p.add_argument("--ks", nargs="+", type=int, default=[10, 30], help="recall cut-offs (default 10 30)")
    p.add_argument("--config", default=None, help="engine preset or JSON config file (shapes the fused ranking)")
    p.add_argument("--threads", type=int, default=1, help="torch / onnxruntime threads (default 1)")
    p.add_argument("--no-cache", action="store_true", help="no on-disk embedding cache ($JEVMEM_CACHE)")
    p.set_defaults(func=cmd_first_stage)


def _eval_conversations(args: argparse.Namespace) -> list[Any]:
    """The `--data` / `--audit` / `--conversations` of an eval command; an id not in the file is a usage error."""
    convs = load_locomo_file(args.data, audit=args.audit, conversations=tuple(args.conversations) if args.conversations else None)
    missing = sorted(set(args.conversations or ()) - {c.sample_id for c in convs})
    if missing:
        raise UsageError(f"conversation(s) not in {args.data}: {', '.join(map(repr, missing))}")
    return convs


def _checked_out(folder: str | None, force: bool = False) -> None:
    """`--out DIR`: created now and written to once, so a path that cannot take the report fails before the run; one
    that holds a report of an earlier run is refused unless `force` (the report would overwrite it)."""
    if folder is None:
        if force:
            raise UsageError("--force goes with --out (it lets the report overwrite an earlier one there)")
        return
    import tempfile

    _no_earlier_report(Path(folder), force)
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise UsageError(f"--out {folder} is not a writable directory ({error.strerror or error})") from error


def _no_earlier_report(folder: Path, force: bool) -> None:
    """`--out DIR` holds none of the files `write_report` writes (other files are left alone), or `force`."""
    from memory.evaluation.report import REPORT_FILES

    if not folder.is_dir():
        return
    taken = [name for name in REPORT_FILES if (folder / name).exists() or (folder / name).is_symlink()]
    for name in taken:
        if (folder / name).is_dir():  # not even --force replaces it: the write would fail after the whole run
            raise UsageError(f"--out {folder}: {name} is a directory, where the report writes a file")
    if taken and not force:
        raise UsageError(f"--out {folder} already holds {', '.join(taken)} of an earlier run; pass another directory, "
                         "or --force to overwrite them")


def _checked_model_dir(folder: str | None) -> None:
    """`--model-dir DIR`: a model directory has its config.json (what the local controller reads first)."""
    if folder is not None and not (Path(folder) / "config.json").is_file():
        raise UsageError(f"--model-dir {folder} holds no config.json (not a local controller model directory)")


def _at_least(args: argparse.Namespace, minimum: int, *names: str, why: str = "") -> None:
    """Each integer flag of `names` (a list flag: each of its values; an unset optional one: nothing) is >= `minimum`."""
    for name in names:
        value = getattr(args, name)
        for v in value if isinstance(value, list) else [value]:
            if v is not None and v < minimum:
                raise UsageError(f"--{name.replace('_', '-')} must be >= {minimum}, got {v}{f' ({why})' if why else ''}")


def _report_ks() -> tuple[int, ...]:
    """The recall cut-offs `eval locomo` scores (EvalConfig's ks): its --k must reach the largest."""
    from memory.evaluation import EvalConfig

    return EvalConfig().ks


def _read_variants(value: str) -> dict[str, Any]:
    """`--variants`: inline JSON (it starts with a bracket or a quote) or the path of a JSON file; an object."""
    if not value.strip():
        raise UsageError("--variants needs a JSON object or the path of a JSON file")
    text = value
    if not value.lstrip().startswith(("{", "[", '"')):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            raise UsageError(f"--variants {value}: cannot read the file ({reason})") from error
    try:
        variants = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"--variants is not valid JSON: {error}") from error
    if not isinstance(variants, dict):
        raise UsageError(f"--variants must be a JSON object: variant name -> {{config field: value}}, got {type(variants).__name__}")
    return variants


def _adapter_dir(args: argparse.Namespace) -> str | None:
    """`--embedder-adapter DIR`, checked (`checked_adapter`)."""
    folder = getattr(args, "embedder_adapter", None)
    return None if folder is None else checked_adapter(folder)


def cmd_eval(args: argparse.Namespace) -> int:
    from memory.evaluation import EvalConfig, run_locomo, to_markdown, write_report
    from memory.evaluation.harness import BASELINES, check_engine_systems

    ks = _report_ks()
    _at_least(args, max(ks), "k", why=f"the report scores recall at {', '.join(map(str, ks))} items")
    _at_least(args, 1, "bootstrap", "threads", "max_turns")
    _at_least(args, 0, "seed")
    if args.systems is not None and args.controller:
        raise UsageError("give either --systems or --controller, not both")
    controllers = args.controller or ["heuristic"]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()] if args.systems is not None else \
        ["bm25", "dense", "rrf", "bm25-stemmed", "rrf-stemmed", *(f"jevmem-{c}" for c in controllers)]
    if not systems:
        raise UsageError(f"--systems names no system (a comma list of {', '.join(BASELINES)}, jevmem-<controller>)")
    if args.reference is not None and args.reference not in systems:
        raise UsageError(f"--reference {args.reference} is not among the systems run: {', '.join(systems)}")
    _checked_model_dir(args.model_dir)
    convs = _eval_conversations(args)
    config = EvalConfig(
        systems=tuple(systems), date_style=args.date_style, baseline_embedder=args.baseline_embedder,
        engine_embedder=args.embedder, engine_adapter=_adapter_dir(args), engine_config=args.config, store=args.store, query_k=args.k,
        bootstrap_draws=args.bootstrap, seed=args.seed, write_quality=not args.no_write_quality, cache=not args.no_cache,
        engine_cache=args.engine_cache, threads=args.threads, max_turns=args.max_turns, model_dir=args.model_dir,
        spinning=not args.no_spin, reference_system=args.reference or "rrf",
    )
    check_engine_systems(config, {})  # run_locomo checks too; here so that a bad system leaves no --out directory
    _checked_out(args.out, args.force)
    report = run_locomo(convs, config, progress=_eval_progress)
    if args.out:
        paths = write_report(report, args.out)
        print(f"wrote {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    print(to_markdown(report))
    failed = [r.name for r in report.systems.values() if r.error]
    return 1 if failed else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from memory.evaluation import sweep
    from memory.evaluation.harness import _engine_config

    _at_least(args, SWEEP_SCORED_AT, "k", why=f"the sweep table scores R_frac, R_all and nDCG at {SWEEP_SCORED_AT} items")
    _at_least(args, 1, "threads")
    _checked_model_dir(args.model_dir)
    variants = _read_variants(args.variants)
    sweep.variant_configs(_engine_config(args.config), variants)  # every variant checked before the first write
    levels: list[Any] = []
    if args.oracle_relevance:
        from memory.evaluation.oracle import parse_levels

        try:
            levels = parse_levels(args.oracle_relevance)
        except ValueError as error:
            raise UsageError(f"--oracle-relevance: {error}") from error
    convs = _eval_conversations(args)
    result = sweep.sweep_locomo(convs, variants, controller=args.controller, config=args.config, embedder=args.embedder,
                                adapter=_adapter_dir(args), threads=args.threads, model_dir=args.model_dir, query_k=args.k, oracle_levels=levels)
    print(f"{args.controller} controller, base config {args.config or 'default'}, conversations "
          f"{', '.join(c.sample_id for c in convs)}")
    print(sweep.sweep_table(result.scores, result.relevance_auroc if levels else None, cost=result))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from memory.evaluation.compare import CompareError, compare, comparison_markdown, label_runs, read_scores, run_names

    _at_least(args, 1, "draws")
    _at_least(args, 0, "seed")
    try:
        names = run_names(args.runs)  # the same run twice is refused before any is read
        systems = label_runs([read_scores(Path(run)) for run in args.runs], names)
        result = compare(systems, args.reference, draws=args.draws, seed=args.seed)
    except CompareError as error:
        raise UsageError(str(error)) from error
    print(comparison_markdown(result))
    return 0


def cmd_first_stage(args: argparse.Namespace) -> int:
    from memory.evaluation.cache import CachedEmbedder
    from memory.evaluation.first_stage import first_stage_recall, format_table
    from memory.evaluation.harness import _embedder, _engine_config

    _at_least(args, 1, "ks", "threads")
    adapters = [checked_adapter(folder) for folder in dict.fromkeys(args.adapter or ())]
    convs = _eval_conversations(args)
    config = _engine_config(args.config)
    embedders: dict[str, Any] = {name: _embedder(name, not args.no_cache, args.threads) for name in dict.fromkeys(args.embedder)}
    for folder in adapters:  # named "minilm-adapted:<digest8>"
        embedders[f"adapter {folder}"] = _embedder("minilm", not args.no_cache, args.threads, folder)
    reports = {}
    for label, embedder in embedders.items():
        reports[label] = first_stage_recall(convs, embedder, ks=args.ks, config=config, progress=_eval_progress)
        if isinstance(embedder, CachedEmbedder):
            embedder.flush()
    print(f"first-stage R_frac@k, conversations {', '.join(c.sample_id for c in convs)}, config {args.config or 'default'}")
    print(format_table(reports))
    return 0


def _eval_progress(label: str, total: int) -> Any:
    from tqdm import tqdm

    bar = tqdm(total=total, desc=label, disable=not sys.stderr.isatty(), leave=False)

    def step() -> None:
        bar.update(1)
        if bar.n >= total:
            bar.close()

    return step


__all__ = ["add_eval_parser", "cmd_compare", "cmd_eval", "cmd_first_stage", "cmd_sweep"]
