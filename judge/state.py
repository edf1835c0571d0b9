"""`TrackerState`: everything a `LoopTracker` remembers, as one serializable model.

It lets a service keep trackers in Redis and serve one session from several replicas:
``LoopTracker.from_state(config, tracker.state)`` continues exactly where the tracker
stopped. Detector state is encoded by `judge._codec` (tagged JSON); the rest are plain
fields. The state quotes the conversation (recent messages, the looping call's
arguments), redacted unless ``redact_secrets`` is off.

Serialized (``model_dump``, ``model_dump_json``), each distinct long string is stored once
in a ``strings`` table (`judge._codec.compact`) and the whole is held under a byte cap
(`fit_state`), so a saved state costs about the size of what the detectors and the judge
window hold, not that times the number of places that quote it.

With the tracker's redactor (``redact_secrets``, the default) every string of the state,
whichever part kept it, is redacted as it enters the string table (`redacted_by`): a saved
state holds no secret the judge's prompt would not show. Each distinct string meets the
rules once in its life, not on every save (a sidecar saves every turn). A tracker restored
from a redacted state reads what is new the same way (`redacting_reader`), so its
detectors compare redacted text with redacted text and find what they would have found
without the restore; its own saves then redact only the streamed text, the one part it
still reads raw.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from judge._codec import compact, decode, encode, expand
from judge.errors import StateError
from judge.history import bounded
from judge.llm.breaker import BreakerSnapshot
from judge.response.ladder import LadderState
from judge.response.stats import TrackerStats
from judge.schedule import ScheduleState

if TYPE_CHECKING:
    from judge.llm.redaction import Redactor

logger = logging.getLogger("judge.state")

# 4: every string redacted with the tracker's redactor (``redacted``); a state of version 3
# may hold secrets as read, so it is refused rather than continued.
# 3: each distinct long string stored once (the ``strings`` table); calls saved as their
# canonical text (parsed arguments and signatures rebuilt on loading); messages and
# arguments bounded when read (judge.history.MAX_CONTENT_CHARS), arguments nested past
# judge.history.MAX_ARGUMENT_DEPTH kept as text. A state of another version is refused
# with a StateError naming both versions, so a server starts that session over.
# 2: the ladder remembers the evidence it answered; tool results carry their error flag;
# detectors keep fence, run and failure-run state (the live-loop fixes).
STATE_VERSION = 4

# A saved state is kept under this many bytes of JSON. Below it nothing is ever dropped:
# the largest state of the 148 labelled runs is about 90 kB (evals/bench_state.py), and a
# session whose every message and call is at its bound (32 KiB text, 16 KiB arguments)
# stays near 1.2 MB; 2 MiB is that with room to spare. Above it `fit_state` sheds what
# only the judge's prompt reads first (the oldest recent messages), then clips the longest
# strings, so saving never fails and a store never holds more than about this per session.
MAX_STATE_BYTES = 2 * 1024 * 1024
# What the longest strings are clipped to when shedding the judge window is not enough:
# head and tail around a digest, as judge.history.bounded does when a message is read.
SHED_STRING_CHARS = 1024
# Characters (strings read plus their redacted forms) a redactor's memo keeps before it
# starts over. A sidecar saves each session every turn and most of a state's strings are
# the previous turn's; the largest recorded state is about 90 kB (evals/bench_state.py), so
# this remembers the whole state of about a hundred busy sessions, a few tens of MB at most.
SCRUB_MEMO_CHARS = 8 * 1024 * 1024
# A piece of a found secret this long is redacted wherever it appears (any case): the leak
# measure of evals/bench_security.py counts a 10-character piece as a leak, and a random
# 10-character string recurs in unrelated text with odds near 36**-10.
SECRET_PIECE_CHARS = 10
# Pieces one scrubber remembers at most: about 500 secrets of 200 characters.
MAX_SECRET_PIECES = 100_000
# Answers one scrubber remembers (a restored tracker's reading lasts one turn; a save is
# one state): more than the distinct strings of the largest state of the recorded runs.
MAX_SCRUBBED_STRINGS = 50_000
# What a redacted piece becomes: the redactor's marker (judge.llm.redaction.MARKER).
PIECE_MARKER = "[REDACTED:secret]"


__all__ = [
    "MAX_STATE_BYTES",
    "STATE_VERSION",
    "BreakerSnapshot",
    "ScheduleState",
    "TrackerState",
    "fit_state",
    "redacted_by",
    "redacting_reader",
    "state_bytes",
]


def _ordinary(piece: str) -> bool:
    """A piece of a redacted span that could as well be ordinary text: a rule's span may
    take in a word around the secret (``-----begin``, ``./deploy.sh``), and redacting that
    everywhere would change what the detectors compare. A random credential's pieces
    nearly all hold a digit or mix upper and lower case (a 10-character base62 piece has
    neither with odds below 1 in 500, and its neighbours then cover it); words have
    neither (``./deploy.s``, ``-----BEGIN``)."""
    if any(c.isspace() for c in piece):
        return True
    return not any(c.isdigit() for c in piece) and (piece.islower() or piece.isupper())


class _RuleMemo:
    """What the redactor's rules make of each string, remembered: a string is redacted the
    first time a state holding it is saved, and later saves (and a restored copy, whose
    strings are the redacted forms, remembered as their own answer) cost a look-up.
    Shared by every state saved with one redactor: a pure function of the text."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._done: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._chars = 0
        self._lock = threading.Lock()  # sidecar sessions save from worker threads

    def __call__(self, text: str) -> tuple[str, tuple[str, ...]]:
        """(``text`` redacted, the secrets the rules found in it)."""
        done = self._done.get(text)
        if done is not None:
            return done
        spans = self._redactor.spans(text)
        clean = self._redactor.redact(text) if spans else text
        answer = (clean, tuple(text[start:end] for start, end, _ in spans))
        with self._lock:
            if self._chars > SCRUB_MEMO_CHARS:
                self._done.clear()
                self._chars = 0
            self._done[text] = answer
            self._done.setdefault(clean, (clean, ()))
            self._chars += len(text) + len(clean)
        return answer


class StateScrubber:
    """The tracker's redactor as a saved state needs it: remembered, and aware of pieces.

    Detectors keep text derived from what they read (a summary clipped mid-token, a
    lowercased request), which the redactor's format rules no longer recognise
    (``ghp_amSu…``, ``sg.uwslc…``). Every secret the rules find in a string this scrubber
    redacts is remembered, and any SECRET_PIECE_CHARS-long piece of one, in any case, is
    redacted wherever else it appears. One scrubber serves one save (`fit_state` walks the
    state again when a secret was first found mid-walk, so a copy walked before its source
    is caught too) or one restored tracker's reading: what one session's secrets look
    like never changes how another session's text is read.
    """

    def __init__(self, rules: _RuleMemo) -> None:
        self._rules = rules
        self._pieces: set[str] = set()  # lowercased pieces of the secrets found
        self._done: dict[str, str] = {}  # text -> answer, for the pieces known now
        self.generation = 0  # bumps with each secret learned

    def __call__(self, text: str) -> str:
        done = self._done.get(text)
        if done is not None:
            return done
        clean, secrets = self._rules(text)
        for secret in secrets:
            self._learn(secret)
        if self._pieces and len(clean) >= SECRET_PIECE_CHARS:
            clean = self._without_pieces(clean)
        if len(self._done) < MAX_SCRUBBED_STRINGS:
            self._done[text] = clean
        return clean

    def leaves_alone(self, data: Any) -> bool:
        """Whether this scrubber leaves every string of ``data`` (JSON-able, keys included)
        as it is: then `compact` through it followed by `expand` gives ``data`` back
        unchanged, and a reader can keep the value it encoded instead of decoding a copy.

        The walk `compact` makes (an explicit stack, linear in the size), stopping at the
        first string that would change; strings already answered are looked up without a
        call (an encoded message repeats the same dozen field names).
        """
        done = self._done
        stack: list[Any] = [data]
        while stack:
            item = stack.pop()
            if type(item) is str:
                clean = done.get(item)
                if clean is None:
                    clean = self(item)
                if clean is not item and clean != item:
                    return False
            elif isinstance(item, str):
                if self(item) != item:
                    return False
            elif isinstance(item, dict):
                for key, value in item.items():
                    if isinstance(key, str):
                        clean = done.get(key)
                        if clean is None:
                            clean = self(key)
                        if clean is not key and clean != key:
                            return False
                    stack.append(value)
            elif isinstance(item, list):
                stack.extend(item)
        return True

    def _learn(self, secret: str) -> None:
        learned = False
        for at in range(len(secret) - SECRET_PIECE_CHARS + 1):
            piece = secret[at : at + SECRET_PIECE_CHARS]
            if _ordinary(piece):
                continue
            piece = piece.lower()
            if piece not in self._pieces and len(self._pieces) < MAX_SECRET_PIECES:
                self._pieces.add(piece)
                learned = True
        if learned:
            self._done.clear()
            self.generation += 1

    def _without_pieces(self, text: str) -> str:
        lowered = text.lower()
        size = SECRET_PIECE_CHARS
        cut: list[tuple[int, int]] = []
        for at in range(len(lowered) - size + 1):
            if lowered[at : at + size] in self._pieces:
                if cut and at <= cut[-1][1]:
                    cut[-1] = (cut[-1][0], at + size)
                else:
                    cut.append((at, at + size))
        if not cut:
            return text
        parts: list[str] = []
        last = 0
        for start, end in cut:
            parts.append(text[last:start])
            parts.append(PIECE_MARKER)
            last = end
        parts.append(text[last:])
        return "".join(parts)


# One rules memo per redactor; trackers with the same settings share a redactor
# (judge.llm.redaction.redactor_for), so a sidecar's restored trackers share the memo.
_MEMOS: weakref.WeakKeyDictionary[Redactor, _RuleMemo] = weakref.WeakKeyDictionary()
_MEMOS_LOCK = threading.Lock()


def redacted_by(redactor: Redactor) -> StateScrubber:
    """A new scrubber for ``redactor``, sharing the memo of every state saved with it."""
    with _MEMOS_LOCK:
        memo = _MEMOS.get(redactor)
        if memo is None:
            memo = _MEMOS[redactor] = _RuleMemo(redactor)
    return StateScrubber(memo)


class TrackerState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = STATE_VERSION
    schedule: ScheduleState = Field(default_factory=ScheduleState)
    seen: int = Field(default=0, description="messages of the history already read")
    last_message: Any = Field(default=None, description="the last message read (encoded)")
    # Absent from states saved before it existed: those restore by the last message alone.
    before_last: Any = Field(
        default=None,
        description="the messages read just before the last one (encoded): a restored "
        "tracker finds its place in a history that lost its head by them too",
    )
    recent: Any = Field(default=None, description="recent normalized messages (encoded)")
    task: Any = None
    user_seen: list[str] = Field(default_factory=list)
    detectors: dict[str, Any] = Field(default_factory=dict)
    stream: dict[str, Any] = Field(default_factory=dict)
    ladder: LadderState = Field(default_factory=LadderState)
    stats: TrackerStats = Field(default_factory=TrackerStats)
    breaker: BreakerSnapshot = Field(default_factory=BreakerSnapshot)
    judge_calls_used: int = 0
    judge_tokens_used: int = 0
    redacted: bool = Field(
        default=False, description="its strings were redacted when it was serialized"
    )
    read_redacted: bool = Field(
        default=False, description="the tracker read what was new redacted (restored)"
    )

    # The byte cap the serialized form is held under (the tracker's max_state_bytes).
    _max_bytes: int = PrivateAttr(default=MAX_STATE_BYTES)
    # What every string passes on its way into the serialized form (the tracker's redactor).
    _redactor: Redactor | None = PrivateAttr(default=None)

    def with_max_bytes(self, max_bytes: int, redactor: Redactor | None = None) -> TrackerState:
        """This state, serialized under ``max_bytes`` instead of MAX_STATE_BYTES, and with
        every string redacted by ``redactor`` (None: as it was read)."""
        self._max_bytes = max_bytes
        self._redactor = redactor
        return self

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        scrub = redacted_by(self._redactor) if self._redactor is not None else None
        data["redacted"] = scrub is not None
        if scrub is not None and self.read_redacted:
            # Everything it holds was read redacted (judge.conversation.read_redacted) or
            # derived from that, except the streamed text: redacting derived copies again
            # would change them (a lowercased "password = ..." reads as an assignment).
            data["stream"] = expand(*compact(data["stream"], scrub))
            scrub = None
        data, strings = fit_state(data, self._max_bytes, scrub)
        data["strings"] = strings
        return data

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        return expand_state(data)


def expand_state(data: Any, *, in_place: bool = False) -> Any:
    """A serialized state's strings put back from its table (`compact`'s inverse); data
    without a table (built in code, a small state a sidecar of an earlier release saved
    without one, a state of version 2, refused by version) as it is.

    ``in_place``: ``data`` was just parsed and is the caller's own (`load_session`), so
    nothing is copied; `TrackerState` copies, since its input may be a user's dict.
    """
    if not isinstance(data, dict) or "strings" not in data:
        return data
    rest = data if in_place else dict(data)
    strings = rest.pop("strings")
    if not isinstance(strings, list):
        raise StateError("the state's string table is not a list")
    return expand(rest, strings, in_place=in_place)


def redacting_reader(redactor: Redactor) -> Callable[[Any], Any]:
    """A message or call as a state saved with ``redactor`` holds it once restored.

    A tracker restored from a redacted state reads everything new through this
    (`judge.conversation.Conversation.read_redacted`): its detectors then compare redacted
    text with redacted text, as they would have compared the raw texts, and its cursor
    finds the last message it read. It is the saved state's own round trip (encode,
    redact each string, decode), so the two forms cannot drift apart.

    Most messages hold no secret: when the redactor changes none of a value's strings,
    the round trip would give back an equal copy, so the value itself is returned and the
    compacting, expanding and decoding are skipped (most of a sidecar turn's reading).
    When one string changes, the copy is made by a walk that starts again with
    the secret's pieces already known, so strings read before it in the walk may come out
    more redacted than a single walk left them, never less.
    """
    scrubber = redacted_by(redactor)

    def read(value: Any) -> Any:
        encoded = encode(value)
        if scrubber.leaves_alone(encoded):
            return value
        packed, strings = compact(encoded, scrubber)
        return decode(expand(packed, strings))

    return read


def state_bytes(data: Any, strings: list[str]) -> int:
    """Bytes of the JSON of a compact state: its structure plus its string table."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    structure = len(text.encode("utf-8", "replace"))
    return structure + sum(len(s.encode("utf-8", "replace")) + 3 for s in strings)


def _compact_scrubbed(data: Any, scrub: StateScrubber | None) -> tuple[Any, list[str]]:
    """`compact` through ``scrub``; walked again when a secret was first found during the
    walk, so its pieces are redacted in the strings walked before it as well."""
    if scrub is None:
        return compact(data)
    generation = scrub.generation
    compacted, strings = compact(data, scrub)
    if scrub.generation != generation:
        compacted, strings = compact(data, scrub)
    return compacted, strings


def fit_state(
    data: dict[str, Any], max_bytes: int, scrub: StateScrubber | None = None
) -> tuple[dict[str, Any], list[str]]:
    """``data`` (a dumped `TrackerState`) compacted, and shed until it fits ``max_bytes``.

    The usual state fits at once (one pass). Otherwise, in order: the oldest half of the
    judge's recent messages goes, again and again (only the judge's prompt reads them);
    then the longest strings are clipped around a digest, longest first (equal strings stay
    equal, so repeats are still told). A state made of nothing but structure over the cap
    (hundreds of thousands of patterns) is returned as it is, with a warning.
    """
    compacted, strings = _compact_scrubbed(data, scrub)
    size = state_bytes(compacted, strings)
    if size <= max_bytes:
        return compacted, strings
    recent = data.get("recent")
    messages = recent.get("$deque") if isinstance(recent, dict) else None
    while isinstance(recent, dict) and isinstance(messages, list) and messages and size > max_bytes:
        messages = messages[len(messages) // 2 :] if len(messages) > 1 else []
        data = {**data, "recent": {**recent, "$deque": messages}}
        compacted, strings = _compact_scrubbed(data, scrub)
        size = state_bytes(compacted, strings)
    if size > max_bytes:
        for position in sorted(range(len(strings)), key=lambda i: -len(strings[i])):
            text = strings[position]
            if len(text) <= SHED_STRING_CHARS:
                break
            strings[position] = bounded(text, SHED_STRING_CHARS)
            size -= len(text.encode("utf-8", "replace"))
            size += len(strings[position].encode("utf-8", "replace"))
            if size <= max_bytes:
                break
    if size > max_bytes:
        logger.warning("tracker state is %d bytes, over its cap of %d", size, max_bytes)
    return compacted, strings
