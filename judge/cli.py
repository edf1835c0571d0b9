"""The ``loop-judge`` command line. The only module that imports rich."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from judge.config import TrackerConfig
from judge.tracker import LoopTracker
from judge.verdict import Verdict

DEMO_FILE = "demo_trajectory.json"


def _load_demo() -> dict[str, Any]:
    return json.loads((resources.files("judge") / "data" / DEMO_FILE).read_text("utf-8"))


def assistant_turn_ends(messages: Sequence[dict[str, Any]]) -> list[int]:
    """History lengths at the start of each turn after an assistant message.

    A turn starts when the agent is about to answer again: right after an assistant
    message and the tool results that answer it.
    """
    ends = []
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant":
            continue
        end = i + 1
        while end < len(messages) and messages[end].get("role") in ("tool", "function"):
            end += 1
        ends.append(end)
    return ends


async def replay(messages: list[dict[str, Any]], tracker: LoopTracker) -> list[tuple[int, Verdict]]:
    """Feed a recorded conversation turn by turn, as the agent would have."""
    out = []
    for end in assistant_turn_ends(messages):
        out.append((end, await tracker.turn_started(messages[:end])))
    return out


def _demo(args: argparse.Namespace, console: Console) -> int:
    data = json.loads(Path(args.file).read_text("utf-8")) if args.file else _load_demo()
    messages = data["messages"] if isinstance(data, dict) else data
    tracker = LoopTracker(TrackerConfig())
    results = anyio.run(replay, messages, tracker)
    name = data.get("id", args.file) if isinstance(data, dict) else args.file
    table = Table(title=f"replay of {name}")
    for col in ("turn", "messages", "looping", "source", "action", "summary"):
        table.add_column(col)
    first = None
    for end, verdict in results:
        if verdict and first is None:
            first = verdict
        table.add_row(
            str(verdict.turn),
            str(end),
            "yes" if verdict else "",
            verdict.source or "",
            verdict.action.value,
            verdict.summary or "",
        )
    console.print(table)
    if first is not None:
        console.print(f"[bold red]loop detected at turn {first.turn}[/]: {first.summary}")
        if first.recovery_message:
            console.print(first.recovery_message)
    else:
        console.print("no loop detected")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loop-judge", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="replay a bundled looping trajectory through the tracker")
    demo.add_argument("file", nargs="?", help="a JSON trajectory instead of the bundled one")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    return int(args.func(args, console))


if __name__ == "__main__":
    sys.exit(main())
