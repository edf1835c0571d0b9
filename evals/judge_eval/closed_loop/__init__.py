"""Closed-loop eval: scripted agents react to the tracker's verdicts, turn by turn.

The replay eval (judge_eval.replay) scores the first flag on a fixed log; it cannot
tell what happens *after* the flag, because a recorded agent never read our recovery
message. Yet that is where a loop detector does its harm or its good: an agent that obeys
the message and does new, distinct work must not be warned again and stopped, and an agent
that goes on looping must be stopped. Here each agent is a script that calls
``tracker.turn_started(history)`` at the start of every turn as the README shows, appends
the recovery message when told, and reacts to it by a fixed policy:

* ``escape_at_once``: on the first recovery message, writes a plain-text plan, then makes
  new, distinct calls (names and arguments never used in the loop, each with a new result);
* ``escape_after_second_warning``: goes on looping after the first message, escapes on the
  second;
* ``ignore_warnings``: never escapes; the ladder must stop it;
* ``escape_then_relapse``: escapes with a plan and five new calls, falls back into the same
  loop, and escapes again when that relapse is flagged;
* ``ask_user``: answers the message with a plain-text question to the user; the simulated
  user gives a new instruction, and the agent works on that.

An escaped agent goes on with new, distinct work for `ESCAPE_WORK_TURNS` turns, so that a
flag after the escape (a "re-flag") shows. The loops are seeded from the labelled looping
runs of the data set: the messages before the labelled onset are replayed turn by turn as
recorded, then the recorded turns from the onset on are replayed in a cycle for as long as
the agent loops. Productive agents (polling, edit and re-test, paging, user follow-ups) are
scripted by hand and must never be stopped.

The judge path runs too: every tracker gets a `ScriptedJudge` that knows the agent's ground
truth and answers like a good judge (0.95 when the last `JUDGE_LOOKBACK` assistant turns it
is shown are all looping, else 0.1). Everything is deterministic: no network, no clock, and
the only randomness (the words of the new work) comes from a seeded generator per scenario.

The package splits that by job: `model` (policies, phases, fixed settings), `scenarios`
(loops seeded from labelled runs), `productive` (the hand-scripted productive agents),
`work` (the words of an escaped agent's new work), `agents` (the scripted agent),
`harness` (driving trackers turn by turn), `metrics` (per-run results and per-policy
figures) and `report` (tables and the JSON and markdown files). Every name is re-exported
here, so importers use ``judge_eval.closed_loop`` alone.
"""

from __future__ import annotations

from judge_eval.closed_loop.agents import ScriptedAgent
from judge_eval.closed_loop.harness import (
    DetectorFactory as DetectorFactory,
)
from judge_eval.closed_loop.harness import (
    closed_loop_config,
    memo_detectors,
    run_closed_loop,
    run_scenario,
)
from judge_eval.closed_loop.metrics import (
    ClosedLoopReport,
    FlagRecord,
    PolicyMetrics,
    RunResult,
)
from judge_eval.closed_loop.model import (
    DEFAULT_SEED as DEFAULT_SEED,
)
from judge_eval.closed_loop.model import (
    ESCAPE_WORK_TURNS,
    JUDGE_LOOKBACK,
    LOOP_POLICIES,
    MAX_TURNS_AFTER_ONSET,
    RELAPSE_AFTER_CALLS,
    Phase,
    Policy,
)
from judge_eval.closed_loop.model import (
    LOOPING_CONFIDENCE as LOOPING_CONFIDENCE,
)
from judge_eval.closed_loop.model import (
    LOOPING_PHASES as LOOPING_PHASES,
)
from judge_eval.closed_loop.model import (
    PRODUCTIVE_CONFIDENCE as PRODUCTIVE_CONFIDENCE,
)
from judge_eval.closed_loop.model import (
    RECOVERED_PHASES as RECOVERED_PHASES,
)
from judge_eval.closed_loop.model import Message as Message
from judge_eval.closed_loop.model import Turn as Turn
from judge_eval.closed_loop.productive import productive_scenarios
from judge_eval.closed_loop.report import EXPLANATION as EXPLANATION
from judge_eval.closed_loop.report import (
    JSON_FILE,
    MARKDOWN_FILE,
    closed_loop_tables,
    write_closed_loop,
)
from judge_eval.closed_loop.report import policy_table as policy_table
from judge_eval.closed_loop.report import productive_table as productive_table
from judge_eval.closed_loop.report import reflag_table as reflag_table
from judge_eval.closed_loop.scenarios import (
    LoopSeed,
    Scenario,
    loop_scenarios,
    seed_from_trajectory,
    seeds_from_trajectories,
    split_turns,
)
from judge_eval.closed_loop.work import FreshWork

__all__ = [
    "ESCAPE_WORK_TURNS",
    "JSON_FILE",
    "JUDGE_LOOKBACK",
    "LOOP_POLICIES",
    "MARKDOWN_FILE",
    "MAX_TURNS_AFTER_ONSET",
    "RELAPSE_AFTER_CALLS",
    "ClosedLoopReport",
    "FlagRecord",
    "FreshWork",
    "LoopSeed",
    "Phase",
    "Policy",
    "PolicyMetrics",
    "RunResult",
    "Scenario",
    "ScriptedAgent",
    "closed_loop_config",
    "closed_loop_tables",
    "loop_scenarios",
    "memo_detectors",
    "productive_scenarios",
    "run_closed_loop",
    "run_scenario",
    "seed_from_trajectory",
    "seeds_from_trajectories",
    "split_turns",
    "write_closed_loop",
]
