"""The write path in explicit phases (context -> retrieve -> decide -> apply), each a small function.

    make_node           validate, id, fingerprint, entities                       (no I/O)
    type_node           one controller request: the four TYPING Nouls
    discover_candidates memory/candidates.py                                      (store reads only)
    deterministic_edges timestamp order -> temporal / temporal_next; shared entity ids -> entity
    assess_pairs        one batched controller call: PAIR questions per candidate -> inferred edges + status

Nothing here writes to the store; `Engine.write` applies the plan inside one transaction. The model's output
never names an id or relation: keys are ours, answers are validated, edges are built by this code.
"""

from __future__ import annotations

import hashlib
import json
import logging
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from controller.errors import BackendError
from controller.families import MEMORY_TYPES, TEMPORAL_RELATIONS
from memory.candidates import linkable_entities
from memory.config import EngineConfig
from memory.control import Controller, ask_batch_within_limit, attributed, choice, clipped, fits, keyed, memory_state, noul
from memory.entities import clean_entities, extract_entities
from memory.errors import ControllerOutputError, InvalidObservationError
from memory.store.base import Store
from memory.types import DIRECTED_RELATIONS, SYMMETRIC_RELATIONS, Edge, EdgeOrigin, LinkStatus, Node, Observation, has_visible_text

log = logging.getLogger(__name__)

# Inferred relation -> (question name, edge runs new->candidate?). causal asks "did memory_b cause memory_a",
# so its edge runs from the candidate (cause) to the new node (effect).
NOUL_RELATIONS: tuple[tuple[str, bool], ...] = (
    ("semantic", True),
    ("causal", False),
    ("same_episode", True),
    ("update", True),
    ("entity_equivalence", True),
)


def fingerprint(content: str) -> str:
    return hashlib.blake2b(content.encode("utf-8"), digest_size=16).hexdigest()


def node_id_for(seq: int, obs: Observation) -> str:
    """Content-addressed and reproducible: the same observation at the same position gets the same id."""
    when = obs.observed_at.isoformat() if obs.observed_at else ""
    key = f"{seq}\x00{obs.speaker or ''}\x00{when}\x00{obs.content}"
    return hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()


def check_text(name: str, value: str) -> None:
    """Stored text must be UTF-8 encodable: JSON admits lone surrogates ("\\ud800"), SQLite and hashing do not."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidObservationError(f"{name} is not valid Unicode text ({error.reason} at {error.start})", value) from error


def json_object(value: dict[Any, Any]) -> dict[str, Any]:
    """`value` as a persistent store reads it back from JSON (call after checking it is JSON)."""
    return dict(json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False)))


def check_speaker(speaker: str) -> None:
    """A speaker leads the memory text (`Speaker: text`) and can become an entity, so it is one visible line:
    not blank ("" and invisible characters only included), no control character (tab and newline too) and no
    line or paragraph separator."""
    if not has_visible_text(speaker):
        raise InvalidObservationError("speaker must not be blank or only invisible characters (omit it or use null "
                                      "for none)", speaker)
    for index, char in enumerate(speaker):
        if unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            raise InvalidObservationError(f"speaker must be one line without control characters "
                                          f"(U+{ord(char):04X} at {index})", speaker)


def check_storable(obs: Observation) -> None:
    """Refuse what some store could not keep, before anything is computed or stored: text that is not valid
    Unicode, metadata that is not JSON (every persistent store keeps it as JSON), and a timestamp whose
    offset moves it outside the datetime range when it is compared in UTC."""
    check_text("content", obs.content)
    for name, value in (("speaker", obs.speaker), *(("source_ids", str(s)) for s in obs.source_ids),
                        *(("entities", str(e)) for e in obs.entities or ())):
        if value is not None:
            check_text(name, value)
    if not isinstance(obs.metadata, dict):
        raise InvalidObservationError(f"metadata must be a JSON object, got {type(obs.metadata).__name__}", obs.metadata)
    try:
        metadata = json.dumps(obs.metadata, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:  # a value json cannot write (NaN too), keys it cannot sort, a cycle
        raise InvalidObservationError(f"metadata must be a JSON object: {error}", obs.metadata) from error
    check_text("metadata", metadata)
    for name in ("observed_at", "event_time"):
        value = getattr(obs, name)
        if value is not None and value.tzinfo is not None:
            try:
                value.astimezone(timezone.utc)
            except OverflowError as error:
                raise InvalidObservationError(f"{name} is out of range in UTC", value) from error


def check_observation(obs: Observation) -> None:
    """Everything `make_node` refuses (InvalidObservationError), with no id, entity or store work: a batch is
    checked whole before its first observation is written."""
    if not isinstance(obs, Observation):
        raise InvalidObservationError(f"expected an Observation, got {type(obs).__name__}", obs)
    if not isinstance(obs.content, str) or not has_visible_text(obs.content):
        raise InvalidObservationError("an observation needs text with a visible character (not only whitespace, "
                                      "control or format characters)", obs.content)
    for name in ("observed_at", "event_time"):
        value = getattr(obs, name)
        if value is not None and not isinstance(value, datetime):
            raise InvalidObservationError(f"{name} must be a datetime or None, got {type(value).__name__}", value)
    if obs.speaker is not None and not isinstance(obs.speaker, str):
        raise InvalidObservationError(f"speaker must be text or None, got {type(obs.speaker).__name__}", obs.speaker)
    if obs.speaker is not None:
        check_speaker(obs.speaker)
    _check_texts("source_ids", obs.source_ids, "a tuple or list of id strings (e.g. ('D1:3',))")
    if obs.entities is not None:
        _check_texts("entities", obs.entities, "a tuple or list of names, () for none, or None to extract them")
    check_storable(obs)
    reserved = sorted(set(obs.metadata) & RESERVED_METADATA)
    if reserved:
        raise InvalidObservationError(f"metadata key {reserved[0]!r} is reserved by the engine", obs.metadata)


def _check_texts(name: str, values: object, expected: str) -> None:
    """`source_ids` / `entities`: a sequence of strings. A string itself would be read one character per item, and
    None or an object would be stored as the text 'None' or "{'a': 1}"."""
    if not isinstance(values, (tuple, list)):
        raise InvalidObservationError(f"{name} must be {expected}, got {type(values).__name__}", values)
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise InvalidObservationError(f"{name}[{index}] must be a string, got {type(value).__name__}", value)


def make_node(obs: Observation, *, seq: int, config: EngineConfig, known_names: Iterable[str] = ()) -> Node:
    """Phase 1: a validated node (not yet typed or stored)."""
    check_observation(obs)
    if obs.entities is None:
        entities = extract_entities(obs.content, speaker=obs.speaker, known_names=known_names, limit=config.max_entities)
    else:
        entities = clean_entities(obs.entities, limit=config.max_entities)
    # as JSON reads it back (tuples are lists, keys are text), so every store holds the same value
    metadata = json_object(obs.metadata)
    if obs.entities is not None:
        metadata["entities_given"] = True
    return Node(
        id=node_id_for(seq, obs),
        content=obs.content,
        observed_at=obs.observed_at,
        event_time=obs.event_time,
        speaker=obs.speaker,
        source_ids=tuple(str(s) for s in obs.source_ids),
        entities=entities,
        types={},
        fingerprint=fingerprint(obs.content),
        seq=seq,
        link_status=LinkStatus.RELATIONS_PENDING,
        metadata=metadata,
    )


def type_node(controller: Controller, content: str, config: EngineConfig, speaker: str | None = None) -> dict[str, float]:
    """Phase 2: the four independent type scores, on the text attributed to its speaker (`attributed`) and cut
    visibly to `max_memory_chars` (never silently). Raises BackendError / ControllerOutputError."""
    text = clipped(attributed(content, speaker), config.max_memory_chars)
    answers = controller.ask({"observation": text}, keyed("", "typing", MEMORY_TYPES))
    return {name: noul(answers, name) for name in MEMORY_TYPES}


# ---------------------------------------------------------------- deterministic edges
def time_of(node: Node) -> datetime | None:
    value = node.event_time or node.observed_at
    if value is not None and value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def _order(a: datetime, b: datetime) -> str:
    return "before" if a < b else "after" if a > b else "same_time"


@dataclass
class EdgePlan:
    add: list[Edge] = field(default_factory=list)
    remove: list[tuple[str, str, str]] = field(default_factory=list)


def temporal_chain(store: Store, node: Node, config: EngineConfig) -> EdgePlan:
    """`temporal_next` from the previous node in time (and to the next one if the node lands in between).

    A timed node's neighbours are the observations nearest in (time, seq) order among all stored ones with a time
    (`Store.nearest_in_time`), so a backfilled note lands where its time puts it; nodes without a time are not
    part of that order. A node without a time follows the nearest earlier node in insertion order."""
    plan = EdgePlan()
    when = time_of(node)
    if when is None:
        near = [n for n in store.get_nodes(store.nodes_near_time(node.seq, max(config.temporal_window, 8)))
                if n.kind == "observation" and n.id != node.id]
        prev = max((n for n in near if n.seq < node.seq), key=lambda n: n.seq, default=None)
        nxt = None
    else:
        prev, nxt = (store.get_node(i) if i is not None and i != node.id else None
                     for i in (store.nearest_in_time(when, node.seq, after=False, kind="observation"),
                               store.nearest_in_time(when, node.seq, after=True, kind="observation")))
    if prev is not None:
        plan.add.append(Edge(prev.id, node.id, "temporal_next", EdgeOrigin.DETERMINISTIC))
    if nxt is not None:
        plan.add.append(Edge(node.id, nxt.id, "temporal_next", EdgeOrigin.DETERMINISTIC))
        if prev is not None and any(e.dst == nxt.id and e.origin == EdgeOrigin.DETERMINISTIC
                                    for e in store.edges_from(prev.id, ["temporal_next"])):
            plan.remove.append((prev.id, nxt.id, "temporal_next"))  # the derived link only: an authored one stays
    return plan


def entity_edges(store: Store, node: Node, config: EngineConfig) -> list[Edge]:
    """`entity` edges to the most recent few nodes per shared entity id (attrs list the shared ids)."""
    shared: dict[str, list[str]] = {}
    for entity in linkable_entities(node.entities, node.speaker, config):
        if config.entity_edge_limit == 0:
            break
        near = [o for o in store.nodes_with_entity(entity, config.entity_edge_limit + 1) if o != node.id]
        for other in near[: config.entity_edge_limit]:
            ents = shared.setdefault(other, [])
            if entity not in ents:
                ents.append(entity)
    kinds = {n.id: n.kind for n in store.get_nodes(list(shared))}
    return [
        Edge(node.id, other, "entity", EdgeOrigin.DETERMINISTIC, attrs={"entities": ents})
        for other, ents in shared.items()
        if kinds.get(other) == "observation"
    ]


def temporal_edges(node: Node, candidates: Sequence[Node]) -> list[Edge]:
    """A `temporal` edge to each candidate when both timestamps are known (attrs: order of the new node)."""
    when = time_of(node)
    out = []
    for cand in candidates:
        other = time_of(cand)
        if when is not None and other is not None:
            out.append(Edge(node.id, cand.id, "temporal", EdgeOrigin.DETERMINISTIC, attrs={"order": _order(when, other)}))
    return out


# Node metadata key of the links a user removed (`Engine.unlink`): [src, dst, relation] triples, kept on both
# endpoints so that deleting either node can drop them without a scan. Derived edges skip them.
REFUSALS = "links_refused"
# Node metadata keys the engine writes and reads (given entities, authored and refused links, a summary's
# sources): an observation may not set them, so what it carries can never change how the engine links it.
RESERVED_METADATA: frozenset[str] = frozenset({"entities_given", "links_authored", REFUSALS, "summary_of", "summary_source"})


def refusals(node: Node | None) -> set[tuple[str, str, str]]:
    """The (src, dst, relation) links refused on `node` (malformed metadata entries are ignored)."""
    raw = node.metadata.get(REFUSALS) if node is not None else None
    if not isinstance(raw, list):
        return set()
    return {(e[0], e[1], e[2]) for e in raw
            if isinstance(e, (list, tuple)) and len(e) == 3 and all(isinstance(x, str) for x in e)}


def covers(refused: set[tuple[str, str, str]], src: str, dst: str, relation: str) -> bool:
    """Whether `refused` rules out (src, dst, relation); a symmetric relation is refused in both directions."""
    return (src, dst, relation) in refused or (relation in SYMMETRIC_RELATIONS and (dst, src, relation) in refused)


def is_refused(store: Store, src: str, dst: str, relation: str) -> bool:
    return covers(refusals(store.get_node(src)), src, dst, relation)


def add_unless_explicit(store: Store, edges: Iterable[Edge]) -> int:
    """Add derived edges, never overwriting an authored edge with the same (src, dst, relation), never
    contradicting an authored one (the reverse of a directed relation: the user said which end comes first) and
    never putting back a link a user removed (`REFUSALS`); returns how many were written."""
    written = 0
    authored: dict[str, set[tuple[str, str]]] = {}
    refused: dict[str, set[tuple[str, str, str]]] = {}

    def authored_from(node_id: str) -> set[tuple[str, str]]:
        if node_id not in authored:
            authored[node_id] = {(e.dst, e.relation) for e in store.edges_from(node_id) if e.origin == EdgeOrigin.EXPLICIT}
        return authored[node_id]

    for edge in edges:
        if edge.src not in refused:
            refused[edge.src] = refusals(store.get_node(edge.src))
        if (edge.dst, edge.relation) in authored_from(edge.src) or covers(refused[edge.src], edge.src, edge.dst, edge.relation):
            continue
        if edge.relation in DIRECTED_RELATIONS and (edge.src, edge.relation) in authored_from(edge.dst):
            continue
        store.add_edge(edge)
        written += 1
    return written


# ---------------------------------------------------------------- pair judgments
@dataclass(frozen=True)
class PairPlan:
    index: int
    candidate: Node
    questions: dict[str, dict[str, Any]]
    ask_entity_equivalence: bool
    ask_temporal: bool


@dataclass(frozen=True)
class Assessment:
    edges: tuple[Edge, ...]
    status: LinkStatus
    judged: tuple[str, ...]  # candidate ids whose pair questions were answered
    over_budget: tuple[str, ...]  # candidate ids not sent because of the state-size bound
    questions: int
    error: str | None = None


def plan_pairs(node: Node, candidates: Sequence[Node], config: EngineConfig) -> tuple[list[PairPlan], list[str]]:
    """Which questions each candidate pair gets; candidates over the state bound are set aside."""
    if not fits(node, config.max_memory_chars):
        return [], [c.id for c in candidates]
    plans: list[PairPlan] = []
    over: list[str] = []
    mine = set(linkable_entities(node.entities, node.speaker, config))
    for cand in candidates:
        if not fits(cand, config.max_memory_chars):
            over.append(cand.id)
            continue
        i = len(plans)
        theirs = set(linkable_entities(cand.entities, cand.speaker, config))
        ask_eq = bool(mine - theirs) and bool(theirs - mine) and not (mine & theirs)
        ask_temporal = time_of(node) is None or time_of(cand) is None
        names = ["semantic", "causal", "same_episode", "update"]
        if ask_eq:
            names.append("entity_equivalence")
        if ask_temporal:
            names.append("temporal")
        plans.append(PairPlan(i, cand, keyed(f"pair_{i}_", "pair", names), ask_eq, ask_temporal))
    return plans, over


def edges_from_answers(node: Node, plan: PairPlan, answers: Any, config: EngineConfig) -> list[Edge]:
    """Validated answers -> inferred edges above their thresholds (ids and relations come from the plan)."""
    cand = plan.candidate
    edges: list[Edge] = []
    for relation, forward in NOUL_RELATIONS:
        if relation == "entity_equivalence" and not plan.ask_entity_equivalence:
            continue
        p = noul(answers, f"pair_{plan.index}_{relation}")
        if p >= config.tau(relation):
            src, dst = (node, cand) if forward else (cand, node)
            edges.append(Edge(src.id, dst.id, relation, EdgeOrigin.INFERRED, p, src.fingerprint, dst.fingerprint))
    if plan.ask_temporal:
        label, probs = choice(answers, f"pair_{plan.index}_temporal", TEMPORAL_RELATIONS)
        if label != "unknown" and probs[label] >= config.tau_temporal:
            edges.append(Edge(node.id, cand.id, "temporal", EdgeOrigin.INFERRED, probs[label], node.fingerprint,
                              cand.fingerprint, attrs={"order": label}))
    return edges


def assess_pairs(controller: Controller, node: Node, candidates: Sequence[Node], config: EngineConfig) -> Assessment:
    """Phase 5: one batched controller call for all candidate pairs; failures become statuses, not guesses.

    A state over the model's input limit refuses the whole batch; the pairs are then asked one by one, so only
    the pairs over the limit go unjudged (set aside like pairs over `max_memory_chars`)."""
    if not candidates:
        return Assessment((), LinkStatus.EMPTY_SHORTLIST, (), (), 0)
    plans, over = plan_pairs(node, candidates, config)
    if not plans:
        return Assessment((), LinkStatus.OVER_BUDGET, (), tuple(over), 0)
    mine = memory_state(node)
    requests = [({"memory_a": mine, "memory_b": memory_state(p.candidate)}, p.questions) for p in plans]
    try:
        answers = ask_batch_within_limit(controller, requests)
        edges = [e for plan, ans in zip(plans, answers) if ans is not None for e in edges_from_answers(node, plan, ans, config)]
    except (BackendError, ControllerOutputError) as error:
        log.warning("pair judgments for %s pending: %s", node.id, error)
        asked = sum(len(p.questions) for p in plans)
        return Assessment((), LinkStatus.RELATIONS_PENDING, (), tuple(over), asked, f"{type(error).__name__}: {error}")
    answered = [p for p, ans in zip(plans, answers) if ans is not None]
    over = [*over, *(p.candidate.id for p, ans in zip(plans, answers) if ans is None)]
    if not answered:
        return Assessment((), LinkStatus.OVER_BUDGET, (), tuple(over), 0, "every pair state is over the controller's input limit")
    judged = tuple(p.candidate.id for p in answered)
    return Assessment(tuple(edges), LinkStatus.ASSESSED, judged, tuple(over), sum(len(p.questions) for p in answered))
