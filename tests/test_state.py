"""Detector and tracker state survive a JSON round trip exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judge import TrackerConfig
from judge._codec import StateError, decode, encode
from judge.dataset import load_dataset
from judge.detectors.suite import DetectorSuite
from judge.history import normalize_history
from tests.test_detectors import Agent

SMOKE = Path(__file__).resolve().parent.parent / "evals" / "data"


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
        blob = json.dumps(restored.state())
        restored = DetectorSuite(config)
        restored.load_state(json.loads(blob))
        assert restored.assess() == live.assess()
        mine, theirs = restored.state(), live.state()
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
            again.load_state(json.loads(json.dumps(restored.state())))
            restored = again
        assert restored.assess() == live.assess()


def test_state_of_another_configuration_is_refused() -> None:
    saved = DetectorSuite(TrackerConfig(semantic="off")).state()
    del saved["detectors"]["cycle"]
    with pytest.raises(StateError, match="cycle"):
        DetectorSuite(TrackerConfig(semantic="off")).load_state(saved)
