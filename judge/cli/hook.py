"""``loop-judge hook claude-code``: the Claude Code hook command.

Claude Code runs it once per hook event with the event's JSON on stdin; it answers with
exit code 0 and, only when it has something to say, the hook's JSON on stdout (see
`judge.integrations.claude_code` for what it answers). A hook must never break the agent:
whatever goes wrong inside (an unreadable payload, a locked or unwritable state file, a
bug) ends with exit 0, nothing on stdout and one line on stderr, so Claude Code carries on
as if no hook ran. It runs on every tool call, so it imports only what the tracker needs,
and litellm only when a judge check is due; and the console script and ``python -m
judge.hooks`` first ask the warm daemon (`judge.hooks.client`), which answers the same
without the imports, and come here (`main`) when it does not answer.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

__all__ = ["add_parser", "main", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hook = sub.add_parser(
        "hook",
        help="answer an agent's hook event (Claude Code, Gemini CLI, Codex, Cursor) from stdin",
        description="Run as an agent's hook: read the event JSON on stdin, answer in the "
        "agent's hook protocol on stdout. Always exits 0; problems go to stderr.",
    )
    agents = hook.add_subparsers(dest="agent", required=True)
    claude = agents.add_parser(
        "claude-code",
        help="Claude Code's PreToolUse, PostToolUse, PostToolUseFailure and Stop hooks",
        description="One tracker per Claude Code session, kept in a state file between "
        "invocations (LOOP_JUDGE_* configure it). Denies a call that would repeat a loop "
        "(PreToolUse), tells Claude after a repeated result (PostToolUse), and blocks a "
        "Stop once when the run ends in a loop.",
    )
    claude.add_argument(
        "--state-dir",
        default=None,
        help="where session states are kept (default: $LOOP_JUDGE_HOOK_STATE_DIR, else "
        "the user cache directory's loop-judge/claude-code)",
    )
    claude.set_defaults(func=run)
    gemini = agents.add_parser(
        "gemini",
        help="Gemini CLI's BeforeTool, AfterTool and AfterAgent hooks",
        description="The Claude Code hook's loop protection in Gemini CLI's protocol: "
        "denies a call that would repeat a loop (BeforeTool), tells the model after a "
        "repeated result (AfterTool), and rejects a final response once when the turn "
        "ends in a loop (AfterAgent). Prints JSON ({} for no opinion), exits 0.",
    )
    gemini.add_argument(
        "--state-dir",
        default=None,
        help="where session states are kept (default: as for claude-code)",
    )
    gemini.set_defaults(func=run)
    codex = agents.add_parser(
        "codex",
        help="Codex CLI's PreToolUse, PostToolUse and Stop hooks",
        description="The Claude Code hook's loop protection for Codex (hooks.json or "
        "[hooks] in config.toml): the same events and answers, in Codex's protocol.",
    )
    codex.add_argument(
        "--state-dir",
        default=None,
        help="where session states are kept (default: as for claude-code)",
    )
    codex.set_defaults(func=run)
    cursor = agents.add_parser(
        "cursor",
        help="Cursor's preToolUse, postToolUse, postToolUseFailure and stop hooks",
        description="The Claude Code hook's loop protection for Cursor (.cursor/hooks.json): "
        "denies a call that would repeat a loop (preToolUse, and beforeShellExecution / "
        "beforeMCPExecution of older releases), tells the agent after a repeated result "
        "(postToolUse), and asks for one follow-up when the run ends in a loop (stop). "
        "Prints JSON ({} for no opinion), exits 0.",
    )
    cursor.add_argument(
        "--state-dir",
        default=None,
        help="where session states are kept (default: as for claude-code)",
    )
    cursor.set_defaults(func=run)


def run(args: argparse.Namespace, console: Any = None) -> int:
    """The argparse entry: answer the event on stdin (``console`` is unused: stdout is the
    protocol's, not a person's). Always 0; see `judge.integrations.claude_code.main`."""
    from judge.integrations.claude_code import answer_stdin

    agent = getattr(args, "agent", None) or "claude-code"
    return answer_stdin(state_dir=args.state_dir, raw=getattr(args, "raw", None), agent=agent)


# pydantic's switch for its plugins (pydantic/plugin/_loader.py): "__all__" turns all off.
PLUGINS_ENV = "PYDANTIC_DISABLE_PLUGINS"


def main(argv: list[str], raw: bytes | None = None) -> int:
    """``loop-judge hook ...`` (``argv`` with ``hook``) answered in process, with the
    event's bytes ``raw`` when stdin was read already (by the daemon's client). As
    `judge.cli`'s hook path: pydantic's plugin scan (a large share of each call) skipped for this
    call only, unless the environment already says (the user's choice wins)."""
    preset = PLUGINS_ENV in os.environ
    if not preset:
        os.environ[PLUGINS_ENV] = "__all__"
    try:
        parser = argparse.ArgumentParser(prog="loop-judge")
        add_parser(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(argv)
        args.raw = raw
        return int(args.func(args, None))
    finally:
        if not preset:
            os.environ.pop(PLUGINS_ENV, None)
