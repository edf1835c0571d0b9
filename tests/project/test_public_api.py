"""The seams users build on are public, documented and inside the error tree."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import judge
from judge import LoopJudgeError, LoopTracker, StateError, TrackerConfig
from judge.testing import ScriptedJudge


def test_every_public_error_is_a_loop_judge_error() -> None:
    errors = [
        obj
        for name in judge.__all__
        if inspect.isclass(obj := getattr(judge, name)) and issubclass(obj, Exception)
    ]
    assert judge.StateError in errors and judge.LoopDetected in errors
    assert all(issubclass(e, LoopJudgeError) for e in errors)


def test_the_surface_stays_small() -> None:
    """What an agent builder needs, not every class: the rest is public in its module."""
    assert len(judge.__all__) <= 20
    assert set(judge.__all__) <= set(dir(judge))
    assert "JudgeTimeout" not in dir(judge)  # moved: public in judge.errors


def test_a_name_that_moved_still_resolves_with_a_warning() -> None:
    from judge.errors import JudgeTimeout

    with pytest.warns(DeprecationWarning, match=r"from judge\.errors import JudgeTimeout"):
        assert judge.JudgeTimeout is JudgeTimeout


def test_every_error_is_in_the_drawn_tree() -> None:
    """The tree in judge.errors names every LoopJudgeError subclass the runtime defines.

    Read from the source (class name -> base names), so no optional framework is imported.
    """
    import ast
    from pathlib import Path

    import judge.errors

    bases: dict[str, set[str]] = {}
    for path in Path(judge.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = {b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases}
                bases.setdefault(node.name, set()).update(n.rpartition(".")[2] for n in names)
    errors = {"LoopJudgeError"}
    while grown := {c for c, b in bases.items() if b & errors and c not in errors}:
        errors |= grown
    tree = judge.errors.__doc__ or ""
    missing = sorted(e for e in errors if f"+-- {e} " not in tree and e != "LoopJudgeError")
    assert not missing, f"add to the tree in judge/errors.py: {missing}"


def test_public_names_say_judge_not_a_private_module() -> None:
    for name in judge.__all__:
        assert getattr(judge, name).__module__ == "judge", name


def test_a_test_double_needs_no_private_import() -> None:
    """A client written against the public protocol drives the judge path."""

    class Always:
        def __init__(self) -> None:
            self.calls = 0

        async def complete(
            self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
        ) -> judge.ModelReply:
            self.calls += 1
            return judge.ModelReply(
                content='{"unproductive_state_analysis": "fine", '
                '"unproductive_state_confidence": 0.1}',
                finish_reason="stop",
                prompt_tokens=10,
                completion_tokens=5,
                cost_usd=None,
                attempts=1,
            )

    client = Always()
    assert isinstance(client, judge.LLMClient)
    tracker = LoopTracker(
        TrackerConfig(
            semantic="off", fast_model="mine/fast", check_after_turns=1, initial_interval=1
        ),
        client=client,
    )
    import anyio

    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    verdict = anyio.run(tracker.turn_started, history)
    assert client.calls == 1 and not verdict and verdict.judge_calls


def test_a_detector_without_a_state_contract_fails_saving_with_a_public_error() -> None:
    class Stateless:
        name = "stateless"

        def observe(self, event: Any) -> None:
            return None

        def reset(self) -> None:
            return None

    tracker = LoopTracker(TrackerConfig(semantic="off"), detectors=[Stateless()])
    with pytest.raises(StateError, match="stateless"):
        _ = tracker.state


def test_an_unreadable_state_is_a_public_state_error() -> None:
    saved = LoopTracker(TrackerConfig(semantic="off")).state.model_dump()
    saved["version"] = 999
    with pytest.raises(LoopJudgeError, match="version"):
        LoopTracker.from_state(TrackerConfig(semantic="off"), saved)


def test_the_scripted_judge_is_a_client() -> None:
    assert isinstance(ScriptedJudge(lambda request: 0.1), judge.LLMClient)


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_agent_history_drives_the_live_loop(fmt: str) -> None:
    """The testing builder: a loop flagged, its recovery message appended, the agent obeys."""
    import anyio

    from judge.testing import AgentHistory

    async def run() -> AgentHistory:
        history = AgentHistory(LoopTracker(TrackerConfig(semantic="off")), fmt=fmt)
        for _ in range(4):
            history.call("testTool", {"customer": "42"}, "order 7: shipped")
            await history.turn()
        history.say("Order 7 has shipped.")
        await history.turn()
        return history

    history = anyio.run(run)
    flagged = [v for v in history.verdicts if v]
    assert len(flagged) == 1 and not history.verdicts[-1]
    assert history.messages[-2]["content"] == flagged[0].recovery_message


def test_agent_history_rejects_an_unknown_format() -> None:
    from judge.testing import AgentHistory

    with pytest.raises(ValueError, match="fmt"):
        AgentHistory(None, fmt="gemini")


def test_a_verdict_source_has_typed_parts_and_a_checked_shape() -> None:
    from judge import Verdict
    from judge.verdict import Origin

    heuristic = Verdict(looping=True, source="heuristic:exact_repeat")
    assert (heuristic.origin, heuristic.detector) == (Origin.HEURISTIC, "exact_repeat")
    judged = Verdict(looping=True, source="llm")
    assert (judged.origin, judged.detector) == (Origin.LLM, None)
    assert Verdict().origin is None
    for bad in ("heuristic", "heuristic:", "regex:foo", "LLM"):
        with pytest.raises(ValueError, match="source must be"):
            Verdict(source=bad)


def test_a_failed_judge_call_is_typed_on_the_verdict() -> None:
    """A program tells a rate limit from a bad answer without parsing ``errors``."""
    import anyio

    from judge.errors import JudgeRateLimited
    from judge.verdict import JudgeFailureKind

    class Limited:
        async def complete(
            self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
        ) -> judge.ModelReply:
            raise JudgeRateLimited("slow down", model=model, retry_after=7.0)

    tracker = LoopTracker(
        TrackerConfig(
            semantic="off", fast_model="mine/fast", check_after_turns=1, initial_interval=1
        ),
        client=Limited(),
    )
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    verdict = anyio.run(tracker.turn_started, history)
    [failure] = verdict.judge_failures
    assert (failure.kind, failure.status, failure.retry_after) == (
        JudgeFailureKind.RATE_LIMITED,
        429,
        7.0,
    )
    assert verdict.errors and "slow down" in verdict.judge_calls[0].error
