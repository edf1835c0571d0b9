"""SWE-agent ``.traj`` files -> chat messages with one tool call per agent turn.

A ``.traj`` file is a JSON object with (depending on the SWE-agent version):

* ``history``: the conversation as the model saw it - ``{"role", "content", "agent",
  "message_type"?, "thought"?, "action"?, "tool_calls"?, "tool_call_ids"?, "is_demo"?}``;
* ``trajectory``: one entry per agent step - ``{"action", "observation", "thought",
  "response", "state"?, ...}``;
* ``info``, ``environment``, ``replay_config``: run metadata.

The mapping follows the recorded SWE-agent runs (evals/data/recorded/swe_agent_repo) so
imported files look like them: a text action becomes one call per turn - SWE-agent
interface commands (``open``, ``edit``,
``find_file``, ``scroll_down``, ``submit``, ``debug_*`` ...) keep their name with
``{"args": "<rest of the action>"}``, anything else is a shell command
``bash {"command": ...}``; the thought is the assistant content and the next observation is
the tool message. Function-calling runs keep their native ``tool_calls``. Demonstration
turns (``is_demo``) are dropped: they are in-context examples, not the agent's behaviour.
When there is no usable ``history`` the ``trajectory`` steps are used instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judge_eval.dataset import Trajectory, TrajectoryFormatError, make_trajectory
from judge_eval.importers._common import text_of, tool_call

FORMAT = "swe_agent"

#: Non-shell commands of SWE-agent's tool bundles (0.x and 1.x), kept as their own tools.
INTERFACE_COMMANDS: frozenset[str] = frozenset(
    {
        "open",
        "goto",
        "edit",
        "create",
        "find_file",
        "search_dir",
        "search_file",
        "scroll_up",
        "scroll_down",
        "submit",
        "exit_forfeit",
        "decompile",
        "disassemble",
        "filemap",
        "str_replace_editor",
        "insert",
        "append",
        "view",
        "windowed_edit",
        "check_flag",
        "exit_cost",
        "exit_context",
        "exit_api",
        "exit_format",
    }
)
_INTERFACE_PREFIXES: tuple[str, ...] = ("debug_", "connect_")
_OBS = ("observation",)


def looks_like(data: Any) -> bool:
    """An object with a ``trajectory`` list, or a ``history`` list and no ``messages``."""
    if not isinstance(data, dict) or "messages" in data:
        return False
    return isinstance(data.get("trajectory"), list) or isinstance(data.get("history"), list)


def action_to_call(action: str, call_id: str) -> dict[str, Any] | None:
    """Map a text action to a tool call (``None`` for an empty action)."""
    action = action.strip()
    if not action:
        return None
    name = action.split(None, 1)[0]
    if name in INTERFACE_COMMANDS or name.startswith(_INTERFACE_PREFIXES):
        return tool_call(call_id, name, {"args": action[len(name) :].strip()})
    return tool_call(call_id, "bash", {"command": action})


def parse(data: Any, path: Path) -> Trajectory:
    """Convert a SWE-agent trajectory object to a :class:`Trajectory`."""
    if not isinstance(data, dict):
        raise TrajectoryFormatError(path, f"expected an object, got {type(data).__name__}")
    history = data.get("history")
    steps = data.get("trajectory")
    if history is not None and not isinstance(history, list):
        raise TrajectoryFormatError(path, "'history' must be a list")
    if steps is not None and not isinstance(steps, list):
        raise TrajectoryFormatError(path, "'trajectory' must be a list")
    if not history and not steps:
        raise TrajectoryFormatError(path, "neither 'history' nor 'trajectory' has any entries")
    has_agent_turn = any(
        isinstance(entry, dict) and entry.get("role") == "assistant" for entry in history or []
    )
    if history and has_agent_turn:
        messages = _from_history(history, path)
    else:
        messages = _from_steps(steps or [], path)
        messages = _leading_context(history or []) + messages
    raw_info = data.get("info")
    info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
    meta: dict[str, Any] = {"agent": "SWE-agent", "format": FORMAT}
    for key in ("exit_status", "swe_agent_version", "model_stats"):
        if key in info:
            meta[key] = info[key]
    return make_trajectory(
        path,
        id=str(data.get("id") or path.name.removesuffix(".traj").removesuffix(".json")),
        messages=messages,
        source={"path": str(path), "format": FORMAT},
        meta=meta,
    )


def _leading_context(history: list[Any]) -> list[dict[str, Any]]:
    """System/user messages from a history that has no assistant turns (non-demo only)."""
    context: list[dict[str, Any]] = []
    for entry in history:
        if (
            isinstance(entry, dict)
            and entry.get("role") in {"system", "user"}
            and not entry.get("is_demo")
        ):
            context.append({"role": entry["role"], "content": text_of(entry.get("content"))})
    return context


def _from_history(history: list[Any], path: Path) -> list[dict[str, Any]]:
    """Walk ``history``; an observation right after an action answers that action's call."""
    messages: list[dict[str, Any]] = []
    pending: list[str] = []  # call ids of the last assistant turn still awaiting an answer
    counter = 0
    for index, entry in enumerate(history):
        if not isinstance(entry, dict):
            raise TrajectoryFormatError(path, f"history[{index}]: expected an object")
        if entry.get("is_demo"):
            continue
        role = entry.get("role")
        if role is None:
            raise TrajectoryFormatError(path, f"history[{index}]: 'role' missing")
        content = text_of(entry.get("content"))
        if role == "assistant":
            native = entry.get("tool_calls")
            message: dict[str, Any] = {"role": "assistant"}
            if isinstance(native, list) and native:
                message["content"] = content
                calls = [_native_call(call, path, index) for call in native]
            else:
                thought = entry.get("thought")
                message["content"] = text_of(thought) if thought is not None else content
                counter += 1
                action = entry.get("action")
                call = action_to_call(text_of(action), f"call_{counter:04d}") if action else None
                calls = [call] if call else []
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
            pending = [call["id"] for call in calls]
        elif role == "tool":
            ids = entry.get("tool_call_ids") or (
                [entry["tool_call_id"]] if "tool_call_id" in entry else pending[:1]
            )
            call_id = str(ids[0]) if ids else f"call_unmatched_{index}"
            messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
            pending = [p for p in pending if p != call_id]
        elif role == "user" and pending and entry.get("message_type", "observation") in _OBS:
            messages.append({"role": "tool", "tool_call_id": pending[0], "content": content})
            pending = pending[1:]
        else:
            messages.append({"role": str(role), "content": content})
            pending = []
    return messages


def _native_call(call: Any, path: Path, index: int) -> dict[str, Any]:
    """Copy one native (function-calling) tool call, checking it has a name."""
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise TrajectoryFormatError(path, f"history[{index}]: malformed tool_calls entry")
    function = call["function"]
    if not function.get("name"):
        raise TrajectoryFormatError(path, f"history[{index}]: tool call without a name")
    return tool_call(
        str(call.get("id") or f"call_h{index}"), function["name"], function.get("arguments")
    )


def _from_steps(steps: list[Any], path: Path) -> list[dict[str, Any]]:
    """One assistant turn + one tool message per ``trajectory`` step."""
    messages: list[dict[str, Any]] = []
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            raise TrajectoryFormatError(path, f"trajectory[{index}]: expected an object")
        if "action" not in step:
            raise TrajectoryFormatError(path, f"trajectory[{index}]: 'action' missing")
        thought = step.get("thought")
        content = text_of(thought if thought is not None else step.get("response"))
        call = action_to_call(text_of(step["action"]), f"call_{index + 1:04d}")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if call:
            message["tool_calls"] = [call]
        messages.append(message)
        if call and "observation" in step:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": text_of(step["observation"]),
                }
            )
    return messages
