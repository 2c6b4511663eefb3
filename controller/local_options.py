"""The `local` backend's keyword options, checked before anything is loaded or built.

`create_backend("local", **options)` is fed from JSON (`JEVMEM_CONTROLLER_OPTIONS`), where `{"quantize": "false"}`
or `{"threads": "2"}` are easy to write: unchecked, the first quantised (a non-empty string is true), the second
reached torch as a bare RuntimeError. Every refusal is a `BackendOptionValueError` naming the option and the value
(a `TypeError` and a `ValueError` both, whose message says "keyword argument", so the server reports it as a
setting).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

from controller.errors import BackendOptionValueError

RUNTIMES = ("onnx", "torch")
ENCODINGS = ("packed", "npair")
EXPORT_METHODS = ("fused", "torch")
_DEVICES = {"onnx": re.compile(r"auto|cpu|cuda"), "torch": re.compile(r"auto|cpu|cuda(:\d+)?")}


def check_local_options(options: Mapping[str, Any]) -> None:
    """`BackendOptionValueError` for the first option of `LocalBackend` whose value it cannot use (`options`: all of
    them, defaults included)."""
    from controller.template import OVERFLOW_POLICIES

    runtime = options["runtime"]
    _choice(options, "runtime", RUNTIMES)
    _choice(options, "encoding", ENCODINGS)
    _choice(options, "export_method", EXPORT_METHODS)
    _choice(options, "overflow", OVERFLOW_POLICIES)
    for name in ("quantize", "spinning"):
        if not isinstance(options[name], bool):
            raise _error(name, options[name], "must be true or false")
    if options["quantize"] and runtime != "onnx":
        raise _error("quantize", True, "needs runtime='onnx' (int8 quantisation is of the ONNX graph)")
    threads = options["threads"]
    if threads is not None and not (_integer(threads) and threads >= 0):
        raise _error("threads", threads, "must be a whole number >= 0, or null (0 and null: the default)")
    device = options["device"]
    if device is not None and not (isinstance(device, str) and _DEVICES[runtime].fullmatch(device)):
        allowed = "auto, cpu, cuda" + (" or cuda:N" if runtime == "torch" else "")
        raise _error("device", device, f"must be null, {allowed} for runtime={runtime!r}")
    for name in ("max_request_tokens", "max_sequence_tokens", "max_batch_tokens"):
        if not (_integer(options[name]) and options[name] >= 1):
            raise _error(name, options[name], "must be a whole number >= 1")
    padding = options["max_padding"]
    if isinstance(padding, bool) or not isinstance(padding, (int, float)) or not (math.isfinite(padding) and 0 <= padding <= 1):
        raise _error("max_padding", padding, "must be a number in [0, 1] (the largest padded share of a batch)")


def check_path_option(name: str, value: Any) -> None:
    """A directory option (`model_dir`, `base_path`): null, a string or a path."""
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise _error(name, value, "must be a path (a string) or null")
    if value is not None and not os.fspath(value):  # Path("") is the working directory
        raise _error(name, value, "must be a path, not empty (null for the default)")
    if value is not None and "\0" in str(os.fspath(value)):
        raise _error(name, value, "must not contain a NUL byte")


def _choice(options: Mapping[str, Any], name: str, allowed: tuple[str, ...]) -> None:
    if not isinstance(options[name], str) or options[name] not in allowed:
        raise _error(name, options[name], f"must be one of {', '.join(allowed)}")


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _error(name: str, value: Any, rule: str) -> BackendOptionValueError:
    detail = f"{name} {rule}, not {value!r}"
    return BackendOptionValueError(f"backend 'local' cannot use the keyword argument {name}={value!r}: {detail}",
                                   backend="local", option=name, detail=detail)


__all__ = ["ENCODINGS", "EXPORT_METHODS", "RUNTIMES", "check_local_options", "check_path_option"]
