"""The eval suite: replay labelled trajectories through the tracker and measure it.

Data flows trajectories -> `replay` (one tracker per trajectory, turn by turn) ->
`metrics` (first flag against the labels) -> `report` (tables, JSON, markdown, chart).
`oracle` is a simulated judge that answers from the labels, `cassette` records and
replays real judge replies, and `sweep` scores a grid of tracker settings. The command
line front is ``loop-judge eval`` in judge.cli; importing this package imports neither
litellm nor matplotlib. (The ``replay`` function is not re-exported: the name would hide
the ``judge.evaluation.replay`` module.)
"""

from judge.evaluation.cassette import Cassette, CassetteMiss, CassetteRecorder
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
    "Metrics",
    "OracleClient",
    "OracleSettings",
    "Outcome",
    "Score",
    "TrajectoryResult",
    "assistant_turn_ends",
    "compute_metrics",
    "parse_axis",
    "percentile",
    "replay_all",
    "replay_trajectory",
    "score",
    "settings_grid",
]
