"""`make demo`: ingest the bundled sample conversation, then answer a few queries showing route, evidence
and trace. Uses the shipped trained controller when the repo has one, else the heuristic one (said loudly).

    python -m serving.demo [--controller heuristic|local] [--embedder minilm-tuned|minilm|hashing]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

SAMPLE = Path(__file__).resolve().parent.parent / "data" / "samples" / "demo_conversation.jsonl"
QUERIES = (
    "When did Mira buy a new bicycle, and why?",
    "Where does Tomas's sister work?",
    "How many paintings had Mira finished for the exhibition by early June?",
    "What bread does Mira like?",
    "When is the gallery opening?",
)


def default_controller() -> str:
    from controller.artifacts import DEFAULT_MODEL_DIR

    return "local" if (DEFAULT_MODEL_DIR / "config.json").exists() else "heuristic"


def main(argv: list[str] | None = None) -> int:
    """Exit status 0; 2 with one line on stderr when the demo cannot run (no model, a broken embedder)."""
    from controller.embedding import EMBEDDERS
    from controller.errors import ControllerError
    from memory.errors import MemoryEngineError

    parser = argparse.ArgumentParser(prog="python -m serving.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--controller", choices=("heuristic", "local"), default=None)
    parser.add_argument("--embedder", choices=EMBEDDERS, default="minilm-tuned")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        return _demo(args)
    except BrokenPipeError:  # `python -m serving.demo | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("demo: interrupted", file=sys.stderr)
        return 130
    except (ControllerError, MemoryEngineError, OSError, ValueError) as error:
        print(f"demo: error: {error}", file=sys.stderr)
        return 2


def _demo(args: argparse.Namespace) -> int:
    from memory import Engine
    from memory.ingest import read_jsonl

    controller = args.controller or default_controller()
    if controller == "heuristic" and args.controller is None:
        print("NOTE: no trained controller is shipped in controller/models/ yet -> using the heuristic controller.")
    print(f"controller: {controller}   embedder: {args.embedder}   sample: {SAMPLE.name}\n")
    observations = list(read_jsonl(SAMPLE))
    with Engine.open(None, controller=controller, embedder=args.embedder) as engine:
        start = time.perf_counter()
        results = engine.write_many(observations)
        build = time.perf_counter() - start
        stats = engine.stats()
        questions = sum(r.controller_questions for r in results)
        print(f"ingested {len(results)} observations in {build:.2f} s "
              f"({1000 * build / max(1, len(results)):.0f} ms per write, {questions / max(1, len(results)):.1f} controller questions per write)")
        print(f"store: {stats}\n")
        for query in QUERIES:
            start = time.perf_counter()
            result = engine.query(query, k=5, answer=True)
            elapsed = 1000 * (time.perf_counter() - start)
            route = ", ".join(f"{name}={p:.2f}" for name, p in sorted(result.route.items(), key=lambda x: -x[1]))
            print(f"Q: {query}")
            print(f"   route: {route}")
            print(f"   active views: {', '.join(result.active_views)}; stopped: {result.stopped_reason}; "
                  f"{result.controller_requests} controller requests / {result.controller_questions} questions; {elapsed:.0f} ms")
            for rank, ev in enumerate(result.evidence, start=1):
                print(f"   {rank}. [{ev.score:.3f}] ({', '.join(ev.source_ids)}; {ev.via}, depth {ev.depth}) {ev.content}")
            print("   trace: " + " -> ".join(f"{step.phase}" for step in result.trace))
            if result.answer is not None:
                print(f"   answer ({result.answer_source}): {result.answer.splitlines()[0][:160]}")
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
