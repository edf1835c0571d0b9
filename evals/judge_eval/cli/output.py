"""The rich output the tooling's commands share: progress, tables and skipped files."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from judge_eval.dataset import ImportProblem
from judge_eval.tables import TableData

__all__ = ["print_problems", "progress_bar", "rich_table"]


def progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def rich_table(table: TableData) -> Table:
    out = Table(title=table.title, title_justify="left")
    for i, column in enumerate(table.columns):
        out.add_column(column, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for row in table.rows:
        out.add_row(*row)
    return out


def print_problems(problems: Sequence[ImportProblem], console: Console) -> None:
    if problems:
        console.print(f"[yellow]{len(problems)} file(s) could not be loaded and were skipped:[/]")
        for problem in problems:
            console.print(f"  {problem}", style="yellow", markup=False, highlight=False)
