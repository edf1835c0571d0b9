"""What a fresh process pays before loop-judge answers its first turn.

Every CLI run and every Claude Code hook event is a new process, and a script that builds
one tracker pays the same once. This prints, side by side, the medians of ``--runs`` fresh
processes for: ``import judge``; building the first ``LoopTracker`` (its ``TrackerConfig``
included: that is where pydantic is imported and its first schema built); the first
``turn_started`` with no judge model, run by ``anyio.run`` (a script's own event loop), timed in
two parts: starting the event loop (which an agent already inside one does not pay) and
the call itself, from inside the running loop; their sum; and the Claude Code hook's cold
start per event (`bench_hook`'s session, 40 tool calls in). Two rows give the scale:
``python -c pass``, and the floor that no change of ours can go under while
`TrackerConfig` is a pydantic model: importing pydantic and anyio, building one small
model and running an empty ``anyio.run``.

Each row gives wall time and CPU time (the process's own; for the hook, user + system of
the child): on a shared machine CPU time is the steadier of the two. Bytecode is compiled
once into a temporary PYTHONPYCACHEPREFIX first (`bench_hook._env`), so the figures are an
installed package's, not a checkout recompiling edited modules.

With ``--baseline-tree DIR`` (a ``git worktree`` of an earlier commit), the same steps are
timed for that tree's package too, in the same run, with the same interpreter and
dependencies, its rows printed first, each block ending with its sum: work that moved
from ``import judge`` into the first tracker shows there, not as a gain.

Run from the repository root:  .venv/bin/python evals/bench_cold_start.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench_hook import LOOP_JUDGE, PYTHON, _cold, _env, _session

# This checkout: the package the unmarked rows time.
REPO = Path(__file__).resolve().parents[1]
# Fresh processes per row: the median of 15 is stable to a few ms on a shared 2-core box.
RUNS = 15

# Times its three steps in one fresh process and prints them as JSON (milliseconds).
_STEPS = """
import time
t0, c0 = time.perf_counter(), time.process_time()
import judge
t1, c1 = time.perf_counter(), time.process_time()
tracker = judge.LoopTracker(judge.TrackerConfig(semantic="off"))
t2, c2 = time.perf_counter(), time.process_time()
import anyio
history = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "x", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "a", "content": "ok"},
]
marks = []
async def first_turn():
    marks.append((time.perf_counter(), time.process_time()))  # the loop is running
    await tracker.turn_started(history)
    marks.append((time.perf_counter(), time.process_time()))
anyio.run(first_turn)
(t3, c3), (t4, c4) = marks
print(__import__("json").dumps({
    "import": [t1 - t0, c1 - c0], "tracker": [t2 - t1, c2 - c1], "loop": [t3 - t2, c3 - c2],
    "turn": [t4 - t3, c4 - c3]}))
"""

# The floor: what pydantic and anyio cost before any code of ours runs.
_FLOOR = """
import time
t0, c0 = time.perf_counter(), time.process_time()
import anyio, pydantic
class Config(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    limit: int = 1
    name: str | None = None
    tools: tuple[str, ...] = ()
Config()
async def turn() -> None:
    pass
anyio.run(turn)
print(__import__("json").dumps({"floor": [time.perf_counter() - t0, time.process_time() - c0]}))
"""


def _steps(
    code: str, runs: int, pycache: Path, tree: Path | None = None
) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds of each step ``code`` reports, over ``runs`` fresh
    processes. CPU time (the process's own) is the steadier figure on a shared machine.
    ``tree``: import ``judge`` from that source tree instead of this one."""
    env = _env(pycache)
    # `python -c` puts its working directory first on sys.path: each tree's steps run in
    # that tree, or whichever checkout the shell stood in would be the one imported.
    expected = (tree if tree is not None else REPO).resolve()
    cwd = str(expected)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    found = subprocess.run(
        [str(PYTHON), "-c", "import judge; print(judge.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(expected):
        raise SystemExit(f"the steps imported {found}, not the package in {expected}")
    subprocess.run([str(PYTHON), "-c", code], check=True, capture_output=True, env=env, cwd=cwd)
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    for _ in range(runs):
        out = subprocess.run(
            [str(PYTHON), "-c", code], check=True, capture_output=True, text=True, env=env, cwd=cwd
        ).stdout
        for name, (wall, cpu) in json.loads(out).items():
            walls.setdefault(name, []).append(wall)
            cpus.setdefault(name, []).append(cpu)
    return {name: (statistics.median(walls[name]), statistics.median(cpus[name])) for name in walls}


def _row(label: str, figures: tuple[float, float]) -> None:
    wall, cpu = figures
    print(f"{label:58} wall {wall * 1000:5.0f} ms  cpu {cpu * 1000:5.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--baseline-tree", type=Path, help="also time this tree's package")
    args = parser.parse_args()
    if args.baseline_tree is not None and not (args.baseline_tree / "judge").is_dir():
        parser.error(f"--baseline-tree {args.baseline_tree} holds no judge package")
    tmp = Path(tempfile.mkdtemp(prefix="bench-cold-"))
    try:
        pycache = tmp / "pycache"
        _row("python -c pass", _cold([str(PYTHON), "-c", "pass"], b"", args.runs, pycache=pycache))
        _row("floor: pydantic + one model + anyio.run", _steps(_FLOOR, args.runs, pycache)["floor"])
        trees: list[tuple[str, Path | None]] = [("", None)]
        if args.baseline_tree is not None:
            trees.insert(0, ("baseline: ", args.baseline_tree.resolve()))
        for tag, tree in trees:
            # Each tree's bytecode apart, so neither run pays for the other's compiling.
            cache = pycache if tree is None else tmp / "pycache-baseline"
            steps = _steps(_STEPS, args.runs, cache, tree)
            _row(f"{tag}import judge", steps["import"])
            _row(f"{tag}first LoopTracker(TrackerConfig(semantic='off'))", steps["tracker"])
            _row(f"{tag}starting the event loop (the first anyio.run)", steps["loop"])
            _row(f"{tag}first turn_started in the running loop", steps["turn"])
            total = tuple(sum(step[i] for step in steps.values()) for i in (0, 1))
            _row(f"{tag}import + tracker + first turn (sum of medians)", (total[0], total[1]))
        _, state, events = _session(tmp)
        saved = tmp / "saved"

        def reset() -> None:
            shutil.rmtree(saved, ignore_errors=True)
            shutil.copytree(state, saved)

        command = [str(LOOP_JUDGE), "hook", "claude-code", "--state-dir", str(saved)]
        for name, event in events.items():
            payload = json.dumps(event).encode()
            _row(
                f"hook: loop-judge hook claude-code {name}",
                _cold(command, payload, args.runs, reset, pycache),
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
