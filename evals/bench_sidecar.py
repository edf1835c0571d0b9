"""Sidecar throughput and latency: full-history vs append turns, in memory and in Redis.

Starts ``loop-judge serve`` (uvicorn, heuristics only, so no judge check is ever due) on
127.0.0.1 in a subprocess, once per store, and drives it from this process with N
concurrent sessions (``--sessions``, default 100 and 1,000), each an agent sending
``--turns`` turns (default 30; a different file read each turn, so no loop is found):

- ``full``: every turn sends the whole history so far (what every client did before the
  append API);
- ``append``: every turn sends only the two new messages and the index they start at.

Both modes run against the same server process, one after the other, so their ratio is
measured side by side. With Redis, ``--replicas N`` also runs N servers of this tree on the
one Redis, sessions routed to them by affinity (``--routing sticky``, as a load balancer
keeps a session on one replica) or each turn to the next (``--routing rotate``).
With ``--baseline-tree DIR`` (a checkout or ``git worktree`` of an earlier commit), that
tree's server is measured too, in the same run and modes (a tree from before the append
API: ``--baseline-modes full``).
``--huge`` adds the stall test: one session posts a 1,000-message history (~6 MB) while
``/healthz`` is polled every 10 ms; it reports the slowest health answer.

It also prints what one session holds in the in-memory store, in this process (this
tree): the bytes the store counts against its cap (``LOOP_JUDGE_MAX_STORE_BYTES``) and
the Python memory the session's objects take (tracemalloc), for the benchmark's sessions
after ``--turns`` turns and for one whose last tool result is 7.9 MB.

The client is a small keep-alive HTTP/1.1 pool on asyncio streams (~30 us per request),
so the figures are the server's, not an HTTP library's (``--client httpx`` drives the
servers with httpx instead, the client of the first release's ``evals/bench_server.py``,
kept so its older figures can be compared: there the client is what saturates a core); client and
server still share the machine's cores, so they are a floor for a server with cores of
its own. Each row says how many cores each side used (CPU seconds over wall seconds: the
client's from its own process clock, the server's from /proc). Requests wait for a free
connection of the pool (at most ``--connections``), and that wait is
part of their latency, as in any pooled client.

Run from the repository root:  .venv/bin/python evals/bench_sidecar.py
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# A busy deployment's load and a large one's: 100 and 1,000 agents at once.
DEFAULT_SESSIONS = "100,1000"
# Turns per session: 30 is where the tracker's first judge check would be due, so this is
# the range a heuristics-only turn sees.
DEFAULT_TURNS = 30
# Client connections: a pool as an agent platform would keep; more than the server's two
# cores can use, fewer than the 1,000 sessions (the server caps connections at 900).
DEFAULT_CONNECTIONS = 128
# Hard stop per measurement, so a slow machine still finishes in bounded time.
DEFAULT_MAX_SECONDS = 60.0
# Requests sent before timing starts: imports, first connections, the first trackers.
WARMUP_REQUESTS = 50
# uvicorn starts in ~1-3 s (FastAPI import); 60 s covers a loaded CI machine.
SERVER_START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
# A single request taking longer than this counts as an error.
REQUEST_TIMEOUT_S = 120.0
# The stall test: 1,000 messages of ~6 kB (~6 MB of JSON) under the 8 MiB body cap; the
# tracker needs ~1.5 s of CPU for it on one core of a 2-core CI machine.
HUGE_MESSAGES = 1000
HUGE_MESSAGE_CHARS = 4000
HEALTH_POLL_S = 0.01
TOKEN = "bench-token-0123456789abcdef"


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
        cmd = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        cmd += ["--appendonly", "no", "--dir", workdir]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time so far (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime and stime are fields 14 and 15 of stat(5); [0] here is field 3 (state).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def sidecar(redis_url: str | None, tree: Path | None, log: Path) -> Iterator[tuple[int, int]]:
    """``loop-judge serve`` in a subprocess on a free loopback port; yields (port, pid).

    ``tree``: run that source tree's server instead of this one (a baseline). Its stderr
    goes to ``log`` (a pipe nobody reads would fill and block the server).
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOP_JUDGE_")}
    env["LOOP_JUDGE_SEMANTIC"] = "off"  # measure the server, not the embedding model
    env["LOOP_JUDGE_SERVER_TOKEN"] = TOKEN
    cmd = [sys.executable, "-m", "judge.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    if redis_url:
        cmd += ["--redis-url", redis_url]
    cwd = None
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
        cwd = str(tree)
    with log.open("wb") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            if proc.poll() is not None:
                tail = log.read_text("utf-8", "replace")[-2000:]
                raise RuntimeError(f"the sidecar exited: {tail}")
            if time.monotonic() > deadline:
                raise RuntimeError("the sidecar did not start listening")
            time.sleep(0.1)
        yield port, proc.pid
    finally:
        _stop(proc)


def warnings_in(log: Path) -> list[str]:
    """Lines the server logged at WARNING or above (lost locks, store errors)."""
    text = log.read_text("utf-8", "replace")
    return [line for line in text.splitlines() if "WARNING" in line or "ERROR" in line]


class Pool:
    """Keep-alive HTTP/1.1 connections to one server; one request per connection at a time."""

    def __init__(self, port: int, size: int) -> None:
        self.port = port
        self.size = size
        self._idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.Queue()
        )
        self._open = 0
        self._head = (
            f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\n"
        ).encode()

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._idle.empty() and self._open < self.size:
            self._open += 1
            return await asyncio.open_connection("127.0.0.1", self.port, limit=2**24)
        return await self._idle.get()

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        reader, writer = await self._connection()
        try:
            writer.write(
                f"{method} {path} HTTP/1.1\r\n".encode()
                + self._head
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            keep = True
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    keep = False
            data = await reader.readexactly(length)
        except BaseException:
            writer.close()
            self._open -= 1
            raise
        if keep:
            self._idle.put_nowait((reader, writer))
        else:
            writer.close()
            self._open -= 1
        return status, data

    async def aclose(self) -> None:
        while not self._idle.empty():
            _, writer = self._idle.get_nowait()
            writer.close()


class HttpxPool:
    """The same requests through an httpx client with as many keep-alive connections: what
    an agent written with a common HTTP library costs the shared cores."""

    def __init__(self, port: int, size: int) -> None:
        import httpx

        self._transport_error = httpx.TransportError
        self._client = httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
            timeout=REQUEST_TIMEOUT_S,
            trust_env=False,  # a proxy from the environment must not carry loopback traffic
        )

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        try:
            response = await self._client.request(method, path, content=body)
        except self._transport_error as exc:  # counted like the streams client's failures
            raise ConnectionError(f"httpx {type(exc).__name__}") from exc
        return response.status_code, response.content

    async def aclose(self) -> None:
        await self._client.aclose()


CLIENTS: dict[str, type[Pool] | type[HttpxPool]] = {"streams": Pool, "httpx": HttpxPool}


def history(turns: int, session: int) -> list[dict[str, Any]]:
    """An agent reading a different file each turn (no loop, no judge: nothing is due)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Task {session}: summarize the repository."},
    ]
    for i in range(turns):
        call_id = f"call_{session}_{i}"
        arguments = json.dumps({"path": f"src/mod_{i}.py"})
        messages.append(
            {
                "role": "assistant",
                "content": f"Reading file {i}.",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": arguments},
                    }
                ],
            }
        )
        body = f"# module {i}\n" + "def f():\n    return 1\n" * 5
        messages.append({"role": "tool", "tool_call_id": call_id, "content": body})
    return messages


@dataclass
class Result:
    server: str
    store: str
    mode: str
    sessions: int
    requests: int
    errors: int
    seconds: float
    rps: float  # every request, failed ones (503, timeouts, lost connections) included
    ok_rps: float  # requests answered 200 with the verdict expected: what an agent gets
    p50_ms: float
    p99_ms: float
    client_cores: float = 0.0
    server_cores: float = 0.0
    error_kinds: dict[str, int] = field(default_factory=dict)


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def drive(
    ports: list[int],
    label: tuple[str, str, str],
    sessions: int,
    turns: int,
    args: argparse.Namespace,
    server_pids: list[int] | None = None,
) -> Result:
    """Drive the servers on ``ports`` (replicas of one store). Routing (``--routing``):
    ``sticky``, session ``n`` always goes to replica ``n % len(ports)``, as behind a load
    balancer with session affinity; ``rotate``, each turn goes to the next replica, so
    every turn finds the session saved by another replica (the worst case)."""
    per_replica = max(1, min(sessions, args.connections) // len(ports))
    client = CLIENTS[args.client]
    pools = [client(port, per_replica) for port in ports]
    try:
        return await _drive(pools, label, sessions, turns, args, server_pids or [])
    finally:  # whatever went wrong, no connection or client is left open
        for pool in pools:
            await pool.aclose()


async def _drive(
    pools: list[Pool | HttpxPool],
    label: tuple[str, str, str],
    sessions: int,
    turns: int,
    args: argparse.Namespace,
    pids: list[int],
) -> Result:
    server, store, mode = label
    run_id = f"{server.replace(' ', '_')}-{store}-{mode}-{sessions}-{time.monotonic_ns()}"
    warm = json.dumps({"messages": history(1, -1)}).encode()
    for i in range(WARMUP_REQUESTS):
        pool = pools[i % len(pools)]
        await pool.request("POST", f"/v1/sessions/warm-{run_id}-{i}/turns", warm)
    latencies: list[float] = []
    error_kinds: dict[str, int] = {}
    deadline = time.perf_counter() + args.max_seconds

    rotate = args.routing == "rotate"

    async def agent(n: int) -> None:
        full = history(turns, n)
        path = f"/v1/sessions/{run_id}-{n}/turns"
        for t in range(1, turns + 1):
            if time.perf_counter() > deadline:
                return
            pool = pools[(n + t if rotate else n) % len(pools)]
            end = 2 + 2 * t
            if mode == "full":
                body: dict[str, Any] = {"messages": full[:end]}
            else:
                start = 0 if t == 1 else end - 2
                body = {"messages": full[start:end], "start": start}
            started = time.perf_counter()
            try:
                status, data = await asyncio.wait_for(
                    pool.request("POST", path, json.dumps(body).encode()), REQUEST_TIMEOUT_S
                )
                if status == 409 and mode == "append":
                    # The server's copy ends elsewhere (an earlier turn got a 503): send the
                    # whole history once, as a client of the append API does.
                    full_body = json.dumps({"messages": full[:end]}).encode()
                    status, data = await asyncio.wait_for(
                        pool.request("POST", path, full_body), REQUEST_TIMEOUT_S
                    )
                error = None if status == 200 else f"HTTP {status}"
                if error is None and json.loads(data)["looping"]:
                    error = "unexpected loop verdict"
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                error = type(exc).__name__
            latencies.append(time.perf_counter() - started)
            if error is not None:
                error_kinds[error] = error_kinds.get(error, 0) + 1

    started = time.perf_counter()
    client_cpu = time.process_time()
    server_cpu = sum(cpu_seconds(pid) for pid in pids)
    await asyncio.gather(*(agent(n) for n in range(sessions)))
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - client_cpu
    server_cpu = sum(cpu_seconds(pid) for pid in pids) - server_cpu
    ordered = sorted(latencies)
    return Result(
        server=server,
        store=store,
        mode=mode,
        sessions=sessions,
        requests=len(latencies),
        errors=sum(error_kinds.values()),
        seconds=round(elapsed, 2),
        rps=round(len(latencies) / elapsed, 1) if elapsed else 0.0,
        ok_rps=(
            round((len(latencies) - sum(error_kinds.values())) / elapsed, 1) if elapsed else 0.0
        ),
        p50_ms=round(statistics.median(ordered) * 1000, 1) if ordered else 0.0,
        p99_ms=round(_percentile(ordered, 0.99) * 1000, 1),
        client_cores=round(client_cpu / elapsed, 2) if elapsed else 0.0,
        server_cores=round(server_cpu / elapsed, 2) if elapsed else 0.0,
        error_kinds=error_kinds,
    )


def huge_history() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Summarize the logs."},
    ]
    for i in range(HUGE_MESSAGES // 2):
        cid = f"c{i}"
        call = {"id": cid, "type": "function"}
        call["function"] = {"name": "read_log", "arguments": json.dumps({"part": i})}  # type: ignore[assignment]
        text = f"Step {i}: reading. " + "word " * (HUGE_MESSAGE_CHARS // 10)
        messages.append({"role": "assistant", "content": text, "tool_calls": [call]})
        log = f"line {i} of output\n" * (HUGE_MESSAGE_CHARS // 20)
        messages.append({"role": "tool", "tool_call_id": cid, "content": log})
    return messages


@dataclass
class Stall:
    server: str
    huge_status: int
    huge_seconds: float
    health_polls: int
    health_max_ms: float
    health_p99_ms: float


async def stall(port: int, server: str) -> Stall:
    """Poll /healthz while one session's huge turn runs; the slowest answer says whether
    the turn held the event loop."""
    pool = Pool(port, 4)
    body = json.dumps({"messages": huge_history()}).encode()
    await pool.request("GET", "/healthz")
    done = asyncio.Event()
    health: list[float] = []

    async def poll() -> None:
        while not done.is_set():
            started = time.perf_counter()
            await pool.request("GET", "/healthz")
            health.append(time.perf_counter() - started)
            await asyncio.sleep(HEALTH_POLL_S)

    poller = asyncio.create_task(poll())
    started = time.perf_counter()
    status, _ = await pool.request("POST", "/v1/sessions/huge/turns", body)
    seconds = time.perf_counter() - started
    done.set()
    await poller
    await pool.aclose()
    ordered = sorted(health)
    return Stall(
        server=server,
        huge_status=status,
        huge_seconds=round(seconds, 2),
        health_polls=len(ordered),
        health_max_ms=round(ordered[-1] * 1000, 1) if ordered else 0.0,
        health_p99_ms=round(_percentile(ordered, 0.99) * 1000, 1),
    )


# Sessions replayed in process for the turn-cost line (30 turns each: 6,000 turns, ~1 s).
IN_PROCESS_SESSIONS = 200


def in_process_turn_us(turns: int) -> float:
    """Median CPU microseconds of one ``turn_started`` on the benchmark's own sessions in
    this process, with no HTTP: the part of a request's server CPU the tracker itself takes
    (this tree's tracker, heuristics only, the whole history passed each turn)."""
    import anyio

    from judge import LoopTracker, TrackerConfig

    config = TrackerConfig(fast_model=None, confirm_model=None, semantic="off")

    async def replay() -> list[int]:
        spent = []
        for n in range(IN_PROCESS_SESSIONS):
            full = history(turns, n)
            tracker = LoopTracker(config)
            for t in range(1, turns + 1):
                started = time.thread_time_ns()
                await tracker.turn_started(full[: 2 + 2 * t])
                spent.append(time.thread_time_ns() - started)
        return spent

    return statistics.median(anyio.run(replay)) / 1_000


# The session whose last message is a huge tool result: just under the 8 MiB body cap.
HUGE_RESULT_CHARS = 7_900_000


@dataclass
class SessionBytes:
    label: str
    sessions: int
    counted: int  # bytes the store counts per session (median)
    counted_max: int
    python: int  # bytes of Python memory per session (tracemalloc, all sessions / count)


def in_process_session_bytes(turns: int) -> list[SessionBytes]:
    """What a session holds in this tree's in-memory store after ``turns`` turns: the
    bytes it counts against its cap, and the Python memory its objects take."""
    import gc
    import tracemalloc

    import anyio

    from judge import TrackerConfig
    from judge.service.session_codec import held_bytes
    from judge.service.store import MemoryStore
    from judge.service.turns import run_turn

    config = TrackerConfig(fast_model=None, confirm_model=None, semantic="off")

    async def fill(label: str, histories: list[list[dict[str, Any]]]) -> SessionBytes:
        store = MemoryStore(config, max_bytes=None, max_sessions=len(histories) + 1)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for n, full in enumerate(histories):
            for t in range(1, turns + 1):
                # Parsed per request, as the server does: what a session keeps of a
                # request (its last entry) is then its own, not shared with the input.
                sent = json.loads(json.dumps(full[: 2 + 2 * t]))
                async with store.open(f"s{n}") as session:
                    await run_turn(session, sent, False)
        gc.collect()
        python = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        counted = []
        for n in range(len(histories)):
            async with store.open(f"s{n}") as session:
                counted.append(held_bytes(session)[0])
        return SessionBytes(
            label,
            len(histories),
            int(statistics.median(counted)),
            max(counted),
            python // len(histories),
        )

    async def both() -> list[SessionBytes]:
        usual = [history(turns, n) for n in range(IN_PROCESS_SESSIONS // 4)]
        huge = history(turns, 0)
        last = 2 + 2 * turns - 1
        huge[last] = {**huge[last], "content": "x" * HUGE_RESULT_CHARS}
        return [
            await fill(f"{turns} turns", usual),
            await fill(f"{turns} turns, last result 7.9 MB", [huge]),
        ]

    return anyio.run(both)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", default=DEFAULT_SESSIONS, help="comma list")
    parser.add_argument("--turns", type=int, default=DEFAULT_TURNS)
    parser.add_argument("--connections", type=int, default=DEFAULT_CONNECTIONS)
    parser.add_argument("--max-seconds", type=float, default=DEFAULT_MAX_SECONDS)
    parser.add_argument("--stores", default="memory,redis", help="comma list: memory,redis")
    parser.add_argument("--modes", default="full,append", help="comma list: full,append")
    parser.add_argument("--baseline-tree", type=Path, help="also measure this tree's server")
    parser.add_argument(
        "--baseline-modes", help="the baseline's modes (default: --modes)", default=None
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="with Redis, also run this many servers of this tree on one Redis, each "
        "session sticking to one of them (a load balancer with session affinity)",
    )
    parser.add_argument(
        "--routing",
        choices=("sticky", "rotate"),
        default="sticky",
        help="how --replicas share the sessions: each session on one replica, or each "
        "turn on the next replica",
    )
    parser.add_argument(
        "--client",
        choices=sorted(CLIENTS),
        default="streams",
        help="the HTTP client driving the servers (default streams, the lightest)",
    )
    parser.add_argument("--huge", action="store_true", help="add the /healthz stall test")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.sessions.split(",")]
    modes = args.modes.split(",")
    baseline_modes = (args.baseline_modes or args.modes).split(",")
    servers: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline_tree is not None:
        servers.insert(0, ("baseline", args.baseline_tree.resolve()))
    results: list[Result] = []
    stalls: list[Stall] = []
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        for store in args.stores.split(","):
            redis_url = None
            if store == "redis":
                redis_url = stack.enter_context(private_redis())
                if redis_url is None:
                    notes.append("redis: skipped, redis-server is not installed")
                    continue
            elif store != "memory":
                parser.error(f"unknown store {store!r}")
            for server, tree in servers:
                log = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "server.log"
                with sidecar(redis_url, tree, log) as (port, pid):
                    if args.huge and store == "memory":
                        stalls.append(asyncio.run(stall(port, server)))
                    for sessions in counts:
                        for mode in modes if tree is None else baseline_modes:
                            label = (server, store, mode)
                            results.append(
                                asyncio.run(drive([port], label, sessions, args.turns, args, [pid]))
                            )
                if store == "redis" and tree is None and args.replicas > 1:
                    with contextlib.ExitStack() as replicas:
                        logs = [log.with_name(f"replica-{i}.log") for i in range(args.replicas)]
                        started = [
                            replicas.enter_context(sidecar(redis_url, None, replica_log))
                            for replica_log in logs
                        ]
                        ports = [port for port, _ in started]
                        pids = [pid for _, pid in started]
                        for sessions in counts:
                            for mode in modes:
                                tag = "" if args.routing == "sticky" else " rot"
                                label = (f"{server} x{args.replicas}{tag}", store, mode)
                                results.append(
                                    asyncio.run(
                                        drive(ports, label, sessions, args.turns, args, pids)
                                    )
                                )
                    for replica_log in logs:
                        logged = warnings_in(replica_log)
                        if logged:
                            notes.append(
                                f"{replica_log.stem}: the server logged {len(logged)} "
                                "warnings, e.g. " + " | ".join(logged[:3])
                            )
                logged = warnings_in(log)
                if logged:
                    notes.append(
                        f"{server} {store}: the server logged {len(logged)} warnings, e.g. "
                        + " | ".join(logged[:3])
                    )
    if args.json:
        print(
            json.dumps(
                {"load": [asdict(r) for r in results], "stall": [asdict(s) for s in stalls]},
                indent=2,
            )
        )
    else:
        print(
            f"up to {args.turns} turns per session, heuristics only, {os.cpu_count()} cores "
            f"shared by client and server, {args.connections} client connections at most"
        )
        print(
            f"one turn_started of these sessions in this process, no HTTP (this tree): "
            f"median {in_process_turn_us(args.turns):.0f} us of CPU"
        )
        print(
            f"{'server':<9} {'store':<7} {'mode':<7} {'sessions':>8} {'requests':>8} "
            f"{'errors':>6} {'req/s':>8} {'ok/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'client':>6} "
            f"{'server':>6} {'cpu ms/req':>10}"
        )
        for r in results:
            print(
                f"{r.server:<9} {r.store:<7} {r.mode:<7} {r.sessions:>8} {r.requests:>8} "
                f"{r.errors:>6} {r.rps:>8} {r.ok_rps:>8} {r.p50_ms:>8} {r.p99_ms:>8} "
                f"{r.client_cores:>6} {r.server_cores:>6} "
                f"{(r.server_cores * 1000 / r.ok_rps if r.ok_rps else 0.0):>10.2f}"
            )
        print(
            "req/s: every request, failed ones (refusals, timeouts, lost connections) "
            "included; ok/s: requests answered 200 with the verdict expected; client, "
            "server: cores used (CPU seconds per wall second); cpu ms/req: the server's CPU "
            "per request answered (ok/s), which the machine's other load does not change much"
        )
        for r in results:
            if r.error_kinds:
                print(f"{r.server} {r.store} {r.mode} {r.sessions} errors: {r.error_kinds}")
        for s in stalls:
            print(
                f"stall ({s.server}): huge turn HTTP {s.huge_status} in {s.huge_seconds} s; "
                f"/healthz polled {s.health_polls}x, slowest {s.health_max_ms} ms, "
                f"p99 {s.health_p99_ms} ms"
            )
        for b in in_process_session_bytes(args.turns):
            print(
                f"per session in memory ({b.label}, {b.sessions} sessions, this tree): "
                f"{b.counted:,} bytes counted against LOOP_JUDGE_MAX_STORE_BYTES (max "
                f"{b.counted_max:,}), {b.python:,} bytes of Python memory"
            )
    for note in notes:
        print(note)
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
