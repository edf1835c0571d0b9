"""``loop-judge import``: convert other agents' trajectories into our labelled JSON.

One JSON file per trajectory, named after its id; a file that cannot be read or parsed is
reported and skipped, and the others are all written. The formats themselves are
judge_eval.importers; this is only the command around them.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from rich.console import Console

from judge.cli.shared import EXIT_FAILED
from judge_eval.dataset import TrajectoryFormatError, iter_trajectory_files
from judge_eval.importers import load_trajectories

__all__ = ["add_parser", "run"]

# File names written by `import`: anything outside this set becomes "_".
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    imp = sub.add_parser(
        "import",
        help="convert OpenAI JSON/JSONL, ATIF, SWE-agent .traj or recorded files to our format",
    )
    imp.add_argument("paths", nargs="+", help="files or folders to convert")
    imp.add_argument("--out", required=True, help="folder for one JSON file per trajectory")
    imp.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Convert each file; a bad one is reported and skipped, the others are all written."""
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    failures = 0
    for file in iter_trajectory_files(args.paths):
        try:
            trajectories = load_trajectories(file)
        except TrajectoryFormatError as exc:
            failures += 1
            console.print(f"[red]error[/]: {exc}", highlight=False)
            continue
        except OSError as exc:
            failures += 1
            console.print(
                f"[red]error[/]: {file}: cannot read: {exc.strerror or exc}", highlight=False
            )
            continue
        for traj in trajectories:
            stem = _UNSAFE_NAME.sub("_", traj.id).strip("._") or "trajectory"
            name, n = stem, 1
            while name in written:
                n += 1
                name = f"{stem}-{n}"
            written.add(name)
            target = out_dir / f"{name}.json"
            text = json.dumps(traj.to_json_dict(), indent=2, ensure_ascii=False) + "\n"
            target.write_text(text, encoding="utf-8")
            console.print(f"{file} -> {target}", highlight=False)
    console.print(
        f"imported {len(written)} trajectories into {out_dir}"
        + (f"; [red]{failures} file(s) failed[/]" if failures else "")
    )
    return EXIT_FAILED if failures else 0
