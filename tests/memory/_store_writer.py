"""Helper for the kill -9 test: writes nodes + edges in a loop, printing each committed node id.

Usage: python tests/memory/_store_writer.py DB_PATH FIRST_SEQ
"""

from __future__ import annotations

import sys

import numpy as np

from memory.store.sqlite import SQLiteStore
from memory.types import Edge, EdgeOrigin, LinkStatus, Node

DIM = 8


def main() -> None:
    path, first = sys.argv[1], int(sys.argv[2])
    store = SQLiteStore(path, dim=DIM)
    rng = np.random.default_rng(first)
    seq = first
    while True:  # runs until killed
        node_id = f"w{seq}"
        node = Node(
            id=node_id,
            content=f"written item {seq} about cats and topic{seq % 7}",
            observed_at=None,
            event_time=None,
            speaker="writer",
            source_ids=(f"D{seq}",),
            entities=(f"topic{seq % 7}",),
            types={"episodic": 0.5},
            fingerprint=f"fp{seq}",
            seq=seq,
            link_status=LinkStatus.RELATIONS_PENDING,
        )
        with store.transaction():
            store.add_node(node, rng.standard_normal(DIM).astype(np.float32))
            store.add_edge(Edge(node_id, f"w{seq - 1}", "temporal_next", EdgeOrigin.DETERMINISTIC))
            prev = f"w{seq - 1}"
            store.add_edge(Edge(node_id, prev, "semantic", EdgeOrigin.INFERRED, 0.9, f"fp{seq}", f"fp{seq - 1}"))
            store.set_link_status(node_id, LinkStatus.ASSESSED)
        sys.stdout.write(node_id + "\n")
        sys.stdout.flush()
        seq += 1


if __name__ == "__main__":
    main()
