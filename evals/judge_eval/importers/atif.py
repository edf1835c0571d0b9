"""ATIF (Agent Trajectory Interchange Format, Harbor RFC 0001) -> chat messages.

An ATIF document is ``{"schema_version": "ATIF-v1.x", "agent": {"name", "version",
"model_name"?}, "steps": [...], "session_id"?, "trajectory_id"?, ...}`` where each step is
``{"step_id": 1.., "source": "system"|"user"|"agent", "message": str | [ContentPart],
"tool_calls"?: [{"tool_call_id", "function_name", "arguments": {...}}],
"observation"?: {"results": [{"source_call_id"?, "content"?}]}, ...}``.

The document is parsed here with the stdlib, following the published schema, so the
``atif`` package is not a runtime dependency. Mapping: system/user steps -> system/user
messages; an agent step -> one assistant message (``message`` as content, ``tool_calls``
converted to OpenAI shape, ``reasoning_content`` kept under the same key) followed by one
tool message per observation result that names its call; results without a call id (non-tool
actions, system events) become a user message named ``observation``. Embedded
``subagent_trajectories`` are not inlined (the monitored agent is the parent); their count is
recorded in ``meta``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judge_eval.dataset import Trajectory, TrajectoryFormatError, make_trajectory
from judge_eval.importers._common import text_of, tool_call

FORMAT = "atif"
_SOURCES = {"system": "system", "user": "user", "agent": "assistant"}


def looks_like(data: Any) -> bool:
    """An object with an ``ATIF-...`` ``schema_version``, or with ``steps`` and ``agent``."""
    if not isinstance(data, dict):
        return False
    version = data.get("schema_version")
    if isinstance(version, str) and version.upper().startswith("ATIF"):
        return True
    return isinstance(data.get("steps"), list) and isinstance(data.get("agent"), dict)


def parse(data: Any, path: Path) -> Trajectory:
    """Validate the parts of an ATIF document that the conversion relies on, then convert."""
    if not isinstance(data, dict):
        raise TrajectoryFormatError(path, f"expected an object, got {type(data).__name__}")
    if not isinstance(data.get("schema_version"), str):
        raise TrajectoryFormatError(path, "'schema_version' missing")
    agent = data.get("agent")
    if not isinstance(agent, dict) or not isinstance(agent.get("name"), str):
        raise TrajectoryFormatError(path, "'agent.name' missing")
    steps = data.get("steps")
    if not isinstance(steps, list):
        raise TrajectoryFormatError(path, "'steps' missing or not a list")
    messages: list[dict[str, Any]] = []
    for index, step in enumerate(steps):
        messages.extend(_convert_step(step, index, path))
    meta: dict[str, Any] = {
        "format": FORMAT,
        "schema_version": data["schema_version"],
        "agent": agent["name"],
    }
    for key, target in (("version", "agent_version"), ("model_name", "model")):
        if agent.get(key) is not None:
            meta[target] = agent[key]
    if data.get("subagent_trajectories"):
        meta["subagent_trajectories"] = len(data["subagent_trajectories"])
    ident = data.get("trajectory_id") or data.get("session_id") or path.stem
    return make_trajectory(
        path,
        id=str(ident),
        messages=messages,
        source={"path": str(path), "format": FORMAT},
        meta=meta,
    )


def _convert_step(step: Any, index: int, path: Path) -> list[dict[str, Any]]:
    """Messages for ``steps[index]``; ``step_id`` must be ``index + 1`` as the RFC requires."""
    where = f"steps[{index}]"
    if not isinstance(step, dict):
        raise TrajectoryFormatError(path, f"{where}: expected an object")
    if step.get("step_id") != index + 1:
        raise TrajectoryFormatError(
            path,
            f"{where}: step_id {step.get('step_id')!r} is not sequential (expected {index + 1})",
        )
    source = step.get("source")
    if source not in _SOURCES:
        raise TrajectoryFormatError(path, f"{where}: 'source' must be system, user or agent")
    if "message" not in step:
        raise TrajectoryFormatError(path, f"{where}: 'message' missing")
    message: dict[str, Any] = {"role": _SOURCES[source], "content": text_of(step["message"])}
    call_ids: set[str] = set()
    if source == "agent":
        if step.get("reasoning_content"):
            message["reasoning_content"] = step["reasoning_content"]
        calls = step.get("tool_calls") or []
        if not isinstance(calls, list):
            raise TrajectoryFormatError(path, f"{where}: 'tool_calls' must be a list")
        converted = []
        for number, call in enumerate(calls):
            if not isinstance(call, dict) or not call.get("function_name"):
                raise TrajectoryFormatError(
                    path, f"{where}.tool_calls[{number}]: 'function_name' missing"
                )
            if "tool_call_id" not in call:
                raise TrajectoryFormatError(
                    path, f"{where}.tool_calls[{number}]: 'tool_call_id' missing"
                )
            call_ids.add(str(call["tool_call_id"]))
            converted.append(
                tool_call(
                    str(call["tool_call_id"]), call["function_name"], call.get("arguments", {})
                )
            )
        if converted:
            message["tool_calls"] = converted
    result_messages: list[dict[str, Any]] = []
    observation = step.get("observation")
    if observation is not None:
        results = observation.get("results") if isinstance(observation, dict) else None
        if not isinstance(results, list):
            raise TrajectoryFormatError(path, f"{where}: 'observation.results' must be a list")
        for number, result in enumerate(results):
            if not isinstance(result, dict):
                raise TrajectoryFormatError(
                    path, f"{where}.observation.results[{number}]: expected an object"
                )
            content = text_of(result.get("content"))
            call_id = result.get("source_call_id")
            if call_id is not None:
                if str(call_id) not in call_ids:
                    raise TrajectoryFormatError(
                        path,
                        f"{where}.observation.results[{number}]: source_call_id {call_id!r} "
                        "matches no tool call of this step",
                    )
                result_messages.append(
                    {"role": "tool", "tool_call_id": str(call_id), "content": content}
                )
            else:
                result_messages.append({"role": "user", "name": "observation", "content": content})
    return [message, *result_messages]
