"""The closed-loop eval: scripted judge, scenarios built from trajectories, the harness, and
the full eval's must-be-0 figures (no recovered agent and no productive agent stopped)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from judge.config import TrackerConfig
from judge.errors import JudgeOutputError, JudgeTimeout
from judge.llm.assessment import parse_assessment
from judge.testing import (
    SCRIPTED_CONFIRM_MODEL,
    SCRIPTED_FAST_MODEL,
    JudgeRequest,
    ScriptedJudge,
    transcript_records,
)
from judge.tracker import LoopTracker
from judge_eval.cli import main
from judge_eval.closed_loop import (
    LOOP_POLICIES,
    RELAPSE_AFTER_CALLS,
    Phase,
    Policy,
    ScriptedAgent,
    closed_loop_config,
    loop_scenarios,
    productive_scenarios,
    run_scenario,
    seed_from_trajectory,
    split_turns,
)
from judge_eval.dataset import Labels, Trajectory, load_dataset

REPO = Path(__file__).resolve().parents[2]
SEED_FILE = REPO / "evals/data/handmade/handmade-exact-repeat-failing-pytest-3x.json"

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every figure here is for the default settings: no LOOP_JUDGE_* from the shell."""
    for name in list(os.environ):
        if name.startswith("LOOP_JUDGE_"):
            monkeypatch.delenv(name)


def _call(call_id: str, name: str, args: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        ],
    }


def _result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _looping_trajectory() -> Trajectory:
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the build."},
        _call("a", "ls", '{"path": "."}'),  # 2: prefix
        _result("a", "src tests"),
        _call("b", "build", "{}"),  # 4: onset
        _result("b", "error: missing header foo.h"),
        {"role": "user", "content": "any luck?"},  # part of the loop turn
        _call("b", "build", "{}"),  # 7
        _result("b", "error: missing header foo.h"),
    ]
    labels = Labels(looping=True, onset_message_index=4, kind="exact_repeat")
    return Trajectory(id="t-loop", messages=messages, labels=labels)


# -- ScriptedJudge ----------------------------------------------------------------------------


async def test_scripted_judge_replies_match_the_schema_and_are_recorded() -> None:
    judge = ScriptedJudge([0.95, 0.2, JudgeTimeout("down", model="m")], default=0.3)
    prompt = [{"role": "user", "content": 'x <transcript>\n{"n": 3, "role": "assistant"}\n'
               '{"n": 4, "role": "tool"}\n</transcript>'}]  # fmt: skip
    first = await judge.complete("fast", prompt, schema={})
    assert parse_assessment(first.content, finish_reason=first.finish_reason).confidence == 0.95
    assert first.prompt_tokens and first.completion_tokens and first.attempts == 1
    second = await judge.complete("confirm", prompt, schema={})
    assert parse_assessment(second.content).confidence == 0.2
    with pytest.raises(JudgeTimeout):
        await judge.complete("fast", prompt, schema={})
    assert parse_assessment((await judge.complete("fast", prompt, schema={})).content).confidence
    assert judge.confidences == [0.95, 0.2, None, 0.3]
    assert [c.model for c in judge.calls] == ["fast", "confirm", "fast", "fast"]
    assert judge.calls[2].error is not None and "down" in judge.calls[2].error
    assert [c.request.number for c in judge.calls] == [1, 2, 3, 4]
    assert judge.calls[0].request.indices == [3, 4] and judge.calls[0].request.newest_index == 4
    assert len(judge.calls_to("confirm")) == 1


async def test_scripted_judge_without_default_fails_like_a_bad_reply() -> None:
    judge = ScriptedJudge([0.1])
    await judge.complete("m", [], schema={})
    with pytest.raises(JudgeOutputError, match="exhausted"):
        await judge.complete("m", [], schema={})
    with pytest.raises(ValueError, match=r"0\.\.1"):
        await ScriptedJudge([1.5]).complete("m", [], schema={})
    raw = await ScriptedJudge(["not json"]).complete("m", [], schema={})
    assert raw.content == "not json"


async def test_scripted_judge_drives_the_tracker_judge_path() -> None:
    seen: list[JudgeRequest] = []

    def script(request: JudgeRequest) -> float:
        seen.append(request)
        return 0.95

    judge = ScriptedJudge(script)
    config = TrackerConfig(
        fast_model=SCRIPTED_FAST_MODEL, confirm_model=SCRIPTED_CONFIRM_MODEL, check_after_turns=2
    )
    tracker = LoopTracker(config, client=judge)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Summarize the docs."}]
    verdict = None
    for i in range(3):
        verdict = await tracker.turn_started(history)
        history += [_call(f"c{i}", "read_file", f'{{"path": "doc{i}.md"}}'),
                    _result(f"c{i}", f"chapter {i} text")]  # fmt: skip
    assert verdict is not None and verdict.looping and verdict.source == "llm"
    assert [c.model for c in judge.calls] == [SCRIPTED_FAST_MODEL, SCRIPTED_CONFIRM_MODEL]
    assert [c.model for c in verdict.judge_calls] == [SCRIPTED_FAST_MODEL, SCRIPTED_CONFIRM_MODEL]
    # the script sees the transcript the judge is shown, message indices included
    assert seen[0].newest_index == len(history) - 3
    first = transcript_records(seen[0].messages)[0]
    assert first["n"] == 0 and first["role"] == "user"


# -- scenarios --------------------------------------------------------------------------------


def test_split_turns_groups_each_assistant_message_with_what_answers_it() -> None:
    traj = _looping_trajectory()
    opening, turns = split_turns(traj.messages)
    assert [m["role"] for m in opening] == ["system", "user"]
    assert [start for start, _ in turns] == [2, 4, 7]
    assert [m["role"] for m in turns[1][1]] == ["assistant", "tool", "user"]


def test_seed_is_cut_at_the_labelled_onset() -> None:
    seed = seed_from_trajectory(_looping_trajectory())
    assert seed is not None
    assert seed.id == "t-loop" and seed.kind == "exact_repeat"
    assert len(seed.prefix) == 1 and seed.prefix[0][0]["tool_calls"][0]["id"] == "a"
    assert len(seed.loop) == 2 and seed.loop[0][0]["tool_calls"][0]["function"]["name"] == "build"
    assert seed.tools == frozenset({"build"})
    productive = Trajectory(
        id="p", messages=[{"role": "user", "content": "hi"}],
        labels=Labels(looping=False, kind="none"),
    )  # fmt: skip
    assert seed_from_trajectory(productive) is None
    scenarios = loop_scenarios([seed])
    assert [s.policy for s in scenarios] == list(LOOP_POLICIES)
    assert all(s.looping and s.id.startswith("t-loop/") for s in scenarios)


def test_agent_replays_the_loop_in_a_cycle_with_fresh_ids_then_escapes() -> None:
    seed = seed_from_trajectory(_looping_trajectory())
    assert seed is not None
    scenario = loop_scenarios([seed], [Policy.ESCAPE_THEN_RELAPSE])[0]
    agent = ScriptedAgent(scenario)
    history = [dict(m) for m in scenario.opening]
    for _ in range(4):  # prefix, then the two loop turns, then the first again
        history += agent.next_turn(len(history)) or []
    assert agent.phases == [Phase.PREFIX, Phase.LOOP, Phase.LOOP, Phase.LOOP]
    assert agent.onset_turn == 2
    ids = [c["id"] for m in history for c in m.get("tool_calls") or ()]
    assert len(ids) == len(set(ids)) == 4
    answered = [m["tool_call_id"] for m in history if m["role"] == "tool"]
    assert answered == ids
    agent.on_recovery()
    escape = []
    for _ in range(1 + RELAPSE_AFTER_CALLS):
        escape.append(agent.next_turn(len(history)) or [])
        history += escape[-1]
    plan = escape[0]
    assert len(plan) == 1 and plan[0]["role"] == "assistant" and not plan[0].get("tool_calls")
    calls = [turn[0]["tool_calls"][0]["function"] for turn in escape[1:]]
    results = [turn[1]["content"] for turn in escape[1:]]
    assert not {c["name"] for c in calls} & scenario.tools
    assert len({(c["name"], c["arguments"]) for c in calls}) == RELAPSE_AFTER_CALLS
    assert len(set(results)) == RELAPSE_AFTER_CALLS
    assert agent.escape_turns == [5]
    agent.next_turn(len(history))
    assert agent.phase is Phase.RELAPSE and agent.relapse_turn == 5 + 1 + RELAPSE_AFTER_CALLS


def test_judge_answers_from_the_agents_ground_truth() -> None:
    seed = seed_from_trajectory(_looping_trajectory())
    assert seed is not None
    agent = ScriptedAgent(loop_scenarios([seed], [Policy.IGNORE_WARNINGS])[0])
    history = [dict(m) for m in agent.scenario.opening]
    for _ in range(4):
        history += agent.next_turn(len(history)) or []

    def request(indices: list[int]) -> JudgeRequest:
        lines = "\n".join(json.dumps({"n": n, "role": history[n]["role"]}) for n in indices)
        content = f"<transcript>\n{lines}\n</transcript>"
        return JudgeRequest(1, "m", [{"role": "user", "content": content}])

    everything = list(range(len(history)))
    assert agent.judge_answer(request(everything)) > 0.9  # the last 3 turns loop
    assert agent.judge_answer(request(everything[:-3])) < 0.5  # a prefix turn among them


async def test_productive_agents_are_never_stopped() -> None:
    config = closed_loop_config()
    scenarios = productive_scenarios()
    assert {s.family for s in scenarios} == {"polling", "edit_test", "paging", "follow_ups"}
    for scenario in scenarios:
        result = await run_scenario(scenario, config)
        assert result.crash is None, result.crash
        assert result.end == "finished" and not result.stopped, result.id
        assert result.turns == len(scenario.script)


async def test_seeded_scenarios_run_each_policy() -> None:
    trajectories, _ = load_dataset(SEED_FILE)
    seed = seed_from_trajectory(trajectories[0])
    assert seed is not None
    config = closed_loop_config()
    results = {s.policy: await run_scenario(s, config) for s in loop_scenarios([seed])}
    for result in results.values():
        assert result.crash is None, result.crash
        assert result.loop_flagged and result.onset_turn == 2
    ignored = results[Policy.IGNORE_WARNINGS]
    assert ignored.stopped_looping and not ignored.escape_turns
    assert [f.action for f in ignored.flags][-1] == "stop"
    escaped = results[Policy.ESCAPE_AT_ONCE]
    assert escaped.escape_turns and escaped.ended_by_recovery
    assert results[Policy.ESCAPE_THEN_RELAPSE].relapse_turn is not None
    assert results[Policy.ASK_USER].escape_turns
    again = await run_scenario(loop_scenarios([seed], [Policy.ESCAPE_THEN_RELAPSE])[0], config)
    assert again.flags == results[Policy.ESCAPE_THEN_RELAPSE].flags  # deterministic


# -- the whole eval ---------------------------------------------------------------------------


def test_closed_loop_usage_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--closed-loop", "--judge", "oracle", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "--judge" in capsys.readouterr().err


@pytest.mark.slow
def test_full_closed_loop_eval_stops_no_recovered_and_no_productive_agent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(REPO)
    code = main(["eval", "--closed-loop", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "closed_loop.json").read_text())
    assert "### closed loop: per policy" in (tmp_path / "closed_loop.md").read_text()
    overall, policies = report["overall"], report["by_policy"]
    assert list(policies) == [*(p.value for p in LOOP_POLICIES), "productive"]
    assert overall["crashed"] == 0
    assert overall["loop_runs"] == 5 * report["settings"]["seeds"]
    assert policies["productive"]["productive_runs"] == len(productive_scenarios())
    assert policies["escape_then_relapse"]["relapses"] > 0
    stopped = [r["id"] for r in report["runs"] if r["end"] == "stopped"
               and r["stopped_phase"] in ("escaped", "asked")]  # fmt: skip
    assert overall["stopped_after_recovery"] == 0, stopped
    false_stops = [r["id"] for r in report["runs"] if not r["looping"] and r["end"] == "stopped"]
    assert overall["false_stops"] == 0, false_stops
    assert code == 0
