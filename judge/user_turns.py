"""Which user-role messages are a person's new prompt.

The turn count (and with it the judge's schedule, which starts at turn 30) restarts at each
new prompt. Many agents put other things in the user role, and counting those as prompts
resets the count on every step, so the judge is never asked. The rule, in order:

1. Our own recovery message (it opens with the ``loop-judge`` fence): not a prompt.
2. An observation: a user message named ``observation`` (text beside Anthropic tool
   results, ATIF observations without a call id), or text that opens the way tool output
   does in text-only agents: ReAct's ``Observation:`` / ``Observation 3:``, SWE-agent's
   ``OBSERVATION:``, mini-swe-agent's ``<returncode>``. Not a prompt.
3. A message that repeats, word for word, a user message already seen in this session: a
   harness's corrective message ("Please provide exactly one action"), or the same
   observation again. Not a prompt (and a loop signal when it comes in a row, or after
   the same prose answer each time: see `judge.detectors.repeated_feedback`).
4. Anything else is a person's prompt.

Anthropic ``tool_result`` blocks never get here: `judge.history` turns them into ``tool``
messages.
"""

from __future__ import annotations

import re
from enum import Enum
from hashlib import blake2b

from judge.history import OBSERVATION_NAME, Message

# How every shipped recovery template opens (judge/response/recovery.py re-exports it): the
# tracker knows its own message by this when an agent appends it to the history as a user
# message. Defined here, where every turn reads it, so that reading a turn does not import
# the recovery texts, needed only on a loop verdict (a fresh process answers its first turn sooner).
RECOVERY_FENCE = "```loop-judge"

# How text-only agents mark tool output in a user message; only the opening is read, so
# the check is O(1) whatever the message's length.
_OBSERVATION_HEAD = re.compile(r"\s*(?:observation(?:\s*#?\d+)?\s*:|<returncode>)", re.IGNORECASE)
_HEAD_CHARS = 40


class UserMessageKind(str, Enum):
    """What a user-role message is, for the turn count."""

    PROMPT = "prompt"  # a person's new request: restarts the per-prompt turn count
    RECOVERY = "recovery"  # our recovery message, appended by the agent
    OBSERVATION = "observation"  # tool output carried in the user role
    REPEAT = "repeat"  # a user message seen before, word for word (a harness's nudge)


def digest(text: str) -> str:
    """A stable key for a user message (stable across processes, unlike ``hash()``)."""
    return blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()


def is_recovery(msg: Message) -> bool:
    return msg.content.lstrip().startswith(RECOVERY_FENCE)


def is_observation(msg: Message) -> bool:
    return msg.name == OBSERVATION_NAME or bool(_OBSERVATION_HEAD.match(msg.content[:_HEAD_CHARS]))


def classify_user(msg: Message, seen: set[str]) -> UserMessageKind:
    """Classify a user message; ``seen`` holds the digests of earlier user messages."""
    if is_recovery(msg):
        return UserMessageKind.RECOVERY
    if is_observation(msg):
        return UserMessageKind.OBSERVATION
    if digest(msg.content) in seen:
        return UserMessageKind.REPEAT
    return UserMessageKind.PROMPT
