"""OpenAI chat-completions messages: a list, an object with ``messages``, or JSONL.

Accepted shapes:

* ``[{"role": ..., ...}, ...]`` - a bare message list;
* ``{"messages": [...], ...}`` - e.g. a request body or a mini-SWE-agent ``.traj.json``;
  ``id``/``session_id`` and ``meta``/``metadata`` are kept when present;
* JSONL with one message per line (one trajectory) or one such object per line (one
  trajectory per line) - the per-line case is dispatched in :mod:`judge_eval.importers`.

Messages are normalised only where the tracker would otherwise have to special-case them:
``content: null`` and content-part lists become strings, and dict ``arguments`` become JSON
strings. Everything else (extra keys such as ``name``) is kept as is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judge_eval.dataset import Trajectory, TrajectoryFormatError, make_trajectory
from judge_eval.importers._common import arguments_json, text_of

FORMAT = "openai_chat"


def looks_like(data: Any) -> bool:
    """True for any list (validated later, message by message) or an object with ``messages``."""
    if isinstance(data, list):
        return True
    return isinstance(data, dict) and isinstance(data.get("messages"), list)


def normalise_messages(messages: list[Any]) -> list[Any]:
    """Copy ``messages`` with string content and JSON-string tool arguments.

    Non-dict entries are passed through untouched so that validation can point at them.
    """
    result: list[Any] = []
    for message in messages:
        if not isinstance(message, dict):
            result.append(message)
            continue
        message = dict(message)
        if "content" in message and not isinstance(message["content"], str):
            message["content"] = text_of(message["content"])
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            fixed: list[Any] = []
            for call in calls:
                if isinstance(call, dict) and isinstance(call.get("function"), dict):
                    call = dict(call)
                    function = dict(call["function"])
                    function["arguments"] = arguments_json(function.get("arguments"))
                    call["function"] = function
                    call.setdefault("type", "function")
                fixed.append(call)
            message["tool_calls"] = fixed
        result.append(message)
    return result


def parse(data: Any, path: Path, *, default_id: str | None = None) -> Trajectory:
    """Build a trajectory from a message list or a ``{"messages": [...]}`` object."""
    default_id = default_id or path.stem
    if isinstance(data, list):
        messages, ident, meta = data, default_id, {}
    elif isinstance(data, dict):
        if "messages" not in data:
            raise TrajectoryFormatError(path, "'messages' missing")
        messages = data["messages"]
        if not isinstance(messages, list):
            raise TrajectoryFormatError(path, "'messages' must be a list")
        ident = str(data.get("id") or data.get("session_id") or default_id)
        raw_meta = data.get("meta", data.get("metadata"))
        meta = dict(raw_meta) if isinstance(raw_meta, dict) else {}
    else:
        raise TrajectoryFormatError(
            path, f"expected a list or an object, got {type(data).__name__}"
        )
    meta.setdefault("format", FORMAT)
    return make_trajectory(
        path,
        id=ident,
        messages=normalise_messages(messages),
        source={"path": str(path), "format": FORMAT},
        meta=meta,
    )
