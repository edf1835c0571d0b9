"""The judge tier (`judge_eval.judge_tier`): which windows it picks and labels, how it
samples them, and the figures it reports, with a scripted judge and no model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from judge.config import TrackerConfig
from judge.errors import JudgeTimeout
from judge.testing import JudgeRequest, ScriptedJudge, transcript_records
from judge_eval.dataset import Labels, Trajectory
from judge_eval.judge_tier import (
    LOOP_VISIBLE_TURNS,
    TierResult,
    Window,
    WindowResult,
    collect_windows,
    percentile,
    roc_auc,
    run_tier,
    sample_windows,
    summarize,
    write_results,
)

TASK = "Fix the failing test in parser.py"
# A schedule that asks the judge every 5 turns from turn 5 on, so a 40-turn run is
# checked 8 times (the defaults would check it once, at turn 30).
EVERY_5 = {"check_after_turns": 5, "initial_interval": 5, "min_interval": 5, "max_interval": 5}


def run(turns: int, *, onset_turn: int | None, run_id: str = "run") -> Trajectory:
    """``turns`` distinct file reads (nothing for the heuristics to flag), labelled looping
    from the assistant message of ``onset_turn`` (1-based) when one is given."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": TASK},
    ]
    onset = None
    for turn in range(1, turns + 1):
        if turn == onset_turn:
            onset = len(messages)
        call_id = f"call_{turn}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"src/module_{turn}.py"}),
                        },
                    }
                ],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": f"contents of module {turn}"}
        )
    if onset is None:
        labels = Labels(looping=False, kind="none")
    else:
        labels = Labels(looping=True, onset_message_index=onset, kind="exact_repeat")
    return Trajectory(id=run_id, messages=messages, labels=labels)


def windows_of(traj: Trajectory, **settings: Any) -> list[Window]:
    return anyio.run(collect_windows, traj, TrackerConfig(**{**EVERY_5, **settings}))


def test_windows_are_the_prompts_the_tracker_sends_at_its_checks() -> None:
    traj = run(40, onset_turn=25)
    windows = windows_of(traj)
    assert [w.turn for w in windows] == [5, 10, 15, 20, 25, 30, 35, 40]
    for window in windows:
        # The judge's own prompt: system instructions, then the task and the transcript.
        assert [m["role"] for m in window.prompt] == ["system", "user"]
        assert TASK in window.prompt[1]["content"]
        records = transcript_records(window.prompt)
        # The newest message shown is the result of the turn's call; at most 20 messages.
        assert records[-1]["n"] == window.newest_index == 2 * window.turn + 1
        assert len(records) <= 20
    # Before the onset: negative; the onset's own turn shows 1 looping turn: left out;
    # from there on the loop is in view.
    assert [w.label for w in windows] == [False, False, False, False, None, True, True, True]
    assert [w.loop_turns_visible for w in windows][4:] == [1, 6, 10, 10]


def test_a_loop_barely_in_view_is_left_out_and_productive_runs_are_negative() -> None:
    # Onset at turn 28: the turn-30 window shows turns 28..30, exactly LOOP_VISIBLE_TURNS.
    looping = windows_of(run(30, onset_turn=28))
    assert LOOP_VISIBLE_TURNS == 3
    assert looping[-1].loop_turns_visible == 3 and looping[-1].label is True
    looping = windows_of(run(30, onset_turn=29))
    assert looping[-1].loop_turns_visible == 2 and looping[-1].label is None
    productive = windows_of(run(30, onset_turn=None))
    assert productive and all(w.label is False for w in productive)
    assert all(w.onset is None for w in productive)


def test_the_heuristics_move_and_take_the_judge_s_turns_as_in_use() -> None:
    # The same read 12 times: the suspicion at the 2nd identical answer brings a check
    # forward (turn 2, before the schedule's turn 5), then the heuristics' own loop verdict
    # takes the later turns.
    traj = run(12, onset_turn=None)
    for msg in traj.messages:
        for call in msg.get("tool_calls") or []:
            call["function"]["arguments"] = json.dumps({"path": "src/same.py"})
        if msg["role"] == "tool":
            msg["content"] = "same contents"
    assert [w.turn for w in windows_of(traj)] == [2]
    assert [w.turn for w in windows_of(run(12, onset_turn=None))] == [5, 10]


def window(run_id: str, turn: int, label: bool | None) -> Window:
    prompt = [{"role": "user", "content": f"{run_id}/{turn}"}]
    return Window(run_id, "o", turn, 2 * turn, None, 0, label, prompt)


def test_the_sample_is_balanced_seeded_spread_over_runs_and_alternating() -> None:
    pool = [window(f"loop{r}", t, True) for r in range(3) for t in range(1, 6)]
    pool += [window(f"ok{r}", t, False) for r in range(4) for t in range(1, 6)]
    pool += [window("loop0", 99, None)]  # never sampled
    sample = sample_windows(pool, 10, seed=7)
    assert [w.label for w in sample] == [True, False] * 5
    # Every run gets a window before any gets a second: 3 loop runs for 5 positives.
    positives = [w.run_id for w in sample if w.label]
    assert sorted(set(positives[:3])) == ["loop0", "loop1", "loop2"]
    negatives = [w.run_id for w in sample if not w.label]
    assert sorted(negatives[:4]) == ["ok0", "ok1", "ok2", "ok3"]
    # Seeded: the same pool in any order gives the same sample; another seed, another one.
    assert sample_windows(list(reversed(pool)), 10, seed=7) == sample
    assert sample_windows(pool, 10, seed=8) != sample
    # The smaller class caps both halves; an odd count rounds down to pairs.
    assert len(sample_windows(pool[:2] + pool[15:], 10)) == 4
    assert len(sample_windows(pool, 7)) == 6
    with pytest.raises(ValueError, match="at least 2 windows"):
        sample_windows(pool, 1)


def test_roc_auc_and_percentiles() -> None:
    assert roc_auc([(0.9, True), (0.8, True), (0.2, False), (0.1, False)]) == 1.0
    assert roc_auc([(0.1, True), (0.9, False)]) == 0.0
    assert roc_auc([(0.5, True), (0.5, False)]) == 0.5
    # 3 of the 4 (positive, negative) pairs are ordered right: 0.4 < 0.5 is the miss.
    assert roc_auc([(0.9, True), (0.4, True), (0.5, False), (0.1, False)]) == 0.75
    # One tie among 4 pairs counts half.
    assert roc_auc([(0.9, True), (0.5, True), (0.5, False), (0.1, False)]) == 0.875
    assert roc_auc([(0.9, True)]) is None
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 95) == 19.0
    assert percentile(values, 50) == 10.0
    assert percentile([3.0], 95) == 3.0
    assert percentile([], 95) is None


def test_run_tier_scores_replies_through_the_judge_path(tmp_path: Path) -> None:
    windows = [window(f"r{i}", 1, label) for i, label in enumerate([True, False] * 3)]

    def script(request: JudgeRequest) -> Any:
        content = request.messages[0]["content"]
        return {
            "r0/1": 0.95,  # loop, flagged: tp
            "r1/1": 0.92,  # productive, flagged: fp
            "r2/1": 0.3,  # loop, missed
            "r3/1": 0.1,
            "r4/1": "I think the agent is looping.",  # no JSON: rejected by the schema
            "r5/1": JudgeTimeout("timed out", model=request.model),
        }[content]

    seen: list[tuple[WindowResult, str | None]] = []
    results = anyio.run(
        lambda: run_tier(
            windows,
            ScriptedJudge(script),
            "scripted/fast",
            threshold=0.9,
            on_result=lambda r, raw: seen.append((r, raw)),
        )
    )
    assert [r.confidence for r in results] == [0.95, 0.92, 0.3, 0.1, None, None]
    assert [r.failure for r in results] == [None, None, None, None, "output", "timeout"]
    # The rejected reply is handed to the console, nothing else is.
    assert [raw for _, raw in seen] == [None] * 4 + ["I think the agent is looping.", None]
    assert results[4].error_shape is not None and "looping" not in results[4].error_shape
    summary = summarize(results, 0.9)
    assert (summary.windows, summary.positives, summary.negatives) == (6, 3, 3)
    assert summary.failures == {"output": 1, "timeout": 1}
    assert summary.replies == 5 and summary.validity == 4 / 5
    # Over the valid replies, loops 0.95 and 0.3 against productive 0.92 and 0.1: 3 of
    # the 4 pairs ordered right (0.3 < 0.92 is not).
    assert summary.auc == 0.75
    # The failed call on a loop (r4) counts as missed, as the tracker would miss it.
    assert (summary.tp, summary.fp, summary.fn) == (1, 1, 2)
    assert summary.precision == 0.5 and summary.recall == 1 / 3
    # Scripted replies report tokens from the text (4 chars each).
    assert summary.prompt_tokens_median is not None and summary.prompt_tokens_max == 1

    path = write_results(
        TierResult({"model": "scripted/fast"}, summary, results), tmp_path / "t.json"
    )
    data = json.loads(path.read_text("utf-8"))
    assert data["summary"]["validity"] == 0.8
    assert [w["run_id"] for w in data["windows"]] == [f"r{i}" for i in range(6)]
    text = path.read_text("utf-8")
    assert "r0/1" not in text  # the prompt's text is never written


def test_a_window_without_a_label_is_refused() -> None:
    with pytest.raises(ValueError, match="no label"):
        anyio.run(
            lambda: run_tier([window("r", 1, None)], ScriptedJudge([0.1]), "m", threshold=0.9)
        )


# -- the command, through litellm to a fake OpenAI-compatible server on 127.0.0.1 -----------


@pytest.mark.model_requests
def test_the_command_asks_the_model_over_http_and_writes_figures_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from judge_eval.cli import main
    from tests.fault_server import FaultServer, Reply, Request, completion

    data = tmp_path / "data"
    data.mkdir()
    # 40 turns: the default schedule asks once, at turn 30, in each run.
    looping = run(40, onset_turn=20, run_id="looping-run")
    productive = run(40, onset_turn=None, run_id="productive-run")
    for traj in (looping, productive):
        traj.messages[1]["content"] = f"task of {traj.id}"
        (data / f"{traj.id}.json").write_text(json.dumps(traj.to_json_dict()), "utf-8")

    def reply(request: Request) -> Reply:
        prompt = json.dumps(request.json()["messages"])
        if "task of looping-run" in prompt:
            return completion(
                json.dumps(
                    {
                        "unproductive_state_analysis": "same reads",
                        "unproductive_state_confidence": 0.97,
                    }
                )
            )
        return completion("The agent reads a new module each turn.")  # no JSON

    out = tmp_path / "out"
    with FaultServer(reply) as server:
        code = main(
            [
                "eval",
                str(data),
                "--judge-model",
                "openai/local",
                "--api-base",
                server.api_base,
                "--windows",
                "2",
                "--out",
                str(out),
            ]
        )
        sent = [r.json() for r in server.requests]
    assert code == 0
    # Single stage, the project's schema asked for, the project's prompt sent.
    assert len(sent) == 2 and all(r["model"] == "local" for r in sent)
    assert all(
        "unproductive_state_confidence" in json.dumps(r.get("response_format")) for r in sent
    )
    report = json.loads((out / "judge_tier.json").read_text("utf-8"))
    summary = report["summary"]
    assert (summary["windows"], summary["valid"], summary["failures"]) == (2, 1, {"output": 1})
    assert summary["tp"] == 1 and summary["fp"] == 0 and summary["recall"] == 1.0
    assert summary["prompt_tokens_median"] == 120  # as the server reported
    assert {w["run_id"]: w["label"] for w in report["windows"]} == {
        "looping-run": True,
        "productive-run": False,
    }
    text = (out / "judge_tier.json").read_text("utf-8")
    assert "task of" not in text and "module" not in text
    printed = capsys.readouterr().out
    assert "rejected reply" in printed and "ROC AUC" in printed


@pytest.mark.slow
@pytest.mark.model_requests
def test_a_stopped_run_resumes_where_it_stopped_and_refuses_another_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A window costs minutes of CPU: --resume asks only about the windows not yet in the
    file, and the rows it keeps are the ones a full run writes; a resume under another
    seed would mix two samples, so it is refused naming the seed."""
    from judge_eval.cli import main
    from tests.fault_server import FaultServer, Reply, Request, completion

    data = tmp_path / "data"
    data.mkdir()
    for traj in (
        run(40, onset_turn=20, run_id="looping-run"),
        run(40, onset_turn=None, run_id="calm-run"),
    ):
        (data / f"{traj.id}.json").write_text(json.dumps(traj.to_json_dict()), "utf-8")

    def reply(request: Request) -> Reply:
        answer = {"unproductive_state_analysis": "x", "unproductive_state_confidence": 0.95}
        return completion(json.dumps(answer))

    out = tmp_path / "out"
    argv = ["eval", str(data), "--judge-model", "openai/local", "--windows", "2"]
    with FaultServer(reply) as server:
        argv += ["--api-base", server.api_base, "--out", str(out)]
        assert main(argv) == 0
        full = json.loads((out / "judge_tier.json").read_text("utf-8"))
        assert len(server.requests) == 2
        # Stopped after the first window:
        stopped = {**full, "windows": full["windows"][:1]}
        (out / "judge_tier.json").write_text(json.dumps(stopped), "utf-8")
        assert main([*argv, "--resume"]) == 0
        assert len(server.requests) == 3  # only the second window was asked again
        resumed = json.loads((out / "judge_tier.json").read_text("utf-8"))
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--resume", "--seed", "7"])
    strip = ("latency_s",)
    assert [{k: v for k, v in w.items() if k not in strip} for w in resumed["windows"]] == [
        {k: v for k, v in w.items() if k not in strip} for w in full["windows"]
    ]
    assert resumed["summary"]["tp"] == full["summary"]["tp"] == 1
    assert resumed["settings"]["started"] == full["settings"]["started"]
    assert len(resumed["settings"]["resumed"]) == 1
    printed = capsys.readouterr()
    assert "resuming: 1 of 2" in printed.out
    assert exc.value.code == 2
    assert "seed=20261128" in printed.err


def test_the_command_refuses_flags_of_other_evals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from judge_eval.cli import main

    for flags, said in (
        (["--judge", "oracle"], "drop --judge"),
        (["--windows", "1"], "--windows must be at least 2"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(["eval", "--judge-model", "openai/x", *flags, "--out", str(tmp_path)])
        assert exc.value.code == 2 and said in capsys.readouterr().err
