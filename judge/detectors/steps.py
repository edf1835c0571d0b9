"""Pair each tool call with its result, so detectors reason about (call, outcome) steps.

Parallel calls in one assistant message become steps one by one, in call order. A call
whose result never arrives becomes a step with outcome MISSING when the next assistant
message shows the agent moved on.

Some harnesses record a failed call's result as nothing (or a placeholder such as
"(no output)") and report the error in the user-role message that follows: the step's
outcome then comes from that message. A step whose result is empty waits for the next
message (at most until the history has been read, `StepBuilder.drain`): a user message
that opens with an error, or holds a strong error marker near its start (`classify`),
becomes its result; anything else leaves the empty result as it is.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from hashlib import blake2b

from judge.detectors.edits import modifies_files
from judge.detectors.outcome import Outcome, classify, error_substance, obstacle, result_key
from judge.history import RESULT_ROLES, Message, ToolCall
from judge.user_turns import is_recovery


@dataclass(frozen=True, slots=True)
class Step:
    call: ToolCall
    call_index: int  # the assistant message that made the call
    result_index: int | None  # the tool message that answered it
    result: str | None
    outcome: Outcome
    key: str  # result key: equal for "the same result"
    signature: str = ""  # the call's signature, copied for the detectors' hot loops
    # New file changes made so far in the run, this step included (judge.detectors.edits):
    # two steps with the same count have no new edit between them.
    edits: int = 0
    # For an error that no change of the call's input fixes (an environment's refusal, a
    # missing path), what failed whichever tool reported it (`outcome.obstacle`); empty
    # otherwise, and for every other error.
    substance: str = ""

    def __post_init__(self) -> None:
        if not self.signature:
            object.__setattr__(self, "signature", self.call.signature)

    @property
    def indices(self) -> tuple[int, ...]:
        if self.result_index is None:
            return (self.call_index,)
        return (self.call_index, self.result_index)


def _obstacle(text: str) -> str:
    return obstacle(text, error_substance(text))


# Detectors quote at most 200 characters of a result; the rest would only swell the
# tracker's saved state (results are keyed in full before this cut).
STEP_RESULT_CHARS = 400
# Argument values shorter than this are too common to strip from an error text.
_MIN_ECHO_CHARS = 3


def _without_arguments(text: str, call: ToolCall) -> str:
    """The error with the call's own argument values blanked out.

    Errors echo their input ("file ./data.csv not found"), which would make every variant
    of a retried call fail "differently".
    """
    if not isinstance(call.parsed, dict):
        return text
    stripped = (v.strip() for v in call.parsed.values() if isinstance(v, str))
    values = [v for v in stripped if len(v) >= _MIN_ECHO_CHARS]
    values.sort(key=len, reverse=True)  # the longest first: a value may hold a shorter one
    for value in values:
        text = text.replace(value, "<arg>")
    return text


# What a harness records as the result of a call whose error it reports elsewhere: nothing,
# or a stand-in that says there is nothing. Short, whole-result matches only.
_PLACEHOLDER = re.compile(
    r"\s*[(\[<]?\s*(?:none|null|nil|undefined|empty|no (?:output|content|result|response)"
    r"(?: returned)?|tool (?:returned|produced) no output)\s*[)\]>]?\s*\.?\s*",
    re.IGNORECASE,
)
_PLACEHOLDER_MAX_CHARS = 40
# How much of a user message is taken as an error result: the verdict and the key read its
# head and last lines, and a harness's error report fits (the tool results of the labelled
# sets are cut to 4,000 characters, their errors are far shorter).
USER_ERROR_CHARS = 2000


def _placeholder(text: str) -> bool:
    return len(text) <= _PLACEHOLDER_MAX_CHARS and (
        not text.strip() or _PLACEHOLDER.fullmatch(text) is not None
    )


def user_error(msg: Message) -> str | None:
    """The error ``msg`` (a user-role message) reports, if it reports one."""
    if msg.role != "user" or is_recovery(msg):
        return None
    text = msg.content[:USER_ERROR_CHARS]
    return text if classify(text) is Outcome.ERROR else None


# File changes remembered to tell a new edit from one re-applied (or a backup restored
# again): far more than a coding run makes between two runs of the same test.
EDITS_REMEMBERED = 256


class StepBuilder:
    """Incremental: feed messages in order, get completed steps back."""

    __slots__ = ("_edit_seen", "_edits", "_pending", "_pending_index", "_results")
    STATE = ("_pending", "_pending_index", "_results", "_edits", "_edit_seen")

    def __init__(self) -> None:
        self._pending: list[ToolCall] = []
        self._pending_index = -1
        # position -> (result index, text, the tool's own error flag)
        self._results: dict[int, tuple[int, str, bool]] = {}
        self._edits = 0
        self._edit_seen: deque[str] = deque(maxlen=EDITS_REMEMBERED)

    def reset(self) -> None:
        self._pending = []
        self._pending_index = -1
        self._results = {}
        self._edits = 0
        self._edit_seen = deque(maxlen=EDITS_REMEMBERED)

    def _count_edit(self, call: ToolCall) -> None:
        if not modifies_files(call):
            return
        # A digest, not the call: an edit's arguments can hold a whole file.
        key = blake2b(call.signature.encode("utf-8", "replace"), digest_size=8).hexdigest()
        if key in self._edit_seen:
            return  # the same change again: re-applied, or the same backup restored
        self._edit_seen.append(key)
        self._edits += 1

    def _flush(self) -> list[Step]:
        steps = []
        for pos, call in enumerate(self._pending):
            index, text, is_error = self._results.get(pos, (None, None, False))
            # Errors echo their input ("String '<200 lines>' not found"): read the result
            # with the call's own arguments blanked, so the verdict fits in the head.
            stripped = _without_arguments(text, call) if text else text
            # The tool's own error flag beats reading the text: "0 rows" can be a failure.
            outcome = Outcome.ERROR if is_error else classify(stripped)
            keyed = stripped if outcome.failed else text
            if not outcome.failed:  # a refused edit changed nothing
                self._count_edit(call)
            steps.append(
                Step(
                    call,
                    self._pending_index,
                    index,
                    text,
                    outcome,
                    result_key(keyed, outcome),
                    edits=self._edits,
                    substance=_obstacle(stripped or "") if outcome is Outcome.ERROR else "",
                )
            )
        self._pending = []
        self._results = {}
        return steps

    def _match(self, msg: Message) -> int | None:
        for pos, call in enumerate(self._pending):
            if pos in self._results:
                continue
            if msg.tool_call_id is not None and call.id == msg.tool_call_id:
                return pos
        # No id match (legacy function role, ids rewritten): the first unanswered call of
        # that name, else the first unanswered call.
        for pos, call in enumerate(self._pending):
            if pos not in self._results and (msg.name is None or msg.name == call.name):
                return pos
        return None

    def _held(self) -> bool:
        """Every call is answered but the steps wait: one result is empty (module doc)."""
        return bool(self._pending) and len(self._results) == len(self._pending)

    def drain(self) -> list[Step]:
        """The steps waiting for the message after an empty result: the history has been
        read to its end, so no such message came (yet); they are taken as they are."""
        return self._flush() if self._held() else []

    def answer(self, msg: Message) -> list[Step]:
        """The steps ``msg`` completes when they wait for it (results one of which is
        empty): an error it reports becomes the empty results' own. Called before ``msg``
        is fed (`feed` does it too), so that a caller can take in those steps before
        the message, in the order of the history."""
        if not self._held():
            return []
        error = user_error(msg)
        if error is not None:
            for pos, (_, text, is_error) in list(self._results.items()):
                if _placeholder(text):
                    self._results[pos] = (msg.index, error, is_error)
        return self._flush()

    def feed(self, msg: Message) -> list[Step]:
        held = self.answer(msg)
        if msg.role == "assistant":
            done = self._flush() if self._pending else []
            if msg.tool_calls:
                self._pending = list(msg.tool_calls)
                self._pending_index = msg.index
            return held + done
        if msg.role in RESULT_ROLES and self._pending:
            pos = self._match(msg)
            if pos is not None:
                self._results[pos] = (msg.index, msg.content, msg.is_error)
            if len(self._results) == len(self._pending):
                if any(_placeholder(text) for _, text, _ in self._results.values()):
                    return held  # the next message may say why (module doc)
                return held + self._flush()
        return held
