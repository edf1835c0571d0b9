"""Detector and tracker state survive a JSON round trip exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judge import LoopTracker, TrackerConfig
from judge._codec import StateError, decode, encode
from judge.detectors.suite import DetectorSuite
from judge.history import normalize_history
from judge_eval.dataset import load_dataset
from tests.fakes import Agent

SMOKE = Path(__file__).resolve().parents[2] / "evals" / "data"


def _agent() -> Agent:
    agent = Agent()
    for i in range(4):
        agent.call("write_file", {"path": "a"}, "File written.")
        agent.call("search", {"q": f"fo{i}"}, "No results found")
        agent.say("I will try the search once more with a slightly different spelling now.")
    agent.parallel([("read", {"p": "x"}, "data"), ("read", {"p": "y"}, "Error: nope")])
    return agent


def test_codec_keeps_tuples_deques_and_records() -> None:
    from collections import deque

    value = {"a": (1, ("x", 2.5)), "d": deque([1, 2], maxlen=3), "p": {1: "one"}}
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and back["d"].maxlen == 3 and isinstance(back["a"], tuple)
    with pytest.raises(StateError):
        decode({"$nope": 1})


def test_suite_state_round_trips_at_every_message() -> None:
    config = TrackerConfig(semantic="off")
    messages = normalize_history(_agent().history)
    live, restored = DetectorSuite(config), DetectorSuite(config)
    for msg in messages:
        live.feed(msg)
        restored.feed(msg)
        blob = json.dumps(restored.snapshot())
        restored = DetectorSuite(config)
        restored.restore(json.loads(blob))
        assert restored.findings() == live.findings()
        mine, theirs = restored.snapshot(), live.snapshot()
        mine.pop("last_step_at"), theirs.pop("last_step_at")  # wall-clock stamps differ
        assert mine == theirs


def test_suite_state_round_trips_on_recorded_runs() -> None:
    trajectories, _ = load_dataset([SMOKE / "recorded" / "react_webshop"])
    config = TrackerConfig(semantic="off")
    for traj in trajectories[:6]:
        live, restored = DetectorSuite(config), DetectorSuite(config)
        for msg in normalize_history(traj.messages):
            live.feed(msg)
            restored.feed(msg)
            again = DetectorSuite(config)
            again.restore(json.loads(json.dumps(restored.snapshot())))
            restored = again
        assert restored.findings() == live.findings()


def test_state_of_another_configuration_is_refused() -> None:
    saved = DetectorSuite(TrackerConfig(semantic="off")).snapshot()
    del saved["detectors"]["cycle"]
    with pytest.raises(StateError, match="cycle"):
        DetectorSuite(TrackerConfig(semantic="off")).restore(saved)


def _replay_with_restarts(messages: list[dict], config: TrackerConfig) -> tuple[list, list]:
    import anyio

    from judge import LoopTracker
    from judge.turns import assistant_turn_ends

    async def run() -> tuple[list, list]:
        live = LoopTracker(config)
        restarted = LoopTracker(config)
        a, b = [], []
        for end in assistant_turn_ends(messages):
            a.append(await live.turn_started(messages[:end]))
            b.append(await restarted.turn_started(messages[:end]))
            blob = restarted.state.model_dump_json()
            restarted = LoopTracker.from_state(config, blob)  # a new process, as it were
        return a, b

    return anyio.run(run)


@pytest.mark.slow
def test_tracker_state_round_trips_exactly_on_recorded_runs() -> None:
    from judge import LoopTracker

    config = TrackerConfig(semantic="off")
    trajectories, _ = load_dataset([SMOKE / "recorded" / "react_fever", SMOKE / "handmade"])
    for traj in trajectories[:25]:
        live, restarted = _replay_with_restarts(traj.messages, config)
        assert [v.model_dump() for v in live] == [v.model_dump() for v in restarted], traj.id
    tracker = LoopTracker(config)
    again = LoopTracker.from_state(config, tracker.state.model_dump())
    # the same state, except that a tracker restored from a redacted one reads redacted
    assert again.state.read_redacted and not tracker.state.read_redacted
    assert again.state.model_copy(update={"read_redacted": False}) == tracker.state


def test_tracker_state_with_semantic_vectors() -> None:
    pytest.importorskip("onnxruntime")
    from judge.detectors import embeddings

    if not embeddings.available():
        pytest.skip("the semantic extra is not installed")
    config = TrackerConfig(semantic="on")
    agent = Agent()
    for text in [
        "Please check the Mariano's website to find the price of their salads.",
        "Visit marianos.com and look up how much the ready-to-eat salads cost.",
        "Go to the Mariano's site and find the prices of ready made salads.",
        "Check Mariano's website once more for the cost of their salads please.",
    ]:
        agent.call("WebSurfer", {"request": text}, "I clicked a link.")
    live, restarted = _replay_with_restarts(agent.history, config)
    assert [bool(v) for v in live] == [bool(v) for v in restarted] == [False] * 3 + [True]


def test_unreadable_state_is_a_clear_error() -> None:
    from pydantic import ValidationError

    from judge import LoopTracker

    config = TrackerConfig(semantic="off")
    state = LoopTracker(config).state.model_dump()
    state["version"] = 99
    with pytest.raises(StateError, match="version"):
        LoopTracker.from_state(config, state)
    with pytest.raises(ValidationError):
        LoopTracker.from_state(config, {"nonsense": 1})


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
    from judge.service.session_codec import StateFormatError, dump_tracker, load_tracker
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
