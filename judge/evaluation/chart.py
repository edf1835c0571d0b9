"""Draw an eval's ``report.png``: detection delay and judge calls per trajectory.

The only module of the eval suite that touches matplotlib, and only inside `write_chart`:
matplotlib is optional (the ``eval`` extra), so importing this module never needs it, and
without it the chart is skipped with a one-line note, never an error. Split out of
`report` (issue 10).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from judge.evaluation.metrics import score
from judge.evaluation.tables import Run

__all__ = ["CHART_DPI", "CHART_FILE", "CHART_SIZE_IN", "write_chart"]

CHART_FILE = "report.png"
# Chart size in inches at CHART_DPI: two panels side by side stay legible on a laptop.
CHART_SIZE_IN = (12.0, 4.5)
CHART_DPI = 110


def write_chart(runs: Sequence[Run], out_dir: Path) -> tuple[Path | None, str | None]:
    """Draw detection delay and judge calls per trajectory; (path, None) or (None, why not)."""
    if not any(run.labelled for run in runs):
        return None, "chart skipped: no labelled trajectories to score"
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on CI or a server; must precede pyplot
        import matplotlib.pyplot as plt
    except ImportError:
        return None, "chart skipped: matplotlib is not installed (pip install 'loop-judge[eval]')"

    fig, (delay_ax, calls_ax) = plt.subplots(1, 2, figsize=CHART_SIZE_IN, dpi=CHART_DPI)
    delays = {run.name: _delays(run) for run in runs}
    top = max((max(d) for d in delays.values() if d), default=0)
    bins = [b - 0.5 for b in range(0, int(top) + 2)]
    labels = []
    for name, values in delays.items():
        median = f", median {statistics.median(values):g}" if values else ""
        labels.append(f"{name} ({len(values)} caught{median})")
    # Runs side by side in each bin: overlaid outlines hide a run that agrees with another.
    delay_ax.hist(list(delays.values()), bins=bins, label=labels)
    delay_ax.legend(loc="upper right", fontsize="small")
    delay_ax.xaxis.get_major_locator().set_params(integer=True)
    delay_ax.yaxis.get_major_locator().set_params(integer=True)
    delay_ax.set_title("Detection delay (turns after the loop's onset)")
    delay_ax.set_xlabel("turns after onset (0 = flagged at the onset)")
    delay_ax.set_ylabel("looping trajectories caught")

    # Looping runs first, then productive ones; within each, most judge calls first.
    last_calls = {r.id: len(r.calls) for r in runs[-1].results}
    ordered = sorted(
        runs[0].labelled,
        key=lambda r: (not (r.labels and r.labels.looping), -last_calls.get(r.id, 0), r.id),
    )
    ids = [r.id for r in ordered]
    width = 0.8 / max(len(runs), 1)
    any_calls = False
    for offset, run in enumerate(runs):
        per_id = {r.id: len(r.calls) for r in run.results}
        heights = [per_id.get(i, 0) for i in ids]
        any_calls = any_calls or any(heights)
        xs = [x + offset * width for x in range(len(ids))]
        calls_ax.bar(xs, heights, width=width, label=run.name)
    split = sum(1 for r in ordered if r.labels is not None and r.labels.looping)
    calls_ax.axvline(split - 0.5, color="grey", linestyle="--", linewidth=1)
    calls_ax.set_title("Judge calls per trajectory")
    calls_ax.set_xlabel(
        f"trajectories: {split} looping left of the dashed line, "
        f"{len(ids) - split} productive right"
    )
    calls_ax.set_ylabel("judge calls")
    calls_ax.set_xticks([])
    if any_calls:
        calls_ax.legend(loc="upper right", fontsize="small")
    else:
        calls_ax.set_ylim(0, 1)
        calls_ax.set_yticks([])
        calls_ax.text(
            0.5,
            0.5,
            "no judge calls (heuristics only)",
            ha="center",
            va="center",
            transform=calls_ax.transAxes,
        )
    fig.tight_layout()
    path = out_dir / CHART_FILE
    fig.savefig(path)
    plt.close(fig)
    return path, None


def _delays(run: Run) -> list[int]:
    out = []
    for result in run.labelled:
        s = score(result)
        if s is not None and s.delay is not None and result.crash is None:
            out.append(s.delay)
    return out
