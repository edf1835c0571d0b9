"""Round-trips for every importer, on small made-up files written in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judge_eval.dataset import TrajectoryFormatError
from judge_eval.importers import detect_format, load_trajectories, load_trajectory
from judge_eval.importers.swe_agent import action_to_call

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
    {"role": "assistant", "content": "Take an umbrella."},
]


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def _calls(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for m in messages
        for c in m.get("tool_calls", [])
    ]


# --- openai_chat -----------------------------------------------------------------------


def test_openai_message_list(tmp_path: Path) -> None:
    traj = load_trajectory(_write(tmp_path / "chat.json", MESSAGES))
    assert traj.id == "chat"
    assert traj.messages == MESSAGES
    assert traj.labels is None
    assert traj.meta["format"] == "openai_chat"


def test_openai_object_normalises_content_and_arguments(tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
            ],
        },
    ]
    traj = load_trajectory(_write(tmp_path / "x.json", {"id": "run-7", "messages": messages}))
    assert traj.id == "run-7"
    assert traj.messages[0]["content"] == "hi"
    assert traj.messages[1]["content"] == ""
    assert traj.messages[1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'


def test_openai_jsonl_one_message_per_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in MESSAGES) + "\n")
    traj = load_trajectory(path)
    assert traj.messages == MESSAGES


def test_jsonl_one_trajectory_per_line(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    lines = [{"messages": MESSAGES}, {"id": "second", "messages": MESSAGES[:2]}]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    trajectories = load_trajectories(path)
    assert [t.id for t in trajectories] == ["many:1", "second"]
    with pytest.raises(TrajectoryFormatError, match="holds 2 trajectories"):
        load_trajectory(path)


def test_bad_message_names_file_and_index(tmp_path: Path) -> None:
    bad = [*MESSAGES[:4], {"content": "no role"}]
    path = _write(tmp_path / "bad.json", bad)
    with pytest.raises(TrajectoryFormatError) as info:
        load_trajectory(path)
    assert str(info.value) == f"{path}: message 4: 'role' missing"
    assert info.value.path == str(path)
    assert isinstance(info.value, ValueError)


def test_invalid_json_is_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"messages": [')
    with pytest.raises(TrajectoryFormatError, match=r"broken\.json: invalid JSON"):
        load_trajectory(path)


def test_unrecognised_object(tmp_path: Path) -> None:
    path = _write(tmp_path / "other.json", {"foo": 1})
    with pytest.raises(TrajectoryFormatError, match=r"other\.json: .*'messages' missing"):
        load_trajectory(path)


# --- recorded --------------------------------------------------------------------------


def _recorded(**labels: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": "rec-1",
        "source": {"repo": "o/r", "path": "p", "commit": "0" * 40, "license": "MIT"},
        "meta": {"agent": "x"},
        "messages": MESSAGES,
    }
    if labels:
        data["labels"] = labels
    return data


def test_recorded_round_trip_with_labels(tmp_path: Path) -> None:
    data = _recorded(
        looping=True, onset_message_index=2, kind="exact_repeat", confidence="high", note="n"
    )
    path = _write(tmp_path / "rec.json", data)
    traj = load_trajectory(path)
    assert detect_format(data) == "recorded"
    assert traj.to_json_dict() == data
    assert traj.labels is not None and traj.labels.onset_message_index == 2


def test_recorded_without_labels(tmp_path: Path) -> None:
    traj = load_trajectory(_write(tmp_path / "rec.json", _recorded()))
    assert traj.labels is None
    assert traj.source["license"] == "MIT"


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        ({"looping": True, "onset_message_index": 99, "kind": "exact_repeat"}, "outside the 5"),
        ({"looping": True, "onset_message_index": 1, "kind": "exact_repeat"}, "'user' message"),
        ({"looping": True, "onset_message_index": None, "kind": "cognitive"}, "onset"),
        ({"looping": True, "onset_message_index": 2, "kind": "spinning"}, "kind 'spinning'"),
        ({"looping": False, "onset_message_index": None, "kind": "cognitive"}, "kind 'none'"),
    ],
)
def test_recorded_bad_labels(tmp_path: Path, labels: dict[str, Any], problem: str) -> None:
    path = _write(tmp_path / "lab.json", _recorded(**labels))
    with pytest.raises(TrajectoryFormatError) as info:
        load_trajectory(path)
    assert str(info.value).startswith(f"{path}: labels")
    assert problem in str(info.value)


def test_recorded_unknown_key(tmp_path: Path) -> None:
    data = {**_recorded(), "label": {}}
    with pytest.raises(TrajectoryFormatError, match="unknown top-level key"):
        load_trajectory(_write(tmp_path / "typo.json", data))


# --- SWE-agent -------------------------------------------------------------------------


def test_action_to_call_mapping() -> None:
    assert action_to_call("open src/a.py 40", "c")["function"] == {
        "name": "open",
        "arguments": '{"args": "src/a.py 40"}',
    }
    assert json.loads(action_to_call("ls -la", "c")["function"]["arguments"]) == {
        "command": "ls -la"
    }
    assert action_to_call("debug_start ./bin", "c")["function"]["name"] == "debug_start"
    assert action_to_call("  ", "c") is None


def test_swe_agent_text_history(tmp_path: Path) -> None:
    data = {
        "environment": "swe_main",
        "history": [
            {"role": "system", "content": "SETTING: ...", "agent": "primary"},
            {"role": "user", "content": "demo", "is_demo": True},
            {"role": "user", "content": "Fix the bug.", "agent": "primary"},
            {
                "role": "assistant",
                "content": "Look.\n```\nfind_file missing.py\n```",
                "thought": "Look.",
                "action": "find_file missing.py\n",
            },
            {"role": "user", "content": "Found 1 match", "agent": "primary"},
            {"role": "assistant", "content": "x", "thought": "Run.", "action": "python t.py"},
            {"role": "user", "content": "ok"},
        ],
        "trajectory": [],
        "info": {"exit_status": "submitted"},
    }
    traj = load_trajectory(_write(tmp_path / "inst.traj", data))
    assert traj.id == "inst"
    assert [m["role"] for m in traj.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert _calls(traj.messages) == [
        ("find_file", {"args": "missing.py"}),
        ("bash", {"command": "python t.py"}),
    ]
    assert traj.messages[2]["content"] == "Look."
    assert traj.messages[3]["tool_call_id"] == traj.messages[2]["tool_calls"][0]["id"]
    assert traj.meta["exit_status"] == "submitted"


def test_swe_agent_function_calling_history(tmp_path: Path) -> None:
    call = {
        "id": "call_a",
        "type": "function",
        "function": {"name": "str_replace_editor", "arguments": '{"command": "view"}'},
    }
    data = {
        "history": [
            {"role": "system", "content": [{"type": "text", "text": "sys"}]},
            {"role": "assistant", "content": "View it.", "tool_calls": [call]},
            {
                "role": "tool",
                "content": [{"type": "text", "text": "file"}],
                "tool_call_ids": ["call_a"],
            },
        ]
    }
    traj = load_trajectory(_write(tmp_path / "fc.traj", data))
    assert traj.messages[1]["tool_calls"][0] == call
    assert traj.messages[2] == {"role": "tool", "tool_call_id": "call_a", "content": "file"}


def test_swe_agent_trajectory_steps_only(tmp_path: Path) -> None:
    data = {
        "trajectory": [
            {"action": "ls", "observation": "a.py", "thought": "List."},
            {"action": "submit", "observation": "", "thought": "Done."},
        ]
    }
    traj = load_trajectory(_write(tmp_path / "steps.traj", data))
    assert _calls(traj.messages) == [("bash", {"command": "ls"}), ("submit", {"args": ""})]
    assert len(traj.messages) == 4


def test_swe_agent_bad_step(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.traj", {"trajectory": [{"observation": "x"}]})
    with pytest.raises(TrajectoryFormatError, match=r"bad\.traj: trajectory\[0\]: 'action'"):
        load_trajectory(path)


# --- ATIF ------------------------------------------------------------------------------

ATIF_DOC: dict[str, Any] = {
    "schema_version": "ATIF-v1.6",
    "session_id": "sess-1",
    "agent": {"name": "my-agent", "version": "1.0", "model_name": "gpt-4o"},
    "steps": [
        {"step_id": 1, "source": "system", "message": "You are an agent."},
        {"step_id": 2, "source": "user", "message": "What time is it?"},
        {
            "step_id": 3,
            "source": "agent",
            "message": "Let me check.",
            "reasoning_content": "Need the clock.",
            "tool_calls": [
                {"tool_call_id": "t1", "function_name": "get_time", "arguments": {"tz": "UTC"}},
                {"tool_call_id": "t2", "function_name": "get_date", "arguments": {}},
            ],
            "observation": {
                "results": [
                    {"source_call_id": "t1", "content": "12:00"},
                    {"source_call_id": "t2", "content": [{"type": "text", "text": "Mon"}]},
                ]
            },
        },
        {"step_id": 4, "source": "agent", "message": "It is 12:00 UTC on Monday."},
    ],
}


def test_atif_round_trip(tmp_path: Path) -> None:
    traj = load_trajectory(_write(tmp_path / "a.json", ATIF_DOC))
    assert traj.id == "sess-1"
    assert [m["role"] for m in traj.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert _calls(traj.messages) == [("get_time", {"tz": "UTC"}), ("get_date", {})]
    assert traj.messages[4] == {"role": "tool", "tool_call_id": "t2", "content": "Mon"}
    assert traj.messages[2]["reasoning_content"] == "Need the clock."
    assert traj.meta["model"] == "gpt-4o"


@pytest.mark.slow
def test_atif_document_is_valid_for_reference_models() -> None:
    """Our understanding of ATIF matches the third-party pydantic models (if installed)."""
    atif = pytest.importorskip("atif")
    atif.Trajectory.model_validate(ATIF_DOC)


def test_atif_bad_step_id(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(ATIF_DOC))
    doc["steps"][1]["step_id"] = 7
    with pytest.raises(TrajectoryFormatError, match=r"a\.json: steps\[1\]: step_id 7"):
        load_trajectory(_write(tmp_path / "a.json", doc))


def test_atif_unknown_call_id(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(ATIF_DOC))
    doc["steps"][2]["observation"]["results"][0]["source_call_id"] = "zzz"
    with pytest.raises(TrajectoryFormatError, match="matches no tool call"):
        load_trajectory(_write(tmp_path / "a.json", doc))


def test_jsonl_bad_line_names_line(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text(json.dumps({"messages": MESSAGES}) + "\n" + json.dumps({"id": "x"}) + "\n")
    with pytest.raises(TrajectoryFormatError, match=r"many\.jsonl: line 2: .*'messages' missing"):
        load_trajectories(path)
