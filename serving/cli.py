"""The `jevmem` command line (also `python -m serving`):

    jevmem ingest --db PATH (--jsonl FILE | --locomo FILE [--conversation ID]) [--controller heuristic|local]
                  [--embedder hashing|minilm|minilm-tuned] [--config PRESET|FILE.json]
    jevmem query  --db PATH "text" [--k 10] [--answer] [--json]
    jevmem show   --db PATH NODE_ID
    jevmem relink --db PATH
    jevmem stats  --db PATH [--json]
    jevmem reembed --db PATH --embedder NAME [--force]   (convert a store to another embedder)
    jevmem eval locomo --data PATH [--audit PATH] [--conversations conv-26 ...] [--controller heuristic local]
                  [--systems bm25,dense,rrf,jevmem-heuristic] [--out DIR] ...
    jevmem eval sweep  --data PATH [--audit PATH] [--conversations ...] [--controller heuristic|local]
                  [--config PRESET|FILE.json] --variants '{"name": {read-path field: value}, ...}'
    jevmem eval compare RUN [RUN ...] --reference SYSTEM   (paired differences from saved `eval locomo --out` runs)
    jevmem eval first-stage --data PATH [--audit PATH] [--conversations conv-44 ...] [--embedder NAME ...]
                  [--adapter DIR ...] [--ks 10 30] [--config PRESET|FILE.json]   (seed-ranking recall per embedder)
    jevmem serve  [--host H] [--port P] [--controller NAME] [--db PATH [--embedder minilm]]

JSONL input: one object per line with `content` (or `text`) and optional `observed_at`, `event_time` (ISO 8601),
`speaker`, `source_ids`, `entities`, `metadata`. User errors print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

from controller.errors import ControllerError
from memory.errors import MemoryEngineError

log = logging.getLogger(__name__)

USER_ERRORS: tuple[type[BaseException], ...] = (ControllerError, MemoryEngineError, OSError, ValueError)
class UsageError(ValueError):
    """A command line that cannot be carried out as written."""


# ---------------------------------------------------------------------------------------------- helpers
def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    return value


def _dump(value: Any) -> None:
    print(json.dumps(_jsonable(value), indent=2, ensure_ascii=False))


def open_engine(args: argparse.Namespace, *, create: bool = False) -> Any:
    from memory.engine import Engine

    db = Path(args.db)
    if not create and not db.is_file():
        raise UsageError(f"no memory store at {db} (create one with `jevmem ingest --db {db} ...`)")
    from memory.store.sqlite_schema import stored_embedder

    embedder = args.embedder or stored_embedder(db) or "hashing"
    options = {"spinning": False} if args.controller == "local" and args.no_spin else {}
    return Engine.open(db, controller=args.controller, embedder=embedder, config=_engine_config(args.config), **options)


def _engine_config(value: str | None) -> Any:
    if value is None:
        return None
    from memory.config import EngineConfig

    return EngineConfig.from_json(Path(value)) if value.endswith(".json") else value


def _progress(total: int, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="obs", disable=not sys.stderr.isatty(), leave=False)


def _load_locomo(path: str, **options: Any) -> list[Any]:
    from data.locomo import load_locomo

    try:
        return load_locomo(path, **options)
    except (KeyError, TypeError, AttributeError, IndexError) as error:
        raise UsageError(f"{path} (or its audit file) does not look like LoCoMo data: {type(error).__name__} {error}") from error


def _eval_conversations(args: argparse.Namespace) -> list[Any]:
    """The `--data` / `--audit` / `--conversations` of an eval command; an id not in the file is a usage error."""
    convs = _load_locomo(args.data, audit=args.audit, conversations=tuple(args.conversations) if args.conversations else None)
    missing = sorted(set(args.conversations or ()) - {c.sample_id for c in convs})
    if missing:
        raise UsageError(f"conversation(s) not in {args.data}: {', '.join(missing)}")
    return convs


# ---------------------------------------------------------------------------------------------- commands
def cmd_ingest(args: argparse.Namespace) -> int:
    if args.jsonl:
        from memory.ingest import read_jsonl

        observations = list(read_jsonl(Path(args.jsonl)))
    else:
        from memory.ingest import locomo_observations

        wanted = (args.conversation,) if args.conversation else None
        convs = _load_locomo(args.locomo, conversations=wanted)
        if not convs:
            available = ", ".join(c.sample_id for c in _load_locomo(args.locomo))
            raise UsageError(f"no conversation {args.conversation!r} in {args.locomo} (available: {available})")
        if len(convs) > 1:
            raise UsageError(f"{args.locomo} holds {len(convs)} conversations; pick one with --conversation "
                             f"({', '.join(c.sample_id for c in convs)}): one memory per conversation")
        observations = locomo_observations(convs[0])
    with open_engine(args, create=True) as engine, _progress(len(observations), "ingest") as bar:
        pending = 0
        for obs in observations:
            result = engine.write(obs)
            pending += result.link_status.value == "relations_pending"
            bar.update(1)
        stats = engine.stats()
    print(f"ingested {len(observations)} observations into {args.db}: {stats.nodes} nodes, "
          f"{sum(stats.edges.values())} edges" + (f", {pending} pending relink" if pending else ""))
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        result = engine.query(args.text, k=args.k, answer=args.answer)
    if args.json:
        _dump(result)
        return 0
    route = ", ".join(f"{name} {p:.2f}" for name, p in sorted(result.route.items(), key=lambda x: -x[1]))
    print(f"route: {route}")
    print(f"active views: {', '.join(result.active_views) or '-'}; stopped: {result.stopped_reason}; "
          f"controller: {result.controller_requests} requests, {result.controller_questions} questions")
    for rank, e in enumerate(result.evidence, start=1):
        when = e.observed_at.isoformat(sep=" ", timespec="minutes") if e.observed_at else "-"
        sources = ",".join(e.source_ids) or "-"
        print(f"{rank:>3}. [{e.score:.3f}] {e.node_id} via {e.via} (depth {e.depth}) sources {sources} at {when}")
        print(f"     {e.content}")
    print("trace:")
    for step in result.trace:
        detail = json.dumps(_jsonable(step.detail), ensure_ascii=False)
        print(f"  {step.phase:<7} {step.elapsed_ms:8.1f} ms  {detail[:200]}")
    if result.answer is not None:
        print(f"answer ({result.answer_source}):\n{result.answer}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        view = engine.get(args.node_id)
    if args.json:
        _dump(view)
        return 0
    n = view.node
    print(f"{n.id} ({n.kind}, seq {n.seq}, {n.link_status.value})")
    print(f"  content:   {n.content}")
    print(f"  speaker:   {n.speaker or '-'}; observed {n.observed_at or '-'}; event {n.event_time or '-'}")
    print(f"  sources:   {', '.join(n.source_ids) or '-'}; entities: {', '.join(n.entities) or '-'}")
    print("  types:     " + (", ".join(f"{k} {v:.2f}" for k, v in n.types.items()) or "-"))
    if n.superseded_by:
        print(f"  superseded by {n.superseded_by}")
    for title, edges, other in (("edges", view.edges_out, "dst"), ("backlinks", view.backlinks, "src")):
        print(f"  {title} ({len(edges)}):")
        for e in edges:
            attrs = f" {json.dumps(e.attrs)}" if e.attrs else ""
            print(f"    {e.relation:<18} {getattr(e, other)}  {e.origin.value} w={e.weight:.2f}{attrs}")
    return 0


def cmd_relink(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        report = engine.relink()
    print(f"assessed {report.assessed} nodes, wrote {report.edges_written} inferred edges, "
          f"{report.controller_questions} controller questions; {len(report.pending)} still pending")
    for node_id, reason in report.errors.items():
        print(f"  pending {node_id}: {reason}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        stats = engine.stats()
    if args.json:
        _dump(stats)
        return 0
    print(f"nodes: {stats.nodes}; summaries: {stats.summaries}")
    print("edges: " + (", ".join(f"{k} {v}" for k, v in sorted(stats.edges.items())) or "none"))
    print("link status: " + ", ".join(f"{k} {v}" for k, v in stats.link_status.items() if v))
    return 0


def _adapter_dir(args: argparse.Namespace) -> str | None:
    """`--embedder-adapter DIR`, checked (`_checked_adapter`)."""
    folder = getattr(args, "embedder_adapter", None)
    return None if folder is None else _checked_adapter(folder)


def _checked_adapter(folder: str) -> str:
    """An adapter directory given on the command line, checked before any run: a usage error, not a traceback."""
    from controller.adapters import adapter_digest

    adapter_digest(folder)  # ArtifactError (a user error) naming the missing file
    return str(folder)


def cmd_reembed(args: argparse.Namespace) -> int:
    from controller.embedding import create_embedder
    from memory.reembed import reembed

    db = Path(args.db)
    if not db.is_file():
        raise UsageError(f"no memory store at {db}")
    result = reembed(db, create_embedder(args.embedder), batch_size=args.batch_size, force=args.force)
    if args.json:
        _dump(result)
    elif result.changed:
        print(f"re-embedded {result.nodes} nodes of {db}: {result.before or 'unrecorded'} -> {result.after} ({result.seconds:.1f} s)")
    else:
        print(f"{db} is already embedded with {result.after} ({result.nodes} nodes); nothing to do (--force re-embeds)")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from memory.evaluation import EvalConfig, run_locomo, to_markdown, write_report

    if args.systems and args.controller:
        raise UsageError("give either --systems or --controller, not both")
    controllers = args.controller or ["heuristic"]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()] if args.systems else \
        ["bm25", "dense", "rrf", "bm25-stemmed", "rrf-stemmed", *(f"jevmem-{c}" for c in controllers)]
    if args.reference is not None and args.reference not in systems:
        raise UsageError(f"--reference {args.reference} is not among the systems run: {', '.join(systems)}")
    convs = _eval_conversations(args)
    config = EvalConfig(
        systems=tuple(systems), date_style=args.date_style, baseline_embedder=args.baseline_embedder,
        engine_embedder=args.embedder, engine_adapter=_adapter_dir(args), engine_config=args.config, store=args.store, query_k=args.k,
        bootstrap_draws=args.bootstrap, seed=args.seed, write_quality=not args.no_write_quality, cache=not args.no_cache,
        engine_cache=args.engine_cache, threads=args.threads, max_turns=args.max_turns, model_dir=args.model_dir,
        spinning=not args.no_spin, reference_system=args.reference or "rrf",
    )
    report = run_locomo(convs, config, progress=_eval_progress)
    if args.out:
        paths = write_report(report, args.out)
        print(f"wrote {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    print(to_markdown(report))
    failed = [r.name for r in report.systems.values() if r.error]
    return 1 if failed else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from memory.evaluation.sweep import sweep_locomo, sweep_table

    text = args.variants if args.variants.lstrip().startswith("{") else Path(args.variants).read_text(encoding="utf-8")
    try:
        variants = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"--variants is not valid JSON: {error}") from error
    if not isinstance(variants, dict):
        raise UsageError("--variants must be a JSON object: variant name -> {config field: value}")
    levels: list[Any] = []
    if args.oracle_relevance:
        from memory.evaluation.oracle import parse_levels

        try:
            levels = parse_levels(args.oracle_relevance)
        except ValueError as error:
            raise UsageError(f"--oracle-relevance: {error}") from error
    convs = _eval_conversations(args)
    result = sweep_locomo(convs, variants, controller=args.controller, config=args.config, embedder=args.embedder,
                          adapter=_adapter_dir(args), threads=args.threads, model_dir=args.model_dir, query_k=args.k, oracle_levels=levels)
    print(f"{args.controller} controller, base config {args.config or 'default'}, conversations "
          f"{', '.join(c.sample_id for c in convs)}")
    print(sweep_table(result.scores, result.relevance_auroc if levels else None, cost=result))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from memory.evaluation.compare import CompareError, compare, comparison_markdown, label_runs, read_scores

    try:
        runs = [read_scores(Path(run)) for run in args.runs]
        systems = label_runs(runs, [Path(run).name if Path(run).is_dir() else Path(run).parent.name for run in args.runs])
        result = compare(systems, args.reference, draws=args.draws, seed=args.seed)
    except CompareError as error:
        raise UsageError(str(error)) from error
    print(comparison_markdown(result))
    return 0


def cmd_first_stage(args: argparse.Namespace) -> int:
    from memory.evaluation.cache import CachedEmbedder
    from memory.evaluation.first_stage import first_stage_recall, format_table
    from memory.evaluation.harness import _embedder, _engine_config

    if args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    adapters = [_checked_adapter(folder) for folder in dict.fromkeys(args.adapter or ())]
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


def cmd_serve(args: argparse.Namespace) -> int:
    from serving.server import run

    overrides = {k: v for k, v in (("memory_db", args.db), ("embedder", args.embedder)) if v is not None}
    run(args.host, args.port, args.controller, **overrides)
    return 0


# ---------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    from controller.embedding import EMBEDDERS

    parser = argparse.ArgumentParser(prog="jevmem", description="Jev-Mem: offline agent memory with a local System One controller.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def engine_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--db", required=True, help="the SQLite memory store")
        p.add_argument("--controller", default="heuristic", help="controller backend: heuristic (default) or local")
        p.add_argument("--embedder", choices=EMBEDDERS, default=None,
                       help="embedder (default: the one the store was built with, else hashing)")
        p.add_argument("--config", default=None, help="engine preset (default, fast, thorough) or a JSON config file")
        p.add_argument("--no-spin", action="store_true",
                       help="local controller: onnxruntime threads sleep between calls instead of spinning (measured faster "
                            "in process on 2 cores, where embedding and retrieval share the cores)")

    p = sub.add_parser("ingest", help="write observations into a store")
    engine_options(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--jsonl", help="one observation per line")
    source.add_argument("--locomo", help="a LoCoMo JSON file (turns only; never qa / summaries)")
    p.add_argument("--conversation", help="LoCoMo sample id, e.g. conv-26 (required when the file holds several)")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("query", help="retrieve evidence for a query")
    engine_options(p)
    p.add_argument("text")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--answer", action="store_true", help="also answer (System Two when configured, else extractive)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("show", help="a node with its edges and backlinks")
    engine_options(p)
    p.add_argument("node_id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)

    for name, func, text in (("relink", cmd_relink, "re-run pending and stale judgments"), ("stats", cmd_stats, "store statistics")):
        p = sub.add_parser(name, help=text)
        engine_options(p)
        if name == "stats":
            p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)

    p = sub.add_parser("reembed", help="convert a store to another embedder (every node embedded again)")
    p.add_argument("--db", required=True, help="SQLite store file")
    p.add_argument("--embedder", required=True, choices=EMBEDDERS, help="the embedder to convert to")
    p.add_argument("--batch-size", type=int, default=256, help="texts per embedding call")
    p.add_argument("--force", action="store_true", help="re-embed even when the store already records this embedder")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_reembed)

    p = sub.add_parser("eval", help="benchmarks")
    bench = p.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    def locomo_source(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data", required=True, help="LoCoMo JSON file")
        p.add_argument("--audit", help="audit file with corrected evidence")
        p.add_argument("--conversations", nargs="+", metavar="ID", help="sample ids (default: all in the file)")

    p = bench.add_parser("locomo", help="retrieval on LoCoMo: flat baselines and Jev-Mem in one run")
    locomo_source(p)
    p.add_argument("--controller", nargs="+", help="Jev-Mem controllers to run beside the baselines (default: heuristic)")
    p.add_argument("--systems", help="comma list of bm25, dense, rrf, jevmem-<controller>")
    p.add_argument("--out", help="directory for report.json, questions.jsonl and report.md")
    p.add_argument("--k", type=int, default=20, help="items per question for every system (default 20)")
    p.add_argument("--embedder", choices=EMBEDDERS, default="minilm-tuned", help="the engine's embedder")
    p.add_argument("--embedder-adapter", default=None, metavar="DIR",
                   help="the engine embeds with this LoRA retrieval adapter merged into the base MiniLM (instead of --embedder)")
    p.add_argument("--baseline-embedder", choices=EMBEDDERS, default="minilm", help="the dense baseline's embedder")
    p.add_argument("--config", default=None, help="engine preset or JSON config file")
    p.add_argument("--store", choices=("memory", "sqlite"), default="memory", help="fresh store per conversation")
    p.add_argument("--date-style", default="locomo", help="date prefix of the baselines' turn texts")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap draws (default 1000)")
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
    p.add_argument("--k", type=int, default=20, help="items per question (default 20)")
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
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or their questions.jsonl)")
    p.add_argument("--reference", required=True,
                   help="the system subtracted; a name met in several runs is NAME@RUN (the directory's name)")
    p.add_argument("--draws", type=int, default=1000, help="bootstrap draws (default 1000, as `eval locomo`)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0, as `eval locomo`)")
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

    p = sub.add_parser("serve", help="the HTTP server (TypeSafe wire protocol + memory API)")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--controller", default=None, help="controller backend name")
    p.add_argument("--db", default=None, help="SQLite memory store: mounts the memory API (JEVMEM_MEMORY_DB)")
    p.add_argument("--embedder", default=None, choices=EMBEDDERS, help="the memory store's embedder (JEVMEM_EMBEDDER)")
    p.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `jevmem ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("jevmem: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as error:
        if args.verbose >= 2:
            raise
        print(f"jevmem {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
