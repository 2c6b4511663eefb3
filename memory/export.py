"""A store's observations as JSONL records that `jevmem ingest --jsonl` (`memory.ingest`) reads back: the way to move
a memory to another controller, embedder or engine version, or to keep a plain-text copy.

Each observation node (summaries are derived, and are made again by the engine that ingests the records) becomes one
JSON object in seq order: `content`, and where present `speaker`, `source_ids`, `observed_at`, `event_time`,
`entities` (only the names a writer gave; extracted ones are extracted again) and `metadata` (the writer's keys; the
engine's own bookkeeping keys are left out). What an export does not carry: edges (the ingesting engine judges and
derives its own), authored links and refused links (`ExportReport` counts them, so a caller can say so), node ids,
and the type scores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TextIO

from memory.store.base import Store
from memory.types import EdgeOrigin, Node
from memory.write_path import RESERVED_METADATA, refusals


@dataclass(frozen=True)
class ExportReport:
    observations: int  # records written
    summaries: int  # summary nodes left out
    authored_edges: int  # explicit (user-authored) edges not carried by the records
    refused_links: int  # links a user removed (`unlink`) that the records do not remember


def node_record(node: Node) -> dict[str, Any]:
    """One observation node as an ingest record (`memory.ingest.observation_from_record` reads it back)."""
    record: dict[str, Any] = {"content": node.content}
    if node.speaker is not None:
        record["speaker"] = node.speaker
    if node.source_ids:
        record["source_ids"] = list(node.source_ids)
    for name in ("observed_at", "event_time"):
        value = getattr(node, name)
        if value is not None:
            record[name] = value.isoformat()
    if node.metadata.get("entities_given"):
        record["entities"] = list(node.entities)
    metadata = {k: v for k, v in node.metadata.items() if k not in RESERVED_METADATA}
    if metadata:
        record["metadata"] = metadata
    return record


def export_jsonl(store: Store, out: TextIO) -> ExportReport:
    """Write every observation node of `store` to `out` as JSONL, in seq order (`node_record`); what was left out is
    counted in the report."""
    observations = summaries = authored = 0
    refused: set[tuple[str, str, str]] = set()  # recorded on both nodes of a link: counted once
    for node in sorted(store.iter_nodes(), key=lambda n: n.seq):
        if node.kind != "observation":
            summaries += 1
            continue
        out.write(json.dumps(node_record(node), ensure_ascii=False, sort_keys=True) + "\n")
        observations += 1
        authored += sum(e.origin is EdgeOrigin.EXPLICIT for e in store.edges_from(node.id))
        refused |= refusals(node)
    return ExportReport(observations, summaries, authored, len(refused))


__all__ = ["ExportReport", "export_jsonl", "node_record"]
