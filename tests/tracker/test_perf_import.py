"""What importing loop-judge costs, and what the first judge check waits for.

Functional checks only (which modules load, what is recorded where); the timings
themselves vary by machine and live in the benchmarks (docs/benchmarks.md).
"""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

import judge
from judge.llm.pair import TwoStageJudge
from judge.testing import ScriptedJudge
from tests.fakes import answer, fake_judge


def _modules_after(code: str) -> set[str]:
    """The top modules loaded by a fresh interpreter that runs ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return set(out.split())


def test_import_judge_loads_no_dependency() -> None:
    loaded = _modules_after("import judge")
    heavy = {"pydantic", "pydantic_settings", "jsonschema", "tenacity", "litellm", "anyio"}
    assert not heavy & loaded
    assert "judge.tracker" not in loaded


@pytest.mark.slow
def test_a_tracker_without_a_judge_model_loads_no_judge_machinery() -> None:
    loaded = _modules_after(
        "import anyio\nfrom judge import LoopTracker, TrackerConfig\n"
        "t = LoopTracker(TrackerConfig(semantic='off'))\n"
        "anyio.run(t.turn_started, [{'role': 'user', 'content': 'hi'}])"
    )
    assert not {"jsonschema", "tenacity", "litellm", "judge.llm.redaction"} & loaded


def test_every_public_name_resolves_lazily_and_is_listed() -> None:
    for name in judge.__all__:
        assert getattr(judge, name).__module__ == "judge"
    assert set(judge.__all__) <= set(dir(judge))
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = judge.no_such_name


def test_an_error_raised_inside_already_reads_as_public() -> None:
    """Loading a module publishes all of its names, not only the one asked for."""
    code = "import judge\n_ = judge.ConfigError\nprint(judge.errors.HistoryError.__module__)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "judge"


def _judge(client: ScriptedJudge, prepare_s: float, deadline_s: float) -> TwoStageJudge:
    async def prepare() -> None:
        await anyio.sleep(prepare_s)

    return TwoStageJudge(
        client,
        fast_model="fast",
        confirm_model=None,
        threshold=0.9,
        prepare=prepare,
        prepare_deadline_s=deadline_s,
    )


def test_client_preparation_is_timed_apart_from_the_judge_latency() -> None:
    client = fake_judge({"fast": [answer(0.1)]})
    pair = _judge(client, prepare_s=0.2, deadline_s=5.0)
    outcome = anyio.run(pair.check, [{"role": "user", "content": "x"}])
    assert outcome.prepare_s >= 0.2 and not outcome.not_ready
    assert outcome.deciding is not None and outcome.deciding.latency_s < 0.2
    # Ready for good: the second check does not wait again.
    again = anyio.run(pair.check, [{"role": "user", "content": "x"}])
    assert again.prepare_s == 0.0


def test_a_client_not_ready_by_the_deadline_asks_no_model() -> None:
    client = fake_judge({"fast": [answer(0.1)]})
    pair = _judge(client, prepare_s=30.0, deadline_s=0.05)
    outcome = anyio.run(pair.check, [{"role": "user", "content": "x"}])
    assert outcome.not_ready and outcome.deciding is None and not client.requests
    assert "still importing" in outcome.errors[0]
