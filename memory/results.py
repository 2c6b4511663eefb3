"""Result types of the engine facade that `memory/types.py` does not already define."""

from __future__ import annotations

from dataclasses import dataclass, field

from memory.types import Edge, LinkStatus, Node


@dataclass(frozen=True)
class NodeView:
    """A node with its outgoing edges and its backlinks (a reverse view of stored edges, never copies)."""

    node: Node
    edges_out: tuple[Edge, ...]
    backlinks: tuple[Edge, ...]


@dataclass(frozen=True)
class RelinkReport:
    assessed: int  # nodes whose pair judgments ran (status assessed)
    edges_written: int  # inferred edges written
    statuses: dict[str, LinkStatus]  # node id -> status after the run
    controller_questions: int
    errors: dict[str, str] = field(default_factory=dict)  # node id -> why it is still pending
    remaining: tuple[str, ...] = ()  # nodes not taken up before the deadline (untouched; relink them next)

    @property
    def pending(self) -> tuple[str, ...]:
        return tuple(i for i, s in self.statuses.items() if s == LinkStatus.RELATIONS_PENDING)


@dataclass(frozen=True)
class Stats:
    nodes: int
    edges: dict[str, int]  # per relation
    link_status: dict[str, int]  # per LinkStatus value
    writes: int  # successful writes by this engine instance
    consolidations: int
    summaries: int
    controller_calls: int
    controller_requests: int
    controller_questions: int
