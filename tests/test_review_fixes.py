"""Regression tests for defects found in review: each test names the defect it pins."""

from __future__ import annotations

import json
from typing import Any

import pytest

from judge import JudgeOutputError, LoopTracker, TrackerConfig
from judge.history import canonical_arguments
from judge.llm.assessment import parse_assessment
from judge.trajectories.dataset import iter_trajectory_files
from tests.fakes import FakeClient, answer, looping_history

# -- deeply nested JSON is odd but valid input, never a RecursionError --------------------


def test_deeply_nested_string_arguments_are_read_as_text() -> None:
    canonical, parsed = canonical_arguments("[" * 100_000)
    assert parsed is None and canonical.startswith("[[[")


def test_deeply_nested_object_arguments_are_read_as_text() -> None:
    outer: list[Any] = []
    inner = outer
    for _ in range(100_000):
        inner.append([])
        inner = inner[0]
    canonical, parsed = canonical_arguments(outer)
    assert parsed is None and "nested too deeply" in canonical


@pytest.mark.anyio
async def test_deeply_nested_tool_arguments_do_not_crash_the_turn() -> None:
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": "[" * 100_000},
                }
            ],
        },
    ]
    verdict = await LoopTracker(TrackerConfig()).turn_started(history)
    assert not verdict


def test_deeply_nested_judge_reply_is_an_output_error() -> None:
    with pytest.raises(JudgeOutputError, match="nested too deeply"):
        parse_assessment("[" * 100_000)


@pytest.mark.anyio
async def test_deeply_nested_judge_reply_is_a_failed_call_not_a_crash() -> None:
    client = FakeClient({"fast": ['{"x": ' + "[" * 100_000]})
    tracker = LoopTracker(TrackerConfig(fast_model="fast"), client=client)
    history = looping_history(30)
    verdict = None
    for i in range(30):
        verdict = await tracker.turn_started(history[: 4 + 2 * i])
    assert verdict is not None and not verdict
    assert verdict.judge_calls and verdict.judge_calls[0].error


# -- the README's loop appends the recovery message as a user message ---------------------


def _failing_call(i: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"c{i}",
                    "type": "function",
                    "function": {"name": "run_tests", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"c{i}", "content": "Error: boom"},
    ]


@pytest.mark.anyio
async def test_injected_recovery_message_is_not_a_new_prompt() -> None:
    """Appending ``verdict.recovery_message`` as a user message (README example) must not
    become the judge's task nor restart the turn count and the judge's schedule."""
    client = FakeClient({"fast": [answer(0.1)]})
    tracker = LoopTracker(TrackerConfig(fast_model="fast"), client=client)
    history: list[dict[str, Any]] = [{"role": "user", "content": "TASK-MARKER fix app.py"}]
    injected = 0
    for i in range(6):
        history += _failing_call(i)
        verdict = await tracker.turn_started(history)
        assert verdict.turn == i + 1 == tracker.turn
        if verdict:
            history.append({"role": "user", "content": verdict.recovery_message})
            injected += 1
    assert injected >= 2
    # a real new prompt still restarts the count
    history.append({"role": "user", "content": "now do something else"})
    await tracker.turn_started(history)
    assert tracker.turn == 1
    # and the judge is told the user's task, not our recovery text
    tracker = LoopTracker(TrackerConfig(fast_model="fast"), client=client)
    history = [{"role": "user", "content": "TASK-MARKER fix app.py"}]
    for i in range(4):
        history += _failing_call(i)
        verdict = await tracker.turn_started(history)
        if verdict:
            history.append({"role": "user", "content": verdict.recovery_message})
    for i in range(4, 40):
        history += [
            {
                "role": "assistant",
                "content": f"step {i}",
                "tool_calls": [
                    {
                        "id": f"r{i}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": json.dumps({"p": i})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"r{i}", "content": f"content {i}"},
        ]
        await tracker.turn_started(history)
    assert client.requests, "the judge was never asked"
    _, prompt = client.requests[-1]
    task_part = prompt[1]["content"].split("<transcript>")[0]
    assert "TASK-MARKER" in task_part and "LOOP DETECTED" not in task_part


# -- a model_overrides block that switches preset ----------------------------------------


def test_block_preset_replaces_every_value_of_the_base_preset() -> None:
    config = TrackerConfig(preset="conservative", model_overrides={"x*": {"preset": "balanced"}})
    assert config.for_model("x1").recur_min == TrackerConfig(preset="balanced").recur_min
    explicit = TrackerConfig(
        preset="conservative", recur_min=7, model_overrides={"x*": {"preset": "balanced"}}
    )
    assert explicit.for_model("x1").recur_min == 7


# -- one directory walker for trajectory files -------------------------------------------


def test_trajectory_files_are_walked_sorted(tmp_path: Any) -> None:
    (tmp_path / "b").mkdir()
    for name in ("b/2.json", "1.jsonl", "x.txt", "b/0.traj"):
        (tmp_path / name).write_text("{}")
    found = [p.relative_to(tmp_path).as_posix() for p in iter_trajectory_files([tmp_path])]
    assert found == ["1.jsonl", "b/0.traj", "b/2.json"]


# -- a stored state that cannot be read is a StateError, so the server starts over --------


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["breaker"].update(state="bogus"),
        lambda d: d["detectors"].update(findings={"$dict": [1, 2]}),
    ],
    ids=["unknown breaker state", "malformed tagged entry"],
)
def test_unreadable_state_is_a_state_error(mutate: Any) -> None:
    from judge._codec import StateError
    from judge.service.state import StateFormatError, dump_tracker, load_tracker
    from judge.service.store import _load_or_fresh

    config = TrackerConfig()
    data = json.loads(dump_tracker(LoopTracker(config)))
    mutate(data)
    blob = json.dumps(data).encode()
    with pytest.raises(StateError):
        LoopTracker.from_state(config, data)
    with pytest.raises(StateFormatError):
        load_tracker(config, blob)
    assert _load_or_fresh("s1", blob, config, None).turn == 0
