"""Turn chat messages into frozen, validated `Message` records.

This is the only place that knows the wire shape of a conversation; everything downstream
(detectors, the judge transcript) sees `Message` and `ToolCall`. Two wire formats are read
natively, because agents hand us whatever their model API speaks:

- OpenAI chat completions: ``tool_calls`` on assistant messages, ``tool`` role results.
- Anthropic Messages: ``tool_use`` blocks in assistant content and ``tool_result`` blocks
  (with ``is_error``) in user content. A user message of tool results becomes one ``tool``
  message per block, so detectors and the turn count see results, not a new prompt; text
  that rides along with the results becomes a user message named ``observation``.
  ``thinking`` / ``redacted_thinking`` blocks are private reasoning and are left out.

Validation is strict about structure (a clear `HistoryError` beats a KeyError deep in a
detector) and lenient about content (None, lists of parts, non-JSON arguments, any
Unicode).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

from judge.errors import HistoryError

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Roles that carry a tool's result (``function`` is the legacy OpenAI one).
RESULT_ROLES = frozenset({"tool", "function"})

# What one message may hold, so that a tracker (and its saved state) stays bounded whatever
# an agent sends. Longer text keeps its head and tail around a marker that names its full
# length and digest, so two texts compare equal exactly when they were equal in full.
# 32 KiB is 2.7x the longest message of the 148 labelled runs (12,030 chars) and 4x what
# the judge is ever shown of one (max_message_chars x SCRUB_MARGIN = 8,000).
MAX_CONTENT_CHARS = 32_768
# The same for a call's arguments: 2.7x the longest canonical arguments of the labelled
# runs (6,150 chars). Long string values are clipped first, so keys such as a file path
# stay readable to the detectors (edits, echoes in errors).
MAX_ARGUMENT_CHARS = 16_384
# A string value inside arguments longer than this is clipped when the arguments are over
# MAX_ARGUMENT_CHARS: a whole file being written, a base64 blob.
MAX_VALUE_CHARS = 2_048
# Arguments nested deeper than this are kept as text, not parsed: real tool arguments nest
# a few levels (at most 4 in the labelled runs), and the cap keeps every walk of the parsed
# value (json.dumps, detectors, the saved state) far below the interpreter's recursion
# limit, whatever the caller's own stack depth ("[" * n + "]" * n must not crash us).
MAX_ARGUMENT_DEPTH = 100
# A call's signature (its identity for the detectors, quoted in loop patterns) holds at
# most this much of the canonical text, then a digest of all of it: 512 chars reads as the
# call in a pattern, and an escalation ladder keyed by patterns stays small.
SIGNATURE_CHARS = 512
# The raw arguments are only shown, never compared by a detector: 1 KiB of head and tail.
RAW_ARGUMENT_CHARS = 1_024
# Hex digits of the digest in a clip marker: 96 bits, no collision among realistic inputs.
_DIGEST_BYTES = 12


def _digest(text: str) -> str:
    return blake2b(text.encode("utf-8", "replace"), digest_size=_DIGEST_BYTES).hexdigest()


def bounded(text: str, limit: int) -> str:
    """``text``, or its head and tail around a marker naming the full length and digest.

    Equal texts give equal results and different texts (practically) different ones, so
    detectors that compare for equality behave as on the full text; the tail is kept
    because errors and final lines show at the end.
    """
    if len(text) <= limit:
        return text
    marker = f" [... {len(text)} chars, blake2b {_digest(text)} ...] "
    keep = max(limit - len(marker), 2)
    head = keep * 2 // 3
    return text[:head] + marker + text[len(text) - (keep - head) :]


def _value_depth(value: Any, cap: int) -> int:
    """Nesting of a Python value (lists, tuples, dicts), walked with an explicit stack."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > cap:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _deep_digest(value: Any) -> str:
    """A digest of a value too deep to serialize, computed without recursion."""
    h = blake2b(digest_size=_DIGEST_BYTES)
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            h.update(b"{%d;" % len(item))
            for key, child in item.items():
                h.update(_length_prefixed(key))
                stack.append(child)
        elif isinstance(item, (list, tuple)):
            h.update(b"[%d;" % len(item))
            stack.extend(reversed(item))
        else:
            h.update(_length_prefixed(item))
    return h.hexdigest()


def _length_prefixed(leaf: Any) -> bytes:
    data = f"{type(leaf).__name__}:{leaf}".encode("utf-8", "replace")
    return b"%d;" % len(data) + data


def _clip_values(value: Any) -> Any:
    """``value`` with every string longer than MAX_VALUE_CHARS bounded (depth is capped
    before this is called, so the recursion is shallow)."""
    if isinstance(value, str):
        return bounded(value, MAX_VALUE_CHARS)
    if isinstance(value, list):
        return [_clip_values(v) for v in value]
    if isinstance(value, dict):
        return {k: _clip_values(v) for k, v in value.items()}
    return value


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call requested by the assistant.

    ``canonical`` is the identity used for repeat detection: parsed JSON with sorted keys
    and no layout whitespace, so call ids and key order never matter. ``arguments`` is the
    text as sent, kept for display only (past RAW_ARGUMENT_CHARS its head and tail around a
    digest); ``signature`` likewise holds a long canonical text as head, tail and digest,
    so it is compared, quoted in patterns and saved at a bounded size.
    """

    id: str | None
    name: str
    arguments: str
    canonical: str
    parsed: Any
    signature: str = ""  # name(canonical), precomputed: detectors compare it on every step

    def __post_init__(self) -> None:
        if not self.signature:
            text = bounded(self.canonical, SIGNATURE_CHARS)
            object.__setattr__(self, "signature", f"{self.name}({text})")


@dataclass(frozen=True, slots=True)
class Message:
    """A normalized chat message; ``index`` is its position in the history passed in.

    One raw message can give several records (an Anthropic user message carrying parallel
    tool results): they share the raw message's ``index``. ``is_error`` is the tool's own
    failure flag (Anthropic ``is_error``), which beats reading the result's text.
    """

    index: int
    role: str
    content: str
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False


# The ``name`` given to text that arrives in the user role but is not a person's words: the
# text beside Anthropic tool results here, ATIF observations (judge_eval.importers.atif).
OBSERVATION_NAME = "observation"
# Content block types of the Anthropic Messages API that carry calls and results.
_TOOL_USE = "tool_use"
_TOOL_RESULT = "tool_result"
# Reasoning blocks: the model's private scratchpad, neither shown to the judge nor compared.
_REASONING_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def _clean_text(text: str) -> str:
    """Replace lone surrogates, which cannot be encoded and would break the judge request."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def caller_text(value: Any, what: str, index: int | None = None, field: str | None = None) -> str:
    """``str(value)`` for an object the caller passed in; a ``__str__`` that raises becomes
    a `HistoryError` naming the message and field (not whatever the object raised)."""
    try:
        return str(value)
    except RecursionError:
        raise
    except Exception as exc:  # the caller's code: any exception at all, named and typed
        raise HistoryError(
            f"{what} ({type(value).__name__}) cannot be read as text: {type(exc).__name__}",
            index=index,
            field=field,
        ) from exc


# The abstract classes' isinstance checks are slow; listing the usual concrete classes first
# answers for them without one.
_MAPPINGS = (dict, Mapping)
_SEQUENCES = (list, tuple, Sequence)


def _as_mapping(raw: Any, index: int) -> Mapping[str, Any]:
    if isinstance(raw, _MAPPINGS):
        return raw
    dump = getattr(raw, "model_dump", None)  # pydantic / litellm message objects
    if callable(dump):
        try:
            dumped = dump(exclude_none=True)
        except Exception as exc:  # the caller's own object: its failure is named, typed
            raise HistoryError(
                f"{type(raw).__name__}.model_dump() failed: {type(exc).__name__}", index=index
            ) from exc
        if isinstance(dumped, Mapping):
            return dumped
    raise HistoryError(f"expected a message mapping, got {type(raw).__name__}", index=index)


def _content_text(content: Any, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return bounded(_clean_text(content), MAX_CONTENT_CHARS)
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
                continue
            part = _as_mapping(part, index) if not isinstance(part, Mapping) else part
            kind = part.get("type", "text")
            if kind in _REASONING_BLOCKS:
                continue
            if kind == "text" or "text" in part:
                text = part.get("text")
                if not isinstance(text, str):
                    raise HistoryError(
                        "text part without a string 'text'", index=index, field="content"
                    )
                parts.append(text)
            else:
                # Images, audio, files: present, and told apart by a digest of their data,
                # so a screenshot after each click is not "the same result" every time.
                parts.append(f"[{kind} {_part_digest(part, index)}]")
        return bounded(_clean_text("\n".join(parts)), MAX_CONTENT_CHARS)
    raise HistoryError(
        f"content must be a string, a list of parts or None, got {type(content).__name__}",
        index=index,
        field="content",
    )


def _part_digest(part: Mapping[str, Any], index: int) -> str:
    try:
        data = json.dumps(part, sort_keys=True, default=lambda v: caller_text(v, "content", index))
    except (TypeError, ValueError, RecursionError):
        data = repr(sorted(map(str, part)))
    return blake2b(data.encode("utf-8", "replace"), digest_size=6).hexdigest()


def canonical_arguments(arguments: Any) -> tuple[str, Any]:
    """Canonical text and parsed value of tool arguments.

    Non-JSON arguments (some agents send raw shell text) are kept with their whitespace
    runs collapsed, so a stray space does not make two calls different. Whatever comes in,
    the parsed value is what ``json.loads`` reads from the canonical text (None when that
    text is not JSON), it nests at most MAX_ARGUMENT_DEPTH levels, and the text is at most
    about MAX_ARGUMENT_CHARS long: a saved state stores the text alone and parses it again.
    """
    parsed: Any
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested too deep
            return _as_text(arguments), None
        if _too_deep(arguments, parsed):
            return _as_text(arguments), None
    else:
        parsed = arguments
        if _value_depth(parsed, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
            name, digest = type(arguments).__name__, _deep_digest(arguments)
            return f"<{name} nested too deeply (over {MAX_ARGUMENT_DEPTH} levels) {digest}>", None
    try:
        text = _dump(parsed)
    except (TypeError, ValueError, RecursionError):
        try:
            raw = caller_text(arguments, "tool call arguments")
        except RecursionError:  # repr of an object nested past the interpreter's limit
            raw = f"<{type(arguments).__name__} nested too deeply>"
        return _as_text(raw), None
    # The parsed value must be JSON's reading of the text, exactly: a caller's tuples and
    # int keys as JSON has them, long values clipped, lone surrogates cleaned.
    reread = not isinstance(arguments, str)
    if len(text) > MAX_ARGUMENT_CHARS:
        # A whole file or blob in one value: clip the long values, keep the structure.
        text, reread = _dump(_clip_values(json.loads(text))), True
        if len(text) > MAX_ARGUMENT_CHARS:  # many short values: the text alone
            return bounded(_clean_text(text), MAX_ARGUMENT_CHARS), None
    clean = _clean_text(text)
    if reread or clean is not text:
        parsed = json.loads(clean)
    return clean, parsed


# Built once: ``json.dumps`` with these options builds a new encoder on every call, which
# costs about as much as the encoding of a typical call's arguments.
_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _dump(value: Any) -> str:
    return _CANONICAL_ENCODER.encode(value)


def _as_text(raw: str) -> str:
    return bounded(_clean_text(" ".join(raw.split())), MAX_ARGUMENT_CHARS)


def _too_deep(text: str, parsed: Any) -> bool:
    # A text with fewer openers than the cap cannot nest deeper: no walk for the usual case.
    if text.count("[") + text.count("{") <= MAX_ARGUMENT_DEPTH:
        return False
    return _value_depth(parsed, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH


def _tool_call(raw: Any, index: int, position: int) -> ToolCall:
    call = _as_mapping(raw, index)
    field = f"tool_calls[{position}]"
    function = call.get("function")
    if function is None:
        raise HistoryError("tool call without 'function'", index=index, field=field)
    function = _as_mapping(function, index)
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise HistoryError("tool call without a name", index=index, field=f"{field}.function.name")
    arguments = function.get("arguments")
    if arguments is None:
        arguments = "{}"
    try:
        canonical, parsed = canonical_arguments(arguments)
    except HistoryError as exc:
        raise HistoryError(exc.reason, index=index, field=f"{field}.function.arguments") from exc
    raw_text = arguments if isinstance(arguments, str) else canonical
    call_id = call.get("id")
    return ToolCall(
        id=_clean_text(caller_text(call_id, "id", index, f"{field}.id"))
        if call_id is not None
        else None,
        name=_clean_text(name),
        arguments=bounded(_clean_text(raw_text), RAW_ARGUMENT_CHARS),
        canonical=canonical,
        parsed=parsed,
    )


def normalize_message(raw: Any, index: int) -> Message:
    """Validate one message and return its normalized form; raise `HistoryError` if broken."""
    data = _as_mapping(raw, index)
    role = data.get("role")
    if role is None:
        raise HistoryError("'role' missing", index=index, field="role")
    if not isinstance(role, str) or role not in ROLES:  # a list role is unhashable
        raise HistoryError(
            f"unknown role {role!r} (expected one of {', '.join(sorted(ROLES))})",
            index=index,
            field="role",
        )
    content = _content_text(data.get("content"), index)
    name = data.get("name")
    tool_calls: tuple[ToolCall, ...] = ()
    raw_calls = data.get("tool_calls")
    if raw_calls:
        if role != "assistant":
            raise HistoryError(
                "only assistant messages carry tool_calls", index=index, field="tool_calls"
            )
        if not isinstance(raw_calls, _SEQUENCES) or isinstance(raw_calls, (str, bytes)):
            raise HistoryError("tool_calls must be a list", index=index, field="tool_calls")
        tool_calls = tuple(_tool_call(c, index, i) for i, c in enumerate(raw_calls))
    elif role == "assistant" and data.get("function_call"):
        # Legacy single function_call: same thing, one call without an id.
        legacy = {"function": data["function_call"]}
        tool_calls = (_tool_call(legacy, index, 0),)
    tool_call_id = data.get("tool_call_id")
    if role == "tool":
        if not isinstance(tool_call_id, str) or not tool_call_id:
            raise HistoryError(
                "tool message without tool_call_id", index=index, field="tool_call_id"
            )
    elif role == "function" and not name:
        raise HistoryError("function message without name", index=index, field="name")
    return Message(
        index=index,
        role=role,
        content=content,
        # ids and names are echoed into the judge prompt: no lone surrogates there either
        name=_clean_text(caller_text(name, "name", index, "name")) if name is not None else None,
        tool_calls=tool_calls,
        tool_call_id=_clean_text(tool_call_id)
        if isinstance(tool_call_id, str) and role == "tool"
        else None,
    )


def _parts(content: Any, index: int) -> list[Any] | None:
    """The content's parts when it is a list of blocks, each as a mapping (or a bare
    string), so the Anthropic block types can be told apart; None for any other content."""
    if isinstance(content, (str, bytes, bytearray)) or not isinstance(content, _SEQUENCES):
        return None
    return [p if isinstance(p, (str, Mapping)) else _as_mapping(p, index) for p in content]


def _block_type(part: Any) -> Any:
    return part.get("type") if isinstance(part, Mapping) else None


def _tool_use_as_call(part: Mapping[str, Any], index: int, position: int) -> dict[str, Any]:
    """An Anthropic ``tool_use`` block as an OpenAI-shaped call, so one validator reads both."""
    field = f"content[{position}]"
    name = part.get("name")
    if not isinstance(name, str) or not name:
        raise HistoryError("tool_use block without a name", index=index, field=f"{field}.name")
    call_id = part.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise HistoryError("tool_use id must be a string", index=index, field=f"{field}.id")
    return {"id": call_id, "function": {"name": name, "arguments": part.get("input", {})}}


def _assistant_blocks(data: Mapping[str, Any], parts: list[Any], index: int) -> Message:
    if data.get("role") != "assistant":
        raise HistoryError(
            "tool_use blocks belong in assistant messages", index=index, field="content"
        )
    calls = [
        _tool_use_as_call(part, index, position)
        for position, part in enumerate(parts)
        if _block_type(part) == _TOOL_USE
    ]
    text = [part for part in parts if _block_type(part) != _TOOL_USE]
    openai_calls = data.get("tool_calls") or []
    if not isinstance(openai_calls, Sequence) or isinstance(openai_calls, (str, bytes)):
        raise HistoryError("tool_calls must be a list", index=index, field="tool_calls")
    merged = {**data, "content": text, "tool_calls": [*openai_calls, *calls]}
    return normalize_message(merged, index)


def _tool_result_blocks(data: Mapping[str, Any], parts: list[Any], index: int) -> list[Message]:
    """One ``tool`` message per ``tool_result`` block, then the text beside them (if any)
    as an observation: a harness's note next to results is not a person's new prompt."""
    if data.get("role") != "user":
        raise HistoryError(
            "tool_result blocks belong in user messages", index=index, field="content"
        )
    results: list[Message] = []
    others: list[Any] = []
    for position, part in enumerate(parts):
        if _block_type(part) != _TOOL_RESULT:
            others.append(part)
            continue
        field = f"content[{position}]"
        call_id = part.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            raise HistoryError(
                "tool_result block without tool_use_id", index=index, field=f"{field}.tool_use_id"
            )
        is_error = part.get("is_error")
        if is_error is not None and not isinstance(is_error, bool):
            raise HistoryError(
                f"is_error must be true, false or absent, got {is_error!r}",
                index=index,
                field=f"{field}.is_error",
            )
        try:
            text = _content_text(part.get("content"), index)
        except HistoryError as exc:
            raise HistoryError(exc.reason, index=index, field=f"{field}.content") from None
        results.append(
            Message(
                index=index,
                role="tool",
                content=text,
                tool_call_id=_clean_text(call_id),
                is_error=bool(is_error),
            )
        )
    note = _content_text(others, index) if others else ""
    if note.strip():
        results.append(Message(index=index, role="user", content=note, name=OBSERVATION_NAME))
    return results


def normalize_entry(raw: Any, index: int) -> list[Message]:
    """Every normalized message in one raw history entry (usually exactly one).

    Reads OpenAI chat and Anthropic Messages shapes alike (see the module docstring);
    raises `HistoryError` naming the entry and the field that is wrong.
    """
    data = _as_mapping(raw, index)
    parts = _parts(data.get("content"), index)
    if parts is not None:
        kinds = {_block_type(part) for part in parts}
        if _TOOL_RESULT in kinds:
            return _tool_result_blocks(data, parts, index)
        if _TOOL_USE in kinds:
            return [_assistant_blocks(data, parts, index)]
    return [normalize_message(data, index)]


def message_digest(msg: Message) -> str:
    """A digest of what a message says, not where it is: the same message keeps it when a
    rewritten history moves it (a sliding window, a compacted head)."""
    parts = [msg.role, msg.name or "", msg.tool_call_id or "", str(msg.is_error), msg.content]
    parts.extend(call.signature for call in msg.tool_calls)
    text = "\x1f".join(parts)
    return blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()


def ensure_sequence(history: Any) -> Sequence[Any]:
    """Reject a history that is not a list-like of messages, naming what it got instead."""
    if isinstance(history, (str, bytes, bytearray, Mapping)) or not isinstance(history, _SEQUENCES):
        raise HistoryError(f"history must be a list of messages, got {type(history).__name__}")
    return history


def normalize_history(history: Any) -> list[Message]:
    """Normalize a whole history; for callers that do not need incremental processing."""
    seq = ensure_sequence(history)
    return [msg for i, raw in enumerate(seq) for msg in normalize_entry(raw, i)]


# Raw messages the cursor remembers from the end of what it read, to find its place again
# in a history that lost its head: the last one read and the one before it must both be
# there, in order. Two, not one: a single short message ("OK") recurs by chance; an agent
# that keeps fewer than two of the messages we read has rewritten its history, not slid it.
TAIL_MATCH = 2
# A history that is neither the one read before, extended, nor its tail kept (rewritten in
# the middle or at the end) is re-read from at most this many messages before its end, and
# the place of the last message read is looked for among as many. Every detector's memory
# is far shorter (the longest, result_cycle's, is 40 failed calls), so what is re-read
# rebuilds it; a rewrite costs at most this many messages' reading, whatever the length.
REREAD_MESSAGES = 1_000


class HistoryCursor:
    """Remembers how much of the history was already seen, so each message is read once.

    Three shapes of history are told apart, each read in time linear in what is new:

    - the history read before, extended (agents append): only the tail is read;
    - its tail kept and its head dropped or replaced (a sliding window, a summarised
      head): the last message read is found near the end and only what follows it is
      read. Indices keep counting from the first history read, as if nothing was dropped
      (``index`` minus the messages dropped is the position in the list passed in);
    - anything else is a rewrite: `advance` reports it and hands back the last
      REREAD_MESSAGES messages (at most) to be re-read, numbered by position.

    An edit before the last message read (the same last message, something changed before
    it) is not noticed: messages are read once.
    """

    __slots__ = ("_last", "_offset", "_seen", "_tail", "scrub")

    def __init__(self) -> None:
        # What each message read passes before anyone sees it (a restored tracker's
        # redactor: judge.state.redacting_reader), so it compares with what was saved.
        self.scrub: Callable[[Message], Message] | None = None
        self.reset()

    def _normalize(self, raw: Any, index: int) -> list[Message]:
        read = normalize_entry(raw, index)
        return read if self.scrub is None else [self.scrub(m) for m in read]

    @property
    def seen(self) -> int:
        return self._seen

    def reset(self) -> None:
        self._seen = 0
        self._offset = 0  # the index of the list's first message
        self._last: Message | None = None
        # (raw entry or None, its last normalized message) for the newest entries read
        self._tail: deque[tuple[Any, Message]] = deque(maxlen=TAIL_MATCH)

    def snapshot(self) -> tuple[int, Message | None]:
        """(messages seen, the last one) for a saved tracker state."""
        return self._seen, self._last

    def before_last(self) -> list[Message]:
        """The messages remembered before the last one (oldest first), for a saved state:
        a restored cursor finds its place after a dropped head by the same messages as one
        never saved, not by the last message alone."""
        return [msg for _raw, msg in list(self._tail)[:-1]]

    def restore(self, seen: int, last: Message | None, before: Sequence[Message] = ()) -> None:
        # The raw objects are not saved: the next call compares by content instead.
        self.reset()
        self._seen, self._last = seen, last
        if last is not None:
            self._offset = last.index - (seen - 1)
            # The deque keeps the newest TAIL_MATCH: the saved ones, then the last.
            self._tail.extend((None, msg) for msg in before)
            self._tail.append((None, last))

    def _matches(self, raw: Any, kept: tuple[Any, Message]) -> bool:
        """Is ``raw`` the entry remembered in ``kept``, wherever it now stands?"""
        kept_raw, kept_msg = kept
        if kept_raw is not None:
            if raw is kept_raw:
                return True
            if isinstance(raw, dict) and isinstance(kept_raw, dict):
                return bool(raw == kept_raw)  # copies (a server's JSON) compare equal
        try:  # normalized at the remembered index, so only the content is compared
            return self._normalize(raw, kept_msg.index)[-1:] == [kept_msg]
        except HistoryError:
            return False

    def _find_tail(self, seq: Sequence[Any]) -> int | None:
        """The position of the last message read, when the messages read just before it
        are still right before it; looked for from the end, among REREAD_MESSAGES."""
        tail = list(self._tail)
        lowest = max(len(seq) - REREAD_MESSAGES, len(tail) - 1)
        for pos in range(len(seq) - 1, lowest - 1, -1):
            if self._matches(seq[pos], tail[-1]) and all(
                self._matches(seq[pos - j], tail[-1 - j]) for j in range(1, len(tail))
            ):
                return pos
        return None

    def _place(self, seq: Sequence[Any]) -> tuple[int, int, bool]:
        """(position to read from, index of position 0, rewound)."""
        if self._seen == 0 or not self._tail:
            return 0, 0, False
        last = self._seen - 1
        if len(seq) > last and self._matches(seq[last], self._tail[-1]):
            return self._seen, self._offset, False  # appended to (or unchanged)
        assert self._last is not None
        found = self._find_tail(seq)
        if found is not None:  # a sliding window or a summarised head: the tail was kept
            return found + 1, self._last.index - found, False
        return max(len(seq) - REREAD_MESSAGES, 0), 0, True

    def advance(self, history: Any) -> tuple[list[Message], bool]:
        """Return (new messages, rewound) and mark them seen.

        All new messages are validated before any is marked seen, so a `HistoryError`
        leaves the cursor where it was.
        """
        seq = ensure_sequence(history)
        start, offset, rewound = self._place(seq)
        new: list[Message] = []
        kept: list[tuple[Any, Message]] = []
        tail_from = len(seq) - TAIL_MATCH
        for pos in range(start, len(seq)):
            raw = seq[pos]
            read = self._normalize(raw, offset + pos)
            new.extend(read)
            if read and pos >= tail_from:
                kept.append((raw, read[-1]))
        if new:
            if rewound:
                self._tail.clear()
            self._seen, self._offset, self._last = len(seq), offset, new[-1]
            self._tail.extend(kept)
        elif rewound:
            self.reset()
        else:  # the head was dropped, nothing added: the same messages, now elsewhere
            self._seen, self._offset = len(seq), offset
        return new, rewound
