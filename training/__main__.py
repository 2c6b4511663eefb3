"""`python -m training <command>`: the training pipeline's command line.

Each command lives in its own module exposing `add_parser(subparsers)`, which registers a subparser whose
`handler` default takes the parsed arguments and returns an exit code. Add new commands to `COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
from collections.abc import Sequence

COMMANDS: tuple[str, ...] = ("training.data_cli", "training.cli", "training.calibration_compare", "training.compare_models", "training.ood",
                             "training.ensemble", "training.embedder")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training", description="jevmem-local training pipeline")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        importlib.import_module(module).add_parser(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from controller.errors import ArtifactError, BackendUnavailableError
    from data.schema import DataError
    from training.errors import TrainingError

    try:
        return int(args.handler(args))
    except (DataError, TrainingError, ArtifactError, BackendUnavailableError) as error:  # bad input (data, a model or base directory)
        # or a stage that cannot run: a message, not a traceback
        print(f"error: {flag_names(str(error))}", file=sys.stderr)
        return 2
    except OSError as error:  # the system refused a file no check foresaw (it names it): a message, not a traceback
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:  # Ctrl-C: every file is whole (written atomically); a fit says how to resume
        print(f"interrupted: {interrupt}" if str(interrupt) else "interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as a shell reports it


# a settings check names the field it refused; the user typed the flag (the flags are the fields, dashed)
_FIELD = re.compile(r"\b(?:FitConfig|LocomoRules|PipelineConfig|OodConfig|EmbedderFitConfig)\.(\w+)")


def flag_names(message: str) -> str:
    """`FitConfig.max_minutes` -> `--max-minutes` (likewise the other settings classes), and the synthetic
    builders' `per_family` -> `--synthetic-per-family`, in an error message shown to the command's user."""
    message = _FIELD.sub(lambda m: "--" + m.group(1).replace("_", "-"), message)
    return re.sub(r"\bper_family\b", "--synthetic-per-family", message)


if __name__ == "__main__":
    sys.exit(main())
