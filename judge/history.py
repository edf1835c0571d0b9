"""Turn OpenAI-format chat messages into frozen, validated `Message` records.

This is the only place that knows the wire shape of a conversation; everything downstream
(detectors, the judge transcript) sees `Message` and `ToolCall`. Validation is strict about
structure (a clear `HistoryError` beats a KeyError deep in a detector) and lenient about
content (None, lists of parts, non-JSON arguments, any Unicode).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judge.errors import HistoryError

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call requested by the assistant.

    ``canonical`` is the identity used for repeat detection: parsed JSON with sorted keys
    and no layout whitespace, so call ids and key order never matter.
    """

    id: str | None
    name: str
    arguments: str
    canonical: str
    parsed: Any
    signature: str = ""  # name(canonical), precomputed: detectors compare it on every step

    def __post_init__(self) -> None:
        if not self.signature:
            object.__setattr__(self, "signature", f"{self.name}({self.canonical})")


@dataclass(frozen=True, slots=True)
class Message:
    """A normalized chat message; ``index`` is its position in the history passed in."""

    index: int
    role: str
    content: str
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


def _clean_text(text: str) -> str:
    """Replace lone surrogates, which cannot be encoded and would break the judge request."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def _as_mapping(raw: Any, index: int) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        return raw
    dump = getattr(raw, "model_dump", None)  # pydantic / litellm message objects
    if callable(dump):
        dumped = dump(exclude_none=True)
        if isinstance(dumped, Mapping):
            return dumped
    raise HistoryError(f"expected a message mapping, got {type(raw).__name__}", index=index)


def _content_text(content: Any, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return _clean_text(content)
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
                continue
            part = _as_mapping(part, index) if not isinstance(part, Mapping) else part
            kind = part.get("type", "text")
            if kind == "text" or "text" in part:
                text = part.get("text")
                if not isinstance(text, str):
                    raise HistoryError(
                        "text part without a string 'text'", index=index, field="content"
                    )
                parts.append(text)
            else:
                parts.append(f"[{kind}]")  # images, audio, files: present but not compared
        return _clean_text("\n".join(parts))
    raise HistoryError(
        f"content must be a string, a list of parts or None, got {type(content).__name__}",
        index=index,
        field="content",
    )


def canonical_arguments(arguments: Any) -> tuple[str, Any]:
    """Canonical text and parsed value of tool arguments.

    Non-JSON arguments (some agents send raw shell text) are kept with their whitespace
    runs collapsed, so a stray space does not make two calls different.
    """
    parsed: Any
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested too deep
            return _clean_text(" ".join(arguments.split())), None
    else:
        parsed = arguments
    try:
        text = json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        try:
            raw = str(arguments)
        except RecursionError:  # repr of an object nested past the interpreter's limit
            raw = f"<{type(arguments).__name__} nested too deeply>"
        return _clean_text(" ".join(raw.split())), None
    clean = _clean_text(text)
    if clean is not text:
        # JSON "\ud800" escapes parse to lone surrogates; detectors that read the parsed
        # values (embeddings, similarity) must get the same cleaned text as the canonical.
        parsed = json.loads(clean)
    return clean, parsed


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
    canonical, parsed = canonical_arguments(arguments)
    raw_text = arguments if isinstance(arguments, str) else canonical
    call_id = call.get("id")
    return ToolCall(
        id=_clean_text(str(call_id)) if call_id is not None else None,
        name=_clean_text(name),
        arguments=_clean_text(raw_text),
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
        if not isinstance(raw_calls, Sequence) or isinstance(raw_calls, (str, bytes)):
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
        name=_clean_text(str(name)) if name is not None else None,
        tool_calls=tool_calls,
        tool_call_id=_clean_text(tool_call_id) if role == "tool" else None,
    )


def ensure_sequence(history: Any) -> Sequence[Any]:
    """Reject a history that is not a list-like of messages, naming what it got instead."""
    if isinstance(history, (str, bytes, bytearray, Mapping)) or not isinstance(history, Sequence):
        raise HistoryError(f"history must be a list of messages, got {type(history).__name__}")
    return history


def normalize_history(history: Any) -> list[Message]:
    """Normalize a whole history; for callers that do not need incremental processing."""
    seq = ensure_sequence(history)
    return [normalize_message(m, i) for i, m in enumerate(seq)]


class HistoryCursor:
    """Remembers how much of the history was already seen, so each message is read once.

    Agents append to their history, so normally only the tail is new. If the history was
    rewritten (compacted, truncated, edited), `advance` reports a rewind and hands back the
    whole history to be re-read.
    """

    __slots__ = ("_last", "_last_raw", "_seen")

    def __init__(self) -> None:
        self._seen = 0
        self._last: Message | None = None
        self._last_raw: Any = None

    @property
    def seen(self) -> int:
        return self._seen

    def reset(self) -> None:
        self._seen = 0
        self._last = None
        self._last_raw = None

    def snapshot(self) -> tuple[int, Message | None]:
        """(messages seen, the last one) for a saved tracker state."""
        return self._seen, self._last

    def restore(self, seen: int, last: Message | None) -> None:
        # The raw object is not saved: the next call compares by content instead.
        self._seen, self._last, self._last_raw = seen, last, None

    def _unchanged(self, history: Sequence[Any]) -> bool:
        if self._seen == 0:
            return True
        if len(history) < self._seen:
            return False
        raw = history[self._seen - 1]
        if raw is self._last_raw:
            return True
        return normalize_message(raw, self._seen - 1) == self._last

    def advance(self, history: Any) -> tuple[list[Message], bool]:
        """Return (new messages, rewound) and mark them seen.

        All new messages are validated before any is marked seen, so a `HistoryError`
        leaves the cursor where it was.
        """
        seq = ensure_sequence(history)
        rewound = not self._unchanged(seq)
        start = 0 if rewound else self._seen
        new = [normalize_message(seq[i], i) for i in range(start, len(seq))]
        if new:
            self._seen = len(seq)
            self._last = new[-1]
            self._last_raw = seq[-1]
        elif rewound:
            self.reset()
        return new, rewound
