"""Synthetic decision data with exact labels: seeded, template-based generators over word banks.

    from data.synthetic import SyntheticConfig, generate
    examples = generate(SyntheticConfig(per_family=1500, seed=0), SplitPlan())

Generators (module -> registry name -> family): memory_types -> typing; causal, temporal, entities,
near_miss -> pair (near_miss also labels consolidation on the same states); consolidation ->
consolidation; routing -> routing; retrieval -> relevance, stopping. Every module's docstring states its
labelling rules.
"""

from data.synthetic import causal, consolidation, entities, memory_types, near_miss, retrieval, routing, temporal  # noqa: F401  (registration)
from data.synthetic.emit import Emitter, QuestionStyle
from data.synthetic.registry import GENERATORS, Generator, SyntheticConfig, generate, register

__all__ = ["GENERATORS", "Emitter", "Generator", "QuestionStyle", "SyntheticConfig", "generate", "register"]
