"""`Engine`: the Jev-Mem facade. Thin by design: each operation delegates to the module that owns it.

    write / write_many   memory/write_path.py (+ candidates.py), periodic consolidation.py
    query                memory/read_path.py (+ routing.py, traversal.py), System Two or extractive answer
    get / edit / link / unlink / set_links / delete / relink   memory/lifecycle.py

    engine = Engine.open(None, controller="heuristic", embedder="hashing")
    engine.write(Observation("Mira: My old bicycle broke.", observed_at=datetime(2024, 5, 14, 10)))
    result = engine.query("Why did Mira buy a new bicycle?", k=5)

One store transaction per write (per batch for `write_many`, the consolidation it triggers included): the
controller is asked first, then node, edges and status are applied together. Operations are serialised by one lock, so one engine may be shared between threads.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from numbers import Integral
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TextIO

from controller.backend import Backend
from controller.client import SystemOneClient
from controller.embedding import Embedder, create_embedder
from controller.errors import BackendError, InputTooLongError
from memory import lifecycle
from memory.candidates import CandidateSet, discover_candidates
from memory.config import EngineConfig, preset
from memory.consolidation import ConsolidationReport, consolidate
from memory.export import ExportReport, export_jsonl
from memory.control import Controller
from memory.errors import (
    ConfigError,
    ControllerOutputError,
    EngineClosedError,
    InvalidObservationError,
    InvalidQueryError,
    SystemTwoError,
)
from memory.read_path import run_query
from memory.results import NodeView, RelinkReport, Stats
from memory.store.base import Store
from memory.system_two import SystemTwo
from memory.types import Edge, LinkStatus, Observation, QueryResult, TraceStep, WriteResult, has_visible_text
from memory.write_path import (
    Assessment,
    add_unless_explicit,
    assess_pairs,
    check_observation,
    entity_edges,
    make_node,
    temporal_chain,
    temporal_edges,
    type_node,
)

log = logging.getLogger(__name__)


class Engine:
    def __init__(
        self,
        store: Store,
        client: SystemOneClient,
        embedder: Embedder,
        config: EngineConfig = EngineConfig(),
        system_two: SystemTwo | None = None,
    ) -> None:
        if embedder.dim != store.dim:
            raise ValueError(f"embedder dim {embedder.dim} != store dim {store.dim}")
        self.store = store
        self.embedder = embedder
        self.config = config
        self.system_two = system_two
        self.controller = Controller(client)
        self.last_consolidation: ConsolidationReport | None = None
        self.last_candidates: CandidateSet | None = None  # of the latest write: per-channel hits for recall studies
        self._lock = threading.RLock()
        self._seq: int | None = None
        self._seq_checked = False  # `_seq` was compared with the store's inside the current write's transaction
        self._writes = 0
        self._consolidations = 0
        self._summaries = 0
        self._recent: deque[str] = deque(maxlen=config.consolidation_window)
        self._consolidated: set[tuple[str, str]] = set()
        self._known_names: set[str] | None = None  # speakers so far, the stored ones included (`_names`)
        self._owned: list[Any] = []
        self._closed = False

    def _check_open(self) -> None:
        """Every public call runs this under the engine lock: a closed engine refuses instead of working on (an
        in-memory store) or failing inside the database (SQLite)."""
        if self._closed:
            raise EngineClosedError()

    @classmethod
    def open(
        cls,
        path: str | Path | None,
        *,
        controller: str | Backend = "heuristic",
        embedder: str | Embedder = "hashing",
        config: EngineConfig | str | None = None,
        system_two: SystemTwo | None | Literal["env"] = "env",
        create_dirs: bool = False,
        **controller_options: Any,
    ) -> Engine:
        """An engine over `open_store(path)` (None: in memory; a new file's directory must exist unless
        `create_dirs`). `config` may name a preset; System Two is read from JEVMEM_LLM_* unless given (None:
        extractive answers only)."""
        from memory.store import open_store

        emb, cfg = _open_arguments(path, embedder, config, system_two)
        with ExitStack() as opened:  # on any failure below, close what was opened (an SQLite store holds a lock)
            client = SystemOneClient(controller, **controller_options)
            opened.callback(client.close)
            store = open_store(path, dim=emb.dim, embedder=emb.name, create_dirs=create_dirs)
            opened.callback(store.close)
            s2 = SystemTwo.from_settings() if system_two == "env" else system_two
            if s2 is not None and system_two == "env":
                opened.callback(s2.close)
            engine = cls(store, client, emb, cfg, s2)  # type: ignore[arg-type]
            opened.pop_all()
        engine._owned = [store, client, *([s2] if s2 is not None and system_two == "env" else [])]
        return engine

    # ------------------------------------------------------------------ write path
    def _peek_seq(self) -> int:
        """The next node's seq. Read from the store once per write operation, inside its transaction: another
        engine (another process) writing the same store may have used the seqs this one would take next."""
        if self._seq is None or not self._seq_checked:
            next_seq = getattr(self.store, "next_seq", None)
            stored = next_seq() if callable(next_seq) else max((n.seq for n in self.store.iter_nodes()), default=-1) + 1
            self._seq = stored if self._seq is None else max(self._seq, stored)
            self._seq_checked = True
        return self._seq

    def _names(self) -> set[str]:
        """Known names for entity extraction (a sentence-initial name counts only when known): every speaker in
        the store, read once, so a reopened store extracts what one long session would."""
        if self._known_names is None:
            self._known_names = {n.speaker for n in self.store.iter_nodes() if n.speaker}
        return self._known_names

    def _take_seq(self) -> int:
        seq = self._peek_seq()
        self._seq = seq + 1
        return seq

    def write(self, obs: Observation) -> WriteResult:
        """Store one observation and link it. `edges_written` counts inferred (judged) edges only. A store failure
        (in the write or in the consolidation it triggers) stores nothing: the write may be sent again."""
        return self._write_all([obs])[0]

    def _write_all(self, observations: Sequence[Observation],
                   progress: Callable[[int], None] | None = None) -> list[WriteResult]:
        """Write in order inside one store transaction (each write's own transaction joins it). On any failure the
        store rolls back and the engine's own state (seq, counters, recent writes, names) is put back as well."""
        with self._lock:
            self._check_open()
            saved = self._write_state()
            self._seq_checked = False
            try:
                with self.store.transaction():
                    results = []
                    for obs in observations:
                        results.append(self._write_one(obs))
                        if progress is not None:
                            progress(len(results))
                    return results
            except BaseException:
                for name, value in saved.items():
                    setattr(self, name, value)
                raise

    def _write_state(self) -> dict[str, Any]:
        """A copy of what writes (and the consolidations they trigger) change in the engine itself."""
        return {
            "_seq": self._seq, "_writes": self._writes, "_consolidations": self._consolidations, "_summaries": self._summaries,
            "_recent": deque(self._recent, maxlen=self._recent.maxlen), "_consolidated": set(self._consolidated),
            "_known_names": None if self._known_names is None else set(self._known_names),
            "last_consolidation": self.last_consolidation, "last_candidates": self.last_candidates,
        }

    def _write_one(self, obs: Observation) -> WriteResult:
        """One write, inside `_write_all`, which holds `self._lock` and the store transaction for the whole batch:
        the engine lock is not taken again here (it is re-entrant, so taking it was a no-op)."""
        timings: dict[str, float] = {}
        clock = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[name] = (now - clock) * 1000.0
            clock = now

        node = make_node(obs, seq=self._peek_seq(), config=self.config, known_names=self._names())
        embedding = self.embedder.embed([node.content])[0]
        lap("embedding")
        questions = 0
        too_long: str | None = None
        try:
            types = type_node(self.controller, node.content, self.config, node.speaker)
            questions += len(types)
        except InputTooLongError as error:  # the text fits max_memory_chars but not the model: no retry helps
            log.info("typing state of %s over the controller's input limit: %s", node.id, error)
            types, too_long = {}, str(error)
        except (BackendError, ControllerOutputError) as error:
            log.warning("typing of %s pending: %s", node.id, error)
            types = {}
        lap("typing")
        cands = discover_candidates(self.store, content=node.content, embedding=embedding, entities=node.entities,
                                    seq=node.seq, config=self.config, speaker=node.speaker)
        self.last_candidates = cands
        chain = temporal_chain(self.store, node, self.config)
        structural = [*chain.add, *entity_edges(self.store, node, self.config), *temporal_edges(node, cands.nodes)]
        lap("candidates")
        if types:
            assessment = assess_pairs(self.controller, node, cands.nodes, self.config)
        elif too_long is not None:  # its pair states would be longer still
            assessment = Assessment((), LinkStatus.OVER_BUDGET, (), tuple(c.id for c in cands.nodes), 0, too_long)
        else:  # the controller just failed: typing and pairs are owed, `relink` runs both
            assessment = Assessment((), LinkStatus.RELATIONS_PENDING, (), (), 0, "typing failed")
        questions += assessment.questions
        status = assessment.status
        lap("judgment")
        node = replace(node, types=types, link_status=status)
        with self.store.transaction():
            self.store.add_node(node, embedding)
            for key in chain.remove:
                self.store.remove_edge(*key)
            add_unless_explicit(self.store, structural)
            inferred = add_unless_explicit(self.store, assessment.edges)
        self._seq = node.seq + 1
        lap("apply")
        if node.speaker:
            self._names().add(node.speaker)
        self._writes += 1
        self._recent.append(node.id)
        every = self.config.consolidation_every
        if every and self._writes % every == 0:
            self._consolidate()
            lap("consolidation")
        return WriteResult(node.id, len(cands.nodes), inferred, questions, status, timings, assessment.over_budget)

    def write_many(self, observations: Iterable[Observation], *,
                   progress: Callable[[int], None] | None = None) -> list[WriteResult]:
        """Write in order, all or nothing. Every observation is checked first: an invalid one
        (InvalidObservationError, naming its index) writes none of them. The writes then share one store
        transaction: a store failure on any of them (StoreError) stores none and leaves the engine as it was. Either
        way the same batch can be sent again (corrected) without duplicating its head. A successful batch stores
        exactly what writing its observations one by one stores: each write sees the batch's earlier ones.
        `progress`, when given, is called with the number written so far after each write (not yet committed)."""
        if isinstance(observations, Observation) or not isinstance(observations, Iterable):
            raise InvalidObservationError(f"write_many takes an iterable of Observations (a list, a generator), got "
                                          f"{type(observations).__name__}; use write for one", observations)
        batch = list(observations)
        for index, obs in enumerate(batch):
            try:
                check_observation(obs)
            except InvalidObservationError as error:
                raise InvalidObservationError(f"observation {index}: {error}", error.value) from error
        return self._write_all(batch, progress)

    def _consolidate(self) -> ConsolidationReport:
        report = consolidate(
            self.store, self.controller, self.embedder, list(self._recent), self.config,
            next_seq=self._take_seq, summarizer=self.system_two.merge_summary if self.system_two else None,
            done=self._consolidated,
        )
        self._consolidations += 1
        self._summaries += len(report.summaries)
        self.last_consolidation = report
        return report

    def consolidate(self) -> ConsolidationReport:
        """Run consolidation now over the recent writes (it also runs every `consolidation_every` writes)."""
        with self._lock:
            self._check_open()
            self._seq_checked = False  # a summary's seq is taken inside the transaction that applies it
            return self._consolidate()

    # ------------------------------------------------------------------ read path
    def query(self, text: str, *, k: int = 10, budget: int | None = None, answer: bool = False) -> QueryResult:
        if not isinstance(text, str) or not has_visible_text(text):
            raise InvalidQueryError("a query needs text with a visible character (not only whitespace, control or "
                                    "format characters)", text)
        def whole(value: object) -> bool:
            return isinstance(value, Integral) and not isinstance(value, bool)  # numpy integers too

        if not whole(k) or k < 1 or (budget is not None and (not whole(budget) or budget < 0)):
            raise InvalidQueryError(f"k must be a whole number >= 1 and budget one >= 0 (got k={k!r}, budget={budget!r})",
                                    (k, budget))
        with self._lock:
            self._check_open()
            result = run_query(self.store, self.controller, self.embedder, text, self.config, k=k, budget=budget)
        if not answer:
            return result
        evidence = result.evidence[: self.config.answer_evidence_k]
        if self.system_two is not None:
            started = time.perf_counter()
            try:
                reply = self.system_two.answer(text, evidence)
                step = TraceStep("answer", {"source": "system_two"}, (time.perf_counter() - started) * 1000.0)
                return replace(result, answer=reply, answer_source="system_two", trace=(*result.trace, step))
            except SystemTwoError as error:
                log.warning("System Two failed; answering extractively: %s", error)
                step = TraceStep("answer", {"source": "extractive", "error": str(error)}, (time.perf_counter() - started) * 1000.0)
                result = replace(result, trace=(*result.trace, step))
        return replace(result, answer="\n".join(e.content for e in evidence), answer_source="extractive")

    # ------------------------------------------------------------------ lifecycle
    def get(self, node_id: str) -> NodeView:
        with self._lock:
            self._check_open()
            node = lifecycle.require(self.store, node_id)
            return NodeView(node, tuple(self.store.edges_from(node_id)), tuple(self.store.edges_to(node_id)))

    def edit(self, node_id: str, content: str) -> NodeView:
        """Change a node's text: inferred links and the summaries derived from the old text are dropped and the
        node is marked stale (same text: everything kept)."""
        with self._lock:
            self._check_open()
            node = lifecycle.require(self.store, node_id)
            with self.store.transaction():
                lifecycle.edit_node(self.store, self.embedder, node, content, self.config, self._names())
            return self.get(node_id)

    def link(self, src: str, dst: str, relation: str, *, attrs: Mapping[str, Any] | None = None) -> Edge:
        """An explicit (authored) link; no controller call; survives edits; lifts an earlier `unlink` of it."""
        with self._lock:
            self._check_open()
            with self.store.transaction():
                return lifecycle.add_explicit(self.store, src, dst, relation, attrs)

    def unlink(self, src: str, dst: str, relation: str) -> bool:
        """Remove the link (src, dst, relation), whatever its origin; False if there is none.

        The removal is a user decision and is recorded on both nodes (metadata `links_refused`, stored with
        them): no later judgment, deterministic edge, `relink`, edit or consolidation puts the link back, in
        either direction for a symmetric relation (`SYMMETRIC_RELATIONS`, whose derived reverse edge is removed
        too). `link` on that pair and relation lifts the refusal; deleting either node drops it."""
        lifecycle.check_relation(relation)  # a typo is an error, as in `link`, not "no such link"
        with self._lock:
            self._check_open()
            if not isinstance(src, str) or not isinstance(dst, str):  # no node has such an id
                return False
            with self.store.transaction():
                edge = next((e for e in self.store.edges_from(src, [relation]) if e.dst == dst), None)
                if edge is None:
                    return False
                lifecycle.unlink_edge(self.store, edge)
                return True

    def set_links(self, node_id: str, links: Sequence[tuple[str, str]]) -> NodeView:
        """Replace the node's explicit outgoing links by `links` ((dst, relation) pairs); [] stays empty."""
        with self._lock:
            self._check_open()
            with self.store.transaction():
                lifecycle.set_explicit_links(self.store, node_id, links)
            return self.get(node_id)

    def delete(self, node_id: str) -> bool:
        """Delete a node, its edges and the summaries derived from it (one transaction); False if unknown."""
        with self._lock:
            self._check_open()
            if not isinstance(node_id, str):  # no node has such an id
                return False
            with self.store.transaction():
                return lifecycle.delete_node(self.store, node_id)

    def relink(self, node_ids: Sequence[str] | None = None, *,
               progress: Callable[[int, int], None] | None = None, deadline: float | None = None) -> RelinkReport:
        """Re-run judgments for the given nodes, or for every RELATIONS_PENDING and STALE node. Each node is committed
        on its own (`lifecycle.relink_nodes`): after a failure the nodes done keep their new links, the error carries
        a note saying how many, and running relink again is safe. `progress` gets (nodes done, nodes to do). With a
        `deadline` (a `time.monotonic()` reading) no node but the first is started after it; those left are listed
        in the report's `remaining`."""
        if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or math.isnan(deadline)):
            raise ConfigError(f"deadline must be a time.monotonic() reading (a number) or None, got {deadline!r}")
        with self._lock:
            self._check_open()
            if node_ids is None:
                ids = [*self.store.nodes_with_status(LinkStatus.RELATIONS_PENDING), *self.store.nodes_with_status(LinkStatus.STALE)]
            else:
                ids = [lifecycle.require(self.store, i).id for i in node_ids]
            return lifecycle.relink_nodes(self.store, self.controller, self.embedder, ids, self.config, progress, deadline)

    def export(self, out: TextIO) -> ExportReport:
        """Write every observation to `out` as the JSONL `memory.ingest` reads back (`memory.export`), from one
        consistent snapshot (the store's write transaction is held meanwhile). The report counts what the records do
        not carry (summaries, authored edges, refused links)."""
        with self._lock:
            self._check_open()
            with self.store.transaction():
                return export_jsonl(self.store, out)

    # ------------------------------------------------------------------ bookkeeping
    def stats(self) -> Stats:
        with self._lock:
            self._check_open()
            usage = self.controller.usage()
            return Stats(
                nodes=self.store.count_nodes(),
                edges=self.store.count_edges(),
                link_status={s.value: len(self.store.nodes_with_status(s)) for s in LinkStatus},
                writes=self._writes,
                consolidations=self._consolidations,
                summaries=self._summaries,
                controller_calls=usage.calls,
                controller_requests=usage.requests,
                controller_questions=usage.questions,
            )

    def close(self) -> None:
        """Release what `Engine.open` created (a store / client passed in stays the caller's). Closing twice is
        fine; any other call afterwards is an `EngineClosedError`."""
        with self._lock:
            self._closed = True
            for resource in reversed(self._owned):
                resource.close()
            self._owned = []

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _open_arguments(path: object, embedder: object, config: object, system_two: object) -> tuple[Embedder, EngineConfig]:
    """`Engine.open`'s arguments checked before anything is opened (ConfigError naming the argument): the embedder
    (a name or an `Embedder`) and the config (an `EngineConfig`, a preset name or None), built; the path and
    System Two, of the types they may have."""
    if path is not None and not isinstance(path, (str, Path)):
        raise ConfigError(f"path must be a file path (str or Path) or None for an in-memory store, got {type(path).__name__}",
                          "path", path)
    if not (system_two is None or system_two == "env" or isinstance(system_two, SystemTwo)):
        raise ConfigError(f"system_two must be a SystemTwo, None or 'env', got {type(system_two).__name__}", "system_two", system_two)
    if isinstance(embedder, str):
        try:
            emb = create_embedder(embedder)
        except ValueError as error:  # an unknown name
            raise ConfigError(str(error), "embedder", embedder) from error
    elif callable(getattr(embedder, "embed", None)) and isinstance(getattr(embedder, "dim", None), Integral):
        emb = embedder  # type: ignore[assignment]
    else:
        raise ConfigError(f"embedder must be an embedder name or an Embedder (embed, dim), got {type(embedder).__name__}",
                          "embedder", embedder)
    if isinstance(config, str):
        cfg = preset(config)
    elif config is None or isinstance(config, EngineConfig):
        cfg = config or EngineConfig()
    else:
        raise ConfigError(f"config must be an EngineConfig, a preset name or None, got {type(config).__name__}", "config", config)
    return emb, cfg

