"""`SyncLoopTracker`: the tracker for synchronous agents (scripts, notebooks, smolagents).

`LoopTracker.turn_started` is a coroutine because the judge talks to a model over the
network. A synchronous agent cannot await it, and ``asyncio.run`` is no answer: it fails
inside a thread that already runs an event loop (a notebook, a sync callback called by async
code), and a fresh loop per turn would strand the judge client's connections, which belong
to the loop that opened them.

So the sync tracker owns one event loop of its own, in a daemon thread started on the first
turn (an anyio blocking portal), and runs every turn there. The caller's thread only blocks
on the answer, so it makes no difference whether that thread runs an event loop itself. The
portal is stopped by `close()`, by leaving a ``with`` block, or by a finalizer when the
tracker is collected; its thread is a daemon, so a forgotten tracker never holds up
interpreter exit.

Everything that is already synchronous on `LoopTracker` (``check_call``, ``content_chunk``,
``override``, ``state`` ...) runs in the caller's thread, with no hand-off. Like
`LoopTracker`, it is not thread-safe: use one tracker from one thread at a time.
"""

from __future__ import annotations

import logging
import threading
import weakref
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from judge.config import TrackerConfig
from judge.response.ladder import LadderState, OverrideRecord
from judge.response.stats import TrackerStats
from judge.state import TrackerState
from judge.tracker import LoopTracker
from judge.verdict import Verdict

if TYPE_CHECKING:
    from concurrent.futures import Future

    from anyio.from_thread import BlockingPortal

logger = logging.getLogger("judge.sync")

# The event loop the portal runs. asyncio, not trio: litellm's aiohttp transport and every
# framework we integrate with are asyncio-only.
PORTAL_BACKEND = "asyncio"
# Name of the portal's thread, so a thread dump says whose it is.
PORTAL_THREAD_NAME = "loop-judge-sync"

__all__ = ["SyncLoopTracker"]


class _Portal:
    """One event loop in a daemon thread, started on demand and stopped once.

    Kept apart from `SyncLoopTracker` so the finalizer can hold it without holding the
    tracker (a finalizer that references its object keeps it alive forever).
    """

    def __init__(self) -> None:
        self._manager: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._thread_id: int | None = None
        self.closed = False

    def get(self) -> BlockingPortal:
        if self.closed:
            raise RuntimeError("this SyncLoopTracker is closed")
        if self._portal is None:
            # Imported here: `import judge` must not pay for anyio's threading machinery.
            from anyio.from_thread import start_blocking_portal

            manager = start_blocking_portal(PORTAL_BACKEND, name=PORTAL_THREAD_NAME)
            self._portal = manager.__enter__()
            self._manager = manager
            self._thread_id = self._portal.call(threading.get_ident)
        return self._portal

    def close(self) -> None:
        self.closed = True
        manager, self._manager, self._portal = self._manager, None, None
        if manager is None:
            return
        if threading.get_ident() == self._thread_id:
            # Collected inside the portal's own thread (e.g. by an on_loop callback that
            # dropped the last reference): that thread cannot wait for itself to stop.
            threading.Thread(target=_exit, args=(manager,), daemon=True).start()
            return
        _exit(manager)


def _exit(manager: AbstractContextManager[BlockingPortal]) -> None:
    try:
        manager.__exit__(None, None, None)
    except RuntimeError as exc:  # the loop already died (interpreter shutdown)
        logger.debug("loop-judge portal did not stop cleanly: %s", exc)


class SyncLoopTracker:
    """`LoopTracker` with a blocking ``turn_started``, for agents that are not async.

    Same arguments, same verdicts, same state: a ``SyncLoopTracker`` and a `LoopTracker`
    fed the same histories give the same verdicts, and `state` round-trips between them.
    Use it as a context manager, or call `close()`, to stop its event-loop thread at once
    (a forgotten one is stopped when it is garbage collected).

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
        """The async tracker underneath; await it only from the portal, never concurrently."""
        self._portal = _Portal()
        self._finalizer = weakref.finalize(self, self._portal.close)

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
        """Stop the event-loop thread. Idempotent; a closed tracker refuses new turns."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._portal.closed

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

        Safe in any thread, one that runs an event loop included (the loop is blocked for
        the turn, as any sync call blocks it). Raises `HistoryError` for a malformed
        history and ``RuntimeError`` once closed; never raises for a judge failure. An
        interrupt (KeyboardInterrupt) while waiting cancels the turn in the portal too.
        """
        portal = self._portal.get()
        future: Future[Verdict] = portal.start_task_soon(self.tracker.turn_started, history)
        try:
            return future.result()
        except BaseException:
            # Interrupted while waiting: cancel the turn over there, as an awaiting caller's
            # cancellation would, so the tracker's lock is released for the next turn.
            future.cancel()
            raise

    def check_call(self, name: str, arguments: Any = None) -> Verdict:
        """`LoopTracker.check_call`: would this call be a repeat past its limit?"""
        return self.tracker.check_call(name, arguments)

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
