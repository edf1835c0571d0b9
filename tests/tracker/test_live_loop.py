"""The live loop after a flag: the agent gets the recovery message and reacts.

Each test drives the tracker the way an agent does (README): ``turn_started`` at the start
of every turn, the recovery message appended as a user message when it flags, the agent's
reaction appended after it. Regression tests for defects this loop showed on live runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from judge import Action, HistoryError, LoopKind, LoopTracker, TrackerConfig
from judge.history import normalize_history
from judge.testing import ScriptedJudge
from tests.fakes import Agent, answer, fake_judge, live_agent

pytestmark = pytest.mark.anyio

FAST = "fake/fast"
ORDER = {"customer": "42"}
SHIPPED = "order 7: shipped, 2 items"


def tracker(**cfg: Any) -> LoopTracker:
    return LoopTracker(TrackerConfig(semantic="off", **cfg))


async def fall_into_loop(agent: Agent) -> Any:
    """Four identical lookups with the same answer: flagged on the 4th (limit 3)."""
    for _ in range(3):
        agent.call("testTool", ORDER, SHIPPED)
        assert not await agent.turn()
    agent.call("testTool", ORDER, SHIPPED)
    verdict = await agent.turn()
    assert verdict and verdict.action is Action.WARN
    return verdict


def judge_at_turn_3(client: ScriptedJudge) -> LoopTracker:
    """A tracker whose judge (``client``) is first asked at turn 3, on schedule only."""
    return LoopTracker(
        TrackerConfig(semantic="off", fast_model=FAST, check_after_turns=3, early_checks=False),
        client=client,
    )


# -- 1. a finding is tied to its evidence ------------------------------------------------------


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
async def test_an_agent_that_obeys_is_not_flagged_again(fmt: str) -> None:
    agent = live_agent(tracker(), fmt=fmt)
    await fall_into_loop(agent)
    agent.say("Your order 7 has shipped with 2 items.")
    assert not await agent.turn()
    agent.user("Thanks. And order 8?")
    assert not await agent.turn()
    agent.say("Let me look that up.")
    assert not await agent.turn()
    assert agent.tracker.detections == 1


async def test_new_distinct_work_after_the_flag_is_never_flagged_and_counts_as_recovery() -> None:
    agent = live_agent(tracker())
    await fall_into_loop(agent)
    agent.say("Plan: stop re-reading order 7; check the carrier, then answer.")
    assert not await agent.turn()
    for i in range(6):
        agent.call(f"step_{i}", {"n": i}, f"new finding number {i}: carrier scan at hub {i}")
        assert not await agent.turn(), agent.verdicts[-1]
    stats = agent.tracker.stats
    assert stats.recoveries_succeeded == 1 and stats.recoveries_failed == 0


async def test_the_ladder_climbs_only_when_the_loop_comes_back() -> None:
    agent = live_agent(tracker())
    await fall_into_loop(agent)
    agent.say("Understood, I will not look it up again.")
    assert not await agent.turn()
    agent.call("testTool", ORDER, SHIPPED)  # ... and does it again: a relapse
    relapse = await agent.turn()
    assert relapse and relapse.pattern == 'exact:testTool({"customer":"42"})'
    assert agent.tracker.detections == 2
    assert agent.tracker.stats.recoveries_failed == 1


async def test_a_flag_never_repeats_while_the_evidence_does_not_grow() -> None:
    """An agent that does not append the recovery message: the same evidence, asked
    again, is not a second detection."""
    t = tracker()
    agent = live_agent(t)
    for _ in range(4):
        agent.call("testTool", ORDER, SHIPPED)
    assert await t.turn_started(agent.history)
    for _ in range(3):
        assert not await t.turn_started(agent.history)
    assert t.detections == 1


async def test_the_judge_reads_only_what_came_after_its_flag() -> None:
    client = fake_judge({FAST: [answer(0.95, "circling")]})
    t = judge_at_turn_3(client)
    agent = live_agent(t)
    for i in range(3):
        agent.call(f"read_{i}", {"page": i}, f"before-flag content {i}")
        last = await agent.turn()
    assert last and last.source == "llm" and len(client.calls_to(FAST)) == 1
    for i in range(6):
        agent.call(f"act_{i}", {"n": i}, f"after-flag content {i}")
        await agent.turn()
    assert len(client.calls_to(FAST)) == 2
    # The second check waited for three fresh turns and saw none of the answered ones.
    transcript = "\n".join(m["content"] for m in client.requests[1][1])
    assert "before-flag content" not in transcript
    assert "after-flag content 2" in transcript
    assert "loop-judge" in transcript  # the recovery message the agent got is context


async def test_a_judge_loop_recovers_only_when_a_later_check_says_so() -> None:
    client = fake_judge({FAST: [answer(0.95, "circling"), answer(0.95, "still circling")]})
    t = judge_at_turn_3(client)
    agent = live_agent(t)
    for i in range(20):
        agent.call(f"read_{i}", {"page": i}, f"content {i}")
        await agent.turn()
    flags = [v for v in agent.verdicts if v]
    assert len(flags) == 3 and all(v.source == "llm" for v in flags)
    stats = t.stats
    assert stats.recoveries_succeeded == 0 and stats.recoveries_failed == 2
    assert stats.detections_by_kind == {"cognitive": 3}


async def test_a_clean_check_after_a_judge_flag_is_a_recovery() -> None:
    client = fake_judge({FAST: [answer(0.95, "circling"), answer(0.1, "moving on")]})
    t = judge_at_turn_3(client)
    agent = live_agent(t)
    for i in range(20):
        agent.call(f"read_{i}", {"page": i}, f"content {i}")
        await agent.turn()
    assert t.stats.recoveries_succeeded == 1 and t.stats.recoveries_failed == 0


async def test_a_judge_loop_takes_the_kind_of_the_signal_under_it() -> None:
    client = fake_judge({FAST: [answer(0.95, "same lookup")]})
    t = LoopTracker(
        TrackerConfig(semantic="off", fast_model=FAST, check_after_turns=2, early_checks=False),
        client=client,
    )
    agent = live_agent(t)
    agent.call("read", {"page": 1}, "a")
    await agent.turn()
    agent.call("testTool", ORDER, SHIPPED)
    await agent.turn()
    agent.call("testTool", ORDER, SHIPPED)  # a repeat, under its limit: a weak signal
    verdict = agent.verdicts[-1] if agent.verdicts[-1] else await agent.turn()
    assert verdict and verdict.source == "llm" and verdict.kind is LoopKind.EXACT_REPEAT


# -- 2. one override, every entry point --------------------------------------------------------


async def test_override_silences_the_preflight_check() -> None:
    agent = live_agent(tracker())
    verdict = await fall_into_loop(agent)
    assert agent.tracker.check_call("testTool", ORDER).looping
    agent.tracker.override(verdict, "the customer asked us to keep checking")
    preflight = agent.tracker.check_call("testTool", ORDER)
    assert not preflight.looping and preflight.action is Action.CONTINUE


async def test_override_silences_streaming() -> None:
    t = tracker()
    agent = live_agent(t)
    chant = "I will check the order status now. " * 8
    agent.say(chant)
    verdict = await t.turn_started(agent.history)
    assert verdict and verdict.kind is LoopKind.TEXT_REPETITION
    before = [t.content_chunk(chant[i : i + 20]) for i in range(0, len(chant), 20)]
    assert any(before)
    await t.turn_started(agent.history)  # the next response streams afresh
    t.override(verdict, "a status line the user wants repeated")
    streamed = [t.content_chunk(chant[i : i + 20]) for i in range(0, len(chant), 20)]
    assert not any(streamed)


# -- 3. tool output in the user role is not a new prompt ----------------------------------------


def judged(**cfg: Any) -> tuple[LoopTracker, ScriptedJudge]:
    client = fake_judge({FAST: [answer(0.1, "fine")]})
    return LoopTracker(TrackerConfig(semantic="off", fast_model=FAST, **cfg), client=client), client


async def test_react_observations_in_user_messages_keep_counting_turns() -> None:
    t, client = judged()
    history: list[dict[str, Any]] = [{"role": "user", "content": "Is Lima the capital of Peru?"}]
    for i in range(45):
        history.append({"role": "assistant", "content": f"Thought: step {i}\nAction: search[{i}]"})
        history.append({"role": "user", "content": f"Observation {i}: page {i} of results"})
        await t.turn_started(history)
    assert t.turn == 45
    assert len(client.calls_to(FAST)) >= 1 and t.last_check_turn >= 30


@pytest.mark.parametrize("fmt", ["anthropic", "atif"])
async def test_results_in_the_user_role_keep_counting_turns(fmt: str) -> None:
    t, client = judged()
    agent = live_agent(t, fmt="anthropic" if fmt == "anthropic" else "openai")
    for i in range(32):
        if fmt == "atif":  # observations the ATIF reader could not tie to a call
            agent.say(f"Running step {i}")
            agent.history.append({"role": "user", "name": "observation", "content": f"out {i}"})
        else:
            agent.call("run", {"step": i}, f"output {i}")
        await t.turn_started(agent.history)
    assert t.turn == 32 and len(client.calls_to(FAST)) == 1


async def test_a_repeated_corrective_message_is_not_a_prompt_and_is_a_loop() -> None:
    t = tracker()
    nudge = "Please always provide EXACTLY ONE action in triple backticks."
    agent = live_agent(t)
    agent.say("I think we should look at the file first, then decide.")
    await t.turn_started(agent.history)
    verdicts = []
    for i in range(3):
        agent.user(nudge)
        agent.say(f"Sure. Let me think about the approach again, attempt {i}.")
        verdicts.append(await t.turn_started(agent.history))
    assert t.turn == 3  # the first nudge was new; its repeats are not new prompts
    assert not verdicts[1] and verdicts[2]
    assert verdicts[2].kind is LoopKind.ERROR_CYCLE and "EXACTLY ONE" in verdicts[2].summary


async def test_a_persons_new_prompt_still_restarts_the_count() -> None:
    t = tracker()
    agent = live_agent(t)
    for i in range(3):
        agent.call("read", {"page": i}, f"content {i}")
        await t.turn_started(agent.history)
    agent.user("Now summarise what you found.")
    agent.say("Here is the summary.")
    await t.turn_started(agent.history)
    assert t.turn == 1


# -- 4. Anthropic content blocks ----------------------------------------------------------------


def test_anthropic_blocks_become_calls_and_results() -> None:
    msgs = normalize_history(
        [
            {"role": "user", "content": [{"type": "text", "text": "Compare two files"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "private", "signature": "x"},
                    {"type": "text", "text": "Reading both."},
                    {"type": "tool_use", "id": "tu_1", "name": "read", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "tu_2", "name": "read", "input": {"path": "b"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "tu_2", "content": "B text"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "tu_1",
                        "content": [{"type": "text", "text": "no such file"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "(2 results)"},
                ],
            },
        ]
    )
    _task, assistant, r2, r1, note = msgs
    assert assistant.content == "Reading both." and "private" not in assistant.content
    assert [(c.id, c.signature) for c in assistant.tool_calls] == [
        ("tu_1", 'read({"path":"a"})'),
        ("tu_2", 'read({"path":"b"})'),
    ]
    assert (r2.role, r2.tool_call_id, r2.content, r2.is_error) == ("tool", "tu_2", "B text", False)
    assert (r1.tool_call_id, r1.is_error, r1.index) == ("tu_1", True, 2)
    assert (note.role, note.name, note.content) == ("user", "observation", "(2 results)")


async def test_anthropic_is_error_makes_a_failure_loop() -> None:
    t = tracker()
    agent = live_agent(t, fmt="anthropic")
    verdicts = []
    for _ in range(3):
        agent.call("deploy", {"env": "prod"}, "0 rows affected", is_error=True)
        verdicts.append(await t.turn_started(agent.history))
    assert verdicts[-1] and "the same error" in verdicts[-1].summary


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (
            {"role": "user", "content": [{"type": "tool_result", "content": "x"}]},
            "content[0].tool_use_id",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}],
            },
            "content[0].is_error",
        ),
        (
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "input": {}}]},
            "content[0].name",
        ),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}],
            },
            "content",
        ),
    ],
)
def test_broken_anthropic_blocks_name_the_field(message: dict[str, Any], field: str) -> None:
    with pytest.raises(HistoryError) as err:
        normalize_history([{"role": "user", "content": "hi"}, message])
    assert err.value.index == 1 and err.value.field == field


# -- review findings: the live loop in other history shapes -------------------------------


async def test_a_sliding_window_history_still_flags_a_relapse() -> None:
    """The agent sends the system message and its last 12 messages each turn: every turn
    is a rewrite. A flag must not make the rest of the session look answered."""
    t = tracker()
    full = live_agent(t).history[:2]
    flags = []
    for i in range(20):
        cid = f"c{i}"
        full.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "testTool", "arguments": '{"customer": "42"}'},
                    }
                ],
            }
        )
        full.append({"role": "tool", "tool_call_id": cid, "content": SHIPPED})
        window = [full[0], *full[2:][-12:]]
        if await t.turn_started(window):
            flags.append(i)
    assert len(flags) >= 5, flags  # the agent never stopped: neither does detection


async def test_a_verdict_answers_every_finding_standing_at_that_moment() -> None:
    t = tracker()
    agent = live_agent(t)
    nudge = "Your last command failed. Please try a different approach."
    for _ in range(3):
        agent.call("deploy", {"env": "prod"}, "Error: deploy failed")
        agent.user(nudge)
    assert await t.turn_started(agent.history)
    agent.say("I will explain the failure to the user instead of deploying again.")
    assert not await t.turn_started(agent.history)
    assert t.detections == 1


async def test_a_long_run_of_the_same_error_keeps_being_flagged() -> None:
    t = tracker()
    agent = live_agent(t)
    flagged = []
    for i in range(14):
        agent.call("run_script", {"name": f"fix_{i}.sh"}, "Error: permission denied")
        flagged.append(bool(await agent.turn()))
    assert all(flagged[-4:]), flagged  # each new failure is the loop again


async def test_screenshots_are_not_the_same_result() -> None:
    t = tracker()
    agent = live_agent(t, fmt="anthropic")
    for i in range(8):
        cid = f"tu_{i}"
        agent.history.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": cid,
                        "name": "computer",
                        "input": {"action": "click", "coordinate": [10 * i, 20]},
                    }
                ],
            }
        )
        agent.history.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": cid,
                        "content": [
                            {"type": "image", "source": {"type": "base64", "data": f"PNGDATA{i}"}}
                        ],
                    }
                ],
            }
        )
        assert not await t.turn_started(agent.history)


async def test_the_same_short_reply_to_different_notes_is_not_a_loop() -> None:
    t = tracker()
    agent = live_agent(t)
    for i in range(7):
        agent.user(f"Please note that meeting number {i} moved to room {i + 100}.")
        agent.say("Got it, noted.")
        assert not await t.turn_started(agent.history)


async def test_the_same_observation_after_different_actions_is_not_a_loop() -> None:
    t = tracker()
    history: list[dict[str, Any]] = [{"role": "user", "content": "Rename the module."}]
    for i in range(6):
        history.append(
            {"role": "assistant", "content": f"```bash\nsed -i 's/a{i}/b{i}/' m.py\n```"}
        )
        history.append(
            {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"}
        )
        assert not await t.turn_started(history)


async def test_override_silences_a_streamed_word_stutter() -> None:
    t = tracker()
    agent = live_agent(t)
    agent.say("Let me try " + "again " * 12 + "later.")
    verdict = await t.turn_started(agent.history)
    assert verdict
    t.override(verdict, "the user asked for it")
    await t.turn_started(agent.history)
    text = "Let me try " + "again " * 30
    assert not any(t.content_chunk(text[i : i + 7]) for i in range(0, len(text), 7))


def test_a_long_fence_marker_split_across_chunks_still_opens_and_closes() -> None:
    t = tracker()
    chunks = ["Here is the fix:\n", "``", "```", "`python\n"]
    chunks += ["    return result\n"] * 40  # code: repeats by design
    chunks += ["``", "```", "\n", "I will check the order status now. " * 4]
    verdicts = [t.content_chunk(c) for c in chunks]
    assert not any(verdicts[:-1])  # the code block was read as code
    assert verdicts[-1]  # the prose after it is read again, and it repeats itself


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
    client = fake_judge({"fast": [answer(0.1)]})
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
