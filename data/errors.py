"""The data package's error roots, in a module of their own so that the low-level helpers (`data.paths`) can
raise them without importing the schema. `data.schema` re-exports `DataError`."""

from __future__ import annotations


class DataError(Exception):
    """Root of all data-package errors."""


class StagingError(DataError, OSError):
    """A directory could not be replaced whole (`data.paths.staged`): the directory is as it was and the copy is
    gone. An `OSError` too, so code that caught the system's error before still catches it."""


__all__ = ["DataError", "StagingError"]
