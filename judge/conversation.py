"""The conversation as the tracker has read it: what is new, what is the task, what the
judge may see, and what a loop verdict already answered.

Kept apart from `LoopTracker` so the tracker only orders the parts. This is the first step
of "history in -> normalized messages": it reads each raw message once (`HistoryCursor`),
keeps the recent messages the judge's window is cut from, tells a person's new prompt
from everything else that arrives in the user role (`judge.user_turns`), and remembers the
newest message a loop verdict answered (`judge.decision.Answered`), found again wherever a
rewrite of the history moves it.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from judge._codec import decode, encode
from judge.decision import NOTHING_ANSWERED, Answered
from judge.history import RESULT_ROLES, HistoryCursor, Message, ToolCall, message_digest
from judge.llm.transcript import SCRUB_MARGIN, clip_whole, judge_window
from judge.user_turns import UserMessageKind, classify_user, digest

if TYPE_CHECKING:
    from judge.response.ladder import LadderState

# Extra normalized messages kept beyond the judge window so that trimming a dangling call
# at the end still leaves a full window.
RECENT_SLACK = 32


@dataclass(frozen=True, slots=True)
class Reading:
    """What one `Conversation.read` found."""

    new: list[Message]  # the messages not read before, in order
    rewound: bool  # the history was rewritten: ``new`` is all of it
    new_prompt: bool  # a person's new prompt was among them


def _for_judge(msg: Message, message_chars: int) -> Message:
    """The message as the judge may see it: content beyond what the transcript could ever
    keep is cut here, so the recent window (and the saved state) stays small. The cuts
    avoid secrets (`clip_whole`): the judge's redaction comes later, and a secret cut in
    two here would reach it as pieces no rule recognises."""
    keep = message_chars * SCRUB_MARGIN
    if len(msg.content) <= keep:
        return msg
    from judge.llm.redaction import default_redactor

    return dataclasses.replace(msg, content=clip_whole(msg.content, keep, default_redactor().spans))


class Conversation:
    """Reads a growing history once, and remembers the task and the recent messages."""

    def __init__(self, *, history_messages: int, message_chars: int) -> None:
        self._history_messages = history_messages
        self._message_chars = message_chars
        self._cursor = HistoryCursor()
        self._recent: deque[Message] = deque(maxlen=history_messages + RECENT_SLACK)
        self.task: Message | None = None
        # Digests of user messages seen, to tell a new prompt from one re-read after the
        # history was rewritten or a nudge said again (stable across processes).
        self._user_seen: set[str] = set()
        # Set on a tracker restored from a redacted state (`read_redacted`).
        self._scrub: Callable[[Any], Any] | None = None
        self.answered: Answered = NOTHING_ANSWERED

    def read_redacted(self, scrub: Callable[[Any], Any] | None) -> None:
        """From now on every message (and `scrubbed` call) is read as a saved state holds
        it: a tracker restored from a redacted state compares like with like."""
        self._cursor.scrub = scrub
        self._scrub = scrub

    def scrubbed(self, call: ToolCall) -> ToolCall:
        """``call`` as `read_redacted` reads calls (itself when nothing is set)."""
        if self._scrub is None:
            return call
        scrubbed: ToolCall = self._scrub(call)
        return scrubbed

    @property
    def last(self) -> Message | None:
        """The newest message read."""
        return self._cursor.snapshot()[1]

    def read(self, history: Any) -> Reading:
        """Read what is new in ``history``; raises `HistoryError` for a malformed one."""
        new, rewound = self._cursor.advance(history)
        if rewound:
            self._recent.clear()
            # What a verdict already answered stays answered when it is re-read, wherever
            # the rewrite moved it; what came after it is new.
            if self.answered.digest is not None:
                found = [m.index for m in new if message_digest(m) == self.answered.digest]
                self.answered = self.answered.moved(found[-1] if found else None)
        new_prompt = False
        for msg in new:
            if msg.role == "user":
                new_prompt = self._on_user_message(msg) or new_prompt
            self._recent.append(_for_judge(msg, self._message_chars))
        return Reading(new, rewound, new_prompt)

    def _on_user_message(self, msg: Message) -> bool:
        # Only a person's new prompt becomes the task; our recovery message, tool output in
        # the user role and a harness's repeated nudge do not (judge/user_turns.py).
        kind = classify_user(msg, self._user_seen)
        if kind is UserMessageKind.RECOVERY or kind is UserMessageKind.OBSERVATION:
            return False
        self._user_seen.add(digest(msg.content))
        if kind is not UserMessageKind.PROMPT:
            return False
        self.task = msg
        return True

    def answer(self) -> None:
        """A loop verdict is being given: everything read so far is answered."""
        last = self.last
        if last is not None:
            self.answered = self.answered.upto(last.index, message_digest(last))

    @property
    def prompt(self) -> int:
        """The index of a person's latest prompt (-1: none yet)."""
        return self.task.index if self.task is not None else -1

    def window(self, *, min_turns: int, after: int | None = None) -> list[Message] | None:
        """The judge's window: the last messages, none at or before index ``after`` (by
        default what a loop verdict already answered; -1 for none). None while fewer than
        ``min_turns`` assistant turns came after it: too little for a new judgement."""
        if after is None:
            after = self.answered.through
        window = judge_window(self._recent, self._history_messages)
        if after < 0:
            return window
        fresh = [m for m in window if m.index > after]
        while fresh and fresh[0].role in RESULT_ROLES:
            fresh.pop(0)  # results whose call was answered already would read as orphans
        if sum(m.role == "assistant" for m in fresh) < min_turns:
            return None
        return fresh

    @property
    def recent(self) -> Sequence[Message]:
        return self._recent

    def reset(self) -> None:
        self._cursor.reset()
        self._recent.clear()
        self.task = None
        self._user_seen.clear()
        self.answered = NOTHING_ANSWERED

    def snapshot(self) -> dict[str, Any]:
        """The conversation for a saved tracker state (fields of `TrackerState`)."""
        seen, last = self._cursor.snapshot()
        return {
            "seen": seen,
            "last_message": encode(last),
            "before_last": encode(self._cursor.before_last()) or None,
            "recent": encode(self._recent),
            "task": encode(self.task),
            "user_seen": sorted(self._user_seen),
            "read_redacted": self._scrub is not None,
        }

    def restore(
        self,
        seen: int,
        last: Any,
        recent: Any,
        task: Any,
        user_seen: list[str],
        before_last: Any = None,
    ) -> None:
        before = decode(before_last) or []
        if not isinstance(before, list) or not all(isinstance(m, Message) for m in before):
            raise TypeError("before_last is not a list of messages")
        self._cursor.restore(seen, decode(last), before)
        self._recent = deque(decode(recent) or (), maxlen=self._recent.maxlen)
        self.task = decode(task)
        self._user_seen = set(user_seen)

    def save_answered(self, ladder: LadderState) -> LadderState:
        """``ladder`` carrying what is answered: a saved state keeps it in the ladder's
        fields, where states saved before it moved here have it."""
        ladder.acted_through, ladder.acted_digest = self.answered.through, self.answered.digest
        return ladder

    def load_answered(self, ladder: LadderState) -> None:
        """What is answered, from a saved ladder state (`save_answered`)."""
        self.answered = Answered(ladder.acted_through, ladder.acted_digest)
