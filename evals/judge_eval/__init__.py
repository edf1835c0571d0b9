"""The tooling around loop-judge: the eval suite, the labelled dataset, the importers and the
commands that use them (``loop-judge eval``, ``import``, ``check``).

It depends on the runtime (`judge`), never the reverse: an agent that imports `judge` loads
none of this. Data flows trajectories (`dataset`, `importers`) -> `replay` (one tracker per
trajectory, turn by turn) -> `metrics` (first flag against the labels) -> `tables` (the
numbers as `TableData`) -> `report_files` (report.json, report.md) and `chart`
(report.png). `oracle` is a simulated judge that answers from the labels, `cassette`
records and replays real judge replies, `sweep` scores a grid of tracker settings and
`loso` holds each agent family out in turn.
`closed_loop` drives scripted agents through the tracker instead (``loop-judge eval
--closed-loop``): they read the recovery message and escape, ignore it, relapse or ask the
user, so what happens after a flag is measured too. `cli` is the ``loop-judge`` console
script: the runtime's commands (`judge.cli`) and these.

This module imports nothing, so the console script's ``hook`` path stays as quick as the
runtime's own.
"""
