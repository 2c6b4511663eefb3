"""Store micro-benchmark: `python -m memory.store.bench --nodes 5000 --dim 384` prints one row per store.

Synthetic data (random vectors, 20 random words per node, one edge per write); numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from memory.store.base import Store
from memory.store.inmemory import InMemoryStore
from memory.store.sqlite import SQLiteStore
from memory.types import Edge, EdgeOrigin, Node


def _nodes(n: int, rng: np.random.Generator) -> list[Node]:
    words = [f"w{i}" for i in range(3000)]
    return [
        Node(f"n{i}", " ".join(rng.choice(words, 20)), None, None, "s", (f"D{i}",), (f"e{i % 50}",), {}, "f", i)
        for i in range(n)
    ]


def _run(store: Store, nodes: list[Node], vecs: np.ndarray, queries: int) -> dict[str, float]:
    start = time.perf_counter()
    for i, node in enumerate(nodes):
        with store.transaction():
            store.add_node(node, vecs[i])
            if i:
                store.add_edge(Edge(node.id, nodes[i - 1].id, "temporal_next", EdgeOrigin.DETERMINISTIC))
    out = {"write_ms": (time.perf_counter() - start) / len(nodes) * 1e3}
    start = time.perf_counter()
    for i in range(queries):
        store.vector_search(vecs[i % len(nodes)], 10)
    out["vector_ms"] = (time.perf_counter() - start) / queries * 1e3
    start = time.perf_counter()
    for i in range(queries):
        store.text_search(nodes[i % len(nodes)].content[:30], 10)
    out["text_ms"] = (time.perf_counter() - start) / queries * 1e3
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    nodes = _nodes(args.nodes, rng)
    vecs = rng.standard_normal((args.nodes, args.dim)).astype(np.float32)
    header = ("store", "nodes", "dim", "write ms", "vector ms", "text ms", "reopen s", "rebuild s")
    print("{:10s} {:>6s} {:>4s} {:>9s} {:>10s} {:>8s} {:>9s} {:>10s}".format(*header))
    results = _run(InMemoryStore(args.dim), nodes, vecs, args.queries)
    print(f"{'inmemory':10s} {args.nodes:6d} {args.dim:4d} {results['write_ms']:9.2f} {results['vector_ms']:10.2f} "
          f"{results['text_ms']:8.2f} {'-':>9s} {'-':>10s}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        store = SQLiteStore(path, dim=args.dim)
        results = _run(store, nodes, vecs, args.queries)
        store.close()
        start = time.perf_counter()
        SQLiteStore(path, dim=args.dim).close()
        reopen = time.perf_counter() - start
        store.vectors_path.unlink()
        start = time.perf_counter()
        SQLiteStore(path, dim=args.dim).close()
        rebuild = time.perf_counter() - start
    print(f"{'sqlite':10s} {args.nodes:6d} {args.dim:4d} {results['write_ms']:9.2f} {results['vector_ms']:10.2f} "
          f"{results['text_ms']:8.2f} {reopen:9.2f} {rebuild:10.2f}")


if __name__ == "__main__":
    main()
