"""What every framework integration does with a turn, whatever the framework.

Each integration converts its framework's messages to chat dicts and then needs the same
things: the tracker of the conversation it is in (one per session, so concurrent
conversations of one agent never share a tracker), a verdict that never crashes the agent
for our own trouble, the rule that says which verdict actions are told to the model and
which end the run, and a conversion that costs only the new messages. They live here,
once, in `Sessions`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from judge.config import TrackerConfig
from judge.errors import LoopJudgeError
from judge.llm.client import LLMClient
from judge.service.store import SessionStore
from judge.tracker import LoopTracker
from judge.verdict import Action, Verdict

# Verdict actions whose recovery message goes to the model, which keeps working: a warning,
# and the rung that tells it to stop calling tools and ask its user (which a framework run
# delivers as the model's final answer).
TELL_ACTIONS = frozenset({Action.WARN, Action.ASK_USER})
# Verdict actions that end the run.
STOP_ACTIONS = frozenset({Action.STOP})
# The session used when the framework names no conversation: one tracker for the agent.
DEFAULT_SESSION = "default"
# Conversations one integration keeps in memory (tracker, converted history, loop record),
# least recently used forgotten: the sidecar's own default (judge.service.settings). A
# forgotten conversation that comes back starts a fresh tracker on its whole history.
MAX_SESSIONS = 10_000

SourceT = TypeVar("SourceT")
Convert = Callable[[SourceT], list[dict[str, Any]]]


@dataclass
class _Session(Generic[SourceT]):
    """One conversation: its tracker (unless a store keeps it), its framework messages and
    their chat dicts message by message, and whether it was ever found looping."""

    tracker: LoopTracker | None = None
    sources: list[SourceT] = field(default_factory=list)
    chunks: list[list[dict[str, Any]]] = field(default_factory=list)
    looped: bool = False


class Sessions(Generic[SourceT]):
    """The trackers of one integration's conversations, and the glue around each turn.

    Trackers live here, in this process, unless a `SessionStore` is given (a
    `judge.service.RedisStore` shares them between replicas): a live tracker needs no lock
    of ours, as its own serializes overlapping turns, and costs no event-loop round trip.

    Conversion is incremental: a framework hands over its whole history every call, but
    the messages before the last one it handed over last time are the same objects (the
    histories are append-only), so their chat dicts are reused and only the rest is
    converted. The last one is always converted again, as frameworks may still add parts
    to it in place.
    """

    def __init__(
        self,
        convert: Convert[SourceT],
        logger: logging.Logger,
        *,
        store: SessionStore | None = None,
        config: TrackerConfig | None = None,
        judge_client: LLMClient | None = None,
    ) -> None:
        self.store = store
        # Read once (LOOP_JUDGE_* when None), shared by every conversation's tracker.
        self._config = config if config is not None else TrackerConfig()
        self._client = judge_client
        self._convert = convert
        self._logger = logger
        self._sessions: OrderedDict[str, _Session[SourceT]] = OrderedDict()

    def _entry(self, session: str) -> _Session[SourceT]:
        entry = self._sessions.get(session)
        if entry is None:
            entry = self._sessions[session] = _Session()
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session)
        return entry

    def tracker(self, session: str) -> LoopTracker | None:
        """The live tracker of ``session`` (None when unknown, or kept by a store)."""
        entry = self._sessions.get(session)
        return entry.tracker if entry is not None else None

    def history(self, session: str, messages: Sequence[SourceT]) -> list[dict[str, Any]]:
        """``messages`` as chat dicts, converting only what this session has not seen."""
        entry = self._entry(session)
        reusable = min(len(entry.sources) - 1, len(messages))
        same = 0
        while same < reusable and messages[same] is entry.sources[same]:
            same += 1
        del entry.sources[same:], entry.chunks[same:]
        for message in messages[same:]:
            entry.sources.append(message)
            entry.chunks.append(self._convert(message))
        return [d for chunk in entry.chunks for d in chunk]

    async def turn(self, session: str, messages: Sequence[SourceT]) -> Verdict | None:
        """One ``turn_started`` of ``session``'s tracker, or None when loop-judge itself failed.

        A history we could not read (our converter's bug, not the agent's) or a store that
        is busy or down is logged and skipped: the agent goes on unjudged for this turn
        rather than crash because of its loop detector. Judge failures never get here (the
        tracker records them on the verdict); cancellation propagates.
        """
        history = self.history(session, messages)
        entry = self._entry(session)
        try:
            if self.store is None:
                if entry.tracker is None:
                    entry.tracker = LoopTracker(self._config, client=self._client, name=session)
                verdict = await entry.tracker.turn_started(history)
            else:
                async with self.store.session(session) as tracker:
                    verdict = await tracker.turn_started(history)
        except LoopJudgeError as exc:
            self._logger.warning("loop-judge skipped a turn of session %s: %s", session, exc)
            return None
        if verdict:
            entry.looped = True
        return verdict

    async def preflight(self, session: str, name: str, arguments: Any) -> Verdict | None:
        """``check_call`` before a tool runs; a looping verdict means the caller refuses
        the call (its result is the recovery message), and is recorded as a refusal.

        A live tracker is asked on every call: it costs microseconds, and a refused call
        must stay refused from the first refusal on. With a store, a session with no loop
        on record skips the store entirely (a read per tool call otherwise), and the rest
        are read first and written only when the call is refused: such a session can run
        a repeat once past its limit, which the next turn then flags. Counts no turn.
        None when clean or on our own trouble.
        """
        entry = self._sessions.get(session)
        if entry is None:
            return None
        try:
            if entry.tracker is not None:
                return entry.tracker.check_call(name, arguments)
            if self.store is None or not entry.looped:
                return None
            async with self.store.session(session, readonly=True) as tracker:
                if not tracker.check_call(name, arguments, refuse=False):
                    return None
            async with self.store.session(session) as tracker:
                return tracker.check_call(name, arguments)
        except LoopJudgeError as exc:
            self._logger.warning("loop-judge skipped a preflight in session %s: %s", session, exc)
            return None
