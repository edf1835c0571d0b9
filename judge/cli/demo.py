"""``loop-judge demo``: replay a bundled looping trajectory and show each turn's verdict.

The quickest look at the tracker: no data, model or flags needed, heuristics only.
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from judge.config import TrackerConfig
from judge.tracker import LoopTracker
from judge.turns import replay

__all__ = ["DEMO_FILE", "add_parser", "run"]

DEMO_FILE = "demo_trajectory.json"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="replay a bundled looping trajectory through the tracker")
    demo.add_argument("file", nargs="?", help="a JSON trajectory instead of the bundled one")
    demo.set_defaults(func=run)


def _load_demo() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (resources.files("judge") / "data" / DEMO_FILE).read_text("utf-8")
    )
    return data


def run(args: argparse.Namespace, console: Console) -> int:
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
