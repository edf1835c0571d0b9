"""What every ``loop-judge`` command shares: exit codes, the usage error and the settings.

Each command lives in its own module of judge.cli; the helpers two or more of them use are
here so no command module imports another command's.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from judge.config import TrackerConfig
from judge.errors import ConfigError

__all__ = [
    "EXIT_FAILED",
    "EXIT_USAGE",
    "PIPE_WIDTH",
    "UsageError",
    "tracker_config",
    "validation_problems",
]

# Exit codes: 1 = the run finished but something failed (a crash, a file not imported),
# 2 = the command was used wrongly (argparse's own code for usage errors).
EXIT_FAILED = 1
EXIT_USAGE = 2
# Console width when output is not a terminal (CI logs, files): wide enough for all columns.
PIPE_WIDTH = 180


class UsageError(ConfigError):
    """The command line asks for something that cannot be done; exit 2 with this message."""


def tracker_config(overrides: dict[str, Any]) -> TrackerConfig:
    """The tracker settings: ``LOOP_JUDGE_*`` under the command's own overrides.

    A bad variable is already a one-line `ConfigError` naming it; a bad override is turned
    into one line per problem that keeps the field's name (the rule alone does not say
    which flag is wrong).
    """
    try:
        return TrackerConfig(**overrides)
    except ValidationError as exc:
        raise UsageError(f"invalid tracker configuration: {validation_problems(exc)}") from exc


def validation_problems(exc: ValidationError) -> str:
    """A pydantic error as one line: ``field: rule`` per problem, joined by ``; ``."""
    problems = []
    for error in exc.errors():
        where = ".".join(map(str, error["loc"]))
        rule = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{where}: {rule}" if where and not rule.startswith(where) else rule)
    return "; ".join(problems)
