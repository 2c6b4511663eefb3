"""The Jev-Mem memory engine: a multi-relational memory whose write and read paths ask a System One controller.

    from memory import Engine, Observation
    with Engine.open(None, controller="heuristic", embedder="hashing") as engine:
        engine.write(Observation("Mira: My old bicycle broke.", speaker="Mira"))
        result = engine.query("What happened to Mira's bicycle?", k=5)

Importing this package loads neither torch nor onnxruntime and does no I/O.
"""

from memory.candidates import CandidateSet, discover_candidates
from memory.config import PRESETS, EngineConfig, preset
from memory.consolidation import ConsolidationReport
from memory.engine import Engine
from memory.entities import extract_entities, normalise_entity
from memory.errors import (
    ConfigError,
    ControllerOutputError,
    EngineClosedError,
    InvalidLinkError,
    InvalidObservationError,
    InvalidQueryError,
    InvalidRelationError,
    MemoryEngineError,
    NodeNotFoundError,
    SystemTwoError,
)
from memory.results import NodeView, RelinkReport, Stats
from memory.system_two import SystemTwo
from memory.types import (
    RELATIONS,
    Edge,
    EdgeOrigin,
    Evidence,
    LinkStatus,
    Node,
    Observation,
    QueryResult,
    TraceStep,
    WriteResult,
)

__all__ = [
    "PRESETS",
    "RELATIONS",
    "CandidateSet",
    "ConfigError",
    "ConsolidationReport",
    "ControllerOutputError",
    "Edge",
    "EdgeOrigin",
    "Engine",
    "EngineClosedError",
    "EngineConfig",
    "Evidence",
    "InvalidLinkError",
    "InvalidObservationError",
    "InvalidQueryError",
    "InvalidRelationError",
    "LinkStatus",
    "MemoryEngineError",
    "Node",
    "NodeNotFoundError",
    "NodeView",
    "Observation",
    "QueryResult",
    "RelinkReport",
    "Stats",
    "SystemTwo",
    "SystemTwoError",
    "TraceStep",
    "WriteResult",
    "discover_candidates",
    "extract_entities",
    "normalise_entity",
    "preset",
]
