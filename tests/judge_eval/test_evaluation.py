"""The eval suite: scoring, replay, the oracle judge, cassettes and sweep validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from judge import LoopTracker, TrackerConfig
from judge.errors import ConfigError, JudgeTimeout
from judge.history import normalize_history
from judge.llm.transcript import build_prompt, judge_window
from judge.turns import assistant_turns, replay
from judge_eval.cassette import Cassette, CassetteMiss, CassetteRecorder
from judge_eval.dataset import Labels, Trajectory
from judge_eval.metrics import Outcome, compute_metrics, percentile, score
from judge_eval.oracle import (
    ORACLE_FAST_MODEL,
    OracleClient,
    OracleSettings,
    max_message_index,
)
from judge_eval.replay import TrajectoryResult, replay_all, replay_trajectory
from judge_eval.sweep import build_configs, parse_axis, settings_grid
from tests.fakes import answer, fake_judge, looping_history

pytestmark = pytest.mark.anyio

FAST = "fake/fast"


# -- scoring ---------------------------------------------------------------------------------

# Assistant messages at 2, 4, 6, ... 20 (as in looping_history: system, user, then pairs).
ASSISTANTS = tuple(range(2, 22, 2))


def result(
    looping: bool, flag: int | None, *, onset: int | None = None, kind: str | None = None
) -> TrajectoryResult:
    labels = Labels(
        looping=looping,
        onset_message_index=onset if looping else None,
        kind=kind or ("exact_repeat" if looping else "none"),
    )
    return TrajectoryResult(
        id=f"t{looping}{flag}{onset}",
        labels=labels,
        assistant_indices=ASSISTANTS,
        turns=len(ASSISTANTS),
        first_flag_index=flag,
    )


def test_scores_each_outcome() -> None:
    assert score(result(True, 8, onset=4)) == score(result(True, 8, onset=4))
    tp = score(result(True, 8, onset=4))
    assert tp is not None and tp.outcome is Outcome.TP and tp.delay == 2  # 4, 6, 8
    onset_itself = score(result(True, 4, onset=4))
    assert onset_itself is not None and onset_itself.delay == 0
    early = score(result(True, 2, onset=6))
    assert early is not None and early.outcome is Outcome.FP and early.missed and early.early
    fn = score(result(True, None, onset=6))
    assert fn is not None and fn.outcome is Outcome.FN and fn.missed
    fp = score(result(False, 10))
    assert fp is not None and fp.outcome is Outcome.FP and not fp.early
    tn = score(result(False, None))
    assert tn is not None and tn.outcome is Outcome.TN
    unlabelled = TrajectoryResult(id="u")
    assert score(unlabelled) is None


def test_metrics_count_early_flags_as_fp_and_miss() -> None:
    results = [
        result(True, 4, onset=4),  # TP, delay 0
        result(True, 10, onset=4),  # TP, delay 3
        result(True, 20, onset=2, kind="alternation"),  # TP, delay 9
        result(True, 2, onset=6),  # FP before onset, and a miss
        result(True, None, onset=6),  # FN
        result(False, 10),  # FP
        result(False, None),  # TN
        result(False, None),  # TN
        TrajectoryResult(id="unlabelled", first_flag_index=3),  # not scored
    ]
    m = compute_metrics(results)
    assert (m.trajectories, m.looping, m.not_looping) == (8, 5, 3)
    assert (m.tp, m.fp, m.fp_before_onset, m.fn, m.tn) == (3, 2, 1, 2, 2)
    assert m.precision == pytest.approx(3 / 5)
    assert m.recall == pytest.approx(3 / 5)
    assert m.f1 == pytest.approx(3 / 5)
    assert m.fpr == pytest.approx(1 / 3)  # only the productive run's flag
    assert m.delay_median == 3
    assert m.delay_p90 == pytest.approx(0 + 3 + (9 - 3) * 0.8)  # between ranks 2 and 3
    assert m.judge_calls == 0 and m.calls_per_100_turns == 0


def test_metrics_exclude_crashes_and_handle_no_flags() -> None:
    crashed = result(True, 4, onset=4)
    crashed.crash = "RuntimeError: boom"
    m = compute_metrics([crashed, result(False, None)])
    assert m.crashed == 1 and m.trajectories == 1
    assert m.precision is None and m.recall is None and m.f1 is None and m.fpr == 0


def test_percentile_interpolates() -> None:
    assert percentile([], 90) is None
    assert percentile([5], 90) == 5
    assert percentile(list(range(1, 11)), 90) == pytest.approx(9.1)
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)


# -- replay ----------------------------------------------------------------------------------


def test_assistant_turns_include_tool_results() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "a"},
        {"role": "tool", "content": "r1"},
        {"role": "tool", "content": "r2"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": "c"},
    ]
    # the user's (or a harness's) message after "b" is in the history the agent passes
    # before it answers again
    assert assistant_turns(messages) == [(1, 4), (4, 6), (6, 7)]


def trajectory(n_turns: int, *, onset: int | None = None, tid: str = "made-up") -> Trajectory:
    labels = (
        Labels(looping=True, onset_message_index=onset, kind="cognitive")
        if onset is not None
        else Labels(looping=False, kind="none")
    )
    return Trajectory(id=tid, messages=looping_history(n_turns), labels=labels)


async def test_replay_records_first_flag_and_calls() -> None:
    # Every check says "loop": the first check (turn 3) flags assistant message 2 + 2*2 = 6.
    client = fake_judge({FAST: [answer(0.95)]})
    config = TrackerConfig(fast_model=FAST, check_after_turns=3, early_checks=False)
    res = await replay_trajectory(trajectory(8, onset=4), config, client)
    assert res.crash is None and res.turns == 8
    assert res.first_flag_index == 6 and res.first_flag_turn == 3
    assert res.flag_source == "llm"
    assert res.calls and res.calls[0].message_index == 6 and res.calls[0].tokens == 120
    assert res.cost_usd == pytest.approx(0.0001 * len(res.calls))
    s = score(res)
    assert s is not None and s.outcome is Outcome.TP and s.delay == 1


async def test_replay_records_a_crash_instead_of_raising() -> None:
    class Broken:
        async def complete(self, model: str, messages: Any, *, schema: Any) -> Any:
            raise RuntimeError("bug in a client")

    config = TrackerConfig(fast_model=FAST, check_after_turns=2)
    res = await replay_trajectory(trajectory(4), config, Broken())
    assert res.crash is not None and "RuntimeError: bug in a client" in res.crash


async def test_replay_all_keeps_order_and_reports_progress() -> None:
    trajs = [trajectory(3, tid=f"t{i}") for i in range(5)]
    done: list[str] = []
    results = await replay_all(
        trajs, TrackerConfig(), concurrency=2, on_done=lambda r: done.append(r.id)
    )
    assert [r.id for r in results] == [t.id for t in trajs]
    assert sorted(done) == sorted(t.id for t in trajs)


# -- oracle ----------------------------------------------------------------------------------


def prompt_up_to(history: list[dict[str, Any]], end: int) -> list[dict[str, str]]:
    """The real prompt the tracker would send after seeing ``history[:end]``."""
    msgs = normalize_history(history[:end])
    return build_prompt(judge_window(msgs, 20), msgs[1], message_chars=2000, task_chars=2000)


async def test_oracle_is_low_before_onset_and_high_after() -> None:
    history = looping_history(12)
    labels = Labels(looping=True, onset_message_index=14, kind="similar_retry")
    oracle = OracleClient(labels, trajectory_id="x", settings=OracleSettings(noise=0.0))
    before = prompt_up_to(history, 12)  # ends with the tool result at 11
    after = prompt_up_to(history, 16)
    assert max_message_index(before) == 11 and max_message_index(after) == 15

    def confidence(reply: Any) -> float:
        return json.loads(reply.content)["unproductive_state_confidence"]

    low = await oracle.complete(ORACLE_FAST_MODEL, before, schema={})
    high = await oracle.complete(ORACLE_FAST_MODEL, after, schema={})
    assert confidence(low) == pytest.approx(0.1) and confidence(high) == pytest.approx(0.95)
    assert low.prompt_tokens == sum(len(m["content"]) for m in before) // 4
    assert low.completion_tokens == 60 and low.cost_usd and low.cost_usd > 0

    productive = OracleClient(Labels(looping=False, kind="none"), trajectory_id="y")
    reply = await productive.complete(ORACLE_FAST_MODEL, after, schema={})
    assert confidence(reply) < 0.5


async def test_oracle_noise_is_seeded_and_errors_are_timeouts() -> None:
    prompt = prompt_up_to(looping_history(4), 6)
    labels = Labels(looping=False, kind="none")
    a = OracleClient(labels, trajectory_id="same", settings=OracleSettings(noise=0.2))
    b = OracleClient(labels, trajectory_id="same", settings=OracleSettings(noise=0.2))
    replies_a = [(await a.complete("m", prompt, schema={})).content for _ in range(5)]
    replies_b = [(await b.complete("m", prompt, schema={})).content for _ in range(5)]
    assert replies_a == replies_b and len(set(replies_a)) > 1
    failing = OracleClient(labels, trajectory_id="f", settings=OracleSettings(error_rate=1.0))
    with pytest.raises(JudgeTimeout):
        await failing.complete("m", prompt, schema={})


# -- cassette --------------------------------------------------------------------------------


def oracle_config() -> TrackerConfig:
    return TrackerConfig(
        fast_model=ORACLE_FAST_MODEL, check_after_turns=2, min_interval=1, max_interval=3
    )


def verdict_fingerprint(verdicts: list[Any]) -> list[dict[str, Any]]:
    """Verdicts without the latencies, which differ between any two runs."""
    out = []
    for _, v in verdicts:
        data = v.model_dump(mode="json")
        for call in data["judge_calls"]:
            call.pop("latency_s")
        out.append(data)
    return out


async def test_cassette_replays_identical_verdicts(tmp_path: Path) -> None:
    trajs = [trajectory(10, onset=8, tid="loop"), trajectory(10, tid="fine")]
    settings = OracleSettings(noise=0.1, error_rate=0.2, seed=3)
    recorder = CassetteRecorder(tmp_path / "c.jsonl", {"runs": []})
    recorded = {}
    for traj in trajs:
        client = recorder.client(
            OracleClient(traj.labels, trajectory_id=traj.id, settings=settings), f"run/{traj.id}"
        )
        recorded[traj.id] = await replay(traj.messages, LoopTracker(oracle_config(), client=client))
    path = recorder.save()
    assert recorder.calls > 0

    cassette = Cassette.load(path)
    for traj in trajs:
        player = cassette.client(f"run/{traj.id}")
        replayed = await replay(traj.messages, LoopTracker(oracle_config(), client=player))
        assert verdict_fingerprint(replayed) == verdict_fingerprint(recorded[traj.id])
    assert any(v.errors for _, v in recorded["loop"] + recorded["fine"])  # errors replayed too


async def test_cassette_miss_is_an_error_on_the_verdict(tmp_path: Path) -> None:
    path = CassetteRecorder(tmp_path / "empty.jsonl", {"runs": []}).save()
    player = Cassette.load(path).client("run/none")
    res = await replay_trajectory(trajectory(4), oracle_config(), player)
    assert res.crash is None and res.judge_errors > 0
    assert res.calls[0].error is not None and CassetteMiss.__name__ in res.calls[0].error


def test_cassette_load_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "a cassette"}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl"):
        Cassette.load(bad)
    with pytest.raises(ConfigError, match=r"missing\.jsonl"):
        Cassette.load(tmp_path / "missing.jsonl")


# -- sweep -----------------------------------------------------------------------------------


def test_sweep_rejects_unknown_fields_and_bad_values() -> None:
    with pytest.raises(ConfigError, match=r"not a TrackerConfig field.*check_after_turns"):
        parse_axis("no_such_threshold=1,2")
    with pytest.raises(ConfigError, match="FIELD=v1"):
        parse_axis("check_after_turns")
    axis = parse_axis("min_interval=abc")
    with pytest.raises(ConfigError, match="min_interval=abc"):
        build_configs({}, settings_grid([axis]))


def test_sweep_grid_is_the_cartesian_product() -> None:
    axes = [parse_axis("check_after_turns=10,30"), parse_axis("early_checks=true,false")]
    grid = settings_grid(axes)
    assert len(grid) == 4 and grid[0] == {"check_after_turns": "10", "early_checks": "true"}
    configs = build_configs({"fast_model": None}, grid)
    assert [c.check_after_turns for _, c in configs] == [10, 10, 30, 30]
    assert [c.early_checks for _, c in configs] == [True, False, True, False]


def test_replay_runs_under_anyio_run() -> None:
    res = anyio.run(replay_trajectory, trajectory(3), TrackerConfig())
    assert res.turns == 3 and res.first_flag_index is None
