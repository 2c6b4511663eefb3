"""`EngineConfig`: every knob of the Jev-Mem write and read paths in one frozen, validated dataclass.

Round-trips to JSON (`to_json` / `from_json`; unknown keys are refused) and comes in named presets, the way
graphiti names its search recipes: `preset("default")`, `preset("fast")`, `preset("thorough")`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from memory.errors import ConfigError


@dataclass(frozen=True)
class EngineConfig:
    # ---- write path: candidate discovery (deterministic, bounded)
    candidates_k: int = 8  # K_w: at most this many candidates reach pair judgment per write
    # Candidate discovery on the 6 LoCoMo dev conversations (multi-hop evidence pairs found in the K_w = 8
    # shortlist): 0.331 with channel_k 20 and weights 1 / 1 / 0.7 / 0.5 and no speaker channel; 0.400 as below.
    channel_k: int = 100  # depth of each discovery channel before fusion, and what the speaker channel filters
    w_vector: float = 1.0  # weighted reciprocal-rank fusion weights per channel
    w_lexical: float = 1.0
    w_entity: float = 0.3  # with the speaker channel, entity / temporal at 0.7 / 0.5 kept fewer pairs (0.386)
    w_temporal: float = 0.2
    w_speaker: float = 1.0  # vector + lexical hits by the same speaker (0 turns the channel off)
    rrf_k: int = 60  # candidate fusion: the usual RRF constant (10: 0.389, 5: 0.386 shortlist recall)
    temporal_window: int = 6  # temporal proximity channel: nodes within this many insertion steps
    # ---- write path: deterministic edges
    entity_edge_limit: int = 3  # `entity` edges per shared entity, to its most recent nodes
    speaker_entity_edges: bool = False  # a shared speaker alone makes no entity edge / entity candidate
    max_entities: int = 12  # entities kept per node (first mentions first)
    # ---- write path: pair judgments; an inferred edge of type g is stored when p >= tau_g
    tau_semantic: float = 0.6
    tau_causal: float = 0.6
    tau_same_episode: float = 0.6
    tau_entity_equivalence: float = 0.7
    tau_update: float = 0.6
    tau_temporal: float = 0.5  # the implicit-order Choice must reach this (and not say "unknown") to store an edge
    max_memory_chars: int = 1500  # a memory longer than this is not put into a state (status over_budget)
    # ---- consolidation over a bounded neighbourhood, every N successful writes (0 = never)
    consolidation_every: int = 20
    consolidation_window: int = 20  # the most recent nodes examined
    consolidation_max_pairs: int = 8  # their strongest inferred edges, at most this many pairs
    tau_representation: float = 0.5  # the representation Choice must reach this probability to act
    admission_enabled: bool = False  # admission filtering is not implemented: every valid observation is kept
    # ---- read path: routing and budget
    tau_route: float = 0.5  # a view is active when its routing probability reaches this
    expansion_budget: int = 40  # B: node expansions over all views and rounds
    min_view_budget: int = 4  # m: the floor every active view gets
    gamma: float = 2.0  # the rest is shared in proportion to p ** gamma
    max_depth: int = 3  # depth = 1 + round(multi_hop * (max_depth - 1))
    # ---- read path: seeds
    # Seeds judged first. 20 beat 10 and 15 on the dev pair with the early controllers (30 and 50 no better on 6).
    # Session 25 (stemmed index, shipped controller), R_frac@10 on conv-44 for 20 / 30 / 40: 0.717 / 0.728 / 0.727;
    # 30 then on the dev pair 0.745 vs 0.741, multi-hop R_all@10 0.302 vs 0.279, at 1.4x the controller questions per
    # query (docs/EXPERIMENTS.md, "thirty seeds").
    n_seeds: int = 30
    seed_pool: int = 50  # fused candidates kept; the pool also fills the ranking below the seeds
    seed_depth: int = 1000  # depth of each hybrid list before fusion
    # Hybrid seeds = RRF(BM25 weight 1, vector weight dense_weight, k = seed_rrf_k). On the 6 LoCoMo dev
    # conversations (seeds alone, R_frac@10): k 60 / weight 0.5 (the reference RRF baseline) 0.627; k 10 / 1.0
    # 0.667; k 5 / 1.0 0.673; k 10 / 0.7 0.656; k 20 / 1.0 0.644; k 60 / 1.0 0.575 (large k lets list tails rule).
    seed_rrf_k: int = 10
    dense_weight: float = 1.0
    # Context seeds: two more lists in that fusion, each memory scored with the memory before it on the same day
    # (`traversal.context_lists`: BM25 summed, cosines averaged), at context_weight x the plain lists' weights; the
    # heads of the plain lists (context_depth deep) and the memories after them are scored. 0 = off. A reply ("5 years
    # already!") is found through the turn it answers. Session 26, shipped controller, R_frac@10 at 0 / 0.5 / 1.0:
    # conv-44 (calibration only) 0.728 / 0.752 / 0.768; dev pair at 0 / 1.0, adopted by a rule fixed before that
    # run: 0.745 / 0.814, multi-hop R_all@10 0.302 / 0.349 (docs/EXPERIMENTS.md, "context seeds"). Depth 100 -> 50 (session 27):
    # conv-44 rankings unchanged, dev pair 0.814 -> 0.817 with multi-hop unchanged, at about 0.6x the lists' cost.
    context_weight: float = 1.0
    context_depth: int = 50
    # Named-speaker seeds: when the query names speakers of the memories at the head of the fusion (its top
    # named_speaker_depth), their memories in that head, in fused order, are one more list at named_speaker_weight
    # (`traversal.speaker_list`). A question about a person is mostly answered by what that person said: on conv-41..44,
    # 97.9% of the gold turns of questions naming one speaker are that speaker's, against 67.5% of the top 30 seeds,
    # and the list lifts the plain fusion's R_frac@10 0.719 -> 0.755. End to end it does not help: conv-44 R_frac@10
    # 0.768 / 0.762 / 0.762 / 0.744 at 0 / 0.5 / 1 / 2 (session 27; the judge already reads the speaker). 0 = off.
    named_speaker_weight: float = 0.0
    named_speaker_depth: int = 100
    # ---- read path: traversal, judging and stopping
    expand_per_node: int = 6  # neighbours taken from one node per view and round (strongest edges first)
    tau_frontier: float = 0.5  # a judged node is expanded further when relevant or bridge reaches this
    tau_stop: float = 0.8  # stop when evidence_sufficient reaches this
    tau_continue: float = 0.2  # stop when continue_useful falls below this
    stop_evidence_k: int = 5  # evidence items shown to the stopping questions
    # False: relevance states ask `relevant` alone and it alone picks the frontier. With the shipped controller
    # (`jevmem eval sweep`, 2026-12-01): R_frac@10 conv-44 0.683 -> 0.685, dev pair 0.708 -> 0.703, at 0.56x the
    # controller questions per query; kept on as DESIGN.md's read path, off is the cheaper near-equivalent.
    ask_bridge: bool = True
    ask_stop: bool = True  # False: no stopping request; rounds end only at the depth / budget limit or when exhausted
    max_evidence_chars: int = 400  # per item in read-path states (longer items are cut and marked)
    # The two state-rendering switches below are None by default: the engine then renders relevance states as the
    # controller was trained to read them (its model directory's `states.json`, `controller.states`; off for a
    # controller that declares nothing). True / False override the declaration (sweeps, ablations).
    # Relevance states carry "previous": the memory written just before the judged one on the same day (its
    # `temporal_next` predecessor), so a reply such as "Yes, twice!" is judged with what it answers
    # (`python -m training all --relevance-context`). With the recipe of 2026-11 the context moved neither dev
    # relevance AUROC (0.790 both) nor R_frac@10 (0.703 against 0.708; docs/EXPERIMENTS.md).
    relevance_context: bool | None = None
    # Relevance states render the candidate with its date, `[8 May 2023] Speaker: text`, as pair and stopping
    # states do (`python -m training all --relevance-dated`).
    relevance_dated: bool | None = None
    # ---- read path: final ranking = seed_weight * structure + relevance_weight * (p_relevant - centre)
    seed_weight: float = 1.0
    # centre = the mean p_relevant of the query's judged candidates (center_relevance), else 0.5. A calibrated
    # controller answers near its low base rate, so a 0.5 centre pushes judged seeds below the unjudged pool.
    # R_frac@10, `jevmem eval sweep` (docs/EXPERIMENTS.md, "relevance weight and centre"; weight 0.35 / 1.0 / 2.0 / 3.0):
    #   shipped controller, conv-44 (calibration only):  0.5-centred 0.647 / 0.486;  centred 0.657 / 0.682 / 0.692 / 0.687
    #   shipped controller, dev pair conv-26 + conv-30:  0.5-centred 0.679 / 0.575;  centred 0.685 / 0.683 / 0.656 / 0.644
    #   heuristic controller, dev pair:                  0.5-centred 0.645 / 0.627;  centred 0.645 / 0.638 / 0.629 / 0.629
    # Centring helps the trained controller on both and leaves the heuristic alone; the larger weight picked on
    # conv-44 did not carry over to the dev pair (6 dev conversations, heuristic, 0.5-centred, R_frac@10 / multi-hop
    # R_all@10: 0.1 0.668 / 0.128, 0.35 0.664 / 0.134, 0.5 0.658 / 0.140).
    # 2026-12-01, centred, conv-44 (calibration only), weight 0.35 / 0.7 / 1.0 / 1.5:
    #   current artifact: 0.653 / 0.690 / 0.695 / 0.707;  heuristic: 0.641 / 0.647 / 0.641 / 0.645 (nDCG@10 0.444 -> 0.478 at 1.0)
    # 1.0 is the largest weight no worse than 0.35 for either controller there and on the dev pair seen earlier (current
    # artifact +0.022, heuristic -0.007), short of the conv-44 argmax, which failed to carry over once before.
    # 2026-12-01 evening, artifact c1838dd6 + 44f0e529, conv-44, weight 0.7 / 1.0 / 1.5 / 2.0: 0.688 / 0.700 / 0.711 /
    # 0.707. 1.5 (the argmax) was adopted by a rule fixed before the dev-pair run (no loss there, +0.05 over the
    # heuristic at the same weight): dev pair 0.705 against 0.703 at 1.0, nDCG@10 0.555 against 0.540 (docs/EXPERIMENTS.md).
    relevance_weight: float = 1.5
    center_relevance: bool = True
    # the relevance term in log-odds: relevance_weight * (logit(p_relevant) - centre), the centre then the mean
    # judged logit (0 without center_relevance)
    relevance_logit: bool = False
    # the final ranking's centre over every judged candidate of the query, traversal finds it does not admit included
    # (default: over the admitted ones it ranks)
    center_on_pool: bool = False
    # the view that also walks the deterministic `temporal` edges (a new memory -> each timestamped member of its
    # write-time shortlist, attrs {"order": ...}; with the controller's temporal Choice, inferred ones): "" none
    # (they are stored and never walked), "temporal" or "semantic" (always active). conv-44, shipped artifact:
    # R_frac@10 0.708 / 0.708 / 0.706 for "" / temporal / semantic (docs/EXPERIMENTS.md), so "" stays.
    order_edges_view: str = ""
    # Feedback search: each expansion round also takes up to feedback_k unjudged nodes from a hybrid search for the
    # query joined with the feedback_docs most promising memories the round judged (pseudo-relevance feedback:
    # evidence for a second hop shares words with the first hop's evidence, not with the question). 0 = off.
    feedback_k: int = 0
    feedback_docs: int = 2
    tau_admit: float = 0.5  # a node found by traversal (not a seed) is ranked only when p_relevant exceeds this
    expand_decay: float = 0.8  # structure of an expanded node = decay * parent's structure * edge weight
    recency_weight: float = 0.0  # + recency_weight * p_recency * (position in time among the ranked nodes)
    superseded_penalty: float = 0.1  # - superseded_penalty * p_recency for a node another one superseded
    # ---- System Two
    answer_evidence_k: int = 10  # evidence items passed to the answer model

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            expected = f.type if isinstance(f.type, str) else f.type.__name__
            if expected == "bool":
                if not isinstance(value, bool):
                    raise ConfigError(f"{f.name} must be a bool, got {value!r}", f.name, value)
            elif expected == "bool | None":
                if value is not None and not isinstance(value, bool):
                    raise ConfigError(f"{f.name} must be a bool or null, got {value!r}", f.name, value)
            elif expected == "str":
                if not isinstance(value, str):
                    raise ConfigError(f"{f.name} must be text, got {value!r}", f.name, value)
            elif expected == "int":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ConfigError(f"{f.name} must be an int, got {value!r}", f.name, value)
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{f.name} must be a finite number, got {value!r}", f.name, value)
        positive = ("candidates_k", "channel_k", "rrf_k", "seed_rrf_k", "max_entities", "max_memory_chars", "consolidation_window",
                    "expansion_budget", "max_depth", "n_seeds", "seed_pool", "seed_depth", "stop_evidence_k", "max_evidence_chars",
                    "expand_per_node", "answer_evidence_k", "feedback_docs", "context_depth",
                    "named_speaker_depth")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}", name, getattr(self, name))
        non_negative = ("w_vector", "w_lexical", "w_entity", "w_temporal", "w_speaker", "temporal_window", "entity_edge_limit",
                        "consolidation_every", "consolidation_max_pairs", "min_view_budget", "gamma", "dense_weight",
                        "seed_weight", "relevance_weight", "recency_weight", "superseded_penalty", "feedback_k",
                        "context_weight", "named_speaker_weight")
        for name in non_negative:
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}", name, getattr(self, name))
        unit = ("tau_semantic", "tau_causal", "tau_same_episode", "tau_entity_equivalence", "tau_update",
                "tau_temporal", "tau_representation", "tau_route", "tau_frontier", "tau_stop", "tau_continue", "expand_decay",
                "tau_admit")
        for name in unit:
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)}", name, getattr(self, name))
        if self.seed_pool < self.n_seeds:
            raise ConfigError(f"seed_pool ({self.seed_pool}) must be >= n_seeds ({self.n_seeds})", "seed_pool", self.seed_pool)
        if self.w_vector + self.w_lexical + self.w_entity + self.w_temporal + self.w_speaker <= 0:
            raise ConfigError("at least one candidate channel needs a positive weight", "w_vector", self.w_vector)
        if self.order_edges_view not in ("", "temporal", "semantic"):
            raise ConfigError(f"order_edges_view must be '', 'temporal' or 'semantic', got {self.order_edges_view!r}",
                              "order_edges_view", self.order_edges_view)
        if self.admission_enabled:
            raise ConfigError("admission filtering is not implemented; every valid observation is stored", "admission_enabled", True)

    def tau(self, relation: str) -> float:
        """The acceptance threshold of an inferred relation type."""
        try:
            return float(getattr(self, f"tau_{relation}"))
        except AttributeError as error:
            raise ConfigError(f"no threshold for relation {relation!r}", f"tau_{relation}", relation) from error

    def with_(self, **changes: Any) -> EngineConfig:
        """A copy with some fields changed (validated)."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise ConfigError(f"unknown config fields: {', '.join(unknown)}", unknown[0], changes[unknown[0]])
        return replace(self, **changes)

    # ---- serialisation
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"a config must be a JSON object, got {type(data).__name__}", None, data)
        return cls().with_(**data)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> EngineConfig:
        """Parse JSON text, or read it from a path (a `Path`, or a string that is not JSON)."""
        text = str(text_or_path)
        if isinstance(text_or_path, Path) or not text.lstrip().startswith("{"):
            text = Path(text_or_path).read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"config is not valid JSON: {error}", None, text[:80]) from error
        return cls.from_dict(data)


# Named recipes: the same engine with different cost / coverage trade-offs.
PRESETS: dict[str, EngineConfig] = {
    "default": EngineConfig(),
    # The cheapest useful engine for a local controller on a small CPU: two judged candidates per write, no
    # consolidation, four judged seeds, at most two expansions in one round and no stopping request. With the
    # shipped controller on the LoCoMo dev pair (2 threads, fast with --no-spin; session 27, separate runs):
    # write p50 75 vs 260 ms, query p50 84 vs 612 ms, R_frac@10 0.767 vs 0.817 (docs/EXPERIMENTS.md, "the fast preset, session 27").
    "fast": EngineConfig(candidates_k=2, consolidation_every=0, n_seeds=4, expansion_budget=2, max_depth=1,
                         expand_per_node=2, ask_stop=False),
    # Wider candidate pools and deeper, larger traversals.
    "thorough": EngineConfig(candidates_k=12, channel_k=150, temporal_window=10, entity_edge_limit=5,
                             consolidation_every=10, consolidation_max_pairs=16, expansion_budget=80,
                             min_view_budget=6, max_depth=4, n_seeds=40, seed_pool=80, expand_per_node=8),
}


def preset(name: str) -> EngineConfig:
    try:
        return PRESETS[name]
    except KeyError as error:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}", "preset", name) from error


def named_config(value: str | None) -> EngineConfig:
    """A command line's `--config`: None for the default, a preset name, else the path of a JSON config file (any
    name: `engine.JSON` and `cfg.txt` are files too). A value that is neither a preset nor a readable file is a
    `ConfigError` that names both choices."""
    if value is None:
        return EngineConfig()
    if value in PRESETS:
        return PRESETS[value]
    path = Path(value)
    if not path.is_file():
        looks_like_file = path.suffix != "" or any(sep in value for sep in ("/", "\\"))
        what = f"no config file {value}" if looks_like_file else f"unknown preset {value!r}"
        raise ConfigError(f"{what}: --config takes a preset ({', '.join(PRESETS)}) or the path of a JSON config file",
                          "config", value)
    try:
        return EngineConfig.from_json(path)
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read config file {value}: {error}", "config", value) from error

