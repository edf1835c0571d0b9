"""The ``loop-judge`` command line: a thin front over `judge.cli.app`.

The hook command runs once per tool call of the agent it watches, so its start-up is the
agent's latency: ``loop-judge hook ...`` is parsed here with only the hook's own parser and
never imports rich, the eval machinery or the other commands (about 0.2 s of every call).
Every other command, and every name judge.cli always offered, comes from `judge.cli.app`
on first use (PEP 562), so ``from judge.cli import main, EXIT_STOP`` keeps working.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from judge.cli.app import (
        DEFAULT_DATA_DIR,
        DEFAULT_OUT_DIR,
        DEMO_FILE,
        EXIT_FAILED,
        EXIT_NO_LOOP,
        EXIT_STOP,
        EXIT_USAGE,
        EXIT_WARN,
        JUDGES,
        MODES,
        PIPE_WIDTH,
        SCHEDULES,
        RunPlan,
        UsageError,
        assistant_turn_ends,
        build_parser,
        replay,
    )

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_OUT_DIR",
    "DEMO_FILE",
    "EXIT_FAILED",
    "EXIT_NO_LOOP",
    "EXIT_STOP",
    "EXIT_USAGE",
    "EXIT_WARN",
    "JUDGES",
    "MODES",
    "PIPE_WIDTH",
    "SCHEDULES",
    "RunPlan",
    "UsageError",
    "assistant_turn_ends",
    "build_parser",
    "main",
    "replay",
]

# The command that takes the fast path (see the module doc).
HOOK_COMMAND = "hook"
# pydantic's switch for its plugins (pydantic/plugin/_loader.py): "__all__" turns all off.
PLUGINS_ENV = "PYDANTIC_DISABLE_PLUGINS"


def _run_hook(argv: list[str]) -> int:
    """The hook command. Its process is ours and lives for one event, so pydantic's plugin
    scan (every installed distribution's entry points, read at the first schema build,
    ~12 ms of each call: issue 11) is skipped, unless the environment already sets
    ``PYDANTIC_DISABLE_PLUGINS`` (the user's choice wins). Set for this call only: a
    process that called `main` keeps its plugins afterwards (pydantic caches no answer
    while they are off, and one that already scanned keeps its own). The library itself
    never sets it."""
    from judge.cli import hook

    preset = PLUGINS_ENV in os.environ
    if not preset:
        os.environ[PLUGINS_ENV] = "__all__"
    try:
        parser = argparse.ArgumentParser(prog="loop-judge")
        hook.add_parser(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(argv)
        return int(args.func(args, None))
    finally:
        if not preset:
            os.environ.pop(PLUGINS_ENV, None)


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: ``hook`` directly, everything else through `judge.cli.app`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [HOOK_COMMAND]:
        return _run_hook(args)
    from judge.cli.app import main as full_main

    return full_main(args)


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("judge.cli.app"), name)
    raise AttributeError(f"module 'judge.cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
