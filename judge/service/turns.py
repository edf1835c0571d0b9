"""One turn of a served session: the history it reads (whole, or appended to the stored
one), the work done in the worker thread, and what comes back.

The append API lets a client send only the messages added since its last turn, with the
index the first of them has in its history: each turn then costs what is new, not the whole
history's JSON. The tracker reads a history by index and only ever looks back at the entry
before the first new one (to tell an appended history from a rewritten one), so the
stored session keeps that one entry (``tail``) and the history is rebuilt as a view:
nothing before it is kept or needed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, overload

from judge.errors import LoopJudgeError
from judge.service.session_codec import Replay, SessionData, stored_tail
from judge.service.store import ServedStore, Session, SessionStore
from judge.service.worker import TurnOverBudget, TurnRunner
from judge.verdict import Verdict


class AppendConflict(LoopJudgeError):
    """Appended messages do not continue the stored session: the client re-sends its
    whole history (``expected_start`` says where the server's copy ends)."""

    def __init__(self, message: str, *, expected_start: int, given_start: int | None):
        super().__init__(message)
        self.expected_start = expected_start
        self.given_start = given_start


class AppendedHistory(Sequence[Any]):
    """The agent's history as ``start`` entries the server already read, then ``new``.

    Only the entry just before ``start`` is available among the old ones (the stored
    tail); asking for an earlier one means the tracker's idea of the history differs from
    the server's, which is an `AppendConflict`.
    """

    def __init__(self, start: int, tail: Any, new: list[Any]) -> None:
        self.start = start
        self._tail = tail
        self._new = new

    def __len__(self) -> int:
        return self.start + len(self._new)

    @property
    def new(self) -> list[Any]:
        """The messages sent with this request."""
        return self._new

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if index >= self.start:
            return self._new[index - self.start]
        if index == self.start - 1:
            return self._tail
        if index < 0:
            raise IndexError(index)
        raise AppendConflict(
            f"message {index} was needed to continue this session but only messages from "
            f"{self.start} on were sent: re-send the whole history",
            expected_start=self.start,
            given_start=self.start,
        )


def appended_history(session: SessionData, start: int, new: list[Any]) -> AppendedHistory:
    """The history an append request stands for; `AppendConflict` unless ``start`` is
    exactly where the stored session ends."""
    if start != session.length or (start > 0 and session.tail is None):
        # Nothing stored while the client is past message 0: a new session, or one whose
        # state was lost (the whole history then tells which, and the turn says so).
        lost = " (nothing is stored for it: new, or its state expired or was lost)"
        raise AppendConflict(
            f"cannot append at message {start}: this session's stored history has "
            f"{session.length} messages{lost if session.length == 0 else ''}; send the "
            "whole history (omit 'start')",
            expected_start=session.length,
            given_start=start,
        )
    return AppendedHistory(start, session.tail, new)


@dataclass(frozen=True)
class TurnOutcome:
    verdict: Verdict
    body: bytes  # the verdict's JSON, made in the worker thread


async def run_turn(
    session: Session,
    history: Sequence[Any],
    serialize: bool,
    *,
    measure: bool = False,
    request: tuple[str, str | None] | None = None,
    sent_bytes: int | None = None,
) -> TurnOutcome:
    """The worker thread's part of a turn: the tracker, then everything that costs CPU
    after it (the verdict's JSON, the session's bytes when the store keeps bytes, or
    their count when it caps them: ``measure``).

    ``request``: the request's (body digest, Idempotency-Key): the answer is kept with
    them in the session (`Replay`), so a retry of this request gets it again.
    ``sent_bytes``: the request body's size, which for an append is about the JSON of
    the new messages (what ``measure`` would otherwise count message by message)."""
    verdict = await session.tracker.turn_started(history)
    body = verdict.model_dump_json().encode("utf-8")
    previous = session.length
    session.length = len(history)
    session.tail = stored_tail(session.tracker, history[-1]) if len(history) else None
    session.replay = Replay(request[0], request[1], body) if request is not None else None
    session.fresh = False
    if serialize:
        session.pack()
    elif measure:
        session.measure(*_new_bytes(history, previous, sent_bytes))
    return TurnOutcome(verdict, body)


def _new_bytes(
    history: Sequence[Any], previous: int, sent_bytes: int | None = None
) -> tuple[int, int | None]:
    """(JSON bytes of the messages after the first ``previous``, or of all of them after
    a rewrite made the history shorter; those of the last of them, the entry the session
    keeps, or None when nothing was new): what the turn read, for `Session.measure`.
    An append's new messages are what its body sent (``sent_bytes``)."""
    if isinstance(history, AppendedHistory) and sent_bytes is not None:
        sent = history.new
        return sent_bytes, _json_bytes(sent[-1]) if sent else None
    new = history[previous:] if previous <= len(history) else history[:]
    if not new:
        return 0, None
    sizes = [_json_bytes(message) for message in new]
    return sum(sizes), sizes[-1]


def _json_bytes(value: Any) -> int:
    # json's default encoder (no arguments: the one it caches), a few bytes of spaces more
    # than the stored form; an estimate either way, at a third of the cost.
    try:
        return len(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        return len(repr(value))  # not JSON (a caller's object): as much as its text


async def run_call(
    session: SessionData,
    name: str,
    arguments: Any,
    *,
    refuse: bool = False,
    serialize: bool = False,
) -> TurnOutcome:
    """The worker thread's part of a preflight check (it reads the detectors' state).

    ``refuse=False`` previews (a session opened read-only, nothing recorded); with
    ``refuse`` a looping answer is recorded as a refusal (`LoopTracker.check_call`), and
    ``serialize`` makes the session's bytes for a store that persists them."""
    verdict = session.tracker.check_call(name, arguments, refuse=refuse)
    if refuse and verdict.looping and serialize and isinstance(session, Session):
        session.pack()
    return TurnOutcome(verdict, verdict.model_dump_json().encode("utf-8"))


async def run_store_turn(
    runner: TurnRunner, store: SessionStore, key: str, messages: Sequence[Any]
) -> Verdict:
    """One turn of session ``key`` in ``runner``'s worker threads, under its CPU budget
    (`TurnOverBudget` past it): for a front that holds no session state of its own (the
    litellm guardrail). The whole `Session` where the store hands one out (its bytes then
    made in the thread too, its tracker dropped if the turn was stopped), else the bare
    tracker."""
    if isinstance(store, ServedStore):
        async with store.open(key) as session:
            measure = bool(getattr(store, "measures", False))
            work = partial(run_turn, session, messages, store.persists, measure=measure)
            try:
                outcome = await runner.run(work)
            except TurnOverBudget:
                session.discard()  # stopped mid-way: the tracker may be half-updated
                raise
        return outcome.verdict
    async with store.session(key) as tracker:
        # Past the budget this raises out of the block, so a store that saves does not
        # save the half-updated tracker.
        return await runner.run(partial(tracker.turn_started, messages))
