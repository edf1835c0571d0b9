"""Known-loop memory: nothing raw reaches the file, and a remembered loop is caught earlier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from judge import LoopTracker, TrackerConfig, Verdict
from judge.response.memory import LoopMemory
from judge.testing import ScriptedJudge
from judge.turns import assistant_turn_ends
from tests.fakes import Agent, answer, fake_judge

SECRET = "sk-live-4f9Qz8WmXc2TnB7vR1yLpK0aHs"  # an API key in the call's arguments
UNIQUE_ARG = "zebra-quartz-7731-marmalade"  # a value that must never be persisted
UNIQUE_ERROR = "Error: vault token hq-pineapple-5512 rejected for tenant"  # tool output


def secret_loop(repeats: int = 6) -> Agent:
    agent = Agent()
    agent.user(f"Deploy with key {SECRET}")
    for _ in range(repeats):
        agent.call(
            "deploy",
            {"api_key": SECRET, "target": UNIQUE_ARG},
            UNIQUE_ERROR,
            text=f"Trying {UNIQUE_ARG} again",
        )
    for i in range(8):  # then it escapes: new reads, new results
        agent.call("read_file", {"path": f"notes{i}.md"}, f"note {i}")
    return agent


def play(tracker: LoopTracker, history: list[dict[str, Any]]) -> list[Verdict]:
    async def go() -> list[Verdict]:
        return [await tracker.turn_started(history[:e]) for e in assistant_turn_ends(history)]

    return anyio.run(go)


def stored_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())


def test_no_raw_text_reaches_the_store(tmp_path: Path) -> None:
    db = tmp_path / "mem" / "loops.sqlite"
    tracker = LoopTracker(TrackerConfig(memory_path=db, recovery_turns=3))
    verdicts = play(tracker, secret_loop().history)
    assert any(verdicts) and tracker.stats.recoveries_succeeded >= 1
    raw = stored_bytes(db.parent)
    assert raw  # something was written
    for needle in (
        SECRET,
        UNIQUE_ARG,
        "pineapple",
        "hq-pineapple-5512",
        "vault token",
        "zebra",
        "api_key",
        "Trying",
        "notes0",
    ):
        for encoding in ("utf-8", "utf-16-le", "utf-16-be"):
            assert needle.encode(encoding) not in raw, needle
    entries = LoopMemory(db).entries()
    assert entries and {e.tool for e in entries} <= {"deploy", None}
    assert all(len(e.fingerprint) == 32 and e.loops >= 1 for e in entries)
    assert sum(e.recoveries for e in entries) == tracker.stats.recoveries_succeeded


# A status poll: the explore class's limit of 10 applies to it, not the read rule's 2
# (judge.detectors.revisit), so two identical answers are far below its limit.
POLL = ("get_build_status", {"build_id": "b-41"}, "running")


def poll_twice() -> Agent:
    agent = Agent()
    for _ in range(2):
        agent.call(*POLL)
    return agent


def judged(db: Path | None, **cfg: Any) -> tuple[LoopTracker, ScriptedJudge]:
    client = fake_judge({"fake/fast": [answer(0.2, "fine")]})
    config = TrackerConfig(fast_model="fake/fast", memory_path=db, **cfg)
    return LoopTracker(config, client=client), client


def test_a_remembered_pattern_brings_the_judge_forward(tmp_path: Path) -> None:
    db = tmp_path / "loops.sqlite"
    # session 1: the same status poll 11 times (the explore limit is 10)
    first = Agent()
    for _ in range(11):
        first.call(*POLL)
    assert any(play(LoopTracker(TrackerConfig(memory_path=db)), first.history))

    # session 2: two identical polls are far below the limit (suspicion 0.1)...
    tracker, client = judged(None)
    verdicts = play(tracker, poll_twice().history)
    assert verdicts[-1].suspicion == pytest.approx(0.1) and client.requests == []
    # ...but a remembered pattern is raised to the suspicion cap: an early judge check
    tracker, client = judged(db)
    verdicts = play(tracker, poll_twice().history)
    assert len(client.calls_to("fake/fast")) == 1 and not verdicts[-1]
    assert verdicts[-1].suspicion == pytest.approx(0.5)  # raised by the memory


@pytest.mark.parametrize(("lowers", "flag_at"), [(False, 3), (True, 2)])
def test_memory_lowers_threshold_flags_one_repeat_earlier(
    tmp_path: Path, lowers: bool, flag_at: int
) -> None:
    db = tmp_path / "loops.sqlite"
    agent = Agent()
    for _ in range(3):
        agent.call("write_file", {"path": "a.txt"}, "File written.")
    assert play(LoopTracker(TrackerConfig(memory_path=db)), agent.history)[2]
    tracker = LoopTracker(TrackerConfig(memory_path=db, memory_lowers_threshold=lowers))
    verdicts = play(tracker, agent.history)
    assert next(i + 1 for i, v in enumerate(verdicts) if v) == flag_at
    if lowers:
        assert "earlier session" in (verdicts[1].summary or "")


def test_a_broken_memory_file_is_reported_not_raised(tmp_path: Path) -> None:
    db = tmp_path / "loops.sqlite"
    tracker = LoopTracker(TrackerConfig(memory_path=db))
    db.write_bytes(b"this is not a database" * 100)
    agent = Agent()
    for _ in range(3):
        agent.call("write_file", {"path": "a.txt"}, "File written.")
    verdict = play(tracker, agent.history)[-1]
    assert verdict and any("known-loop memory failed" in e for e in verdict.errors)
