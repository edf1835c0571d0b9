"""Where the turns of a recorded conversation begin, and feeding it to a tracker as it grew.

A recorded run is a finished history; the tracker must instead see it grow. A turn starts
when the agent is about to ask its model again: after an assistant message, the tool
results that answer it and any user or harness message that follows. ``loop-judge demo``
replays with this, and so do the eval harness and the tests, so a turn means the same
everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from judge.tracker import LoopTracker
from judge.verdict import Verdict

__all__ = ["assistant_turn_ends", "assistant_turns", "replay"]

# Roles that arrive between two assistant messages: tool results, and what the user or the
# harness says next ("Please provide a tool call"). The agent calls turn_started with all
# of them before it asks its model again, so a turn's history ends just before the next
# assistant message.
_RESULT_ROLES = ("tool", "function", "user")


def assistant_turns(messages: Sequence[dict[str, Any]]) -> list[tuple[int, int]]:
    """``(assistant index, history length)`` for each turn of a recorded conversation.

    The assistant index is what a flag on that turn points at, because it is the newest
    thing the agent did.
    """
    turns = []
    for i, msg in enumerate(messages):
        if msg.get("role") != "assistant":
            continue
        end = i + 1
        while end < len(messages) and messages[end].get("role") in _RESULT_ROLES:
            end += 1
        turns.append((i, end))
    return turns


def assistant_turn_ends(messages: Sequence[dict[str, Any]]) -> list[int]:
    """History lengths at the start of each turn after an assistant message."""
    return [end for _, end in assistant_turns(messages)]


async def replay(messages: list[dict[str, Any]], tracker: LoopTracker) -> list[tuple[int, Verdict]]:
    """Feed a recorded conversation turn by turn, as the agent would have."""
    out = []
    for end in assistant_turn_ends(messages):
        out.append((end, await tracker.turn_started(messages[:end])))
    return out
