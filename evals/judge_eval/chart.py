"""Draw an eval's ``report.png``: detection delay, loops caught by kind, judge calls.

The only module of the eval suite that touches matplotlib, and only inside `write_chart`:
matplotlib is optional (the ``eval`` extra), so importing this module never needs it, and
without it the chart is skipped with a one-line note, never an error.

A panel is drawn only when it has something to show (an empty "judge calls" panel on the
default, heuristics-only run tells nothing): `chart_panels` decides
which, from the data alone, so the choice is tested without drawing.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from judge_eval.metrics import kind_of, score
from judge_eval.tables import Run

__all__ = [
    "CHART_DPI",
    "CHART_FILE",
    "CHART_HEIGHT_IN",
    "CHART_SIZE_IN",
    "PANEL_WIDTH_IN",
    "Panel",
    "chart_panels",
    "write_chart",
]

CHART_FILE = "report.png"
# Each panel is PANEL_WIDTH_IN x CHART_HEIGHT_IN inches at CHART_DPI: three panels side by
# side (18 in, ~2,000 px) stay legible on a laptop screen.
PANEL_WIDTH_IN = 6.0
CHART_HEIGHT_IN = 4.5
CHART_DPI = 110
# One panel's size; the figure is as many panels wide as it draws.
CHART_SIZE_IN = (PANEL_WIDTH_IN, CHART_HEIGHT_IN)


class Panel(str, Enum):
    """The chart's panels, in drawing order."""

    DELAY = "delay"  # needs at least one loop caught
    KINDS = "kinds"  # needs at least one labelled loop
    JUDGE_CALLS = "judge_calls"  # needs at least one judge call


def chart_panels(runs: Sequence[Run]) -> list[Panel]:
    """The panels that have content for these runs (possibly none)."""
    panels = []
    if any(_delays(run) for run in runs):
        panels.append(Panel.DELAY)
    if any(r.labels is not None and r.labels.looping for run in runs for r in run.labelled):
        panels.append(Panel.KINDS)
    if any(r.calls for run in runs for r in run.results):
        panels.append(Panel.JUDGE_CALLS)
    return panels


def write_chart(runs: Sequence[Run], out_dir: Path) -> tuple[Path | None, str | None]:
    """Draw the panels that have content; (path, None) or (None, why not)."""
    if not any(run.labelled for run in runs):
        return None, "chart skipped: no labelled trajectories to score"
    panels = chart_panels(runs)
    if not panels:
        return None, "chart skipped: no labelled loops and no judge calls to draw"
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on CI or a server; must precede pyplot
        import matplotlib.pyplot as plt
    except ImportError:
        return None, "chart skipped: matplotlib is not installed (pip install 'loop-judge[eval]')"

    size = (CHART_SIZE_IN[0] * len(panels), CHART_SIZE_IN[1])
    fig, axes = plt.subplots(1, len(panels), figsize=size, dpi=CHART_DPI, squeeze=False)
    draw: dict[Panel, Callable[[Any, Sequence[Run]], None]] = {
        Panel.DELAY: _draw_delay,
        Panel.KINDS: _draw_kinds,
        Panel.JUDGE_CALLS: _draw_judge_calls,
    }
    for ax, panel in zip(axes[0], panels, strict=True):
        draw[panel](ax, runs)
    fig.tight_layout()
    path = out_dir / CHART_FILE
    fig.savefig(path)
    plt.close(fig)
    return path, None


def _draw_delay(ax: Any, runs: Sequence[Run]) -> None:
    delays = {run.name: _delays(run) for run in runs}
    top = max((max(d) for d in delays.values() if d), default=0)
    bins = [b - 0.5 for b in range(0, int(top) + 2)]
    labels = []
    for name, values in delays.items():
        median = f", median {statistics.median(values):g}" if values else ""
        labels.append(f"{name} ({len(values)} caught{median})")
    # Runs side by side in each bin: overlaid outlines hide a run that agrees with another.
    ax.hist(list(delays.values()), bins=bins, label=labels)
    ax.legend(loc="upper right", fontsize="small")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Detection delay (turns after the loop's onset)")
    ax.set_xlabel("turns after onset (0 = flagged at the onset)")
    ax.set_ylabel("looping trajectories caught")


def _draw_kinds(ax: Any, runs: Sequence[Run]) -> None:
    """Looping trajectories per labelled kind: all of them (grey), and caught, per run."""
    looping = [r for r in runs[0].labelled if r.labels is not None and r.labels.looping]
    kinds = sorted({str(kind_of(r)) for r in looping})
    width = 0.8 / (len(runs) + 1)
    totals = [sum(1 for r in looping if kind_of(r) == kind) for kind in kinds]
    ax.bar(range(len(kinds)), totals, width=width, color="lightgrey", label="looping")
    for offset, run in enumerate(runs, start=1):
        caught = _caught_by_kind(run)
        xs = [x + offset * width for x in range(len(kinds))]
        ax.bar(xs, [caught.get(kind, 0) for kind in kinds], width=width, label=f"{run.name}")
    ax.set_xticks([x + width * len(runs) / 2 for x in range(len(kinds))])
    ax.set_xticklabels([kind.replace("_", "\n") for kind in kinds], fontsize="small")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Looping trajectories caught, by labelled kind")
    ax.set_ylabel("looping trajectories (grey: all)")
    ax.legend(loc="upper right", fontsize="small")


def _caught_by_kind(run: Run) -> dict[str, int]:
    """True positives per labelled kind (a flag at or after the onset)."""
    caught: dict[str, int] = {}
    for result in run.labelled:
        s = score(result)
        if s is not None and s.delay is not None and result.crash is None:
            kind = str(kind_of(result))
            caught[kind] = caught.get(kind, 0) + 1
    return caught


def _draw_judge_calls(ax: Any, runs: Sequence[Run]) -> None:
    # Looping runs first, then productive ones; within each, most judge calls first.
    last_calls = {r.id: len(r.calls) for r in runs[-1].results}
    ordered = sorted(
        runs[0].labelled,
        key=lambda r: (not (r.labels and r.labels.looping), -last_calls.get(r.id, 0), r.id),
    )
    ids = [r.id for r in ordered]
    width = 0.8 / max(len(runs), 1)
    for offset, run in enumerate(runs):
        per_id = {r.id: len(r.calls) for r in run.results}
        heights = [per_id.get(i, 0) for i in ids]
        xs = [x + offset * width for x in range(len(ids))]
        ax.bar(xs, heights, width=width, label=run.name)
    split = sum(1 for r in ordered if r.labels is not None and r.labels.looping)
    ax.axvline(split - 0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_title("Judge calls per trajectory")
    ax.set_xlabel(
        f"trajectories: {split} looping left of the dashed line, "
        f"{len(ids) - split} productive right"
    )
    ax.set_ylabel("judge calls")
    ax.set_xticks([])
    ax.legend(loc="upper right", fontsize="small")


def _delays(run: Run) -> list[int]:
    out = []
    for result in run.labelled:
        s = score(result)
        if s is not None and s.delay is not None and result.crash is None:
            out.append(s.delay)
    return out
