"""`jevmem ingest`: write a JSONL file or one LoCoMo conversation into a store.

    jevmem ingest --db PATH (--jsonl FILE | --locomo FILE [--conversation ID]) [--batch-size N] [--skip N] ...

The whole input is read and checked first (a bad record anywhere stores nothing, and names its line). Then:

- by default the file is written all or nothing in one store transaction (`Engine.write_many`): after any error the
  store holds none of it and the same command can be run again. That transaction holds SQLite's write lock for the
  whole ingest, so every other writer of the database (a `jevmem serve` on it) waits until it ends;
- with `--batch-size N` the records are written in committed batches of N, so other writers get the lock between
  batches. After a failure the batches before it are kept: the error says exactly which records are stored
  (records 1..k, with the line or LoCoMo turn of record k) and to resume with `--skip k`, which skips the first k
  records of the input (blank lines do not count), so the rerun stores each record once.

Ctrl-C takes effect where the count of stored records is exact: after the record in progress (the batch it belongs to
rolls back), or, when it comes while a batch commits, before the next batch starts; the message then says which
records are stored, as after a failure. A second Ctrl-C stops at once.

A resumed run is a new engine: the records it writes are linked to everything stored, but its consolidation counts
writes from the resumed record, so its summaries may fall at other records than one uninterrupted run's.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.errors import ControllerError
from memory.errors import MemoryEngineError
from memory.types import Observation, WriteResult
from serving.cli_common import CommandError, UsageError, checked_db, load_locomo_file, open_engine, progress_bar


@dataclass(frozen=True)
class Record:
    observation: Observation
    where: str  # "line 12" (JSONL) or "turn D3:4" (LoCoMo), for messages


def add_ingest_parser(sub: Any, engine_options: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("ingest", help="write observations into a store")
    engine_options(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--jsonl", help="one observation per line")
    source.add_argument("--locomo", help="a LoCoMo JSON file (turns only; never qa / summaries)")
    p.add_argument("--conversation", help="LoCoMo sample id, e.g. conv-26 (required when the file holds several)")
    p.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="write in committed batches of N records, releasing the store's write lock between them "
                        "(default: the whole file in one all-or-nothing transaction)")
    p.add_argument("--skip", type=int, default=0, metavar="N",
                   help="skip the first N records of the input: resume a batched ingest that stored records 1..N")
    p.set_defaults(func=cmd_ingest)


def cmd_ingest(args: argparse.Namespace) -> int:
    db = checked_db(args.db)
    source = args.jsonl or args.locomo
    if Path(source).is_dir():
        raise UsageError(f"--{'jsonl' if args.jsonl else 'locomo'} {source} is a directory, not a file")
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size must be a whole number >= 1, got {args.batch_size}")
    if args.skip < 0:
        raise UsageError(f"--skip must be a whole number >= 0, got {args.skip}")
    records = _jsonl_records(args) if args.jsonl else _locomo_records(args)
    if args.skip and args.skip >= len(records):
        raise UsageError(f"--skip {args.skip} skips every record of {source} (it holds {len(records)}): nothing to ingest")
    todo = records[args.skip:]
    mode = "all or nothing" if args.batch_size is None else f"batches of {args.batch_size}"
    with open_engine(args, create=True, db=db) as engine, progress_bar(len(records), f"ingest ({mode})",
                                                                    initial=args.skip) as bar, interrupt_at_records() as stop:
        if args.batch_size is None:
            results = _write_whole(engine, todo, bar, source, db, args.skip, stop)
        else:
            results = _write_batches(engine, todo, bar, source, db, args.skip, args.batch_size, stop)
        pending = sum(r.link_status.value == "relations_pending" for r in results)
        stats = engine.stats()
    skipped = f" (records {args.skip + 1}..{len(records)}; the first {args.skip} skipped)" if args.skip else ""
    print(f"ingested {len(todo)} observations{skipped} into {db}: {stats.nodes} nodes, "
          f"{sum(stats.edges.values())} edges" + (f", {pending} pending relink" if pending else ""))
    return 0


def _jsonl_records(args: argparse.Namespace) -> list[Record]:
    from memory.ingest import read_jsonl_lines

    if args.conversation is not None:
        raise UsageError("--conversation goes with --locomo (a JSONL file is one memory)")
    records = [Record(obs, f"line {line}") for line, obs in read_jsonl_lines(Path(args.jsonl))]
    if not records:
        raise UsageError(f"{args.jsonl} holds no observations (no store was created or changed)")
    return records


def _locomo_records(args: argparse.Namespace) -> list[Record]:
    from memory.ingest import locomo_observations

    if args.conversation is not None and not args.conversation.strip():
        raise UsageError("--conversation needs a LoCoMo sample id (e.g. conv-26), not a blank value")
    wanted = (args.conversation,) if args.conversation is not None else None
    convs = load_locomo_file(args.locomo, conversations=wanted)
    if not convs:
        available = ", ".join(c.sample_id for c in load_locomo_file(args.locomo))
        raise UsageError(f"no conversation {args.conversation!r} in {args.locomo} (available: {available})")
    if len(convs) > 1:
        raise UsageError(f"{args.locomo} holds {len(convs)} conversations; pick one with --conversation "
                         f"({', '.join(c.sample_id for c in convs)}): one memory per conversation")
    return [Record(obs, f"turn {', '.join(obs.source_ids)}") for obs in locomo_observations(convs[0])]


@contextmanager
def interrupt_at_records() -> Iterator[Callable[[], None]]:
    """Ctrl-C (SIGINT) only marks the ingest as stopped; the check yielded raises KeyboardInterrupt where the stored
    count is known (between records, inside the batch's transaction, so the batch rolls back; before a batch). A
    second Ctrl-C interrupts at once. Off the main thread, where no handler can be set, Ctrl-C is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    asked: list[int] = []

    def on_interrupt(signum: int, frame: Any) -> None:
        if asked:
            raise KeyboardInterrupt
        asked.append(signum)
        print("\njevmem ingest: stopping after the record in progress (Ctrl-C again to stop at once)", file=sys.stderr)

    def check() -> None:
        if asked:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, previous)


def _progress(bar: Any, offset: int, stop: Callable[[], None]) -> Callable[[int], None]:
    def advance(done: int) -> None:
        bar.update(offset + done - bar.n)
        stop()

    return advance


def _write_whole(engine: Any, todo: list[Record], bar: Any, source: str, db: Path, skip: int,
                 stop: Callable[[], None]) -> list[WriteResult]:
    """One all-or-nothing batch (`Engine.write_many`)."""
    what = f"nothing from {source}" if not skip else f"none of records {skip + 1}..{skip + len(todo)} of {source}"
    try:
        return list(engine.write_many([r.observation for r in todo], progress=_progress(bar, skip, stop)))
    except MemoryEngineError as error:
        raise CommandError(f"{what} was stored in {db} (the whole file is written or none of it; fix the cause and run "
                           f"the same command again): {error}") from error
    except KeyboardInterrupt:
        print(f"jevmem ingest: {what} was stored in {db}; run the same command again to ingest it", file=sys.stderr)
        raise


def _write_batches(engine: Any, todo: list[Record], bar: Any, source: str, db: Path, skip: int,
                   size: int, stop: Callable[[], None]) -> list[WriteResult]:
    """Committed batches of `size`; a failure says which records are stored and how to resume."""
    results: list[WriteResult] = []
    for start in range(0, len(todo), size):
        batch = todo[start : start + size]
        try:
            stop()  # a Ctrl-C that came while the batch before committed
            results += engine.write_many([r.observation for r in batch], progress=_progress(bar, skip + start, stop))
        except (MemoryEngineError, ControllerError) as error:
            raise CommandError(_resume_message(todo, source, db, skip, start, error)) from error
        except BaseException:  # interrupted (Ctrl-C) or unexpected: say what is stored before it propagates
            print(f"jevmem ingest: {_resume_message(todo, source, db, skip, start, None)}", file=sys.stderr)
            raise
    return results


def _resume_message(todo: list[Record], source: str, db: Path, skip: int, start: int, error: BaseException | None) -> str:
    """Which records are stored (1..k: the skipped ones and the committed batches), which is not, and how to resume."""
    stored = skip + start
    failed = todo[start]
    if stored == 0:
        kept = f"nothing from {source} was stored in {db}"
    else:
        last = todo[start - 1].where if start else f"the {skip} skipped by --skip"
        kept = f"records 1..{stored} of {source} are stored in {db} (through {last})"
    cause = f": {error}" if error is not None else ""
    return (f"{kept}; record {stored + 1} ({failed.where}) and the rest were not{cause}. To resume without duplicates, "
            f"fix the cause and run the same command with --skip {stored}")
