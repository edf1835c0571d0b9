"""smolagents memory (benchmark ``intermediate_steps``) becomes function-calling chat messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judge_eval.importers import load_trajectory
from judge_eval.smolagents_memory import (
    MAX_MESSAGE_CHARS,
    SmolagentsMemoryError,
    memory_to_messages,
    parse_tool_calls,
)


def _text(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


def _memory() -> list[dict[str, Any]]:
    """A CodeAgent run as smolagents stores it: one good step, one parse error, one call."""
    return [
        {"role": "system", "content": _text("You are an expert assistant.")},
        {"role": "user", "content": _text("New task:\nWhat is 6*7?")},
        {"role": "assistant", "content": _text("Thought: compute it.\n<code>print(6*7)</code>")},
        {
            "role": "tool-call",
            "content": _text(
                "Calling tools:\n[{'id': 'call_1', 'type': 'function', 'function': "
                "{'name': 'python_interpreter', 'arguments': 'print(6*7)'}}]"
            ),
        },
        {"role": "tool-response", "content": _text("Observation:\nExecution logs:\n42")},
        {"role": "assistant", "content": _text("42</code>")},
        {"role": "tool-response", "content": _text("Error:\nError in code parsing")},
        {"role": "assistant", "content": _text("Tool call call_2: final_answer")},
        {
            "role": "tool-call",
            "content": _text(
                "Calling tools:\n[{'id': 'call_2', 'type': 'function', 'function': "
                "{'name': 'final_answer', 'arguments': {'answer': '42'}}}]"
            ),
        },
        {"role": "tool-response", "content": _text("Observation:\n42")},
    ]


def test_tool_call_joins_the_assistant_turn_and_its_response_answers_it() -> None:
    messages = memory_to_messages(_memory()).messages
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool",
    ]  # fmt: skip
    assert messages[2]["tool_calls"][0]["id"] == "call_1"
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Observation:\nExecution logs:\n42",
    }


def test_code_arguments_become_a_json_object() -> None:
    messages = memory_to_messages(_memory()).messages
    code_call = messages[2]["tool_calls"][0]["function"]
    assert json.loads(code_call["arguments"]) == {"code": "print(6*7)"}
    answer_call = messages[6]["tool_calls"][0]["function"]
    assert answer_call == {"name": "final_answer", "arguments": '{"answer": "42"}'}


def test_error_with_no_open_call_stays_a_user_turn() -> None:
    messages = memory_to_messages(_memory()).messages
    assert messages[4] == {"role": "assistant", "content": "42</code>"}
    assert messages[5] == {"role": "user", "content": "Error:\nError in code parsing"}


def test_long_observation_is_cut_and_marked() -> None:
    memory = _memory()
    memory[4]["content"] = _text("y" * (MAX_MESSAGE_CHARS + 3))
    converted = memory_to_messages(memory)
    assert converted.truncated == 1
    assert converted.messages[3]["content"].endswith("3 of 20003 characters cut ...]")


@pytest.mark.parametrize(
    "text",
    [
        "Calling tools:\n[not python",
        "Calling tools:\n{'a': 1}",
        "Calling tools:\n[{'id': 'x'}]",
        "hi",
    ],
)
def test_malformed_tool_call_text_is_refused(text: str) -> None:
    with pytest.raises(SmolagentsMemoryError):
        parse_tool_calls(text)


def test_unknown_role_is_refused() -> None:
    with pytest.raises(SmolagentsMemoryError):
        memory_to_messages([{"role": "planner", "content": _text("x")}])


def test_converted_run_loads_as_an_unlabelled_recorded_trajectory(tmp_path: Path) -> None:
    record = {
        "id": "smol-fixture",
        "source": {"repo": "example/repo", "path": "o.jsonl", "commit": "0" * 40, "license": "MIT"},
        "labels": None,
        "messages": memory_to_messages(_memory()).messages,
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    assert len(load_trajectory(path).messages) == 8
