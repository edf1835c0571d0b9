"""How long does a coding agent's hook make the agent wait on each tool call?

Claude Code, Gemini CLI, Codex and Cursor each start the hook command as a new process
for every hook event and wait for it: before and after every tool call, and when a turn
ends. This script plays a session of `CALLS` tool calls the way each agent runs it (its
own event names and payload shapes; Claude Code's transcript growing as it writes it;
the session's state file growing for all four), each event's JSON on a fresh process's
stdin, side by side, one event of each in turn so that all of them see the same load:

- ``python -c pass``: the interpreter's own start, for scale (once per event);
- daemon path: ``python -m judge.hooks <agent>`` answered by the warm per-user daemon
  (`judge.hooks.daemon`; started by the first event, as a user's first tool call does);
- cold path (one agent only): the same command with ``LOOP_JUDGE_HOOK_DAEMON=off``, which
  answers in process: what every event cost before the daemon. ``--agent all`` leaves it
  out: it is the same imports and restore for every agent, and at about half a second an
  event it would take four times as long as the rest together.

It prints the median and the 95th percentile wall time of each, per event kind and over
all events, with their ratio to ``python -c pass``'s median, and the load average
(``uptime``). It runs the session twice: on an otherwise idle machine, then with one
other core kept busy by a spinning process. The package is copied to a temporary
directory first and run from there with its bytecode written once (PYTHONPYCACHEPREFIX),
as an installed package runs: in a checkout that others edit, a daemon rightly retires
whenever one of its modules changes, and a PYTHONDONTWRITEBYTECODE environment would
recompile every edited module in every timed process. POSIX only (Unix sockets).

Run from the repository root:
    .venv/bin/python evals/bench_hook.py [--calls 200] [--agent claude-code|gemini|codex|cursor|all]
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
from typing import Any, ClassVar

# Tool calls per session: a long working session.
CALLS = 200
# A turn's end (Stop, AfterAgent, stop) every this many calls.
STOP_EVERY = 20
# How long to wait for the daemon the first event starts.
DAEMON_START_S = 30.0

PYTHON = Path(sys.executable)
ROOT = Path(__file__).resolve().parent.parent
BASELINE = "python -c pass"
AGENTS = ("claude-code", "gemini", "codex", "cursor")

Event = tuple[str, dict[str, Any]]


def call(i: int) -> tuple[str, dict[str, Any], str]:
    """The i-th call of a productive session, in Claude Code's tool names: reads,
    searches, edits and test runs on varied files, each with its own result."""
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


def final_text(i: int) -> str:
    return f"Step {i // STOP_EVERY} done; moving on."


class Session:
    """One Claude Code session: its transcript, its state directory, its events."""

    agent = "claude-code"

    def __init__(self, tmp: Path, name: str) -> None:
        self.dir = tmp / name
        self.dir.mkdir()
        self.transcript = self.dir / "transcript.jsonl"
        self.state = self.dir / "state"
        self.entries = 0
        self.base: dict[str, Any] = {
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

    def events(self, i: int) -> list[Event]:
        """Call i's hook events, with the transcript written as Claude Code writes it
        around them (the call before PreToolUse, its result after PostToolUse)."""
        name, tool_input, result = call(i)
        call_id = f"toolu_{i:05d}"
        block = {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}
        self.write("assistant", {"role": "assistant", "content": [block]})
        fields = {"tool_name": name, "tool_input": tool_input, "tool_use_id": call_id}
        post = {**fields, "hook_event_name": "PostToolUse", "tool_response": result}
        return [
            ("PreToolUse", {**self.base, **fields, "hook_event_name": "PreToolUse"}),
            ("PostToolUse", {**self.base, **post}),
        ]

    def after(self, i: int) -> list[Event]:
        """What follows call i: its result in the transcript, and every `STOP_EVERY`
        calls the assistant's text and a Stop."""
        _, _, result = call(i)
        block = {"type": "tool_result", "tool_use_id": f"toolu_{i:05d}", "content": result}
        self.write("user", {"role": "user", "content": [block]})
        if (i + 1) % STOP_EVERY:
            return []
        text = final_text(i)
        stop = {**self.base, "hook_event_name": "Stop", "stop_hook_active": False}
        self.write("assistant", {"role": "assistant", "content": [{"type": "text", "text": text}]})
        return [("Stop", {**stop, "last_assistant_message": text})]


class GeminiSession(Session):
    """The same session as Gemini CLI runs it (its hooks reference's shapes): its own tool
    names, ``llmContent`` results and ``AfterAgent``; its transcript is not read."""

    agent = "gemini"
    TOOLS: ClassVar[dict[str, str]] = {
        "Read": "read_file", "Grep": "search_file_content", "Edit": "replace",
        "Bash": "run_shell_command",
    }  # fmt: skip

    def events(self, i: int) -> list[Event]:
        name, tool_input, result = call(i)
        fields = {**self.base, "tool_name": self.TOOLS[name], "tool_input": tool_input}
        response = {"llmContent": result, "returnDisplay": result}
        return [
            ("BeforeTool", {**fields, "hook_event_name": "BeforeTool"}),
            ("AfterTool", {**fields, "hook_event_name": "AfterTool", "tool_response": response}),
        ]

    def after(self, i: int) -> list[Event]:
        if (i + 1) % STOP_EVERY:
            return []
        end = {"hook_event_name": "AfterAgent", "prompt": "Fix the failing tests in src/.",
               "prompt_response": final_text(i), "stop_hook_active": False}  # fmt: skip
        return [("AfterAgent", {**self.base, **end})]


class CodexSession(Session):
    """The same session as Codex runs it: Claude Code's event shapes with Codex's fields
    (``turn_id``, ``model``; its rollout JSONL as ``transcript_path``, not read)."""

    agent = "codex"

    def __init__(self, tmp: Path, name: str) -> None:
        super().__init__(tmp, name)
        rollout = self.dir / "rollout.jsonl"
        self.base = {**self.base, "transcript_path": str(rollout), "turn_id": "t0",
                     "model": "gpt-5-codex"}  # fmt: skip

    def events(self, i: int) -> list[Event]:
        name, tool_input, result = call(i)
        fields = {**self.base, "tool_name": name, "tool_input": tool_input,
                  "tool_use_id": f"call_{i:05d}"}  # fmt: skip
        post = {**fields, "hook_event_name": "PostToolUse", "tool_response": result}
        return [("PreToolUse", {**fields, "hook_event_name": "PreToolUse"}), ("PostToolUse", post)]

    def after(self, i: int) -> list[Event]:
        if (i + 1) % STOP_EVERY:
            return []
        stop = {"hook_event_name": "Stop", "stop_hook_active": False,
                "last_assistant_message": final_text(i)}  # fmt: skip
        return [("Stop", {**self.base, **stop})]


class CursorSession(Session):
    """The same session as Cursor runs it (cursor.com/docs/hooks): ``conversation_id``
    and the common fields, Cursor's tool names, ``tool_output`` as a JSON string, and a
    ``stop`` with no final text."""

    agent = "cursor"
    TOOLS: ClassVar[dict[str, str]] = {
        "Read": "Read",
        "Grep": "Grep",
        "Edit": "Write",
        "Bash": "Shell",
    }

    def __init__(self, tmp: Path, name: str) -> None:
        super().__init__(tmp, name)
        self.base = {"conversation_id": f"bench-{name}", "generation_id": "g0",
                     "model": "claude-sonnet-4", "cursor_version": "2.4.21",
                     "workspace_roots": ["/home/dev/app"], "user_email": None,
                     "transcript_path": None}  # fmt: skip

    def events(self, i: int) -> list[Event]:
        name, tool_input, result = call(i)
        tool = self.TOOLS[name]
        fields = {**self.base, "tool_name": tool, "tool_input": tool_input,
                  "tool_use_id": f"toolu_{i:05d}", "cwd": "/home/dev/app"}  # fmt: skip
        output = {"exitCode": 0, "stdout": result} if tool == "Shell" else {"output": result}
        post = {**fields, "hook_event_name": "postToolUse", "tool_output": json.dumps(output),
                "duration": 120}  # fmt: skip
        return [("preToolUse", {**fields, "hook_event_name": "preToolUse"}), ("postToolUse", post)]

    def after(self, i: int) -> list[Event]:
        if (i + 1) % STOP_EVERY:
            return []
        stop = {"hook_event_name": "stop", "status": "completed", "loop_count": 0}
        return [("stop", {**self.base, **stop})]


SESSIONS: dict[str, type[Session]] = {
    "claude-code": Session,
    "gemini": GeminiSession,
    "codex": CodexSession,
    "cursor": CursorSession,
}


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


def run_session(
    tmp: Path, label: str, calls: int, env: dict[str, str], agents: tuple[str, ...], cold: bool
) -> dict[str, Any]:
    """One session per agent and path, event by event, each agent's event after a
    ``python -c pass`` of its own; wall times per row (``python -c pass``, or an agent
    and its path) and event kind."""
    work = tmp / label
    work.mkdir()
    sockets = Path(tempfile.mkdtemp(prefix="ljb-", dir="/tmp"))  # short: 108-byte limit
    envs = {
        "daemon": {**env, "LOOP_JUDGE_HOOK_SOCKET_DIR": str(sockets)},
        "cold": {**env, "LOOP_JUDGE_HOOK_DAEMON": "off"},
    }
    paths = ("daemon", "cold") if cold else ("daemon",)
    sessions = {
        (agent, path): SESSIONS[agent](work, f"{agent}-{path}")
        for agent in agents
        for path in paths
    }
    # The rows in the order they are printed: the baseline, then each agent's paths.
    times: dict[str, dict[str, list[float]]] = {BASELINE: {}}
    times.update({f"{agent} {path}": {} for agent in agents for path in paths})
    answers: dict[tuple[str, str], list[str]] = {key: [] for key in sessions}
    loads = [load()]
    first = True  # the daemon's start (the first event of all) is not a steady-state event
    try:
        for i in range(calls):
            for phase in ("events", "after"):
                batches = {key: getattr(session, phase)(i) for key, session in sessions.items()}
                for step in range(max(len(batch) for batch in batches.values())):
                    for agent in agents:
                        wall, _ = timed([str(PYTHON), "-c", "pass"], b"", env, tmp)
                        times[BASELINE].setdefault("event", []).append(wall)
                        for path in paths:
                            kind, payload = batches[(agent, path)][step]
                            command = [str(PYTHON), "-m", "judge.hooks", agent, "--state-dir"]
                            command.append(str(sessions[(agent, path)].state))
                            raw = json.dumps(payload).encode()
                            wall, out = timed(command, raw, envs[path], tmp)
                            answers[(agent, path)].append(out)
                            if path == "daemon" and first:
                                first = False
                                _wait_for_daemon(sockets)
                                continue
                            times.setdefault(f"{agent} {path}", {}).setdefault(kind, []).append(
                                wall
                            )
            if i % 50 == 49:
                loads.append(load())
        loads.append(load())
    finally:
        _stop_daemons(sockets)
    said = {agent: _said(answers[(agent, "daemon")]) for agent in agents}
    same = (
        {agent: answers[(agent, "daemon")] == answers[(agent, "cold")] for agent in agents}
        if cold
        else None
    )
    return {"times": times, "loads": loads, "said": said, "same": same}


def _said(answers: list[str]) -> int:
    """How many answers had something to say (a productive session should get none):
    anything but no output, or Gemini CLI's and Cursor's "{}"."""
    return sum(1 for out in answers if out.strip() not in ("", "{}"))


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
    base_median, base_p95 = stats(times[BASELINE]["event"])
    print(f"\n{label}: load average {' -> '.join(result['loads'])}")
    print(f"{'':18} {'event':18} {'n':>4} {'median':>9} {'p95':>9} {'x median':>9} {'x p95':>7}")
    for row, kinds in times.items():
        every = [t for values in kinds.values() for t in values]
        listed = [] if row == BASELINE else sorted(kinds.items())
        for kind, values in [*listed, ("all", every)]:
            median, p95 = stats(values)
            print(
                f"{row:18} {kind:18} {len(values):4d} {median * 1000:7.1f}ms {p95 * 1000:7.1f}ms"
                f" {median / base_median:8.1f}x {p95 / base_median:6.1f}x"
            )
    base = f"{base_median * 1000:.1f} ms; its p95 {base_p95 * 1000:.1f} ms"
    print(f"(ratios to python -c pass's median, {base})")
    for agent, said in result["said"].items():
        print(f"{agent}: answers with something to say (a productive session: 0): {said}")
    if result["same"] is not None:
        for agent, same in result["same"].items():
            print(f"{agent}: daemon and cold answers identical: {same}")


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


# Written to bytecode before the timed runs: every module a hook event imports.
IMPORTED = (
    "import judge.integrations.claude_code, judge.hooks.daemon, judge.integrations.gemini_cli,"
    " judge.integrations.codex, judge.integrations.cursor"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--no-busy", action="store_true", help="skip the busy-core run")
    parser.add_argument(
        "--agent",
        choices=[*AGENTS, "all"],
        default="claude-code",
        help="whose hook to time (all: the four side by side, daemon path only)",
    )
    args = parser.parse_args()
    agents = AGENTS if args.agent == "all" else (args.agent,)
    cold = args.agent != "all"
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
            [str(PYTHON), "-c", IMPORTED],
            env=env,
            check=True,
            cwd=tmp,
        )
        print(f"python {' '.join(sys.argv)}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        report("idle", run_session(tmp, "idle", args.calls, env, agents, cold))
        if not args.no_busy:
            spinner = subprocess.Popen([str(PYTHON), "-c", "while True: pass"])
            try:
                busy = run_session(tmp, "busy", args.calls, env, agents, cold)
                report("other core busy", busy)
            finally:
                spinner.kill()
                spinner.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
