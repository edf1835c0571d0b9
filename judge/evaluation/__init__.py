"""The eval suite: replay labelled trajectories through the tracker and measure it.

Data flows trajectories -> `replay` (one tracker per trajectory, turn by turn) ->
`metrics` (first flag against the labels) -> `tables` (the numbers as `TableData`) ->
`report_files` (report.json, report.md) and `chart` (report.png); `report` re-exports
those three for older imports. `oracle` is a simulated judge that answers from the labels,
`cassette` records and replays real judge replies, and `sweep` scores a grid of tracker
settings. The command line front is ``loop-judge eval`` in judge.cli.evaluate.
`closed_loop` drives scripted agents through the tracker instead (``loop-judge eval
--closed-loop``): they read the recovery message and escape, ignore it, relapse or ask the
user, so what happens after a flag is measured too.
Importing this package imports neither litellm nor matplotlib. (The ``replay`` function is
not re-exported: the name would hide the ``judge.evaluation.replay`` module.)
"""

from judge.evaluation.cassette import Cassette, CassetteMiss, CassetteRecorder
from judge.evaluation.closed_loop import (
    ClosedLoopReport,
    Policy,
    RunResult,
    run_closed_loop,
    run_scenario,
)
from judge.evaluation.metrics import Metrics, Outcome, Score, compute_metrics, percentile, score
from judge.evaluation.oracle import OracleClient, OracleSettings
from judge.evaluation.replay import (
    CallRecord,
    TrajectoryResult,
    assistant_turn_ends,
    replay_all,
    replay_trajectory,
)
from judge.evaluation.sweep import parse_axis, settings_grid

__all__ = [
    "CallRecord",
    "Cassette",
    "CassetteMiss",
    "CassetteRecorder",
    "ClosedLoopReport",
    "Metrics",
    "OracleClient",
    "OracleSettings",
    "Outcome",
    "Policy",
    "RunResult",
    "Score",
    "TrajectoryResult",
    "assistant_turn_ends",
    "compute_metrics",
    "parse_axis",
    "percentile",
    "replay_all",
    "replay_trajectory",
    "run_closed_loop",
    "run_scenario",
    "score",
    "settings_grid",
]
