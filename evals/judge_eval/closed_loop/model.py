"""The shared vocabulary of the closed-loop eval: policies, phases and fixed settings.

Every other module of the package (the scenarios, the agents, the harness, the figures and
the report) speaks in these terms, so they live apart from all of them: a `Policy` says how
a scripted agent reacts to recovery messages, a `Phase` is the ground truth of one turn,
and the constants fix how long agents work and how the scripted judge answers.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

# What counts as an escape: a plain-text plan, then five new calls with new
# results. The relapsing agent falls back into its loop right after those five.
RELAPSE_AFTER_CALLS = 5
# Turns of new work after the (final) escape: four times the ladder's recovery window
# (recovery_turns, 5), long enough for every detector's window to move past the loop, so
# any re-flag the tracker would make on a recovered agent shows.
ESCAPE_WORK_TURNS = 20
# Hard cap on agent turns from the onset: an agent the tracker never stops ends here. The
# slowest path to a stop (ignored warnings, judge from turn 30 of the prompt) fits.
MAX_TURNS_AFTER_ONSET = 60
# The scripted judge calls a window looping only when its last this-many assistant turns
# are all in a loop: a good judge needs to see the repetition, and calls a window with a
# plan or new work in its last turns productive.
JUDGE_LOOKBACK = 3
# What that judge answers; either side of the tracker's 0.9 threshold, as the oracle does.
LOOPING_CONFIDENCE = 0.95
PRODUCTIVE_CONFIDENCE = 0.1
DEFAULT_SEED = 0


class Policy(str, Enum):
    """What a scripted agent does with the recovery messages it receives."""

    ESCAPE_AT_ONCE = "escape_at_once"
    ESCAPE_AFTER_SECOND_WARNING = "escape_after_second_warning"
    IGNORE_WARNINGS = "ignore_warnings"
    ESCAPE_THEN_RELAPSE = "escape_then_relapse"
    ASK_USER = "ask_user"
    PRODUCTIVE = "productive"  # a productive agent: goes on with its script


LOOP_POLICIES: tuple[Policy, ...] = (
    Policy.ESCAPE_AT_ONCE,
    Policy.ESCAPE_AFTER_SECOND_WARNING,
    Policy.IGNORE_WARNINGS,
    Policy.ESCAPE_THEN_RELAPSE,
    Policy.ASK_USER,
)


class Phase(str, Enum):
    """What the agent was doing in one turn: the ground truth every figure is scored on."""

    PREFIX = "prefix"  # recorded work before the labelled onset
    LOOP = "loop"  # the recorded loop
    ESCAPED = "escaped"  # the plan and the new, distinct work after a recovery message
    ASKED = "asked"  # the question to the user after a recovery message
    RELAPSE = "relapse"  # back in the same loop after an escape
    PRODUCTIVE = "productive"  # a productive script


LOOPING_PHASES = frozenset({Phase.LOOP, Phase.RELAPSE})
RECOVERED_PHASES = frozenset({Phase.ESCAPED, Phase.ASKED})

Message = dict[str, Any]
Turn = list[Message]
