"""The commands of ``loop-judge``, runtime and tooling, in the order --help lists them.

``eval`` measures the tracker on labelled data, ``import`` converts other agents'
trajectories into our labelled-trajectory JSON, ``check`` answers for one trajectory in
its exit code and ``scan`` says which runs of trace exports looped; the others are the
runtime's (`judge.cli.app`).
"""

from __future__ import annotations

from judge.cli import demo, doctor, hook, serve
from judge.cli.app import Command
from judge_eval import scan_cli
from judge_eval.cli import check, evaluate, importer
from judge_eval.cli.check import EXIT_NO_LOOP, EXIT_STOP, EXIT_WARN
from judge_eval.cli.eval_plan import (
    DEFAULT_DATA_DIR,
    DEFAULT_OUT_DIR,
    JUDGES,
    MODES,
    SCHEDULES,
    RunPlan,
)

__all__ = [
    "COMMANDS",
    "DEFAULT_DATA_DIR",
    "DEFAULT_OUT_DIR",
    "EXIT_NO_LOOP",
    "EXIT_STOP",
    "EXIT_WARN",
    "JUDGES",
    "MODES",
    "SCHEDULES",
    "RunPlan",
]

COMMANDS: tuple[Command, ...] = (demo, evaluate, importer, serve, check, scan_cli, hook, doctor)
