"""The quiet turn's shortcuts: the all-clear verdict built from a template, and a turn that
takes the lock only when it must await the judge. Both must answer exactly as the general
path does."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from judge import LoopTracker, TrackerConfig, Verdict
from tests.fakes import Agent, replay_turns

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("turn", "suspicion"), [(0, 0.0), (1, 0.5), (12_345, 0.999), (3, 1)])
def test_all_clear_equals_the_validated_verdict(turn: int, suspicion: float) -> None:
    fast = Verdict.all_clear(turn, suspicion)
    slow = Verdict(turn=turn, suspicion=suspicion)
    assert fast == slow
    assert fast.model_dump() == slow.model_dump()
    assert fast.model_fields_set == slow.model_fields_set
    assert repr(fast) == repr(slow)
    assert not fast and isinstance(fast.suspicion, float)
    assert Verdict.model_validate_json(fast.model_dump_json()) == fast


def test_all_clear_verdicts_share_nothing_mutable() -> None:
    one, two = Verdict.all_clear(1), Verdict.all_clear(1)
    one.errors.append("mine")
    one.evidence.append(3)
    assert two.errors == [] and two.evidence == [] and Verdict.all_clear(2).errors == []
    with pytest.raises(ValidationError):
        one.turn = 5  # type: ignore[misc]  # frozen like any verdict
    assert one.model_copy(update={"turn": 9}).turn == 9


def _history() -> list[dict[str, Any]]:
    """Varied work, a run of identical failing calls (flagged, escalated), then recovery."""
    agent = Agent(task="Fix the failing test", system="You are a coding agent.", first_call=0)
    for i in range(4):
        agent.call("read_file", {"path": f"src/m{i}.py"}, f"def f{i}(): pass", text=f"read {i}")
    for _ in range(9):
        agent.call("run_tests", {"path": "tests/"}, "Error: 1 failed", text="retrying")
    for i in range(8):
        agent.call("edit_file", {"path": f"src/m{i}.py", "text": f"v{i}"}, "File written")
    return agent.history


async def _general_path(tracker: LoopTracker, history: list[dict[str, Any]]) -> Verdict:
    """A turn the way one that found the lock taken runs: whole, then settled."""
    async with tracker._lock:
        verdict = await tracker._turn(history)
    return await tracker._responder.settle(verdict)


async def test_quiet_turns_answer_as_the_general_path_does() -> None:
    config = TrackerConfig(fast_model=None, confirm_model=None, semantic="off")
    history = _history()
    fast, general = LoopTracker(config), LoopTracker(config)
    flagged = 0
    for end in range(3, len(history) + 1):
        if history[end - 1]["role"] != "assistant":
            continue
        if end == 30:  # a person overrides the loop: its pattern is then silenced
            for tracker in (fast, general):
                tracker.override(tracker._responder.ladder.state.patterns.popitem()[0], "ok")
        got = await fast.turn_started(history[:end])
        want = await _general_path(general, history[:end])
        assert got.model_dump() == want.model_dump(), f"turn ending at {end}"
        flagged += bool(got)
    assert flagged, "the history should flag at least once"
    assert fast.stats == general.stats
    saved, expected = fast.state.model_dump(), general.state.model_dump()
    for state in (saved, expected):
        del state["detectors"]["last_step_at"]  # the wall clock at the last step
    assert saved == expected


async def test_a_turn_waits_while_another_awaits_the_judge() -> None:
    # Held by a turn awaiting the judge, the lock makes the next turn wait its turn, even a
    # quiet one that would otherwise never touch the lock.
    config = TrackerConfig(fast_model=None, confirm_model=None, semantic="off")
    tracker = LoopTracker(config)
    history = _history()
    await tracker._lock.acquire()
    done: list[Verdict] = []

    async def turn() -> None:
        done.append(await tracker.turn_started(history[:3]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        await anyio.sleep(0.05)
        assert tracker.turn == 0 and not done  # waiting, nothing read yet
        tracker._lock.release()
    assert tracker.turn == 1 and done and not done[0]


async def test_a_text_seen_in_a_recent_verdict_is_redacted_once() -> None:
    # A heuristic verdict's analysis repeats its summary, and a relapse brings the pattern
    # back: each distinct text goes through the redactor once, with the same result.
    config = TrackerConfig(fast_model=None, confirm_model=None, semantic="off")
    tracker = LoopTracker(config)
    redactor = tracker._responder.redactor()
    assert redactor is not None
    seen: list[str] = []
    secret = "sk-proj-" + "a1B2c3D4" * 6

    class Counting:
        def redact(self, text: str) -> str:
            seen.append(text)
            assert redactor is not None
            return redactor.redact(text)

    tracker._responder._redactor = Counting()  # type: ignore[assignment]
    agent = Agent(task="Deploy", system="You are an agent.", first_call=0)
    for _ in range(12):
        agent.call("deploy", {"key": secret}, "Error: denied", text="again")
    loops = [v for v in await replay_turns(tracker, agent.history) if v]
    assert len(loops) >= 2
    assert len(seen) == len(set(seen))  # never the same text twice
    for verdict in loops:
        texts = (verdict.summary, verdict.analysis, verdict.pattern, verdict.recovery_message)
        assert all(t and secret not in t and "[REDACTED" in t for t in texts)
        assert verdict.pattern == redactor.redact(verdict.pattern or "")
