"""Synthetic decision data with exact labels: seeded, template-based generators over word banks.

    from data.synthetic import SyntheticConfig, generate
    examples = generate(SyntheticConfig(per_family=1500, seed=0), SplitPlan())

A generator makes `share x per_family` states: share 1 for typing, consolidation, routing, relevance and
stopping; the pair family's four generators have causal 0.5, temporal 0.75, entities 0.5, near_miss 0.5.

Generators (module -> registry name -> family): memory_types -> typing; causal, temporal, entities,
near_miss -> pair (near_miss also labels consolidation on the same states); consolidation ->
consolidation; routing -> routing; retrieval -> relevance, stopping. Every module's docstring states its
labelling rules.
"""

from data.synthetic import causal, consolidation, entities, memory_types, near_miss, retrieval, routing, temporal  # noqa: F401  (registration)
from data.synthetic.emit import Emitter, QuestionStyle
from data.synthetic.registry import GENERATORS, Generator, SyntheticConfig, generate, register

__all__ = ["GENERATORS", "Emitter", "Generator", "QuestionStyle", "SyntheticConfig", "generate", "register"]
