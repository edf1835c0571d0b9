"""Importers that turn agent trajectories from several frameworks into :class:`Trajectory`.

:func:`load_trajectory` / :func:`load_trajectories` sniff the format from the parsed content
(not only the file name), so users can point the library at whatever their agent wrote:

========================  =====================================================================
format                    recognised by
========================  =====================================================================
``recorded``              object with ``id``, ``source`` and ``messages`` (``labels`` optional)
``atif``                  object with ``schema_version: "ATIF-..."`` (or ``steps`` + ``agent``)
``swe_agent``             ``.traj`` object with ``trajectory`` and/or ``history``
``openai_chat``           message list, object with ``messages``, or JSONL of either
========================  =====================================================================

JSONL files hold either one message per line (one trajectory) or one trajectory object per
line (any of the object formats above); the latter yields several trajectories, with ids
suffixed by the line number when a line has no id of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judge_eval.dataset import Trajectory, TrajectoryFormatError
from judge_eval.importers import atif, openai_chat, recorded, swe_agent
from judge_eval.importers._common import read_json_or_jsonl

__all__ = ["FORMATS", "detect_format", "load_trajectories", "load_trajectory"]

#: Format names in detection order (most specific first).
FORMATS: tuple[str, ...] = ("recorded", "atif", "swe_agent", "openai_chat")


def detect_format(data: Any) -> str | None:
    """Name of the format that parsed JSON ``data`` is in, or ``None`` if none matches."""
    if recorded.looks_like(data):
        return "recorded"
    if atif.looks_like(data):
        return "atif"
    if swe_agent.looks_like(data):
        return "swe_agent"
    if openai_chat.looks_like(data):
        return "openai_chat"
    return None


def _parse_document(data: Any, path: Path, default_id: str | None = None) -> Trajectory:
    """Dispatch one parsed JSON document to its adapter."""
    fmt = detect_format(data)
    if fmt == "recorded":
        return recorded.parse(data, path)
    if fmt == "atif":
        return atif.parse(data, path)
    if fmt == "swe_agent":
        return swe_agent.parse(data, path)
    if fmt == "openai_chat":
        return openai_chat.parse(data, path, default_id=default_id)
    if isinstance(data, dict):
        keys = ", ".join(sorted(map(str, data))[:8]) or "none"
        raise TrajectoryFormatError(
            path, f"unrecognised trajectory format: 'messages' missing (top-level keys: {keys})"
        )
    raise TrajectoryFormatError(
        path, f"unrecognised trajectory format: top level is a {type(data).__name__}"
    )


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """All trajectories in ``path`` (several only for JSONL with one trajectory per line)."""
    path = Path(path)
    try:
        document, lines = read_json_or_jsonl(path)
    except FileNotFoundError:
        raise TrajectoryFormatError(path, "no such file") from None
    if lines is None:
        return [_parse_document(document, path)]
    if not lines:
        raise TrajectoryFormatError(path, "file has no JSON lines")
    records = [record for _, record in lines]
    first = records[0]
    if isinstance(first, dict) and "role" in first:  # one message per line
        return [openai_chat.parse(records, path)]
    trajectories: list[Trajectory] = []
    for number, record in lines:
        if isinstance(record, dict) and "role" in record:
            raise TrajectoryFormatError(
                path, f"line {number}: mixes single messages with trajectory objects"
            )
        try:
            trajectories.append(_parse_document(record, path, default_id=f"{path.stem}:{number}"))
        except TrajectoryFormatError as error:
            raise TrajectoryFormatError(path, f"line {number}: {error.reason}") from None
    return trajectories


def load_trajectory(path: str | Path) -> Trajectory:
    """The single trajectory in ``path``; a file holding several is an error (use the plural)."""
    trajectories = load_trajectories(path)
    if len(trajectories) != 1:
        raise TrajectoryFormatError(
            path,
            f"holds {len(trajectories)} trajectories; use load_trajectories() to read them all",
        )
    return trajectories[0]
