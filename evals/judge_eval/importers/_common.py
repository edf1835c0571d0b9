"""Helpers shared by the importers: reading JSON/JSONL and normalising message pieces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from judge_eval.dataset import TrajectoryFormatError

#: Marker for a JSONL file: the parsed records, one per non-blank line.
JsonLines = list[tuple[int, Any]]


def read_json_or_jsonl(path: Path) -> tuple[Any, JsonLines | None]:
    """Parse ``path`` as one JSON document, or as JSON Lines.

    Returns ``(document, None)`` for plain JSON and ``(None, [(line_no, record), ...])`` for
    JSONL. ``.jsonl`` files are always read line by line; other files fall back to JSONL only
    when the text is clearly several documents ("Extra data"), so a truncated ``.json`` file
    is reported as invalid JSON rather than misread.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise TrajectoryFormatError(path, f"not UTF-8 text ({error.reason})") from None
    if not text.strip():
        raise TrajectoryFormatError(path, "file is empty")
    if path.suffix != ".jsonl":
        try:
            return json.loads(text), None
        except json.JSONDecodeError as error:
            if error.msg != "Extra data":
                raise TrajectoryFormatError(path, f"invalid JSON: {_where(error)}") from None
    records: JsonLines = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError as error:
            raise TrajectoryFormatError(
                path, f"line {number}: invalid JSON: {error.msg} (column {error.colno})"
            ) from None
    return None, records


def _where(error: json.JSONDecodeError) -> str:
    return f"{error.msg} (line {error.lineno}, column {error.colno})"


def text_of(content: Any) -> str:
    """Flatten message content to a string.

    Strings pass through, ``None`` becomes ``""``, and a list of content parts (OpenAI or ATIF
    multimodal) keeps the text parts joined by newlines; images/audio are replaced by a
    ``[image]``/``[audio]`` placeholder because loop detection only looks at text.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    pieces.append(part["text"])
                elif part.get("type"):
                    pieces.append(f"[{str(part['type']).removesuffix('_url')}]")
        return "\n".join(pieces)
    return json.dumps(content, ensure_ascii=False)


def arguments_json(arguments: Any) -> str:
    """Tool-call arguments as the JSON string OpenAI uses (dicts are encoded, strings kept)."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return "{}"
    return json.dumps(arguments, ensure_ascii=False)


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """One OpenAI-style ``tool_calls`` entry."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments_json(arguments)},
    }
