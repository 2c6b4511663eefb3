"""jevmem-local's System One controller: typed Noul / Choice / Score questions about a JSON state.

    from controller import SystemOneClient
    with SystemOneClient("heuristic") as client:
        r = client.system_one({"observation": "..."}, {"episodic": {"type": "noul", "instructions": "..."}})

Importing this package loads neither torch nor onnxruntime; backends import them when built.
"""

from controller.backend import (
    Backend,
    BackendRequest,
    BackendResult,
    ModelInfo,
    available_backends,
    check_backend_options,
    create_backend,
    register_backend,
)
from controller.client import AsyncSystemOneClient, SystemOneClient
from controller.errors import (
    ArtifactError,
    BackendOptionError,
    BackendOptionValueError,
    BackendError,
    BackendUnavailableError,
    CalibrationMismatchError,
    ControllerError,
    InputTooLongError,
    InvalidRequestError,
    ParityError,
    UnknownBackendError,
    UnknownModelError,
    UnsupportedQuestionError,
)
from controller.questions import ChoiceQuestion, NoulQuestion, Question, ScoreQuestion

__all__ = [
    "ArtifactError",
    "AsyncSystemOneClient",
    "Backend",
    "BackendError",
    "BackendOptionError",
    "BackendOptionValueError",
    "BackendRequest",
    "BackendResult",
    "BackendUnavailableError",
    "CalibrationMismatchError",
    "ChoiceQuestion",
    "ControllerError",
    "InputTooLongError",
    "InvalidRequestError",
    "ModelInfo",
    "NoulQuestion",
    "ParityError",
    "Question",
    "ScoreQuestion",
    "SystemOneClient",
    "UnknownBackendError",
    "UnknownModelError",
    "UnsupportedQuestionError",
    "available_backends",
    "check_backend_options",
    "create_backend",
    "register_backend",
]
