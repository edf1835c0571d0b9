"""Runs each turn's CPU-bound work in a worker thread, under a CPU budget.

The detectors are pure Python: run on the event loop, one pathological request (a huge
history, a text shape a regex handles badly) would stall every other session and
``/healthz`` with it. Here a turn runs in one of anyio's worker threads
(``anyio.to_thread.run_sync``), at most ``threads`` at once (an anyio `CapacityLimiter`).
Each worker thread keeps an event loop of its own, so the tracker's async code runs
unchanged; the judge's model requests are sent back to the server's loop (`MainLoopClient`),
which owns the connections.

The CPU budget is our own code because anyio has no way to stop a thread: a watchdog on the
server's loop reads the worker thread's CPU clock (the thread records its id on entry);
past the budget it raises `_OverBudget` inside that thread (CPython's
``PyThreadState_SetAsyncExc``: delivered at the next bytecode, so it stops Python-level
work but not one long C call, such as a single regex match). The caller gets
`TurnOverBudget`; the tracker may be half-updated and must be discarded. Time spent waiting
(for the GIL, for a judge reply) is not CPU time and is not counted.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from judge.errors import LoopJudgeError
from judge.llm.client import LLMClient, ModelReply

T = TypeVar("T")

# How often the watchdog reads the worker's CPU clock: the budget is overshot by at most
# this, and each check costs ~2 us of the loop's time.
WATCH_INTERVAL_S = 0.05


class TurnOverBudget(LoopJudgeError):
    """A turn used more CPU than ``turn_cpu_budget_s`` allows and was stopped."""

    budget_s: float
    used_s: float

    def __init__(self, budget_s: float, used_s: float):
        super().__init__(
            f"the turn used more than its CPU budget of {budget_s:g} s "
            f"(LOOP_JUDGE_TURN_CPU_BUDGET_S) and was stopped after {used_s:.2f} s"
        )
        self.budget_s = budget_s
        self.used_s = used_s


class _OverBudget(BaseException):
    """Raised inside the worker thread; a BaseException so no ``except Exception`` in the
    detectors swallows it."""


def _async_raise(thread_id: int, exc: type[BaseException] | None) -> None:
    """Schedule ``exc`` in thread ``thread_id`` (None clears a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )


def _cpu_clock(thread_id: int) -> Callable[[], float]:
    """The CPU clock of another thread where the OS has one (Linux, BSD); else wall time
    since the call, a looser bound that still ends runaway work."""
    try:
        clock_id = time.pthread_getcpuclockid(thread_id)
    except (AttributeError, OSError):
        return time.monotonic
    return lambda: time.clock_gettime(clock_id)


class _OwnedLoop:
    """A worker thread's event loop, closed when the thread ends: anyio exits a worker
    thread idle for 10 s, the thread's locals are dropped with it, and so is this."""

    def __init__(self) -> None:
        # A selector loop on every platform: it owns no sockets (judge requests run on the
        # server's loop), so nothing needs the proactor Windows would pick.
        self.loop: asyncio.AbstractEventLoop = asyncio.SelectorEventLoop()

    def __del__(self) -> None:  # its selector holds descriptors
        if not self.loop.is_closed() and not self.loop.is_running():
            self.loop.close()


class _ThreadLoop(threading.local):
    """One event loop per worker thread, made on its first turn and reused by the next."""

    owned: _OwnedLoop | None = None

    def get(self) -> asyncio.AbstractEventLoop:
        if self.owned is None or self.owned.loop.is_closed():
            self.owned = _OwnedLoop()
        return self.owned.loop

    def drop(self) -> None:
        """Forget a loop whose run was interrupted (its tasks may be in any state)."""
        self.owned = None  # closed by _OwnedLoop.__del__


@dataclass(eq=False)  # hashed by identity: the runner keeps its running jobs in a set
class _Job:
    """What the watchdog and the worker thread share about one run."""

    guard: threading.Lock = field(default_factory=threading.Lock)
    thread_id: int | None = None
    clock: Callable[[], float] | None = None
    cpu_start: float = 0.0
    running: bool = False
    fired: bool = False


class TurnRunner:
    """Runs coroutine functions in at most ``threads`` worker threads, each under a CPU
    budget."""

    def __init__(self, *, threads: int, cpu_budget_s: float | None) -> None:
        self.threads = threads
        self.cpu_budget_s = cpu_budget_s
        self._limiter = anyio.CapacityLimiter(threads)
        self._loops = _ThreadLoop()
        self.main_loop: asyncio.AbstractEventLoop | None = None
        # One watchdog for all running jobs, not a task per turn.
        self._jobs: set[_Job] = set()
        self._watchdog: asyncio.Task[None] | None = None

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """``await work()`` in a worker thread; raises `TurnOverBudget` past the budget.

        Not cancellable once called (the thread cannot be abandoned while it holds a
        session's tracker); the budget is what bounds it. anyio shields the thread's run
        from its own cancel scopes but not from a plain ``Task.cancel()`` (what litellm's
        proxy and ``asyncio.wait_for`` do), so the run is a task of its own, awaited
        through `_uncancellable`.
        """
        if self.main_loop is None:
            self.main_loop = asyncio.get_running_loop()
        job = _Job()
        if self.cpu_budget_s is not None:
            self._jobs.add(job)
            self._ensure_watchdog(self.cpu_budget_s)
        call = asyncio.ensure_future(
            anyio.to_thread.run_sync(self._in_thread, job, work, limiter=self._limiter)
        )
        try:
            return await _uncancellable(call)
        except _OverBudget:
            used = job.clock() - job.cpu_start if job.clock is not None else 0.0
            raise TurnOverBudget(self.cpu_budget_s or 0.0, used) from None
        finally:
            self._jobs.discard(job)

    def _ensure_watchdog(self, budget_s: float) -> None:
        """Start the shared watchdog unless one is running on this loop (it stops by
        itself once no job is left; a loop that closed under it leaves a dead one)."""
        loop = asyncio.get_running_loop()
        current = self._watchdog
        if current is not None and not current.done() and current.get_loop() is loop:
            return
        # A plain task, not a task group: errors of the work must reach the caller as
        # themselves, not wrapped in an ExceptionGroup.
        self._watchdog = loop.create_task(self._watch_all(budget_s))

    def _in_thread(self, job: _Job, work: Callable[[], Awaitable[T]]) -> T:
        ident = threading.get_ident()
        clock = _cpu_clock(ident)
        loop = self._loops.get()
        finished = False
        try:
            with job.guard:
                job.thread_id, job.clock, job.cpu_start = ident, clock, clock()
                job.running = True
            result = loop.run_until_complete(_call(work))
            finished = True
            return result
        finally:
            # Whatever happens, no interruption may outlive this run: one still pending is
            # cleared here, under the lock the watchdog raises under.
            with job.guard:
                job.running = False
                if job.fired:
                    _async_raise(ident, None)
            if job.fired and not finished:
                self._loops.drop()

    async def _watch_all(self, budget_s: float) -> None:
        while self._jobs:
            await asyncio.sleep(WATCH_INTERVAL_S)
            for job in list(self._jobs):
                _check(job, budget_s)


def _check(job: _Job, budget_s: float) -> None:
    """Stop ``job``'s thread if it is past the budget (once)."""
    with job.guard:
        if job.fired or not job.running or job.clock is None or job.thread_id is None:
            return
        if job.clock() - job.cpu_start > budget_s:
            job.fired = True
            _async_raise(job.thread_id, _OverBudget)


async def _call(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


async def _uncancellable(future: asyncio.Future[T]) -> T:
    """Wait for ``future`` even if the caller is cancelled meanwhile (the thread cannot be
    abandoned while it holds a session's tracker), then raise the cancellation."""
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.done():
                raise
            cancelled = True
            continue
        if cancelled:
            raise asyncio.CancelledError
        return result


class MainLoopClient:
    """A judge client whose requests run on the server's event loop.

    Turns run in worker threads with loops of their own; the model client's connection
    pools (httpx, aiohttp inside litellm) belong to the loop that made them, so every
    request is handed to the server's loop and awaited from the worker's. Cancelling the
    worker's wait (the tracker's deadline) cancels the request on the server's loop.
    """

    def __init__(self, inner: LLMClient, runner: TurnRunner) -> None:
        self.inner = inner
        self._runner = runner

    async def complete(
        self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
    ) -> ModelReply:
        home = self._runner.main_loop
        if home is None or home is asyncio.get_running_loop():
            return await self.inner.complete(model, messages, schema=schema)
        future = asyncio.run_coroutine_threadsafe(
            self.inner.complete(model, messages, schema=schema), home
        )
        return await asyncio.wrap_future(future)


def bridge_judge(store: Any, runner: TurnRunner) -> None:
    """Make ``store``'s trackers (whose config names a judge model) send judge requests
    through the event loop ``runner`` was first used on, which owns the connection pools,
    while their turns run in its worker threads."""
    from judge.llm._litellm import LiteLLMClient

    current = getattr(store, "judge_client", None)
    if isinstance(current, MainLoopClient):
        return
    inner = current if current is not None else LiteLLMClient.from_config(store.config)
    store.judge_client = MainLoopClient(inner, runner)
