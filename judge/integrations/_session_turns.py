"""What every framework integration does with a turn, whatever the framework.

Each integration converts its framework's messages to chat dicts and then needs the same
three things: the tracker of the conversation it is in (one per session, from a
`SessionStore`, so concurrent conversations of one agent never share a tracker), a verdict
that never crashes the agent for our own trouble, and the rule that says which verdict
actions are told to the model and which end the run. They live here, once.
"""

from __future__ import annotations

import logging
from typing import Any

from judge.config import TrackerConfig
from judge.errors import LoopJudgeError
from judge.llm._litellm import LLMClient
from judge.service.store import MemoryStore, SessionStore
from judge.verdict import Action, Verdict

# Verdict actions whose recovery message goes to the model, which keeps working: a warning,
# and the rung that tells it to stop calling tools and ask its user (which a framework run
# delivers as the model's final answer).
TELL_ACTIONS = frozenset({Action.WARN, Action.ASK_USER})
# Verdict actions that end the run.
STOP_ACTIONS = frozenset({Action.STOP})
# The session used when the framework names no conversation: one tracker for the agent.
DEFAULT_SESSION = "default"


def default_store(config: TrackerConfig | None, judge_client: LLMClient | None) -> SessionStore:
    """Trackers in this process, one per session (LRU with an idle TTL, the sidecar's own)."""
    return MemoryStore(config, judge_client=judge_client)


async def judge_turn(
    store: SessionStore, session: str, history: list[dict[str, Any]], logger: logging.Logger
) -> Verdict | None:
    """One ``turn_started`` of ``session``'s tracker, or None when loop-judge itself failed.

    A history we could not read (our converter's bug, not the agent's) or a store that is
    busy or down is logged and skipped: the agent goes on unjudged for this turn rather
    than crash because of its loop detector. Judge failures never get here (the tracker
    records them on the verdict); cancellation propagates.
    """
    try:
        async with store.session(session) as tracker:
            verdict = await tracker.turn_started(history)
    except LoopJudgeError as exc:
        logger.warning("loop-judge skipped a turn of session %s: %s", session, exc)
        return None
    return verdict


async def preflight(
    store: SessionStore, session: str, name: str, arguments: Any, logger: logging.Logger
) -> Verdict | None:
    """``check_call`` on ``session``'s tracker before a tool runs; None on our own trouble.

    Read-only: it counts no turn and takes no lock, so it costs one dict lookup and the
    detectors' preview.
    """
    try:
        async with store.session(session, readonly=True) as tracker:
            return tracker.check_call(name, arguments)
    except LoopJudgeError as exc:
        logger.warning("loop-judge skipped a preflight check in session %s: %s", session, exc)
        return None
