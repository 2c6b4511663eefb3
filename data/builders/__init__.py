"""Builders of the decision data set: LoCoMo label rules, the whole build, its summary.

    from data.builders import BuildConfig, build_dataset, write_build
"""

from data.builders.dataset import BuildConfig, BuildResult, build_dataset, write_build
from data.builders.locomo import LocomoRules, build_locomo
from data.builders.summary import Summary, format_questions, format_table, summarize

__all__ = [
    "BuildConfig", "BuildResult", "LocomoRules", "Summary", "build_dataset", "build_locomo", "format_questions",
    "format_table", "summarize", "write_build",
]
