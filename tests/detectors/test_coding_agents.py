"""Coding agents: their productive habits are not loops, their real loops are.

Each case is a minimal history in the shapes of the real runs in ``evals/coding_dev``
(mini-swe-agent's ``<returncode>`` envelope, Moatless Tools' ``<observation>`` and its
editor, harness nudges), driven through the tracker as the agent would.
"""

from __future__ import annotations

from typing import Any

import pytest

from judge import LoopKind, LoopTracker, TrackerConfig
from judge.detectors.edits import modifies_files
from judge.detectors.outcome import Outcome, classify
from judge.history import normalize_message
from tests.fakes import Agent, live_agent

pytestmark = pytest.mark.anyio


def shell(rc: int, output: str) -> str:
    return f"<returncode>{rc}</returncode>\n<output>\n{output}\n</output>"


def observation(text: str) -> str:
    return f"<observation>\n{text}\n</observation>"


REPRO = {"command": "cd /testbed && python reproduce_issue.py"}
BUG = shell(1, "Traceback (most recent call last):\n  File ...\nAssertionError: still wrong")


async def run(agent: Agent) -> Any:
    """One turn; the verdict without appending its recovery message (replay-style)."""
    verdict = await agent.tracker.turn_started(agent.history)
    agent.verdicts.append(verdict)
    return verdict


def tracker() -> LoopTracker:
    return LoopTracker(TrackerConfig(semantic="off"))


# -- what a result says ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        (shell(0, ""), Outcome.ACK),  # sed -i, cat > file: nothing to say
        (shell(0, "Traceback (most recent call last):\nValueError: x"), Outcome.OK),  # data
        (shell(1, "ValueError: x"), Outcome.ERROR),
        (shell(1, ""), Outcome.EMPTY),  # grep without a match
        ("total 4\nfile.py\n[Command finished with exit code 2]", Outcome.ERROR),
        (observation("The old_str and new_str are the same. No changes were made."), Outcome.ERROR),
        (observation("Found 12 code sections."), Outcome.OK),
    ],
)
def test_the_exit_status_decides(text: str, outcome: Outcome) -> None:
    assert classify(text) is outcome


@pytest.mark.parametrize(
    ("name", "args", "modifies"),
    [
        ("bash", {"command": "sed -i 's/a/b/' x.py"}, True),
        ("bash", {"command": "cat <<'EOF' > fix.py\nprint(1)\nEOF"}, True),
        ("bash", {"command": "git checkout django/forms.py"}, True),
        ("bash", {"command": "python reproduce.py 2>&1 | tail -5"}, False),
        ("bash", {"command": "ls > /dev/null && grep -n x a.py"}, False),
        ("bash", {"command": "python -c 'print(1 > 0)'"}, False),
        ("str_replace_editor", {"command": "str_replace", "path": "a.py"}, True),
        ("str_replace_editor", {"command": "view", "path": "a.py"}, False),
        ("create_reservation", {"user": "u1"}, False),  # business tools name no file
    ],
)
def test_which_calls_change_files(name: str, args: dict[str, Any], modifies: bool) -> None:
    msg = normalize_message(
        {
            "role": "assistant",
            "tool_calls": [{"id": "1", "function": {"name": name, "arguments": args}}],
        },
        0,
    )
    assert modifies_files(msg.tool_calls[0]) is modifies


# -- productive habits -----------------------------------------------------------------------


async def test_rerunning_the_repro_after_each_new_edit_is_not_a_loop() -> None:
    agent = live_agent(tracker())
    for i in range(6):
        agent.call("bash", {"command": f"sed -i 's/v{i}/v{i + 1}/' src/app.py"}, shell(0, ""))
        assert not await run(agent)
        agent.call("bash", REPRO, BUG)
        assert not await run(agent), agent.verdicts[-1]


async def test_rerunning_the_repro_with_nothing_changed_is_a_loop() -> None:
    agent = live_agent(tracker())
    verdicts = []
    for i in range(4):
        agent.call("bash", {"command": f"grep -n 'v{i}' src/app.py"}, shell(0, f"{i}: v{i}"))
        verdicts.append(await run(agent))
        agent.call("bash", REPRO, BUG)
        verdicts.append(await run(agent))
    assert any(verdicts) and "reproduce_issue.py" in next(v for v in verdicts if v).summary


async def test_edits_that_print_nothing_are_not_the_same_result() -> None:
    agent = live_agent(tracker())
    for i in range(6):
        agent.call("bash", {"command": f"sed -i '{i}d' src/app.py"}, shell(0, ""))
        assert not await run(agent)


async def test_reasoning_that_returns_to_a_clause_is_not_degenerate() -> None:
    agent = live_agent(tracker())
    agent.say(
        "The first branch handles None, that's fine. The second one converts the unit "
        "before comparing, that's fine. The cache key includes the tz, that's fine. So "
        "the bug must be in how the offset is applied after the conversion step runs."
    )
    assert not await run(agent)
    agent.say("I will check the file now. " * 3)  # the repeat *is* the message
    verdict = await run(agent)
    assert verdict and verdict.kind is LoopKind.TEXT_REPETITION


async def test_a_question_asked_beside_each_experiment_is_thinking_aloud() -> None:
    agent = live_agent(tracker())
    for i in range(5):
        agent.history.append(
            {
                "role": "assistant",
                "content": ("Maybe the warning is emitted during the equality check itself?"),
                "tool_calls": [
                    {
                        "id": f"q{i}",
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": f'{{"command": "python t{i}.py"}}',
                        },
                    }
                ],
            }
        )
        agent.history.append(
            {"role": "tool", "tool_call_id": f"q{i}", "content": shell(0, f"case {i}: no warning")}
        )
        assert not await run(agent)


# -- real loops -------------------------------------------------------------------------------


async def test_the_same_edit_refused_again_and_again_is_a_loop() -> None:
    agent = live_agent(tracker())
    verdicts = []
    for i in range(4):
        old = f"    if is_relation:\n        rel_{i} = 1"
        agent.call(
            "str_replace_editor",
            {"command": "str_replace", "path": "inspectdb.py", "old_str": old, "new_str": "x"},
            observation(f"String '{old}' not found in inspectdb.py"),
        )
        verdicts.append(await run(agent))
        agent.call(
            "ViewCode",
            {"file_path": "inspectdb.py", "start_line": 160 + i},
            observation(f"lines {160 + i}-190 of inspectdb.py ..."),
        )
        verdicts.append(await run(agent))
    flagged = [v for v in verdicts if v]
    assert flagged and flagged[0].kind is LoopKind.SIMILAR_RETRY


async def test_a_new_successful_edit_between_refusals_resets_them() -> None:
    agent = live_agent(tracker())
    for i in range(4):
        agent.call(
            "str_replace_editor",
            {"command": "str_replace", "path": "a.py", "old_str": f"x{i} = 1", "new_str": "y"},
            observation(f"String 'x{i} = 1' not found in a.py"),
        )
        assert not await run(agent)
        agent.call(
            "str_replace_editor",
            {"command": "str_replace", "path": "b.py", "old_str": f"b{i}", "new_str": f"c{i}"},
            observation(f"The file b.py has been edited (step {i})."),
        )
        assert not await run(agent)


async def test_harness_nudges_that_differ_only_in_numbers_are_a_loop() -> None:
    agent = live_agent(tracker())
    verdicts = []
    replies = [
        "THOUGHT: list the files first.\n```bash\nls\n```\nthen\n```bash\npwd\n```",
        "THOUGHT: sorry, I am confused about the format; here is the grep.",
        "THOUGHT: I only gave one block, I think, so the parser must count my quotes.",
    ]
    for n, reply in zip((2, 4, 3), replies, strict=True):
        agent.say(reply)
        agent.user(
            f"Please always provide EXACTLY ONE action in triple backticks, found {n} actions."
            "\n\nPlease format your action in triple backticks as shown in <response_example>."
            "\n\n<response_example>\nHere are some thoughts about why you want to perform "
            "the action.\n\n```bash\n<action>\n```\n</response_example>"
        )
        verdicts.append(await run(agent))
    assert not verdicts[1] and verdicts[2]
    assert verdicts[2].kind is LoopKind.ERROR_CYCLE


async def test_nudges_with_new_edits_between_are_isolated_mistakes() -> None:
    agent = live_agent(tracker())
    for n in range(3):
        agent.say("THOUGHT: two blocks by mistake")
        agent.user(f"Please always provide EXACTLY ONE action in triple backticks, found {n}.")
        assert not await run(agent)
        agent.call("bash", {"command": f"sed -i 's/a{n}/b{n}/' x.py"}, shell(0, ""))
        assert not await run(agent)


async def test_edits_that_never_move_the_test_result_are_a_loop() -> None:
    agent = live_agent(tracker())
    verdicts = []
    for i in range(7):
        agent.call(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": "models.py",
                "old_str": f"hooks_{i}",
                "new_str": f"hooks_{i + 1}",
            },
            observation("The file models.py has been edited.\n\n70 passed. 16 failed."),
        )
        verdicts.append(await run(agent))
    assert not any(verdicts[:5]) and verdicts[6]
    assert verdicts[6].source == "heuristic:no_effect"


async def test_edits_whose_test_result_moves_are_progress() -> None:
    agent = live_agent(tracker())
    for i in range(8):
        agent.call(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": "models.py",
                "old_str": f"hooks_{i}",
                "new_str": f"hooks_{i + 1}",
            },
            observation(
                f"The file models.py has been edited.\n\n{70 + i} passed. {16 - i} failed."
            ),
        )
        assert not await run(agent)


async def test_a_test_run_flip_flopping_between_two_errors_is_a_loop() -> None:
    agent = live_agent(tracker())
    errors = ["ImportError: cannot import name 'Session'", "NameError: name 'Session'"]
    verdicts = []
    for i in range(5):
        agent.call("bash", REPRO, shell(1, errors[i % 2]))
        verdicts.append(await run(agent))
        agent.call("bash", {"command": f"sed -i 's/import {i}/import {i + 1}/' m.py"}, shell(0, ""))
        verdicts.append(await run(agent))
    flagged = [v for v in verdicts if v]
    assert flagged and "flipping between the same two errors" in flagged[0].summary
