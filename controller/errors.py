"""Errors of the controller package.

    ControllerError                      root of every controller failure
    ├── InvalidRequestError              the request is malformed (also a typesafe_sdk.TypeSafeError,
    │   │                                so `except TypeSafeError` written for the SDK still works)
    │   ├── UnknownModelError            model name is neither an alias nor a served model (HTTP 400)
    │   ├── UnsupportedQuestionError     a question type or asset this text model cannot answer (HTTP 422)
    │   └── InputTooLongError            rendered input exceeds the model's token budget (HTTP 413)
    ├── BackendError                     a backend failed to answer
    │   ├── BackendUnavailableError      remote server down, model not loadable (HTTP 503)
    │   │   └── CacheWriteError          (`controller.graph_cache`, internal) a graph cache that cannot be written:
    │   │                                `ensure_graph` then builds in a private temporary directory instead
    │   ├── UnknownBackendError          no backend registered under that name, or an object that is no Backend
    │   └── BackendOptionError           a backend factory given a keyword option it does not take (also a TypeError)
    │       └── BackendOptionValueError  ... or one it takes with a value it cannot use (also a ValueError)
    └── ArtifactError                    a model directory is missing, corrupt or mismatched
        ├── CalibrationMismatchError     calibration.json was fitted on another model hash (or states.json)
        └── ParityError                  an exported graph disagrees with torch above tolerance

Client-side validation messages are the SDK's own (the SDK's validator is called directly).
"""

from __future__ import annotations

from typesafe_sdk import TypeSafeError


class ControllerError(Exception):
    """Root of all controller errors."""


class InvalidRequestError(ControllerError, TypeSafeError):
    """A request that can never succeed as written. `loc` points into the request body."""

    def __init__(self, message: str, *, loc: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.loc = loc


class UnknownModelError(InvalidRequestError):
    """The requested model is not served here."""


class UnsupportedQuestionError(InvalidRequestError):
    """A question type, option count or asset that this model does not accept."""


class InputTooLongError(InvalidRequestError):
    """The rendered request does not fit the model's maximum sequence length (never truncated)."""

    def __init__(self, message: str, *, tokens: int, limit: int, loc: tuple[str | int, ...] = ()) -> None:
        super().__init__(message, loc=loc)
        self.tokens = tokens
        self.limit = limit


class BackendError(ControllerError):
    """A backend could not produce answers."""


class BackendUnavailableError(BackendError):
    """The backend is temporarily or permanently unable to answer (model missing, server down)."""


class UnknownBackendError(BackendError):
    """No backend is registered under the given name."""



class BackendOptionError(BackendError, TypeError):
    """A backend factory was given a keyword option it does not take. `backend` names the backend (or the
    type of a `Backend` passed in), `option` the offending keyword, `detail` the factory's own TypeError
    text. Also a `TypeError`, so code that caught the factory's TypeError before (serving's
    JEVMEM_CONTROLLER_OPTIONS check) still catches it; the message always says "keyword argument"."""

    def __init__(self, message: str, *, backend: str, option: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.backend = backend
        self.option = option
        self.detail = detail


class BackendOptionValueError(BackendOptionError, ValueError):
    """A backend option of the wrong type or out of range (`{"threads": "2"}`, `{"quantize": "false"}`). A
    `BackendOptionError`, so the server reports it as a setting, and a `ValueError`, as the checks it replaces were."""


class ArtifactError(ControllerError):
    """A model directory is missing files, corrupt, or inconsistent."""


class CalibrationMismatchError(ArtifactError):
    """A calibration file belongs to a different model than the one loaded."""


class ParityError(ArtifactError):
    """An exported graph's outputs differ from the torch reference by more than the tolerance."""

    def __init__(self, message: str, *, max_abs_diff: float, atol: float) -> None:
        super().__init__(message)
        self.max_abs_diff = max_abs_diff
        self.atol = atol
