"""The controller's public API is a curated list, and importing it stays light."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import controller

EXPORTED = {
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
}
HEAVY = ("torch", "transformers", "onnxruntime", "onnx", "faiss", "peft", "datasets")


def test_all_is_the_curated_set() -> None:
    assert set(controller.__all__) == EXPORTED
    assert len(controller.__all__) == len(EXPORTED)
    assert list(controller.__all__) == sorted(controller.__all__)
    for name in controller.__all__:
        assert getattr(controller, name) is not None


def test_public_names_are_defined_in_the_package() -> None:
    for name in controller.__all__:
        member = getattr(controller, name)
        if isinstance(member, type) or inspect.isfunction(member):  # `Question` is a Union alias
            assert member.__module__.startswith("controller."), (name, member.__module__)


def test_builtin_backends_are_registered() -> None:
    assert {"heuristic", "local", "remote"} <= set(controller.available_backends())


def test_import_is_light() -> None:
    code = (
        "import json, sys\n"
        "import controller, controller.client, controller.heuristic, controller.remote, controller.families\n"
        "controller.available_backends()\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
