"""The runtime's command line: a thin front over `judge.cli.app`.

The hook command runs once per tool call of the agent it watches, so its start-up is the
agent's latency: ``loop-judge hook ...`` is parsed here with only the hook's own parser and
never imports rich or the other commands (about 0.2 s of every call). Every other command,
and every name judge.cli offers, comes from `judge.cli.app` on first use (PEP 562), so
``from judge.cli import main, EXIT_USAGE`` keeps working. The ``loop-judge`` console script
is `judge_eval.cli.main`, which adds the tooling's commands; ``python -m judge.cli`` runs
the runtime's alone.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from judge.cli.app import (
        COMMANDS,
        DEMO_FILE,
        EXIT_FAILED,
        EXIT_USAGE,
        PIPE_WIDTH,
        Command,
        UsageError,
        build_parser,
    )

__all__ = [
    "COMMANDS",
    "DEMO_FILE",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "PIPE_WIDTH",
    "Command",
    "UsageError",
    "build_parser",
    "main",
]

# The command that takes the fast path (see the module doc).
HOOK_COMMAND = "hook"
# pydantic's switch for its plugins (pydantic/plugin/_loader.py): "__all__" turns all off.
PLUGINS_ENV = "PYDANTIC_DISABLE_PLUGINS"


def _run_hook(argv: list[str]) -> int:
    """The hook command. Its process is ours and lives for one event, so pydantic's plugin
    scan (every installed distribution's entry points, read at the first schema build,
    a large share of each call) is skipped, unless the environment already sets
    ``PYDANTIC_DISABLE_PLUGINS`` (the user's choice wins). Set for this call only: a
    process that called `main` keeps its plugins afterwards (pydantic caches no answer
    while they are off, and one that already scanned keeps its own). The library itself
    never sets it."""
    import argparse

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


def main(argv: Sequence[str] | None = None, commands: Sequence[Command] | None = None) -> int:
    """``hook`` directly, everything else through `judge.cli.app` with ``commands`` (the
    runtime's when None)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [HOOK_COMMAND]:
        if argv is None or args == sys.argv[1:]:
            # The process's own command line (the console script): the warm daemon's
            # client, stdlib only. A caller in a process of its own answers in process.
            from judge.hooks.client import main as hook_client

            return hook_client(args[1:])
        return _run_hook(args)
    from judge.cli import app

    return app.main(args, app.COMMANDS if commands is None else commands)


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("judge.cli.app"), name)
    raise AttributeError(f"module 'judge.cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
