"""Regression tests for defects found on live runs, through `LoopTracker`."""

from __future__ import annotations

import os
from typing import Any

import pytest
from pydantic import ValidationError

from judge import LoopKind, LoopTracker, TrackerConfig, Verdict
from judge.detectors import stream, text_repetition
from judge.detectors.outcome import Outcome, classify
from tests.fakes import Agent, replay_turns

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A LOOP_JUDGE_* variable in the developer's shell must not change the thresholds."""
    for name in list(os.environ):
        if name.startswith("LOOP_JUDGE_"):
            monkeypatch.delenv(name)


async def replay(agent: Agent, **config: Any) -> list[Verdict]:
    """turn_started at the start of every turn after an assistant message."""
    return await replay_turns(LoopTracker(TrackerConfig(semantic="off", **config)), agent.history)


def first_flag(verdicts: list[Verdict]) -> int | None:
    return next((i + 1 for i, v in enumerate(verdicts) if v), None)


def stream_all(text: str, size: int) -> tuple[int | None, Verdict | None]:
    """Stream ``text`` in ``size``-character chunks: (chunk number, verdict) of a flag."""
    tracker = LoopTracker(TrackerConfig(semantic="off"))
    for n, start in enumerate(range(0, len(text), size), 1):
        verdict = tracker.content_chunk(text[start : start + size])
        if verdict:
            return n, verdict
    return None, None


# -- 5: a streamed code block longer than the stream window ---------------------------------


def _module(functions: int = 40) -> str:
    return "".join(
        f"def step_{i:02d}(values, factor={i}):\n"
        f"    # scale the values for step {i} of the pipeline\n"
        "    result = [v * factor for v in values]\n"
        "    return result\n\n"
        for i in range(functions)
    )


async def test_long_streamed_code_block_is_not_prose() -> None:
    body = _module()
    assert len(body) > stream.TAIL_CHARS  # the opening fence leaves any kept window
    text = f"Here is the module you asked for.\n\n```python\n{body}```\n\nThat covers every step."
    assert stream_all(text, 40) == (None, None)


async def test_fence_marker_split_across_chunks() -> None:
    body = _module()
    loop = "I will now call the search tool to find the answer. " * 6

    def feed(chunks: list[str]) -> Verdict | None:
        tracker = LoopTracker(TrackerConfig(semantic="off"))
        return next((v for c in chunks if (v := tracker.content_chunk(c))), None)

    # the opening marker split "``" + "`": the code after it is not prose
    assert feed(["Here it is.\n``", "`python\n", *body.splitlines(keepends=True)]) is None
    # the closing marker split "`" + "``": the prose after it is read again
    verdict = feed(["```python\n", body, "`", "``\n", loop])
    assert verdict is not None and verdict.kind is LoopKind.TEXT_REPETITION
    # any chunk size, boundaries inside both markers included
    text = f"Here it is.\n```python\n{body}```\nDone with the code."
    for size in (1, 2, 7, 40):
        assert stream_all(text, size) == (None, None)


async def test_prose_after_a_long_code_block_is_still_read() -> None:
    body = _module()
    loop = "I will now call the search tool to find the answer. " * 6
    number, verdict = stream_all(f"```python\n{body}```\n{loop}", 40)
    assert number is not None and verdict is not None
    assert verdict.kind is LoopKind.TEXT_REPETITION
    # an unclosed fence: everything after it is code
    assert stream_all(f"Code:\n```\n{loop}", 40) == (None, None)


async def test_stream_keeps_a_bounded_tail_of_prose() -> None:
    monitor = stream.StreamMonitor()
    chunk = "```\n" + "x = 1\n" * 2000 + "```\n" + "word " * 2000
    for _ in range(50):
        monitor.feed(chunk)
    assert len(monitor._text) <= stream.TAIL_CHARS


# -- 6: short repeated text -----------------------------------------------------------------


async def test_short_sentence_repeated_in_a_run_is_caught_while_streaming() -> None:
    number, verdict = stream_all("Done. " * 500, 6)
    assert verdict is not None and verdict.kind is LoopKind.TEXT_REPETITION
    assert number is not None and number <= 2 * text_repetition.SHORT_SENTENCE_RUN
    assert text_repetition.degenerate("Done. " * text_repetition.SHORT_SENTENCE_RUN)
    # one short of the run, or short sentences taking turns, are ordinary text
    assert text_repetition.degenerate("Done. " * (text_repetition.SHORT_SENTENCE_RUN - 1)) is None
    assert text_repetition.degenerate("Yes. No. " * 10) is None
    assert stream_all("Let me check. " * 10, 14)[1] is not None  # as before


async def test_short_message_repeated_in_a_row_is_a_loop() -> None:
    agent = Agent()
    for _ in range(10):
        agent.say("I'm doing well, thanks for asking.")
        agent.user("How are you?")
    verdicts = await replay(agent)
    assert first_flag(verdicts) == text_repetition.SHORT_MESSAGE_REPEATS
    assert verdicts[text_repetition.SHORT_MESSAGE_REPEATS - 1].kind is LoopKind.TEXT_REPETITION


async def test_short_messages_with_other_turns_between_are_not_a_loop() -> None:
    # Magentic-One: the orchestrator names the next speaker after each ledger update.
    agent = Agent()
    for i in range(10):
        agent.say(
            f"Updated Ledger: step {i}, the request is not yet satisfied; next page.",
            name="Orchestrator",
        )
        agent.call(
            "WebSurfer",
            {"instruction": "scroll down"},
            f"page {i} of the results",
            text="Next speaker WebSurfer",
        )
    assert first_flag(await replay(agent)) is None
    # the same short text between different assistant messages
    other = Agent()
    findings = [
        "the port is set in config.yaml",
        "the tests import the old module name",
        "the README documents a flag that was removed",
        "two workers share a lock",
        "the cache is never invalidated",
        "the schema has a nullable id column",
    ]
    for finding in findings:
        other.say("Let me check.")
        other.say(f"Looking more closely, {finding}; I will note that and move on.")
    assert first_flag(await replay(other)) is None
    # new tool data between identical short messages
    reading = Agent()
    for i in range(10):
        reading.say("Next page.")
        reading.call("scroll_down", {}, f"lines {i * 50}-{i * 50 + 49}: more of the file")
    assert first_flag(await replay(reading)) is None


# -- 7: the same call failing in a row with different errors ----------------------------------


async def test_identical_call_failing_in_a_row_with_different_errors() -> None:
    errors = [
        "Traceback (most recent call last):\n  File \"run.py\", line 3\nKeyError: 'a'",
        "Error: connection reset by peer",
        "fatal: not a git repository (or any of the parent directories)",
        "SyntaxError: unexpected EOF while parsing",
        "Error: disk quota exceeded",
    ]
    agent = Agent()
    for error in errors:
        agent.call("execute_bash", {"command": "invalid_command"}, error)
    verdicts = await replay(agent)
    assert verdicts[1].suspicion > 0  # the 2nd identical failure is already suspicious
    assert first_flag(verdicts) == 3  # README: the 3rd identical failing call is a loop
    assert verdicts[2].kind is LoopKind.EXACT_REPEAT


async def test_openhands_error_trailer_is_an_error() -> None:
    trailer = "[Error occurred in processing last action]"
    outputs = [
        f"Running invalid_command ...\nattempt {i} produced output {i * 13}\n{trailer}"
        for i in range(4)
    ]
    assert all(classify(o) is Outcome.ERROR for o in outputs)
    assert classify(f"{outputs[0]}\n  ") is Outcome.ERROR
    assert classify("x" * 10_000_000 + "\n" + trailer) is Outcome.ERROR
    assert classify(f"step one done\n{trailer}\nthen step two done") is Outcome.OK
    agent = Agent()
    for output in outputs:
        agent.call("execute_bash", {"command": "invalid_command"}, output)
    assert first_flag(await replay(agent)) == 3


async def test_rerunning_a_reproduction_after_each_edit_is_progress() -> None:
    errors = [
        "KeyError: 'user'",
        "TypeError: unsupported operand",
        "ImportError: no parser",
        "AttributeError: 'NoneType' has no 'id'",
        "ValueError: empty header",
        "AssertionError: totals differ",
    ]
    agent = Agent()
    for i, error in enumerate(errors):
        agent.call("edit_file", {"path": "app.py", "patch": f"fix attempt {i}"}, "ok")
        agent.call(
            "execute_bash",
            {"command": "python reproduce.py"},
            f"Traceback (most recent call last):\n{error}",
        )
    assert first_flag(await replay(agent)) is None


async def test_a_success_with_a_different_result_still_resets_the_run() -> None:
    agent = Agent()
    for i in range(6):
        agent.call(
            "execute_bash",
            {"command": "curl -s localhost:8000/health"},
            "Error: connection refused" if i % 2 == 0 else f'{{"up": true, "n": {i}}}',
        )
    assert first_flag(await replay(agent)) is None


# -- 8: tool_limits of 0 and below ----------------------------------------------------------


@pytest.mark.parametrize("value", [-1, -5])
async def test_negative_tool_limit_is_rejected(value: int) -> None:
    with pytest.raises(ValidationError) as info:
        TrackerConfig(tool_limits={"get_weather": value})
    message = str(info.value)
    assert "get_weather" in message and str(value) in message
    assert "LOOP_JUDGE_TOOL_LIMITS" in message


async def test_zero_tool_limit_means_unlimited_successful_repeats() -> None:
    agent = Agent()
    for _ in range(20):
        agent.call("get_weather", {"city": "Lima"}, '{"temp": 18}')
    assert first_flag(await replay(agent, tool_limits={"get_weather": 0})) is None
    assert first_flag(await replay(agent, tool_limits={"get_weather": 1})) == 2
    # ... with other calls between too
    between = Agent()
    for i in range(8):
        between.call("get_weather", {"city": "Lima"}, '{"temp": 18}')
        between.call("lookup", {"q": f"k{i}"}, f"result {i}")
    assert first_flag(await replay(between, tool_limits={"get_weather": 0})) is None
    # the preflight check agrees
    tracker = LoopTracker(TrackerConfig(semantic="off", tool_limits={"get_weather": 0}))
    await tracker.turn_started(agent.history)
    assert not tracker.check_call("get_weather", {"city": "Lima"})


async def test_zero_tool_limit_keeps_the_failure_limit() -> None:
    agent = Agent()
    for _ in range(3):
        agent.call("get_weather", {"city": "Atlantis"}, "Error: unknown city Atlantis")
    assert first_flag(await replay(agent, tool_limits={"get_weather": 0})) == 3
