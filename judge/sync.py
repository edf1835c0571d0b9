"""`SyncLoopTracker`: the tracker for synchronous agents (scripts, notebooks, smolagents).

`LoopTracker.turn_started` is a coroutine because the judge talks to a model over the
network. A synchronous agent cannot await it, and ``asyncio.run`` is no answer: it fails
inside a thread that already runs an event loop (a notebook, a sync callback called by async
code), and a fresh loop per turn would strand the judge client's connections, which belong
to the loop that opened them.

So the sync tracker owns one event loop, made on the first turn and used for every turn of
its life. A caller whose thread runs no event loop (a script, smolagents) runs that loop
itself, in its own thread, for the length of the turn: no thread hand-off, so the sync API
costs what the async one does. A caller whose thread already runs a loop cannot run a
second one there, so its turn goes to one worker thread that runs the tracker's loop while
the caller waits. Either way it is the same loop, never two at once. `close()`, leaving a
``with`` block, or a finalizer when the tracker is collected stops the worker and closes
the loop.

Everything that is already synchronous on `LoopTracker` (``check_call``, ``content_chunk``,
``override``, ``state`` ...) runs in the caller's thread. Like `LoopTracker`, it is not
thread-safe: use one tracker from one thread at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections.abc import Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from judge.config import TrackerConfig
from judge.response.ladder import LadderState, OverrideRecord
from judge.response.stats import TrackerStats
from judge.state import TrackerState
from judge.tracker import LoopTracker
from judge.verdict import Verdict

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

logger = logging.getLogger("judge.sync")

# Name prefix of the worker thread (turns asked from a thread that runs an event loop), so
# a thread dump says whose it is.
WORKER_THREAD_NAME = "loop-judge-sync"

__all__ = ["SyncLoopTracker"]

T = TypeVar("T")


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _drive(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end on ``loop`` in this thread; an interruption (Ctrl-C)
    cancels it there, so the tracker's lock is free for the next turn."""
    task = loop.create_task(coroutine)
    try:
        return loop.run_until_complete(task)
    except BaseException:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(task)
        raise


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()


class _Runner:
    """The tracker's event loop and, once needed, its worker thread.

    Kept apart from `SyncLoopTracker` so the finalizer can hold it without holding the
    tracker (a finalizer that references its object keeps it alive forever).
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.worker: ThreadPoolExecutor | None = None
        self._worker_ident: int | None = None
        self.closed = False

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self.closed:
            coroutine.close()
            raise RuntimeError("this SyncLoopTracker is closed")
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
        if not _loop_running_here():
            return _drive(self.loop, coroutine)
        if self.worker is None:
            # Imported here: `import judge` must not pay for the executor machinery.
            from concurrent.futures import ThreadPoolExecutor

            self.worker = ThreadPoolExecutor(1, thread_name_prefix=WORKER_THREAD_NAME)
            self._worker_ident = self.worker.submit(threading.get_ident).result()
        future = self.worker.submit(_drive, self.loop, coroutine)
        try:
            return future.result()
        except BaseException:
            # Interrupted while waiting: cancel the turn over there as well.
            if not future.done():
                self.loop.call_soon_threadsafe(_cancel_all, self.loop)
            raise

    def close(self) -> None:
        self.closed = True
        loop, worker, self.loop, self.worker = self.loop, self.worker, None, None
        inside_worker = threading.get_ident() == self._worker_ident
        if worker is not None:
            # The worker cannot wait for itself (a callback that dropped the last reference).
            worker.shutdown(wait=not inside_worker)
        if loop is None or loop.is_running() or loop.is_closed():
            return  # closed from inside a turn: the loop goes with the tracker
        if not _loop_running_here():
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


class SyncLoopTracker:
    """`LoopTracker` with a blocking ``turn_started``, for agents that are not async.

    Same arguments, same verdicts, same state: a ``SyncLoopTracker`` and a `LoopTracker`
    fed the same histories give the same verdicts, and `state` round-trips between them.
    Use it as a context manager, or call `close()`, to close its event loop at once (a
    forgotten one is closed when it is garbage collected).

        with SyncLoopTracker(TrackerConfig()) as tracker:
            verdict = tracker.turn_started(history)
    """

    def __init__(
        self,
        config: TrackerConfig | None = None,
        *,
        tracker: LoopTracker | None = None,
        **kwargs: Any,
    ) -> None:
        """Builds a `LoopTracker` from ``config`` and ``kwargs`` (client, on_loop,
        agent_model, ...), or wraps ``tracker``, an existing one (then pass nothing else)."""
        if tracker is not None and (config is not None or kwargs):
            raise TypeError("pass either tracker= or LoopTracker's arguments, not both")
        if tracker is None:
            tracker = LoopTracker(config, **kwargs)
        self.tracker: LoopTracker = tracker
        """The async tracker underneath; its turns belong on this wrapper's loop."""
        self._runner = _Runner()
        self._finalizer = weakref.finalize(self, self._runner.close)

    @classmethod
    def from_state(
        cls,
        config: TrackerConfig | None,
        state: TrackerState | dict[str, Any] | str,
        **kwargs: Any,
    ) -> SyncLoopTracker:
        """A tracker that continues from ``state``; see `LoopTracker.from_state`."""
        return cls(tracker=LoopTracker.from_state(config, state, **kwargs))

    # -- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the event loop and stop the worker thread. Idempotent; a closed tracker
        refuses new turns."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._runner.closed

    def __enter__(self) -> SyncLoopTracker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- per turn -----------------------------------------------------------------------

    def turn_started(self, history: Any) -> Verdict:
        """`LoopTracker.turn_started`, blocking until the verdict is ready.

        Safe in any thread, one that runs an event loop included (that loop is blocked for
        the turn, as any sync call blocks it). Raises `HistoryError` for a malformed
        history and ``RuntimeError`` once closed; never raises for a judge failure. An
        interruption (KeyboardInterrupt) cancels the turn, as cancelling an awaiting
        caller would, and leaves the tracker usable.
        """
        return self._runner.run(self.tracker.turn_started(history))

    def check_call(self, name: str, arguments: Any = None, *, refuse: bool = True) -> Verdict:
        """`LoopTracker.check_call`: would this call be a repeat past its limit?"""
        return self.tracker.check_call(name, arguments, refuse=refuse)

    def content_chunk(self, text: str) -> Verdict | None:
        """`LoopTracker.content_chunk`: a verdict when streamed text repeats itself."""
        return self.tracker.content_chunk(text)

    # -- state and control (the async tracker's own, in the caller's thread) ------------

    @property
    def config(self) -> TrackerConfig:
        return self.tracker.config

    @property
    def turn(self) -> int:
        return self.tracker.turn

    @property
    def check_interval(self) -> int:
        return self.tracker.check_interval

    @property
    def last_check_turn(self) -> int:
        return self.tracker.last_check_turn

    @property
    def judge_calls_used(self) -> int:
        return self.tracker.judge_calls_used

    @property
    def judge_tokens_used(self) -> int:
        return self.tracker.judge_tokens_used

    @property
    def detections(self) -> int:
        return self.tracker.detections

    @property
    def stats(self) -> TrackerStats:
        return self.tracker.stats

    @property
    def overrides(self) -> list[OverrideRecord]:
        return self.tracker.overrides

    @property
    def ladder_state(self) -> LadderState:
        return self.tracker.ladder_state

    def load_ladder_state(self, state: LadderState) -> None:
        self.tracker.load_ladder_state(state)

    def override(self, pattern_or_verdict: str | Verdict, reason: str) -> OverrideRecord:
        """`LoopTracker.override`: a person says "keep going" about a loop."""
        return self.tracker.override(pattern_or_verdict, reason)

    @property
    def state(self) -> TrackerState:
        """`LoopTracker.state`; `from_state` (either class's) continues from it."""
        return self.tracker.state

    def reset(self) -> None:
        """Forget the conversation (see `LoopTracker.reset`)."""
        self.tracker.reset()
