"""Trajectories, their loop labels, and loading them from disk.

Every importer in :mod:`judge_eval.importers` produces a :class:`Trajectory`: a
list of OpenAI chat-completions messages plus where they came from (``source``),
informational ``meta`` and, for the evaluation set, hand-checked ``labels``. Keeping one
in-memory shape means the tracker and the evaluation harness never need to know which
agent framework wrote a file.

Loading is deliberately forgiving at the collection level and strict at the file level:
:func:`load_dataset` reports each bad file as an :class:`ImportProblem` and keeps going,
while a single file either loads completely or raises :class:`TrajectoryFormatError` whose
message names the file and the exact problem (``"evals/x.json: message 4: 'role' missing"``),
so a broken export can be fixed without a debugger.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from judge.errors import TrajectoryFormatError
from judge.history import ROLES as HISTORY_ROLES
from judge.verdict import LoopKind

__all__ = [
    "KINDS",
    "ROLES",
    "TRAJECTORY_SUFFIXES",
    "ImportProblem",
    "Labels",
    "Trajectory",
    "TrajectoryFormatError",
    "iter_trajectory_files",
    "load_dataset",
    "make_trajectory",
    "validate_messages",
]

#: Loop kinds used by the labels (see shared/recorded/LABELING.md); ``none`` = not looping.
KINDS: tuple[str, ...] = (*(kind.value for kind in LoopKind), "none")

#: Chat roles accepted in ``messages`` (``function`` is the legacy OpenAI tool-result role).
ROLES: frozenset[str] = HISTORY_ROLES

#: File name endings that :func:`load_dataset` picks up when walking a directory.
TRAJECTORY_SUFFIXES: tuple[str, ...] = (".json", ".jsonl", ".traj")

Confidence = Literal["high", "medium", "low"]


@dataclass(frozen=True)
class ImportProblem:
    """One file that :func:`load_dataset` skipped, and why (same text as the error)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class Labels(BaseModel):
    """Ground truth for one trajectory, decided by a person under LABELING.md.

    ``onset_message_index`` is the index in ``messages`` of the assistant message that starts
    the first iteration of the repeated pattern; detectors are scored on how soon after it they
    fire, so it must point at a real assistant message (checked by :class:`Trajectory`).
    """

    model_config = ConfigDict(extra="forbid")

    looping: bool
    onset_message_index: int | None = Field(default=None, ge=0)
    kind: str
    confidence: Confidence | None = None
    note: str = ""

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in KINDS:
            raise ValueError(f"kind {value!r} is not one of {', '.join(KINDS)}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Labels:
        if self.looping:
            if self.onset_message_index is None:
                raise ValueError("looping=true needs an onset_message_index")
            if self.kind == "none":
                raise ValueError("looping=true needs a kind other than 'none'")
        else:
            if self.onset_message_index is not None:
                raise ValueError("looping=false must have onset_message_index null")
            if self.kind != "none":
                raise ValueError(f"looping=false must have kind 'none', not {self.kind!r}")
        return self


class Trajectory(BaseModel):
    """One agent run as OpenAI chat messages, with provenance and optional labels.

    ``messages`` stay plain dicts (not models) so that files round-trip byte-for-byte in
    meaning and unknown fields that a framework adds (``name``, ``reasoning_content`` ...)
    survive; their shape is checked by :func:`validate_messages` in the importers.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    messages: list[dict[str, Any]]
    source: dict[str, Any] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)
    labels: Labels | None = None

    @model_validator(mode="after")
    def _onset_inside_messages(self) -> Trajectory:
        labels = self.labels
        if labels is None or labels.onset_message_index is None:
            return self
        onset = labels.onset_message_index
        if onset >= len(self.messages):
            raise ValueError(
                f"labels.onset_message_index {onset} is outside the {len(self.messages)} messages"
            )
        role = self.messages[onset].get("role")
        if role != "assistant":
            raise ValueError(
                f"labels.onset_message_index {onset} points at a {role!r} message, "
                "not an assistant message"
            )
        return self

    def to_json_dict(self) -> dict[str, Any]:
        """The documented on-disk shape (labels omitted when there are none)."""
        data = self.model_dump(mode="json")
        if data["labels"] is None:
            del data["labels"]
        return data


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    """Check that ``messages`` is a list of chat messages; raise ``ValueError`` on the first flaw.

    Only structure is checked (roles, content types, tool-call shape), because that is what
    the tracker relies on; the error text starts with ``message <i>:`` so that the caller can
    prefix the file name and the user can jump straight to the offending entry.
    """
    if not isinstance(messages, list):
        raise ValueError(f"'messages' must be a list, got {type(messages).__name__}")
    for index, message in enumerate(messages):
        where = f"message {index}"
        if not isinstance(message, dict):
            raise ValueError(f"{where}: expected an object, got {type(message).__name__}")
        if "role" not in message:
            raise ValueError(f"{where}: 'role' missing")
        role = message["role"]
        if role not in ROLES:
            raise ValueError(f"{where}: unknown role {role!r}")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise ValueError(f"{where}: 'content' must be a string, a list or null")
        tool_calls = message.get("tool_calls")
        if tool_calls is not None:
            _check_tool_calls(tool_calls, where)
    return messages


def _check_tool_calls(tool_calls: Any, where: str) -> None:
    """Tool calls must carry a function name and JSON-string arguments (OpenAI shape)."""
    if not isinstance(tool_calls, list):
        raise ValueError(f"{where}: 'tool_calls' must be a list")
    for number, call in enumerate(tool_calls):
        here = f"{where}: tool_calls[{number}]"
        if not isinstance(call, dict):
            raise ValueError(f"{here}: expected an object")
        function = call.get("function")
        if not isinstance(function, dict):
            raise ValueError(f"{here}: 'function' missing")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError(f"{here}: 'function.name' missing")
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            raise ValueError(f"{here}: 'function.arguments' must be a JSON string")


def _describe_validation_error(error: ValidationError) -> str:
    """Turn pydantic's multi-line report into one line: ``labels.kind: <message>; ...``."""
    parts: list[str] = []
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)


def make_trajectory(
    path: str | Path,
    *,
    id: str,
    messages: Any,
    source: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    labels: Any = None,
) -> Trajectory:
    """Validate and build a :class:`Trajectory`, blaming ``path`` for anything wrong.

    All importers funnel through here so that every format reports problems the same way.
    """
    try:
        validate_messages(messages)
        return Trajectory(
            id=id,
            messages=messages,
            source=source or {},
            meta=meta or {},
            labels=labels,
        )
    except ValidationError as error:
        raise TrajectoryFormatError(path, _describe_validation_error(error)) from None
    except ValueError as error:
        raise TrajectoryFormatError(path, str(error)) from None


def iter_trajectory_files(paths: Iterable[str | Path]) -> Iterable[Path]:
    """Files under ``paths`` in a stable order (sorted per directory) so runs are reproducible."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.name.endswith(TRAJECTORY_SUFFIXES):
                    yield child
        else:
            yield path


def load_dataset(
    paths: str | Path | Sequence[str | Path],
) -> tuple[list[Trajectory], list[ImportProblem]]:
    """Load every trajectory under ``paths`` (files or directories, walked recursively).

    Directories contribute their ``.json``, ``.jsonl`` and ``.traj`` files. A file that cannot
    be read becomes an :class:`ImportProblem` instead of aborting the whole load, because one
    bad export should not hide the hundreds of good ones; callers decide whether problems are
    fatal. A path that does not exist is reported as a problem too.
    """
    from judge_eval.importers import load_trajectories  # local: adapters import this module

    if isinstance(paths, (str, Path)):
        paths = [paths]
    trajectories: list[Trajectory] = []
    problems: list[ImportProblem] = []
    for file in iter_trajectory_files(paths):
        if not file.exists():
            problems.append(ImportProblem(str(file), "no such file or directory"))
            continue
        try:
            trajectories.extend(load_trajectories(file))
        except TrajectoryFormatError as error:
            problems.append(ImportProblem(error.path, error.reason))
        except (OSError, UnicodeDecodeError) as error:
            problems.append(ImportProblem(str(file), f"cannot read: {error}"))
    return trajectories, problems
