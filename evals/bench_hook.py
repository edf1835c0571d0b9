"""How long does the Claude Code hook make the agent wait on each tool call?

Claude Code starts the hook command as a new process for every hook event and waits for
it: on PreToolUse and PostToolUse of every tool call, and on Stop. This script plays a
session of `CALLS` tool calls the way Claude Code runs it (a transcript that grows as it
writes it, each event's JSON on a fresh process's stdin) three times side by side, one
event of each in turn so that all three see the same machine load:

- ``python -c pass``: the interpreter's own start, for scale (once per event);
- daemon path: ``python -m judge.hooks claude-code`` answered by the warm per-user daemon
  (`judge.hooks.daemon`; started by the first event, as a user's first tool call does);
- cold path: the same command with ``LOOP_JUDGE_HOOK_DAEMON=off``, which answers in
  process: what every event cost before the daemon.

It prints the median and the 95th percentile wall time of each, per event kind and over
all events, with their ratio to ``python -c pass``'s, and the load average (``uptime``).
It runs the session twice: on an otherwise idle machine, then with one other core kept
busy by a spinning process. The package is copied to a temporary directory first and run
from there with its bytecode written once (PYTHONPYCACHEPREFIX), as an installed package
runs: in a checkout that others edit, a daemon rightly retires whenever one of its modules
changes, and a PYTHONDONTWRITEBYTECODE environment would recompile every edited module in
every timed process. POSIX only (Unix sockets).

Run from the repository root:  .venv/bin/python evals/bench_hook.py [--calls 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Tool calls per session: a long working session.
CALLS = 200
# A Stop (the end of one assistant turn) every this many calls.
STOP_EVERY = 20
# How long to wait for the daemon the first event starts.
DAEMON_START_S = 30.0

PYTHON = Path(sys.executable)
ROOT = Path(__file__).resolve().parent.parent
MODES = ("python -c pass", "daemon", "cold")


class Session:
    """One Claude Code session: its transcript, its state directory, its events."""

    def __init__(self, tmp: Path, name: str) -> None:
        self.dir = tmp / name
        self.dir.mkdir()
        self.transcript = self.dir / "transcript.jsonl"
        self.state = self.dir / "state"
        self.entries = 0
        self.base = {
            "session_id": f"bench-{name}",
            "transcript_path": str(self.transcript),
            "cwd": "/home/dev/app",
            "permission_mode": "default",
        }
        self.write("user", {"role": "user", "content": "Fix the failing tests in src/."})

    def write(self, kind: str, message: dict[str, Any]) -> None:
        self.entries += 1
        entry = {"type": kind, "uuid": f"u{self.entries}", "isSidechain": False}
        with self.transcript.open("a") as handle:
            handle.write(json.dumps({**entry, "message": message}) + "\n")


def call(i: int) -> tuple[str, dict[str, Any], str]:
    """The i-th call of a productive session: reads, searches, edits and test runs on
    varied files, each with its own result."""
    kind = i % 4
    if kind == 0:
        return "Read", {"file_path": f"/src/module_{i % 53}.py"}, f"# module {i}\n" * 30
    if kind == 1:
        return "Grep", {"pattern": f"def f{i}", "path": "/src"}, f"src/m{i}.py:{i}: def f{i}"
    if kind == 2:
        edit = {
            "file_path": f"/src/module_{i % 53}.py",
            "old_string": f"x{i}",
            "new_string": f"y{i}",
        }
        return "Edit", edit, "The file has been updated."
    return "Bash", {"command": f"pytest tests/test_{i % 17}.py -q"}, f"{i % 7 + 1} passed in 0.{i}s"


def events(session: Session, i: int) -> list[tuple[str, dict[str, Any]]]:
    """Call i's hook events, with the transcript written as Claude Code writes it around
    them (the call before PreToolUse, its result after PostToolUse)."""
    name, tool_input, result = call(i)
    call_id = f"toolu_{i:05d}"
    block = {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}
    session.write("assistant", {"role": "assistant", "content": [block]})
    fields = {"tool_name": name, "tool_input": tool_input, "tool_use_id": call_id}
    out = [
        ("PreToolUse", {**session.base, **fields, "hook_event_name": "PreToolUse"}),
        (
            "PostToolUse",
            {**session.base, **fields, "hook_event_name": "PostToolUse", "tool_response": result},
        ),
    ]
    return out


def after(session: Session, i: int) -> list[tuple[str, dict[str, Any]]]:
    """What follows call i: its result in the transcript, and every `STOP_EVERY` calls
    the assistant's text and a Stop."""
    _, _, result = call(i)
    block = {"type": "tool_result", "tool_use_id": f"toolu_{i:05d}", "content": result}
    session.write("user", {"role": "user", "content": [block]})
    if (i + 1) % STOP_EVERY:
        return []
    text = f"Step {i // STOP_EVERY} done; moving on."
    stop = {**session.base, "hook_event_name": "Stop", "stop_hook_active": False}
    session.write("assistant", {"role": "assistant", "content": [{"type": "text", "text": text}]})
    return [("Stop", {**stop, "last_assistant_message": text})]


def timed(command: list[str], payload: bytes, env: dict[str, str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(command, input=payload, capture_output=True, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    if proc.returncode != 0 or proc.stderr:
        raise SystemExit(f"{command} failed ({proc.returncode}): {proc.stderr.decode()[:300]}")
    return wall, proc.stdout.decode()


def load() -> str:
    out = subprocess.run(["uptime"], capture_output=True, text=True).stdout
    return out.rsplit("load average:", 1)[-1].strip()


def run_session(tmp: Path, label: str, calls: int, env: dict[str, str]) -> dict[str, Any]:
    """One session in each mode, event by event; wall times per mode and event kind."""
    work = tmp / label
    work.mkdir()
    sockets = Path(tempfile.mkdtemp(prefix="ljb-", dir="/tmp"))  # short: 108-byte limit
    daemon_env = {**env, "LOOP_JUDGE_HOOK_SOCKET_DIR": str(sockets)}
    cold_env = {**env, "LOOP_JUDGE_HOOK_DAEMON": "off"}
    sessions = {"daemon": Session(work, "daemon"), "cold": Session(work, "cold")}
    times: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
    answers: dict[str, list[str]] = {"daemon": [], "cold": []}
    loads = [load()]
    try:
        for i in range(calls):
            batches = {m: events(s, i) for m, s in sessions.items()}
            for step in range(len(batches["cold"])):
                for mode in MODES:
                    kind, payload = batches["cold" if mode == MODES[0] else mode][step]
                    if mode == MODES[0]:
                        wall, _ = timed([str(PYTHON), "-c", "pass"], b"", env, tmp)
                    else:
                        state = sessions[mode].state
                        command = [str(PYTHON), "-m", "judge.hooks", "claude-code"]
                        command += ["--state-dir", str(state)]
                        run_env = daemon_env if mode == "daemon" else cold_env
                        wall, out = timed(command, json.dumps(payload).encode(), run_env, tmp)
                        answers[mode].append(out)
                        if mode == "daemon" and i == 0 and step == 0:
                            _wait_for_daemon(sockets)
                            continue  # the start itself is not a steady-state event
                    times[mode].setdefault(kind, []).append(wall)
            stops = {m: after(s, i) for m, s in sessions.items()}
            for step in range(len(stops["cold"])):
                for mode in MODES:
                    kind, payload = stops["cold" if mode == MODES[0] else mode][step]
                    if mode == MODES[0]:
                        wall, _ = timed([str(PYTHON), "-c", "pass"], b"", env, tmp)
                    else:
                        command = [str(PYTHON), "-m", "judge.hooks", "claude-code"]
                        command += ["--state-dir", str(sessions[mode].state)]
                        run_env = daemon_env if mode == "daemon" else cold_env
                        wall, out = timed(command, json.dumps(payload).encode(), run_env, tmp)
                        answers[mode].append(out)
                    times[mode].setdefault(kind, []).append(wall)
            if i % 50 == 49:
                loads.append(load())
        loads.append(load())
    finally:
        _stop_daemons(sockets)
    same = _same_answers(answers)
    return {"times": times, "loads": loads, "same": same}


def _same_answers(answers: dict[str, list[str]]) -> bool:
    # The two sessions differ in their ids and paths only, which no answer quotes.
    return answers["daemon"] == answers["cold"]


def _wait_for_daemon(sockets: Path) -> None:
    deadline = time.monotonic() + DAEMON_START_S
    while time.monotonic() < deadline:
        if any(p.suffix == ".sock" for p in sockets.iterdir()):
            return
        time.sleep(0.05)
    raise SystemExit("the daemon did not start")


def _stop_daemons(sockets: Path) -> None:
    for pid_file in sockets.glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
    shutil.rmtree(sockets, ignore_errors=True)


def stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95


def report(label: str, result: dict[str, Any]) -> None:
    times = result["times"]
    base_all = [t for kind in times[MODES[0]].values() for t in kind]
    base_median, base_p95 = stats(base_all)
    print(f"\n{label}: load average {' -> '.join(result['loads'])}")
    print(f"{'':16} {'event':12} {'n':>4} {'median':>9} {'p95':>9} {'x median':>9} {'x p95':>7}")
    for mode in MODES:
        rows = [*sorted(times[mode].items()), ("all", [t for v in times[mode].values() for t in v])]
        for kind, values in rows:
            median, p95 = stats(values)
            print(
                f"{mode:16} {kind:12} {len(values):4d} {median * 1000:7.1f}ms {p95 * 1000:7.1f}ms"
                f" {median / base_median:8.1f}x {p95 / base_median:6.1f}x"
            )
    base = f"{base_median * 1000:.1f} ms; its p95 {base_p95 * 1000:.1f} ms"
    print(f"(ratios to python -c pass's median, {base})")
    print(f"daemon and cold answers identical: {result['same']}")


# -- the single-event cold start, as evals/bench_cold_start.py measures it ---------------

# Cold runs per command, as hyperfine's default minimum of 10 doubled.
RUNS = 20
# Tool calls the session has made before the timed events.
WARMUP_CALLS = 40
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
    events: dict[str, dict[str, Any]] = {
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
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--no-busy", action="store_true", help="skip the busy-core run")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-hook-"))
    try:
        package = tmp / "pkg"
        skip = shutil.ignore_patterns("__pycache__")
        shutil.copytree(ROOT / "judge", package / "judge", ignore=skip)
        shutil.copytree(ROOT / "prompts", package / "prompts", ignore=skip)  # read beside judge/
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOP_JUDGE_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        env["PYTHONPATH"] = str(package)
        # Bytecode written once, untimed.
        subprocess.run(
            [str(PYTHON), "-c", "import judge.integrations.claude_code, judge.hooks.daemon"],
            env=env,
            check=True,
            cwd=tmp,
        )
        report("idle", run_session(tmp, "idle", args.calls, env))
        if not args.no_busy:
            spinner = subprocess.Popen([str(PYTHON), "-c", "while True: pass"])
            try:
                report("other core busy", run_session(tmp, "busy", args.calls, env))
            finally:
                spinner.kill()
                spinner.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
