"""OpenHands agent-SDK event logs become chat messages the recorded format accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judge_eval.importers import load_trajectory
from judge_eval.openhands_events import (
    MAX_MESSAGE_CHARS,
    OpenHandsEventError,
    events_to_messages,
)

FIXTURE = Path(__file__).parent / "openhands_fixtures" / "events.json"
#: Events as SDKs before ``MessageToolCall`` wrote them (the SWE-bench runs of the dev set):
#: ``tool_call`` is LiteLLM's ``ChatCompletionMessageToolCall``, arguments under ``function``.
LITELLM_FIXTURE = Path(__file__).parent / "openhands_fixtures" / "events_litellm_tool_call.json"


def _events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return events


def test_actions_of_one_response_share_an_assistant_message() -> None:
    converted = events_to_messages(_events())
    roles = [m["role"] for m in converted.messages]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    first = converted.messages[2]
    assert first["content"] == "Run the tests and read the file."
    assert [c["id"] for c in first["tool_calls"]] == ["toolu_1", "toolu_2"]
    assert json.loads(first["tool_calls"][1]["function"]["arguments"]) == {
        "command": "view",
        "path": "/w/a.py",
    }
    assert converted.messages[3] == {
        "role": "tool",
        "tool_call_id": "toolu_1",
        "content": "1 failed",
    }
    assert converted.messages[4]["content"] == "1\tx = 1"  # newer SDKs: content parts


def test_action_without_tool_call_takes_its_arguments_from_the_action() -> None:
    converted = events_to_messages(_events())
    call = converted.messages[5]["tool_calls"][0]
    assert call["function"] == {
        "name": "execute_bash",
        "arguments": json.dumps({"command": "pytest -q"}),
    }
    assert converted.messages[6] == {
        "role": "tool",
        "tool_call_id": "toolu_3",
        "content": "command timed out",
    }


def test_litellm_tool_call_keeps_the_arguments_the_model_sent() -> None:
    events = json.loads(LITELLM_FIXTURE.read_text(encoding="utf-8"))
    converted = events_to_messages(events)
    assert [m["role"] for m in converted.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
    ]
    view, bash = converted.messages[2]["tool_calls"]
    # Verbatim: the model's own string, including fields the parsed action drops.
    assert view == {
        "id": "toolu_01A",
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "arguments": events[2]["tool_call"]["function"]["arguments"],
        },
    }
    assert json.loads(view["function"]["arguments"]) == {
        "command": "view",
        "path": "/w/README.rst",
        "security_risk": "LOW",
        "view_range": [1, 50],
    }
    assert bash["id"] == "toolu_01B"
    assert bash["function"]["name"] == "execute_bash"
    assert json.loads(bash["function"]["arguments"])["command"] == (
        "cd /w && python -m pytest --version"
    )
    think = converted.messages[5]["tool_calls"][0]
    assert think["function"] == {
        "name": "think",
        "arguments": json.dumps({"thought": "The filter must run in recursive mode too."}),
    }
    assert converted.messages[6]["tool_call_id"] == "toolu_01C"
    every_call = [c for m in converted.messages for c in m.get("tool_calls", [])]
    assert all(c["function"]["arguments"] != "null" for c in every_call)


def test_tool_call_without_arguments_is_refused() -> None:
    events = json.loads(LITELLM_FIXTURE.read_text(encoding="utf-8"))
    del events[2]["tool_call"]["function"]["arguments"]
    with pytest.raises(OpenHandsEventError, match="without arguments"):
        events_to_messages(events)


def test_bookkeeping_events_are_skipped_and_counted() -> None:
    converted = events_to_messages(_events())
    assert converted.skipped == {"Condensation": 1}
    assert converted.truncated == 0


def test_long_message_is_cut_and_marked() -> None:
    events = _events()
    events[4]["observation"]["output"] = "x" * (MAX_MESSAGE_CHARS + 5)
    converted = events_to_messages(events)
    text = converted.messages[3]["content"]
    assert text.startswith("x" * MAX_MESSAGE_CHARS)
    assert "5 of 20005 characters cut" in text
    assert converted.truncated == 1


@pytest.mark.parametrize(
    "bad",
    [
        ["not an event"],
        [{"kind": "ActionEvent", "id": "a", "action": {"kind": "X"}}],
        [{"kind": "MessageEvent", "id": "m", "llm_message": {"role": "robot", "content": []}}],
    ],
)
def test_malformed_events_are_refused(bad: list[Any]) -> None:
    with pytest.raises(OpenHandsEventError):
        events_to_messages(bad)


def test_converted_run_loads_as_an_unlabelled_recorded_trajectory(tmp_path: Path) -> None:
    record = {
        "id": "oh-fixture",
        "source": {"repo": "example/repo", "path": "events/", "commit": "0" * 40, "license": "MIT"},
        "meta": {"agent": "OpenHands agent SDK"},
        "labels": None,
        "messages": events_to_messages(_events()).messages,
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    trajectory = load_trajectory(path)
    assert trajectory.labels is None
    assert len(trajectory.messages) == 8
