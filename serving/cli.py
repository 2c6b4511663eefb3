"""The `jevmem` command line (also `python -m serving`):

    jevmem ingest --db PATH (--jsonl FILE | --locomo FILE [--conversation ID]) [--controller heuristic|local]
                  [--embedder hashing|minilm|minilm-tuned] [--config PRESET|FILE.json] [--batch-size N] [--skip N]
    jevmem query  --db PATH "text" [--k 10] [--answer] [--json]
    jevmem show   --db PATH NODE_ID
    jevmem relink --db PATH
    jevmem stats  --db PATH [--json]
    jevmem reembed --db PATH --embedder NAME [--force]   (convert a store to another embedder)
    jevmem export --db PATH --jsonl FILE|- [--force]      (its observations as ingest JSONL)
    jevmem eval locomo --data PATH [--audit PATH] [--conversations conv-26 ...] [--controller heuristic local]
                  [--systems bm25,dense,rrf,jevmem-heuristic] [--out DIR] ...
    jevmem eval sweep  --data PATH [--audit PATH] [--conversations ...] [--controller heuristic|local]
                  [--config PRESET|FILE.json] --variants '{"name": {read-path field: value}, ...}'
    jevmem eval compare RUN [RUN ...] --reference SYSTEM   (paired differences from saved `eval locomo --out` runs)
    jevmem eval first-stage --data PATH [--audit PATH] [--conversations conv-44 ...] [--embedder NAME ...]
                  [--adapter DIR ...] [--ks 10 30] [--config PRESET|FILE.json]   (seed-ranking recall per embedder)
    jevmem serve  [--host H] [--port P] [--controller NAME] [--db PATH [--embedder minilm]]

JSONL input: one object per line with `content` (or `text`) and optional `observed_at`, `event_time` (ISO 8601),
`speaker`, `source_ids`, `entities`, `metadata`. `ingest` checks the whole file first and then writes it all or
nothing (`Engine.write_many`): after any error the store holds none of the file, so the same command can be run
again; `--batch-size N` commits every N records instead, and a failure says how to resume (`--skip`, `cli_ingest`).
User errors print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

from controller.errors import ControllerError
from memory.errors import MemoryEngineError
from serving.cli_common import CommandError, UsageError, checked_db, existing_store, open_engine, progress_bar
from serving.cli_eval import add_eval_parser
from serving.cli_ingest import add_ingest_parser

log = logging.getLogger(__name__)

USER_ERRORS: tuple[type[BaseException], ...] = (CommandError, ControllerError, MemoryEngineError, OSError, ValueError)


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
    """`--json` output: UTF-8 JSON, with the characters that would act on a terminal as `\\uXXXX` escapes (the
    same JSON value; `json.dumps` escapes only those below U+0020)."""
    text = json.dumps(_jsonable(value), indent=2, ensure_ascii=False)
    print(_UNSHOWN.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


# Characters that would act on the terminal instead of showing: C0 and C1 controls but tab and newline (ESC starts
# the sequences that recolour, move the cursor or set the window title), DEL, and the bidirectional overrides and
# isolates that reorder what is shown.
_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(text: str, indent: str = "") -> str:
    """Stored text as the human-readable output prints it: characters that would act on the terminal are written as
    escapes (`\\x1b`, `\\u202e`), and each further line is indented by `indent`. `--json` output is JSON-escaped
    instead."""
    safe = _UNSHOWN.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    return safe.replace("\n", "\n" + indent) if indent else safe


# ---------------------------------------------------------------------------------------------- commands
def cmd_query(args: argparse.Namespace) -> int:
    if args.k < 1:
        raise UsageError(f"--k must be a whole number >= 1 (how many evidence items to return), got {args.k}")
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
        sources = _shown(",".join(e.source_ids)) or "-"
        print(f"{rank:>3}. [{e.score:.3f}] {e.node_id} via {e.via} (depth {e.depth}) sources {sources} at {when}")
        print(f"     {_shown(e.content, '     ')}")
    print("trace:")
    for step in result.trace:
        detail = _shown(json.dumps(_jsonable(step.detail), ensure_ascii=False))
        print(f"  {step.phase:<7} {step.elapsed_ms:8.1f} ms  {detail[:200]}")
    if result.answer is not None:
        print(f"answer ({result.answer_source}):\n{_shown(result.answer)}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        view = engine.get(args.node_id)
    if args.json:
        _dump(view)
        return 0
    n = view.node
    print(f"{n.id} ({n.kind}, seq {n.seq}, {n.link_status.value})")
    print(f"  content:   {_shown(n.content, ' ' * 13)}")
    print(f"  speaker:   {_shown(n.speaker or '-')}; observed {n.observed_at or '-'}; event {n.event_time or '-'}")
    print(f"  sources:   {_shown(', '.join(n.source_ids)) or '-'}; entities: {_shown(', '.join(n.entities)) or '-'}")
    print("  types:     " + (", ".join(f"{_shown(k)} {v:.2f}" for k, v in n.types.items()) or "-"))
    if n.superseded_by:
        print(f"  superseded by {n.superseded_by}")
    for title, edges, other in (("edges", view.edges_out, "dst"), ("backlinks", view.backlinks, "src")):
        print(f"  {title} ({len(edges)}):")
        for e in edges:
            attrs = f" {json.dumps(e.attrs)}" if e.attrs else ""  # ASCII-escaped JSON
            print(f"    {e.relation:<18} {getattr(e, other)}  {e.origin.value} w={e.weight:.2f}{attrs}")
    return 0


def cmd_relink(args: argparse.Namespace) -> int:
    """Each node is committed on its own: a failure says how many were relinked before it (they are kept), and
    running the command again takes the rest."""
    done = [0, 0]  # nodes relinked (committed), nodes to relink

    def advance(count: int, total: int) -> None:
        done[:] = [count, total]
        bar.total = total
        bar.update(count - bar.n)

    with open_engine(args) as engine, progress_bar(0, "relink", unit="node") as bar:
        try:
            report = engine.relink(progress=advance)
        except (MemoryEngineError, ControllerError) as error:
            raise CommandError(f"relinked {done[0]} of {done[1]} nodes before this failure (they are saved; run `jevmem "
                               f"relink` again for the rest, which is safe): {error}") from error
    print(f"assessed {report.assessed} nodes, wrote {report.edges_written} inferred edges, "
          f"{report.controller_questions} controller questions; {len(report.pending)} still pending")
    for node_id, reason in report.errors.items():
        print(f"  pending {node_id}: {_shown(reason)}")
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


def cmd_reembed(args: argparse.Namespace) -> int:
    from controller.embedding import create_embedder
    from memory.reembed import reembed

    db = checked_db(args.db)
    existing_store(db)
    result = reembed(db, create_embedder(args.embedder), batch_size=args.batch_size, force=args.force)
    if args.json:
        _dump(result)
    elif result.changed:
        print(f"re-embedded {result.nodes} nodes of {db}: {result.before or 'unrecorded'} -> {result.after} ({result.seconds:.1f} s)")
    else:
        print(f"{db} is already embedded with {result.after} ({result.nodes} nodes); nothing to do (--force re-embeds)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """The store's observations as ingest JSONL (`memory.export`), read under the store's write lock so the file is
    one consistent snapshot; a file is written whole (renamed into place) or not at all."""
    from controller.files import atomic_file

    to_stdout = args.jsonl == "-"
    target = Path(args.jsonl)
    if not to_stdout:
        if not args.jsonl.strip() or target.is_dir():
            raise UsageError(f"--jsonl needs a file path (or - for standard output), got {args.jsonl!r}")
        if target.exists() and not args.force:
            raise UsageError(f"--jsonl {target} exists; pass another file, or --force to replace it")
    with open_engine(args) as engine:
        if to_stdout:
            report = engine.export(sys.stdout)
        else:
            with atomic_file(target) as tmp, tmp.open("w", encoding="utf-8") as handle:
                report = engine.export(handle)
    left_out = [f"{n} {what}" for n, what in ((report.summaries, "summaries (derived; the ingesting engine makes its own)"),
                                              (report.authored_edges, "authored edges"),
                                              (report.refused_links, "refused links")) if n]
    where = "standard output" if to_stdout else str(target)
    print(f"exported {report.observations} observations of {args.db} to {where}"
          + (f"; not carried: {', '.join(left_out)}" if left_out else ""), file=sys.stderr)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from serving.server import run

    if args.embedder is not None and args.db is None and not os.environ.get("JEVMEM_MEMORY_DB", "").strip():
        raise UsageError("--embedder is the memory store's embedder: it goes with --db (or JEVMEM_MEMORY_DB)")
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
                       help="embedder (default: the one the store was built with, else minilm-tuned)")
        p.add_argument("--config", default=None, help="engine preset (default, fast, thorough) or a JSON config file")
        p.add_argument("--no-spin", action="store_true",
                       help="local controller: onnxruntime threads sleep between calls instead of spinning (measured faster "
                            "in process on 2 cores, where embedding and retrieval share the cores)")

    add_ingest_parser(sub, engine_options)

    p = sub.add_parser("query", help="retrieve evidence for a query")
    engine_options(p)
    p.add_argument("text")
    p.add_argument("--k", type=int, default=10, help="evidence items to return (default 10)")
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

    p = sub.add_parser("export", help="the store's observations as JSONL that `ingest --jsonl` reads back")
    engine_options(p)
    p.add_argument("--jsonl", required=True, help="the file to write (- for standard output)")
    p.add_argument("--force", action="store_true", help="replace an existing --jsonl file")
    p.set_defaults(func=cmd_export)

    add_eval_parser(sub)

    p = sub.add_parser("serve", help="the HTTP server (TypeSafe wire protocol + memory API)")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--controller", default=None, help="controller backend: heuristic (the default, JEVMEM_CONTROLLER), local or remote")
    p.add_argument("--db", default=None, help="SQLite memory store: mounts the memory API (JEVMEM_MEMORY_DB)")
    p.add_argument("--embedder", default=None, choices=EMBEDDERS, help="the memory store's embedder (JEVMEM_EMBEDDER; default: the one the store was built with, else minilm-tuned)")
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
