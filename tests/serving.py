"""Helpers for the server, store and guardrail tests: a throwaway redis-server, histories.

The Redis server is a real ``redis-server`` process on 127.0.0.1 and a free port, with
persistence off, started and stopped by its PID; tests using it skip with a reason when the
binary is missing (Debian: ``apt-get install -y redis-server``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# redis-server is ready in ~10 ms; 10 s covers a cold start on a loaded CI machine.
REDIS_START_TIMEOUT_S = 10.0
# SIGTERM makes redis-server exit at once with persistence off; SIGKILL after this.
REDIS_STOP_TIMEOUT_S = 5.0

FAILURE = "FAILED tests/test_app.py::test_total - AssertionError: assert 1 == 2"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """Run a private redis-server; yields its URL and stops the process on exit."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            "--daemonize",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + REDIS_START_TIMEOUT_S
        while not _ping(port):
            if proc.poll() is not None:
                pytest.fail(f"redis-server exited with {proc.returncode} on port {port}")
            if time.monotonic() > deadline:
                pytest.fail(f"redis-server did not answer on port {port}")
            time.sleep(0.01)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(REDIS_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def unique_prefix() -> str:
    """A key prefix of its own for each test, so tests sharing one server never collide."""
    return f"test-{uuid.uuid4().hex[:12]}:"


def tool_turn(i: int, name: str, arguments: dict[str, Any], result: str) -> list[dict[str, Any]]:
    call_id = f"call_{i}"
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def failing_repeat_history(n_turns: int) -> list[dict[str, Any]]:
    """The same failing test run again and again: an exact-repeat loop from turn 4."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Make the test suite pass."},
    ]
    for i in range(n_turns):
        history += tool_turn(i, "run_tests", {"path": "tests/"}, FAILURE)
    return history


def alternation_history(n_turns: int) -> list[dict[str, Any]]:
    """Reading the same two files in turn, same contents each round: an A-B cycle."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Find where the config is loaded."},
    ]
    for i in range(n_turns):
        path = "a.py" if i % 2 == 0 else "b.py"
        history += tool_turn(i, "open_file", {"path": path}, f"contents of {path}")
    return history


def prefixes(history: list[dict[str, Any]], n_turns: int) -> list[list[dict[str, Any]]]:
    """The history at the start of each of ``n_turns`` turns, as an agent would send it."""
    return [history[: 2 + 2 * i] for i in range(1, n_turns + 1)]


def threaded_turns(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the turns handed to a worker thread (`TurnRunner.run`)."""
    from judge.service.worker import TurnRunner

    calls: list[int] = []
    original = TurnRunner.run

    async def counting(runner: TurnRunner, work: Any) -> Any:
        calls.append(1)
        return await original(runner, work)

    monkeypatch.setattr(TurnRunner, "run", counting)
    return calls
