"""The ``loop-judge`` console script: the runtime's commands and the tooling's, in one parser.

The runtime (`judge.cli`) knows only its own commands (``demo``, ``serve``, ``hook``,
``doctor``) and never imports this package; the tooling's (``eval``, ``import``, ``check``)
are added here, in `judge_eval.cli.app`. ``hook`` runs once per tool call of the agent it
watches, so it goes straight to `judge.cli.main` before anything of the tooling is
imported: this module and the package above it import nothing else.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Every ``loop-judge`` command; ``hook`` without loading the tooling."""
    import judge.cli

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [judge.cli.HOOK_COMMAND]:
        return judge.cli.main(args)
    from judge_eval.cli.app import COMMANDS

    return judge.cli.main(args, COMMANDS)
