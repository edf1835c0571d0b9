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

Span = tuple[int, int, str]
"""(start, end, kind) of a secret, as `judge.llm.redaction.Redactor.spans` gives them."""

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


# Characters read on each side of a cut for a secret the cut would split: past the longest
# single-line credential of the rule table (a 4 kB bearer token), short enough that a cut
# costs the same whatever the text's length.
CUT_WINDOW = 4096


def clip_whole(text: str, limit: int, spans: Callable[[str], Sequence[Span]]) -> str:
    """`clip`, with each cut moved off any secret ``spans`` finds across it: the head ends
    before such a secret, the tail starts after it. A clip taken before redaction would
    otherwise keep a piece of a secret too short for any rule to recognise (a key's last
    98 characters without its prefix). Only a window around each cut is read, so a long
    text costs no more than a short one; a secret longer than the window (a PEM block of
    more than 4 kB) may still be cut, its piece then reads as base64.
    """
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 2)
    head_end = keep * 2 // 3
    tail_start = len(text) - (keep - keep * 2 // 3)
    low = max(head_end - CUT_WINDOW, 0)
    for start, end, _ in spans(text[low : min(head_end + CUT_WINDOW, len(text))]):
        if low + start < head_end < low + end:
            head_end = low + start
            break
    low = max(tail_start - CUT_WINDOW, 0)
    for start, end, _ in spans(text[low : min(tail_start + CUT_WINDOW, len(text))]):
        if low + start < tail_start < low + end:
            tail_start = low + end
            break
    tail_start = max(tail_start, head_end)
    n = tail_start - head_end
    return text[:head_end] + CLIP_MARKER.format(n=n) + text[tail_start:]


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
# What the conversation keeps of a message, in multiples of the judge's clip: enough that
# the judge's clip, taken later, reads only text the conversation kept.
SCRUB_MARGIN = 4


def _safe_clip(text: str, limit: int, scrub: Scrub) -> str:
    """Redacted, then clipped: a clip taken first could cut a secret into a piece no rule
    recognises. The redactor is linear in the text, so the whole text is read."""
    return clip(scrub(text), limit)


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
