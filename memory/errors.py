"""Errors of the memory engine. One root; every error carries the offending value.

    MemoryEngineError                    root of every engine failure (never named `MemoryError`)
    ├── InvalidObservationError          empty or malformed observation / edited text (value)
    ├── InvalidQueryError                empty or malformed query (value)
    ├── NodeNotFoundError                no node with that id (node_id); also a LookupError
    ├── InvalidRelationError             a relation type the application does not accept (relation)
    ├── InvalidLinkError                 link attrs that are not a JSON object, a link entry not (dst, relation) (value)
    ├── ConfigError                      an EngineConfig field is out of range or unknown (field, value)
    ├── ControllerOutputError            the controller answered, but not with a valid value (key, value)
    └── SystemTwoError                   the answer / summary endpoint failed or returned junk (detail)

Controller failures keep their own types (`controller.errors.BackendError`): the write path turns them into
`LinkStatus.RELATIONS_PENDING` rather than raising. Store failures raise `memory.store.errors.StoreError`, a
`MemoryEngineError` too (its NodeNotFoundError is this module's NodeNotFoundError as well).
"""

from __future__ import annotations


class MemoryEngineError(Exception):
    """Root of all memory engine errors."""


class InvalidObservationError(MemoryEngineError, ValueError):
    def __init__(self, message: str, value: object = None) -> None:
        super().__init__(message)
        self.value = value


class InvalidQueryError(MemoryEngineError, ValueError):
    def __init__(self, message: str, value: object = None) -> None:
        super().__init__(message)
        self.value = value


class NodeNotFoundError(MemoryEngineError, LookupError):
    def __init__(self, node_id: str) -> None:
        super().__init__(f"no node with id {node_id!r}")
        self.node_id = node_id


class InvalidRelationError(MemoryEngineError, ValueError):
    def __init__(self, relation: object, allowed: tuple[str, ...]) -> None:
        super().__init__(f"relation {relation!r} is not one of {', '.join(allowed)}")
        self.relation = relation
        self.allowed = allowed


class InvalidLinkError(MemoryEngineError, ValueError):
    def __init__(self, message: str, value: object = None) -> None:
        super().__init__(message)
        self.value = value


class ConfigError(MemoryEngineError, ValueError):
    def __init__(self, message: str, field: str | None = None, value: object = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class EngineClosedError(MemoryEngineError):
    """A call on an engine after `Engine.close` (or the end of its `with` block)."""

    def __init__(self) -> None:
        super().__init__("this engine is closed (Engine.close, or the end of its with block); open a new one")


class ControllerOutputError(MemoryEngineError):
    """A controller answer that is missing, of the wrong kind, non-finite or outside its option set."""

    def __init__(self, key: str, value: object) -> None:
        super().__init__(f"invalid controller answer for {key!r}: {value!r}")
        self.key = key
        self.value = value


class SystemTwoError(MemoryEngineError):
    def __init__(self, message: str, detail: object = None) -> None:
        super().__init__(message)
        self.detail = detail
