"""Decision labels derived from LoCoMo (conversations from `data.locomo.load_locomo(path, audit=...)`).

The data is read from a path the user gives and never bundled. Categories, gold evidence and the
`observation` facts are used as *labels only*: no state ever contains a category or an answer, and an
observation fact only as the query of an observation-query relevance state (train split, see RELEVANCE).
All examples of a conversation share the group `locomo:<sample_id>` (the split unit). Every
rule, and the noise it is known to carry (lower weights mark the noisier labels):

RELEVANCE (state {"query", "memory"}; questions of categories 1-4 with evidence; adversarial ones skipped)
- gold evidence turns (audit-corrected) -> relevant 1; bridge 1 when the question has >= 2 gold turns
  (each is a step toward the others), no bridge label otherwise.
- hard negatives: the top BM25-ranked and the top dense-ranked non-gold turns -> relevant 0; random turns
  -> relevant 0. Turns within `adjacency` positions of a gold turn are never negatives (they often carry
  the context of the answer). Noise: LoCoMo cites only some of the turns that support an answer, so top
  ranks hold unlabelled evidence (the hardest negatives are the likeliest to be wrong).
  Measured proxy on the 6 dev conversations: 1.2% of the BM25 negatives contain the gold answer string
  literally, against 35% of the gold turns and 0.4% of random turns.
- bridge: non-gold turns sharing a named entity or >= 2 rare topic words with a gold turn -> bridge 1,
  relevant 0 (both weight 0.5). Noisy: a shared word is a weak sign of a useful stepping stone, and 7.6%
  of these turns contain the answer string (likely unlabelled evidence). Every other negative has
  bridge 0 (weight 0.5).
- swapped queries (train split only, `query_swaps` per gold turn): the gold turn under another answerable
  question of the same conversation whose gold turns are not within `adjacency` of it -> relevant 0 (no
  bridge label). The first is that question nearest the turn by dense cosine (BM25 without vectors), the rest
  random (with `random_swaps`, all random: the nearest question is the likeliest to be answered by the turn too). Every gold turn is then both a positive and a negative, so a judgment of the turn alone (long,
  informative turns look relevant to anything) no longer pays; the pair has to be read. Noise: a nearby
  question can be answered by the turn without citing it; `swap_target` > 0 gives these negatives that soft
  target instead of 0 (0.15 did not help the relevance specialist: docs/EXPERIMENTS.md, row "soft targets for the
  swapped-query negatives"). Off by default: with 2 swaps per gold turn
  (`make train` otherwise unchanged) LoCoMo dev relevance AUROC fell from 0.738 to 0.647 (conv-44: 0.740 to
  0.693); the model lowered every gold-like turn instead of learning to read the pair (docs/EXPERIMENTS.md).
- observation queries (train split only, up to `observation_queries` facts per conversation, drawn with a
  fixed seed): an `observation` fact that cites exactly one turn becomes the query of a state, that turn
  -> relevant 1; its top BM25 turns and random turns outside `adjacency` of it -> relevant 0 (no bridge
  labels; every label weight 0.7). A fact is a statement, not a question, and the state contains it: this is
  the one rule under which an observation fact enters a state, as a query written from a turn, never as a
  memory. It multiplies the distinct queries of the training conversations (855 facts citing one turn beside
  about 600 answerable questions) so that matching a query to its turn is learnt from more than the
  question set.
  Noise: a fact restated in a later turn makes that turn unlabelled evidence among the BM25 negatives, and a
  fact can summarise a turn with its neighbours. Off in `make train`: with every fact the model read the query
  more (same-memory share 0.061 -> 0.11-0.20 in two runs) but LoCoMo dev relevance AUROC stayed at 0.72-0.74
  and end-to-end recall did not move (docs/EXPERIMENTS.md).
- context (`relevance_context`, every split): each relevance state also carries "previous", the turn just
  before its memory in the same session (none for a session's first turn), cut to 240 characters
  (`controller.families.previous_text`). Labels are unchanged: the question still judges state.memory. A
  reply such as "Yes, twice!" is evidence only with the question it answers, which the engine supplies from
  its `temporal_next` chain when `EngineConfig.relevance_context` is on. Noise: the previous turn can itself
  be the unlabelled evidence (within `adjacency` of a gold turn no negative is drawn, so this is rare).
- dates (`relevance_dated`, every split): each relevance memory is rendered with its session date,
  `[8 May 2023] Speaker: text` (`controller.families.memory_text`, as in stopping and pair states), so a
  question that names a date ("Who did Maria have dinner with on May 3, 2023?") can tell two turns about
  the same activity apart; without it such negatives look like the gold turn. Labels are unchanged; the
  engine renders its candidates the same way when `EngineConfig.relevance_dated` is on. Noise: the date is
  the session's, and a turn may speak of an earlier day ("last night").
- renamed speakers (`rename_speakers`, train split only, off by default): for that share of the questions
  (drawn with a fixed seed per conversation), every relevance state of the question (gold, bridge and
  negatives alike) has the conversation's two speakers replaced, whole words only, by two other first names
  from the synthetic word banks, the same two throughout the question's states. The training conversations
  have six speakers (two of them named John) and the held-out ones others; renaming makes matching the
  query's person to the memory's speaker a skill rather than a memory of six names. Labels are unchanged.
  Noise: a renamed name can clash with the gender of a pronoun, and third parties keep their names.
STOPPING (state {"query", "evidence", "depth"}; evidence items `[date] Speaker: text`, shuffled)
- all gold turns + BM25 distractors -> evidence_sufficient 1, continue_useful 0, missing_evidence 0.
- some or all gold missing -> 0 / 1 / 1 (missing_evidence weight 0.7: the query's subject is often still
  named by a distractor). Noise: gold sets are incomplete or over-complete (open-domain questions need
  world knowledge), and continue_useful assumes the missing turn can be found (it exists in memory).
- contradiction 0 everywhere (weight 0.3): LoCoMo conversations rarely contradict themselves; synthetic
  data supplies the positives.
ROUTING (state {"query"}; every question, adversarial included)
- temporal: category 2, or a time question form (when, how long, before/after, since, ago, ...).
- multi_hop: category 1, or >= 2 gold turns in different sessions; else 0. Category 3 questions need
  inference and are sometimes multi-hop in effect but get 0 unless the evidence rule fires.
- causal: why / what led / what made / motivated / inspired forms.
- entity (weight 0.5): a named entity other than the two speakers, or a relative/possession of a
  speaker ("Caroline's sister", "Melanie's pets"). Noisy by construction.
- recency (weight 0.7): now / currently / latest / recently / still forms.
- semantic (weight 0.3): 1 except pure date-window queries; near-constant on LoCoMo.
PAIR (state {"memory_a", "memory_b"}, `Speaker: text [shares caption]`, half of the states prefixed by
`[date]`; only the questions a rule settles are labelled)
- same_episode: same session within 2 turns and adjacent or sharing a topic word -> 1; different
  sessions -> 0; same session >= 10 turns apart without a shared topic word -> 0. Noise: adjacent turns
  can change topic; a later session can continue a thread.
- semantic: turns cited together as evidence of one question (weight 0.8), or whose observation facts
  share >= 2 rare topic words (weight 0.6) -> 1; no shared topic word in text or observation facts and
  not adjacent -> 0 (weight 0.8). Noise: co-evidence of list questions joins different events of one theme.
- temporal (7-way Choice): dated states from different sessions whose texts do not shift their own time
  ("last year", "tomorrow", "used to", ...) -> before / after by session date (weight 0.7; a turn can still
  describe an older event); undated states from different sessions -> unknown (weight 0.5; texts sometimes
  imply an order). Same-session pairs get no temporal label.
- update (weight 0.3): the same speaker in a later session, sharing >= 2 rare topic words with the
  earlier turn and using a change marker (now, no longer, switched, moved, quit, ...) -> 1 with the later
  turn as memory_a; pairs labelled semantic 0 -> update 0. Weak and rare.
- causal and entity_equivalence: no sound rule; synthetic data only.
TYPING: no sound rule from observation facts was found; synthetic data only.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.families import memory_text
from controller.lexical import BM25
from data.builders.text import content_tokens, date_text, entities, speaker_stop
from data.locomo import Conversation, Turn, normalise_evidence
from data.schema import DataError, DecisionExample
from data.splits import SplitPlan
from data.synthetic.emit import Emitter, QuestionStyle

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocomoRules:
    """Knobs of the LoCoMo label rules (counts are per question or per conversation)."""

    bm25_negatives: int = 4  # top BM25 non-gold turns per question
    dense_negatives: int = 2  # top dense non-gold turns per question (not already taken)
    random_negatives: int = 2
    bridges: int = 2  # bridge candidates per question
    query_swaps: int = 0  # train split only: each gold turn under this many other questions -> relevant 0 (off: see below)
    random_swaps: bool = False  # swapped questions all drawn at random, the nearest one not taken first (see below)
    swap_target: float = 0.0  # the relevant target of a swapped-query example (soft when > 0; see below)
    observation_queries: int = 0  # train split only: observation facts per conversation used as queries (see below)
    train_hard_negatives: int = 0  # train split only: this many more top BM25 and as many more top dense non-gold turns
    train_bm25_negatives: int | None = None  # train split only: instead of bm25_negatives (None: the same)
    train_dense_negatives: int | None = None  # train split only: instead of dense_negatives (None: the same)
    observation_bm25_negatives: int = 3  # per observation query
    observation_random_negatives: int = 1
    adjacency: int = 1  # turns this close to a gold turn are never negatives
    relevance_context: bool = False  # relevance states carry "previous", the turn before the memory (see below)
    relevance_dated: bool = False  # relevance memories carry their session date, `[8 May 2023] ...` (see below)
    rename_speakers: float = 0.0  # train split only: share of questions whose relevance states rename the speakers (see below)
    stopping_max_items: int = 5
    stopping_insufficient: int = 2  # insufficient evidence sets per question
    pairs_same_session: int = 200  # candidate pairs per conversation, by source
    pairs_far_session: int = 80
    pairs_random: int = 250
    pairs_observation: int = 150
    rare_df: float = 0.012  # a topic word is rare when it occurs in at most this share of turns (min 3)
    seed: int = 0

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if isinstance(value, float) and not math.isfinite(value):  # NaN passes every comparison below
                raise DataError(f"LocomoRules.{name} must be a finite number, got {value}")
            if isinstance(value, (int, float)) and value < 0:
                raise DataError(f"LocomoRules.{name} must be >= 0, got {value}")
        if self.rename_speakers > 1:
            raise DataError(f"LocomoRules.rename_speakers is a share in [0, 1], got {self.rename_speakers}")
        if self.swap_target >= 0.5:
            raise DataError(f"LocomoRules.swap_target is a negative's soft target in [0, 0.5), got {self.swap_target}")


def turn_text(turn: Turn, *, dated: bool = False) -> str:
    """The observation text the engine stores (`Speaker: text [shares caption]`), optionally dated."""
    return memory_text(turn.memory_text(), turn.date if dated else None)


@dataclass
class ConversationIndex:
    """Per-conversation lookups shared by the rules."""

    conv: Conversation
    position: dict[str, int]
    stop: frozenset[str]
    tokens: list[set[str]]
    rare: list[set[str]]
    ents: list[set[str]]
    obs_rare: list[set[str]]
    bm25: BM25
    turn_vectors: Any = None  # (n_turns, dim) float32 or None
    query_vectors: dict[str, Any] = field(default_factory=dict)

    @property
    def turns(self) -> tuple[Turn, ...]:
        return self.conv.turns

    def bm25_rank(self, query: str, k: int = 60) -> list[int]:
        return [doc for doc, _ in self.bm25.top(query, k)]

    def dense_rank(self, qid: str, k: int = 60) -> list[int]:
        if self.turn_vectors is None or qid not in self.query_vectors:
            return []
        scores = self.turn_vectors @ self.query_vectors[qid]
        order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
        return order[:k]


def index_conversation(conv: Conversation, rules: LocomoRules) -> ConversationIndex:
    stop = speaker_stop(conv.speakers)
    turns = conv.turns
    tokens = [content_tokens(f"{t.text} {t.caption or ''}", stop) for t in turns]
    df = Counter(tok for toks in tokens for tok in toks)
    limit = max(3, int(rules.rare_df * len(turns)))
    rare = [{t for t in toks if df[t] <= limit} for toks in tokens]
    known = {t.dia_id for t in turns}
    obs: dict[str, set[str]] = {}
    for facts in conv.observations.values():
        for fact, dia in facts:
            for d in normalise_evidence(dia, known):
                obs.setdefault(d, set()).update(content_tokens(fact, stop))
    obs_df = Counter(tok for toks in obs.values() for tok in toks)
    obs_limit = max(3, int(rules.rare_df * max(1, len(obs))))
    obs_rare = [{t for t in obs.get(turn.dia_id, ()) if obs_df[t] <= obs_limit} for turn in turns]
    bm25 = BM25()
    bm25.add_many(f"[{date_text(t.date)}] {t.memory_text()}" for t in turns)
    return ConversationIndex(
        conv=conv,
        position={t.dia_id: i for i, t in enumerate(turns)},
        stop=stop,
        tokens=tokens,
        rare=rare,
        ents=[entities(f"{t.text} {t.caption or ''}", stop) for t in turns],
        obs_rare=obs_rare,
        bm25=bm25,
    )


def attach_dense(indexes: Sequence[ConversationIndex], embedder: Any) -> None:
    """Embed every turn (`[date] Speaker: text`) and question once, for the dense hard negatives."""
    texts: list[str] = []
    for ix in indexes:
        texts.extend(f"[{date_text(t.date)}] {t.speaker}: {t.text}" for t in ix.turns)
        texts.extend(q.question for q in ix.conv.questions)
    # Length-sorted batches pad far less (the embedder pads each batch to its longest text).
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    sorted_vectors = embedder.embed([texts[i] for i in order])
    vectors = sorted_vectors[_inverse(order)]
    at = 0
    for ix in indexes:
        n, m = len(ix.turns), len(ix.conv.questions)
        ix.turn_vectors = vectors[at : at + n]
        ix.query_vectors = {q.qid: vectors[at + n + i] for i, q in enumerate(ix.conv.questions)}
        at += n + m


def _inverse(order: list[int]) -> list[int]:
    inverse = [0] * len(order)
    for position, original in enumerate(order):
        inverse[original] = position
    return inverse


def build_locomo(
    conversations: Sequence[Conversation],
    plan: SplitPlan,
    *,
    rules: LocomoRules | None = None,
    embedder: Any = None,
    style: QuestionStyle | None = None,
) -> list[DecisionExample]:
    """All LoCoMo-derived examples of the given conversations, split by `plan`."""
    from data.builders.locomo_pairs import pair_examples
    from data.builders.locomo_retrieval import relevance_examples, stopping_examples
    from data.builders.locomo_routing import routing_examples

    rules = rules or LocomoRules()
    indexes = [index_conversation(c, rules) for c in conversations]
    if embedder is not None:
        attach_dense(indexes, embedder)
    out: list[DecisionExample] = []
    for ix in indexes:
        sid = ix.conv.sample_id
        group = f"locomo:{sid}"
        for name, rule in (("relevance", relevance_examples), ("stopping", stopping_examples),
                           ("routing", routing_examples), ("pair", pair_examples)):
            emitter = Emitter(
                source="locomo",
                group=group,
                split=plan.split_for(group),
                rng=random.Random(f"locomo:{rules.seed}:{sid}:{name}"),
                id_prefix=f"locomo:{sid}:{name}",
                style=style or QuestionStyle(),
            )
            rule(ix, emitter, rules)
            out.extend(emitter.examples)
            log.info("locomo %s %s: %d states, %d examples", sid, name, emitter.states, len(emitter.examples))
    return out
