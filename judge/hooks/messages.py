"""How a hook event becomes the messages a tracker reads, whatever the agent.

A hook sees one tool call at a time (and, for Claude Code, new transcript lines), never
the conversation as a list, so the session hands the tracker a history it builds: each
call as its own assistant message followed by its result, texts cut to a bound with a
digest of the whole, a command's response as the text the model read. Every agent's
events go through these same functions, so a Bash result from Claude Code and a shell
result from Cursor read alike to the detectors. Apart from the session
(`judge.hooks.session`) because Claude Code's transcript reader
(`judge.integrations.claude_code`) builds the same messages from the transcript.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from hashlib import blake2b
from typing import Any, overload

__all__ = [
    "MAX_TEXT_CHARS",
    "NO_OUTPUT",
    "REMEMBERED_IDS",
    "TailHistory",
    "block_text",
    "call_message",
    "clip",
    "command_text",
    "digest",
    "remember",
    "response_text",
    "result_message",
]

# Tool results and texts longer than this are cut (a digest of the whole keeps two
# different long results different), so a 5 MB file read does not go into the state file.
MAX_TEXT_CHARS = 32_000
# Ids and transcript entry uuids remembered to skip what was already fed: far more than
# the calls in flight at once, or the entries a rotated transcript can repeat.
REMEMBERED_IDS = 512


class TailHistory(Sequence[Any]):
    """The conversation as the tracker's cursor expects it, without keeping all of it.

    The tracker reads only messages past the ones it has seen, after checking that the
    last one it saw is still in place; so the history handed over is the count already
    fed, the last of them, and the new ones. Older positions are never read unless the
    tracker decides the history was rewritten, and then they read as empty system text.
    """

    def __init__(self, fed: int, last: Any, new: list[dict[str, Any]]) -> None:
        self._fed, self._last, self._new = fed, last, new

    def __len__(self) -> int:
        return self._fed + len(self._new)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        if index >= self._fed:
            return self._new[index - self._fed]
        if index == self._fed - 1 and self._last is not None:
            return self._last
        return {"role": "system", "content": ""}


def clip(text: str) -> str:
    """``text``, cut to `MAX_TEXT_CHARS` with its length and a digest of the whole."""
    if len(text) <= MAX_TEXT_CHARS:
        return text
    whole = blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()
    return f"{text[:MAX_TEXT_CHARS]}\n[... {len(text)} characters in all, digest {whole}]"


def digest(text: str) -> str:
    """A short stable name for ``text``: a file name, a record of a text already fed."""
    return blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()


# What a command that printed nothing is quoted as.
NO_OUTPUT = "(no output)"
# Keys of a command's exit status in a tool response, as shells and agents name it.
_EXIT_KEYS = ("exit_code", "exitCode", "returncode", "return_code")


def command_text(response: Mapping[str, Any]) -> str:
    """A command's response (Bash answers ``{"stdout", "stderr", "interrupted", ...}``)
    as the text the model read: its exit status when given, then stdout and stderr. The
    raw mapping would put ``{"interrupted": false, "isImage": false, ...`` into every
    "already tried" line of a recovery message, and hide an error's first line."""
    lines = []
    code = next((response[k] for k in _EXIT_KEYS if isinstance(response.get(k), int)), None)
    if code is not None:
        lines.append(f"exit code {code}")
    if response.get("interrupted") is True:
        lines.append("(interrupted)")
    for key in ("stderr", "stdout") if code else ("stdout", "stderr"):
        text = response.get(key)
        if isinstance(text, str) and text.strip():
            lines.append(text.strip("\n"))
    # A silent command: said in words, so it reads as the data result it was (the raw
    # mapping did), not as an empty acknowledgement.
    return "\n".join(lines) or NO_OUTPUT


def response_text(response: Any) -> str:
    """A tool's response as text the detectors compare: strings as they are, a command's
    output as its text (`command_text`), anything else as canonical JSON."""
    if isinstance(response, str):
        return clip(response)
    if isinstance(response, Mapping) and isinstance(response.get("stdout"), str):
        return clip(command_text(response))
    try:
        return clip(json.dumps(response, sort_keys=True, ensure_ascii=False, default=str))
    except (TypeError, ValueError, RecursionError):
        return clip(repr(response))


def call_message(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """One tool call as an assistant message of its own (Anthropic content blocks)."""
    block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
    return {"role": "assistant", "content": [block]}


def result_message(call_id: str, content: Any, is_error: bool) -> dict[str, Any]:
    """The result of call ``call_id`` as the user message that follows its call."""
    text = content if isinstance(content, str) else block_text(content)
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": clip(text)}
    if is_error:
        block["is_error"] = True
    return {"role": "user", "content": [block]}


def block_text(content: Any) -> str:
    """Text of a transcript tool_result's content (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, Mapping):
                # An image or document: told apart by a digest of its data, like history.py.
                parts.append(f"[{part.get('type', 'part')} {digest(response_text(part))}]")
        return "\n".join(parts)
    return response_text(content)


def remember(items: list[str], item: str) -> None:
    """Add ``item`` to ``items``, keeping only the last `REMEMBERED_IDS`."""
    items.append(item)
    del items[:-REMEMBERED_IDS]
