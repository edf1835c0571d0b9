"""How many turns per second does the sidecar serve, and how fast, in memory vs Redis?

Starts ``loop-judge serve`` with uvicorn on 127.0.0.1 in a subprocess (heuristics only,
so no judge check is ever due) and drives it from this process with ``--sessions``
concurrent sessions. Each session is an agent: it sends its growing history, one turn at a
time, for ``--turns`` turns (every turn a different file read, so no loop is found). The
run stops after that, or after ``--max-seconds``, whichever comes first. Reports requests
per second and the p50/p99 latency of ``POST /v1/sessions/{id}/turns``, once with the
in-memory store and once with Redis (a private redis-server, started here, when
``--redis-url`` is not given and redis-server is installed).

Client and server share the machine's cores, so the figures are a floor for a server with
cores of its own.

Run from the repository root:  .venv/bin/python evals/bench_server.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import httpx

# A busy deployment's load: 100 agents at once.
DEFAULT_SESSIONS = 100
# Turns per session: 30 is where the tracker's first judge check would be due (gemini-cli's
# schedule), so histories stay in the range a heuristics-only turn sees; 100 x 30 = 3,000
# requests per store, ~10 s at the rates this script measures on 2 cores.
DEFAULT_TURNS = 30
# Hard stop per store, so a slow machine still finishes in bounded time.
DEFAULT_MAX_SECONDS = 60.0
# Requests sent before timing starts: imports, first connections, the first tracker.
WARMUP_REQUESTS = 50
# uvicorn starts in ~1-3 s (FastAPI import); 30 s covers a loaded CI machine.
SERVER_START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# A single request taking longer than this counts as an error (nothing here should).
REQUEST_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def private_redis() -> Iterator[str | None]:
    """A throwaway redis-server on 127.0.0.1 (persistence off), or None if not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
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
                workdir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + SERVER_START_TIMEOUT_S
            while True:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock,
                ):
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.02)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            _stop(proc)


@contextlib.contextmanager
def sidecar(redis_url: str | None) -> Iterator[str]:
    """``loop-judge serve`` in a subprocess on a free loopback port; yields its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOP_JUDGE_")}
    env["LOOP_JUDGE_SEMANTIC"] = "off"  # measure the server, not the embedding model
    cmd = [sys.executable, "-m", "judge.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd.append("--insecure-no-token")  # loopback only; evals/bench_sidecar.py uses a token
    if redis_url:
        cmd += ["--redis-url", redis_url]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"the sidecar exited: {err[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("the sidecar did not answer /healthz")
            time.sleep(0.1)
        yield base
    finally:
        _stop(proc)


def history(turns: int, session: int) -> list[dict[str, Any]]:
    """An agent reading a different file each turn (no loop, no judge: nothing is due)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Task {session}: summarize the repository."},
    ]
    for i in range(turns):
        call_id = f"call_{session}_{i}"
        messages.append(
            {
                "role": "assistant",
                "content": f"Reading file {i}.",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"src/mod_{i}.py"}),
                        },
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": f"# module {i}\n" + "def f():\n    return 1\n" * 5,
            }
        )
    return messages


@dataclass
class Result:
    store: str
    requests: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    error_kinds: dict[str, int]


async def drive(base: str, store: str, sessions: int, turns: int, max_seconds: float) -> Result:
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=REQUEST_TIMEOUT_S) as client:
        warm = history(1, -1)
        for i in range(WARMUP_REQUESTS):
            await client.post(f"/v1/sessions/warmup-{i}/turns", json={"messages": warm})
        latencies: list[float] = []
        error_kinds: dict[str, int] = {}
        deadline = time.perf_counter() + max_seconds

        async def agent(n: int) -> None:
            full = history(turns, n)
            sid = f"bench-{store}-{n}"
            for t in range(1, turns + 1):
                if time.perf_counter() > deadline:
                    return
                body = {"messages": full[: 2 + 2 * t]}
                started = time.perf_counter()
                try:
                    r = await client.post(f"/v1/sessions/{sid}/turns", json=body)
                    error = None if r.status_code == 200 else f"HTTP {r.status_code}"
                    if error is None and r.json()["looping"]:
                        error = "unexpected loop verdict"
                except httpx.HTTPError as exc:
                    error = type(exc).__name__
                latencies.append(time.perf_counter() - started)
                if error is not None:
                    error_kinds[error] = error_kinds.get(error, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(agent(n) for n in range(sessions)))
        elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0
    return Result(
        store=store,
        requests=len(latencies),
        errors=sum(error_kinds.values()),
        seconds=round(elapsed, 2),
        rps=round(len(latencies) / elapsed, 1) if elapsed else 0.0,
        p50_ms=round(statistics.median(ordered) * 1000, 2) if ordered else 0.0,
        p99_ms=round(p99 * 1000, 2),
        error_kinds=error_kinds,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS)
    parser.add_argument("--turns", type=int, default=DEFAULT_TURNS)
    parser.add_argument("--max-seconds", type=float, default=DEFAULT_MAX_SECONDS)
    parser.add_argument("--stores", default="memory,redis", help="comma list: memory,redis")
    parser.add_argument("--redis-url", help="an existing Redis (default: start a private one)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    results: list[Result] = []
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        for store in args.stores.split(","):
            redis_url = None
            if store == "redis":
                redis_url = args.redis_url or stack.enter_context(private_redis())
                if redis_url is None:
                    notes.append("redis: skipped, redis-server is not installed")
                    continue
            elif store != "memory":
                parser.error(f"unknown store {store!r}")
            with sidecar(redis_url) as base:
                results.append(
                    asyncio.run(drive(base, store, args.sessions, args.turns, args.max_seconds))
                )
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(
            f"{args.sessions} concurrent sessions x up to {args.turns} turns, heuristics only, "
            f"{os.cpu_count()} cores shared by client and server"
        )
        print(
            f"{'store':<8} {'requests':>8} {'errors':>6} {'seconds':>8} {'req/s':>8} "
            f"{'p50 ms':>8} {'p99 ms':>8}"
        )
        for r in results:
            print(
                f"{r.store:<8} {r.requests:>8} {r.errors:>6} {r.seconds:>8} {r.rps:>8} "
                f"{r.p50_ms:>8} {r.p99_ms:>8}"
            )
        for r in results:
            if r.error_kinds:
                print(f"{r.store} errors: {r.error_kinds}")
    for note in notes:
        print(note)
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
