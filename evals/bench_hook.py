"""How long does the Claude Code hook make the agent wait on each tool call?

Claude Code starts ``loop-judge hook claude-code`` as a new process for every hook event,
so what the agent waits for is the whole cold start: the interpreter, the imports, the
session state read and written, one tracker step. This script prepares a session as a
real one would leave it (a transcript and a state file after `WARMUP_CALLS` tool calls),
then runs each event `RUNS` times the way Claude Code does (a fresh process, the event on
stdin) and prints the median wall time and CPU time (user + system: about the wall time
on an idle machine), next to a bare ``python -c pass`` for scale. It also times the same
events in process (`handle_payload`): the hook's own work per call, without the process
start. POSIX only (it reads the children's CPU time with ``resource``).

Run from the repository root:  .venv/bin/python evals/bench_hook.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Cold runs per command, as hyperfine's default minimum of 10 doubled: enough for a
# stable median on a busy machine.
RUNS = 20
# Tool calls the session has made before the timed events: a state file of a working
# session, not an empty one.
WARMUP_CALLS = 40
# In-process repetitions per event for the per-call overhead.
IN_PROCESS_RUNS = 50

PYTHON = Path(sys.executable)
LOOP_JUDGE = PYTHON.with_name("loop-judge")


def _env(pycache: Path | None = None) -> dict[str, str]:
    """The children's environment: no LOOP_JUDGE_* settings of ours. With ``pycache``,
    bytecode is written there and read back (PYTHONPYCACHEPREFIX), as an installed package
    has it: a checkout under PYTHONDONTWRITEBYTECODE would otherwise recompile every module
    edited since its .pyc was written, in every timed process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOP_JUDGE_")}
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _session(tmp: Path) -> tuple[Path, Path, dict[str, dict[str, Any]]]:
    """A transcript and state dir after WARMUP_CALLS varied calls; the events to time."""
    from judge.integrations.claude_code import handle_payload

    transcript = tmp / "session.jsonl"
    state = tmp / "state"
    entry = {"type": "user", "uuid": "u0", "message": {"role": "user", "content": "Fix it"}}
    lines = [json.dumps(entry)]
    base = {"session_id": "bench", "transcript_path": str(transcript), "cwd": str(tmp)}
    for i in range(WARMUP_CALLS):
        call_id = f"toolu_w{i}"
        tool_input = {"file_path": f"/src/module_{i}.py"}
        use = {"type": "tool_use", "id": call_id, "name": "Read", "input": tool_input}
        result = {"type": "tool_result", "tool_use_id": call_id, "content": f"# module {i}"}
        lines.append(
            json.dumps({"type": "assistant", "uuid": f"a{i}", "message": {"content": [use]}})
        )
        lines.append(
            json.dumps({"type": "user", "uuid": f"r{i}", "message": {"content": [result]}})
        )
        transcript.write_text("\n".join(lines) + "\n")
        handle_payload(
            {**base, "hook_event_name": "PostToolUse", "tool_name": "Read",
             "tool_input": tool_input, "tool_use_id": call_id, "tool_response": f"# module {i}"},
            state_dir=state,
        )  # fmt: skip
    call = {"tool_name": "Grep", "tool_input": {"pattern": "TODO", "path": "/src"}}
    events = {
        "PreToolUse": {**base, **call, "hook_event_name": "PreToolUse", "tool_use_id": "toolu_x"},
        "PostToolUse": {
            **base, **call, "hook_event_name": "PostToolUse", "tool_use_id": "toolu_x",
            "tool_response": "src/app.py:3: # TODO",
        },
        "Stop": {**base, "hook_event_name": "Stop", "stop_hook_active": False,
                 "last_assistant_message": "Done."},
    }  # fmt: skip
    return transcript, state, events


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cold(
    command: list[str],
    payload: bytes,
    runs: int,
    reset: Callable[[], None] | None = None,
    pycache: Path | None = None,
) -> tuple[float, float]:
    """Median wall and CPU (user + system) seconds of ``runs`` fresh processes fed
    ``payload`` on stdin; ``reset`` runs before each, untimed. CPU time is about what the
    hook costs on an idle machine; wall time is what the agent waited on this one. With
    ``pycache`` (see `_env`), one untimed run first writes the bytecode."""
    walls, cpus = [], []
    env = _env(pycache)
    if pycache is not None:
        if reset is not None:
            reset()
        subprocess.run(command, input=payload, capture_output=True, env=env)
    for _ in range(runs):
        if reset is not None:
            reset()
        cpu = _children_cpu()
        start = time.perf_counter()
        proc = subprocess.run(command, input=payload, capture_output=True, env=env)
        walls.append(time.perf_counter() - start)
        cpus.append(_children_cpu() - cpu)
        if proc.returncode != 0 or proc.stderr:
            raise SystemExit(f"{command[0]} failed: {proc.stderr.decode()[:300]}")
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()
    from judge.integrations.claude_code import handle_payload

    tmp = Path(tempfile.mkdtemp(prefix="bench-hook-"))
    try:
        _, state, events = _session(tmp)
        saved = tmp / "saved"

        def reset() -> None:
            # Each run starts from the same saved state, as the next real call would.
            shutil.rmtree(saved, ignore_errors=True)
            shutil.copytree(state, saved)

        pycache = tmp / "pycache"
        wall, cpu = _cold([str(PYTHON), "-c", "pass"], b"", args.runs, pycache=pycache)
        print(f"{'python -c pass':58} wall {wall * 1000:5.0f} ms  cpu {cpu * 1000:5.0f} ms")
        commands = {
            "loop-judge hook claude-code": [str(LOOP_JUDGE), "hook", "claude-code"],
            "python -m judge.integrations.claude_code": [
                str(PYTHON), "-m", "judge.integrations.claude_code"
            ],
        }  # fmt: skip
        for label, command in commands.items():
            for name, event in events.items():
                payload = json.dumps(event).encode()
                argv = [*command, "--state-dir", str(saved)]
                wall, cpu = _cold(argv, payload, args.runs, reset, pycache)
                print(f"{label:45} {name:12} wall {wall * 1000:5.0f} ms  cpu {cpu * 1000:5.0f} ms")
        for name, event in events.items():
            times = []
            for _ in range(IN_PROCESS_RUNS):
                reset()
                start = time.perf_counter()
                handle_payload(event, state_dir=saved)
                times.append(time.perf_counter() - start)
            median = statistics.median(times)
            print(f"{'in process (handle_payload)':45} {name:12} wall {median * 1000:5.1f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
