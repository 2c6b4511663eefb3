"""The data package's error roots, in a module of their own so that the low-level helpers (`data.paths`) can
raise them without importing the schema. `data.schema` re-exports `DataError`."""

from __future__ import annotations


class DataError(Exception):
    """Root of all data-package errors."""


class StagingError(DataError, OSError):
    """A directory could not be replaced whole (`data.paths.staged`): the directory is as it was and the copy is
    gone. An `OSError` too, so code that caught the system's error before still catches it."""


class BusyError(DataError):
    """Another process (or a nested block of this thread) holds the lock of the path to write (`data.paths.exclusive`)."""


__all__ = ["BusyError", "DataError", "StagingError"]
