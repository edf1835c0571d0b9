"""The litellm proxy guardrail's log lines carry no secret.

The guardrail logs each loop verdict's summary at WARNING; a looping call whose arguments
hold a password used to land in the proxy's log verbatim.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

from judge import TrackerConfig
from judge.integrations.litellm_proxy import LoopJudgeGuardrail
from judge.service.store import MemoryStore, StoreError
from tests.serving import prefixes, tool_turn

pytestmark = pytest.mark.anyio

PASSWORD = "Sup3rS3cretPassw0rd"
ARGUMENTS = {"cmd": f"PGPASSWORD={PASSWORD} psql -h db -c 'select 1'"}


def leaking_history(n_turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Check the database."},
    ]
    for i in range(n_turns):
        history += tool_turn(i, "bash", ARGUMENTS, "psql: connection refused")
    return history


def guardrail(store: Any) -> LoopJudgeGuardrail:
    return LoopJudgeGuardrail(
        guardrail_name="loop-judge",
        event_hook="pre_call",
        default_on=True,
        loop_judge_mode="observe",
        store=store,
    )


def body(messages: list[dict[str, Any]], session: str = "agent-42") -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "messages": copy.deepcopy(messages),
        "metadata": {"loop_judge_session_id": session},
    }


async def test_the_loop_line_names_the_loop_but_not_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    g = guardrail(MemoryStore(TrackerConfig(semantic="off")))
    with caplog.at_level(logging.WARNING, logger="judge.integrations.litellm_proxy"):
        for history in prefixes(leaking_history(6), 6):
            await g.async_pre_call_hook(None, None, body(history), "completion")
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("litellm_proxy")]
    assert lines and all("agent-42" in line for line in lines)
    assert all(PASSWORD not in line for line in lines), lines


async def test_a_tracker_without_redaction_still_logs_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The operator may send secrets to a judge they trust; a log line is not that judge."""
    g = guardrail(MemoryStore(TrackerConfig(semantic="off", redact_secrets=False)))
    with caplog.at_level(logging.WARNING, logger="judge.integrations.litellm_proxy"):
        for history in prefixes(leaking_history(6), 6):
            await g.async_pre_call_hook(None, None, body(history), "completion")
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("litellm_proxy")]
    assert lines and all(PASSWORD not in line for line in lines), lines


class _BrokenStore:
    """A store whose backend error quotes its connection URL, password included."""

    def session(self, session_id: str) -> Any:
        raise StoreError(f"cannot reach redis://default:{PASSWORD}@cache:6379/0")


async def test_a_store_failure_line_hides_the_url_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    g = guardrail(_BrokenStore())
    with caplog.at_level(logging.WARNING, logger="judge.integrations.litellm_proxy"):
        data = body(prefixes(leaking_history(1), 1)[0])
        assert await g.async_pre_call_hook(None, None, data, "completion") == data
    (line,) = [r.getMessage() for r in caplog.records if r.name.endswith("litellm_proxy")]
    assert "store failed" in line and PASSWORD not in line
