"""Build the judge's prompt from the recent history.

The history is untrusted: a tool result can contain anything, including text that looks
like our instructions. Each message is rendered as one JSON line with ``<`` and ``>``
escaped, so nothing inside can close the ``<transcript>`` fence or open a new tag.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from judge._prompts import read_text
from judge.history import RESULT_ROLES, Message

SYSTEM_PROMPT_FILE = "judge_system.md"
USER_PROMPT_FILE = "judge_user.md"
CLIP_MARKER = "\n...[{n} chars clipped]...\n"


def clip(text: str, limit: int) -> str:
    """Keep the head and tail of a long text: errors show at the end, context at the start."""
    if len(text) <= limit:
        return text
    marker_room = 40
    keep = max(limit - marker_room, 2)
    head = keep * 2 // 3
    tail = keep - head
    return text[:head] + CLIP_MARKER.format(n=len(text) - head - tail) + text[len(text) - tail :]


def judge_window(messages: Sequence[Message], size: int) -> list[Message]:
    """The last ``size`` messages the judge should see.

    Dangling tool calls at the end (an assistant call whose results are not all in yet) are
    dropped first, because the judge would otherwise read an unanswered call as a stall;
    then tool results whose call fell outside the window, which would read as orphans.
    """
    msgs = list(messages)
    # Drop the trailing assistant turn if any of its calls is unanswered.
    for pos in range(len(msgs) - 1, -1, -1):
        msg = msgs[pos]
        if msg.role == "assistant":
            if msg.tool_calls:
                answered = {m.tool_call_id for m in msgs[pos + 1 :] if m.role == "tool"}
                ids = [c.id for c in msg.tool_calls]
                dangling = any(i is not None and i not in answered for i in ids)
                if dangling:
                    msgs = msgs[:pos]
            break
        if msg.role not in RESULT_ROLES:
            break
    window = msgs[-size:] if size > 0 else []
    start = 0
    while start < len(window) and window[start].role in RESULT_ROLES:
        start += 1
    return window[start:]


def _escape(line: str) -> str:
    # JSON allows \u escapes anywhere in strings; escaping angle brackets means no content
    # can form "</transcript>" or any tag the prompt relies on.
    return line.replace("<", "\\u003c").replace(">", "\\u003e")


Scrub = Callable[[str], str]
# Redaction runs on a pre-clipped text this many times the final size: a 10 MB tool output
# is not scanned whole, and a secret cut by the first clip lies in the middle that the
# final clip drops anyway.
SCRUB_MARGIN = 4


def _safe_clip(text: str, limit: int, scrub: Scrub) -> str:
    return clip(scrub(clip(text, limit * SCRUB_MARGIN)), limit)


def _keep(text: str) -> str:
    return text


def render_message(msg: Message, limit: int, scrub: Scrub = _keep) -> str:
    record: dict[str, object] = {"n": msg.index, "role": msg.role}
    if msg.name:
        record["name"] = msg.name
    if msg.content:
        record["content"] = _safe_clip(msg.content, limit, scrub)
    if msg.tool_calls:
        record["calls"] = [
            {"tool": c.name, "arguments": _safe_clip(c.canonical, limit // 2, scrub)}
            for c in msg.tool_calls
        ]
    if msg.tool_call_id:
        record["result_of"] = msg.tool_call_id
    return _escape(json.dumps(record, ensure_ascii=False))


def fit_prompt(
    window: Sequence[Message],
    task: Message | None,
    *,
    message_chars: int,
    task_chars: int,
    max_chars: int | None = None,
    scrub: Scrub = _keep,
) -> tuple[list[Message], list[dict[str, str]]]:
    """The judge's chat messages and the window they actually show.

    ``scrub`` redacts secrets from every text that leaves the process, before clipping so
    a clip marker cannot split a secret. With ``max_chars``, the oldest window messages are
    dropped (then any tool results left without their call) until the whole prompt fits;
    the task is never dropped, so a prompt whose fixed part alone is too long is sent with
    an empty transcript rather than without its task.
    """
    task_text = _safe_clip(task.content, task_chars, scrub) if task else "(not available)"
    system = read_text(SYSTEM_PROMPT_FILE)
    template = read_text(USER_PROMPT_FILE)
    task_json = _escape(json.dumps(task_text, ensure_ascii=False))
    msgs = list(window)
    lines = [render_message(m, message_chars, scrub) for m in msgs]
    if max_chars is not None:
        fixed = len(system) + len(template.format(task=task_json, count=len(msgs), transcript=""))
        # one newline between lines; the count's digits can only shrink as messages go
        size = fixed + sum(len(line) for line in lines) + max(len(lines) - 1, 0)
        start = 0
        while start < len(lines) and size > max_chars:
            size -= len(lines[start]) + 1
            start += 1
            while start < len(lines) and msgs[start].role in RESULT_ROLES:
                size -= len(lines[start]) + 1
                start += 1
        msgs, lines = msgs[start:], lines[start:]
    user = template.format(task=task_json, count=len(msgs), transcript="\n".join(lines))
    return msgs, [{"role": "system", "content": system}, {"role": "user", "content": user}]


def build_prompt(
    window: Sequence[Message],
    task: Message | None,
    *,
    message_chars: int,
    task_chars: int,
    max_chars: int | None = None,
    scrub: Scrub = _keep,
) -> list[dict[str, str]]:
    """The chat messages sent to a judge model (see `fit_prompt`)."""
    return fit_prompt(
        window,
        task,
        message_chars=message_chars,
        task_chars=task_chars,
        max_chars=max_chars,
        scrub=scrub,
    )[1]
