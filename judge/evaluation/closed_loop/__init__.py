"""Closed-loop eval: scripted agents react to the tracker's verdicts, turn by turn.

The replay eval (judge.evaluation.replay) scores the first flag on a fixed log; it cannot
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
"""

from __future__ import annotations

import json
import random
import statistics
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

from judge.config import TrackerConfig
from judge.detectors.base import Detector
from judge.detectors.semantic_repeat import SemanticRepeatDetector
from judge.detectors.suite import default_detectors
from judge.evaluation.replay import origin_of
from judge.evaluation.report import TableData, markdown_table, public_config
from judge.testing import (
    SCRIPTED_CONFIRM_MODEL,
    SCRIPTED_FAST_MODEL,
    JudgeRequest,
    ScriptedJudge,
)
from judge.tracker import LoopTracker
from judge.trajectories.dataset import Trajectory
from judge.verdict import Action, Verdict

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

# The definition of an escape: a plain-text plan, then five new calls with new
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
# Productive scripts: variants per family (each a different tool, domain and rhythm).
_DISTINCT_TRIES = 200


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


# -- scenarios ------------------------------------------------------------------------------


def split_turns(messages: Sequence[Message]) -> tuple[list[Message], list[tuple[int, Turn]]]:
    """A conversation as ``(opening, turns)``: the messages before the first assistant
    message, then each assistant message with everything up to the next one (its tool
    results, and user messages such as a simulated customer's replies), with the index of
    the assistant message. That is what the agent adds to its history in one turn."""
    starts = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    opening = [dict(m) for m in messages[: starts[0]]] if starts else [dict(m) for m in messages]
    turns = []
    for pos, start in enumerate(starts):
        end = starts[pos + 1] if pos + 1 < len(starts) else len(messages)
        turns.append((start, [dict(m) for m in messages[start:end]]))
    return opening, turns


def _tool_names(turns: Iterable[Turn]) -> frozenset[str]:
    names = set()
    for turn in turns:
        for msg in turn:
            for call in msg.get("tool_calls") or ():
                name = (call.get("function") or {}).get("name")
                if isinstance(name, str):
                    names.add(name)
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class LoopSeed:
    """A labelled looping run cut at its onset: the recorded work before the loop, and the
    loop itself (the recorded turns from the onset on), which the agent replays in a cycle
    for as long as it loops."""

    id: str
    origin: str
    kind: str
    opening: list[Message]
    prefix: list[Turn]
    loop: list[Turn]
    tools: frozenset[str]


def seed_from_trajectory(traj: Trajectory) -> LoopSeed | None:
    """The seed of one labelled looping trajectory; None for a productive or unlabelled one
    or one whose loop has no assistant turn to replay."""
    labels = traj.labels
    if labels is None or not labels.looping or labels.onset_message_index is None:
        return None
    onset = labels.onset_message_index
    opening, turns = split_turns(traj.messages)
    prefix = [turn for start, turn in turns if start < onset]
    loop = [turn for start, turn in turns if start >= onset]
    if not loop:
        return None
    return LoopSeed(
        id=traj.id,
        origin=origin_of(traj),
        kind=labels.kind,
        opening=opening,
        prefix=prefix,
        loop=loop,
        tools=_tool_names(loop),
    )


def seeds_from_trajectories(trajectories: Iterable[Trajectory]) -> list[LoopSeed]:
    """Seeds of every labelled looping trajectory, in the given order."""
    return [s for s in map(seed_from_trajectory, trajectories) if s is not None]


@dataclass(frozen=True, slots=True)
class Scenario:
    """One scripted agent run: the opening messages, the scripted turns before any loop
    (a loop's prefix, or a productive agent's whole script), the loop (empty for a
    productive agent) and the policy that decides how the agent reacts to recovery."""

    id: str
    family: str
    origin: str
    kind: str
    policy: Policy
    opening: list[Message]
    script: list[Turn]
    loop: list[Turn] = field(default_factory=list)
    tools: frozenset[str] = frozenset()

    @property
    def looping(self) -> bool:
        return bool(self.loop)


def loop_scenarios(
    seeds: Iterable[LoopSeed], policies: Sequence[Policy] = LOOP_POLICIES
) -> list[Scenario]:
    """Every seed under every policy (seed-major order)."""
    return [
        Scenario(
            id=f"{seed.id}/{policy.value}",
            family=seed.id,
            origin=seed.origin,
            kind=seed.kind,
            policy=policy,
            opening=seed.opening,
            script=seed.prefix,
            loop=seed.loop,
            tools=seed.tools,
        )
        for seed in seeds
        for policy in policies
    ]


# -- words for new, distinct work -----------------------------------------------------------

# New work must differ in words, not only in numbers: the detectors mask numbers, ids and
# times, so "read part 7" after "read part 6" would rightly look like the same call.
_NOUNS = (
    "invoice", "ledger", "cache", "router", "session", "schema", "payload", "billing",
    "parser", "scheduler", "token", "widget", "catalog", "profile", "report", "archive",
    "gateway", "metrics", "inventory", "checkout", "locale", "thumbnail", "webhook",
    "migration", "quota", "sitemap", "backup", "tenant", "channel", "plugin", "cursor",
    "ticket", "shipment", "coupon", "avatar", "digest", "render", "ranking", "payroll",
    "forecast",
)  # fmt: skip
_VERBS = (
    "load", "merge", "verify", "encode", "split", "flush", "index", "sync", "resolve",
    "publish", "compact", "sample", "validate", "export", "refresh", "normalize", "schedule",
    "archive", "throttle", "prefetch",
)  # fmt: skip
_FINDINGS = (
    "uses a lazy default", "is only called from tests", "reads its limit from settings",
    "falls back to the previous value", "logs a warning on empty input",
    "keeps a module-level registry", "is wrapped in a retry decorator",
    "returns a generator, not a list", "was renamed two releases ago",
    "depends on the locale setting", "skips disabled records", "sorts by creation date",
    "holds a lock while writing", "converts times to UTC first", "batches writes by tenant",
)  # fmt: skip


class FreshWork:
    """Makes new, distinct tool calls with new, distinct results, for an escaped agent.

    Calls use tool names the loop never used, arguments never used before in this run, and
    results that differ in words; a plan and a question for the user are made here too.
    Deterministic for a given random generator.
    """

    TOOLS = ("read_file", "search_code", "list_directory", "run_command", "fetch_docs")

    def __init__(self, rng: random.Random, *, avoid: frozenset[str]) -> None:
        self._rng = rng
        self._tools = [t for t in self.TOOLS if t not in avoid] or ["inspect_resource"]
        self._used: set[str] = set()
        self._count = 0

    def _pick(self, words: Sequence[str], k: int) -> list[str]:
        return self._rng.sample(list(words), k)

    def call(self) -> tuple[str, dict[str, Any], str, str]:
        """``(tool, arguments, result, thought)`` of a call not made before in this run."""
        tool = self._tools[self._count % len(self._tools)]
        self._count += 1
        for _ in range(_DISTINCT_TRIES):
            a, b, c = self._pick(_NOUNS, 3)
            verb, verb2 = self._pick(_VERBS, 2)
            args, result, thought = self._render(tool, a, b, c, verb, verb2)
            key = f"{tool}:{sorted(args.items())}"
            if key not in self._used:
                self._used.add(key)
                return tool, args, result, thought
        raise RuntimeError("FreshWork ran out of distinct calls")  # pragma: no cover

    def _render(
        self, tool: str, a: str, b: str, c: str, verb: str, verb2: str
    ) -> tuple[dict[str, Any], str, str]:
        finding, finding2 = self._pick(_FINDINGS, 2)
        if tool == "read_file":
            args: dict[str, Any] = {"path": f"src/{a}/{b}_{verb}.py"}
            result = (
                f'"""{b.capitalize()} {verb} helpers for the {a} service."""\n'
                f"from {a}.{c} import {verb2}_{c}\n\n"
                f"def {verb}_{b}({c}, *, strict=False):\n"
                f"    # {finding}\n"
                f"    return {verb2}_{c}({c}, strict=strict)\n"
            )
            thought = f"Reading how the {a} service does its {b} {verb}."
        elif tool == "search_code":
            args = {"query": f"def {verb}_{a}"}
            result = (
                f"src/{b}/{a}.py: def {verb}_{a}(self, {c}):\n"
                f"src/{c}/{verb2}.py: from {b}.{a} import {verb}_{a}  # {finding}\n"
                f"tests/test_{a}.py: def test_{verb}_{a}_{c}():"
            )
            thought = f"Looking for every place that calls {verb}_{a}."
        elif tool == "list_directory":
            args = {"path": f"docs/{a}/{b}"}
            result = "\n".join(
                [f"{verb}-{c}.md", f"{b}-{verb2}.md", f"{a}-overview.md", f"{c}-{b}-notes.txt"]
            )
            thought = f"Listing the {a} {b} docs."
        elif tool == "run_command":
            args = {"command": f"python -m {a}.{verb} --{b} {c}"}
            result = (
                f"{a}.{verb}: {b} mode, {c} selected\n"
                f"{verb2} step finished; the {c} handler {finding}\n"
                f"summary: {a} {verb} ok, {b} {verb2} pending"
            )
            thought = f"Running the {a} {verb} module on {c} to see what it does."
        else:
            args = {"topic": f"{a} {verb} {b}"}
            result = (
                f"The {a} {verb} step {finding}. When {b} is enabled it {finding2}; "
                f"see also {c} {verb2}."
            )
            thought = f"Checking the docs on {a} {verb} for {b}."
        return args, result, thought

    def plan(self, tools: frozenset[str], number: int) -> str:
        a, b, c = self._pick(_NOUNS, 3)
        verb = self._pick(_VERBS, 1)[0]
        repeated = ", ".join(sorted(tools)) or "the same reply"
        again = " again" if number > 1 else ""
        return (
            f"You are right, I was going in circles{again} with {repeated}. I will stop "
            f"repeating that. New plan: first look at how {a} is structured, then read the "
            f"{b} code that does the {verb}, run the {c} check once, and report back with "
            "what I learn instead of retrying the same thing."
        )

    def question(self, tools: frozenset[str]) -> str:
        repeated = ", ".join(sorted(tools)) or "this"
        a, b = self._pick(_NOUNS, 2)
        return (
            f"I have tried {repeated} several times and keep getting the same outcome, so I "
            "have stopped. Should I keep working on this in a different way, or would you "
            f"rather I move on to the {a} {b} part first? What do you prefer?"
        )

    def instruction(self) -> str:
        a, b = self._pick(_NOUNS, 2)
        verb = self._pick(_VERBS, 1)[0]
        return (
            f"Leave that for now. Please look into how the {a} code does its {verb} for "
            f"{b}, and tell me what you find."
        )


# -- productive scripts ---------------------------------------------------------------------


class _Script:
    """Builds one productive conversation turn by turn, with unique tool call ids."""

    def __init__(self, family: str, name: str, system: str, task: str) -> None:
        self.family = family
        self.name = name
        self.opening: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": task},
        ]
        self.turns: list[Turn] = []
        self.tools: set[str] = set()

    def call(self, tool: str, arguments: dict[str, Any], result: str, thought: str = "") -> None:
        call_id = f"call_{self.name}_{len(self.turns)}"
        self.tools.add(tool)
        self.turns.append(
            [
                {
                    "role": "assistant",
                    "content": thought or None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": tool, "arguments": _json(arguments)},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call_id, "content": result},
            ]
        )

    def say(self, text: str, user_follow_up: str | None = None) -> None:
        turn: Turn = [{"role": "assistant", "content": text}]
        if user_follow_up is not None:
            turn.append({"role": "user", "content": user_follow_up})
        self.turns.append(turn)

    def scenario(self) -> Scenario:
        return Scenario(
            id=f"{self.family}/{self.name}",
            family=self.family,
            origin="scripted",
            kind="none",
            policy=Policy.PRODUCTIVE,
            opening=self.opening,
            script=self.turns,
            tools=frozenset(self.tools),
        )


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


_AGENT_SYSTEM = "You are a careful software agent. Use the tools to do the user's task."

_CI_STATES = (
    "queued: waiting for a free runner",
    "running: checking out the repository and restoring caches",
    "running: installing dependencies from the lockfile",
    "running: lint and type checks",
    "running: unit tests on the main shard",
    "running: integration tests against the staging database",
    "running: building release artifacts",
    "succeeded: all checks passed and the artifacts were uploaded",
)
_DEPLOY_STATES = (
    "pending: image pull scheduled on the new nodes",
    "progressing: new replica set created, old replicas still serving",
    "progressing: canary receiving traffic, error rate nominal",
    "progressing: rolling the remaining replicas",
    "available: rollout complete, old replica set scaled down",
)
_EXPORT_TABLES = ("customers", "orders", "order_items", "refunds", "audit_log")


def _polling() -> list[Scenario]:
    """Polls a status whose result changes every few polls, until it is done."""
    out = []
    # Four polls per state: past turn 30, so the judge's scheduled check runs too.
    ci = _Script("polling", "ci-status", _AGENT_SYSTEM, "Wait for CI on PR 482 and report.")
    for state in _CI_STATES:
        for _ in range(4):
            ci.call("get_ci_status", {"pr": 482}, state, "Checking CI again.")
    ci.say("CI on PR 482 passed: lint, unit and integration tests, artifacts uploaded.")
    out.append(ci.scenario())

    deploy = _Script(
        "polling", "rollout", _AGENT_SYSTEM, "Deploy revision r-7f3a of checkout and watch it."
    )
    deploy.call(
        "deploy_service",
        {"service": "checkout", "revision": "r-7f3a"},
        "deployment accepted: rollout started for checkout",
    )
    for state in _DEPLOY_STATES:
        for _ in range(3):
            deploy.call("get_deployment", {"service": "checkout"}, state, "Watching the rollout.")
    deploy.say("Revision r-7f3a of checkout is fully rolled out; the canary was clean.")
    out.append(deploy.scenario())

    export = _Script(
        "polling", "export-job", _AGENT_SYSTEM, "Export the shop database and tell me when done."
    )
    export.call("start_export", {"database": "shop"}, "export job exp-20931 started")
    percent = 0
    for table in _EXPORT_TABLES:
        for _ in range(3):
            percent += 6
            export.call(
                "check_export_job",
                {"job_id": "exp-20931"},
                f"running: {percent}% done, now exporting table {table}",
            )
    export.call("check_export_job", {"job_id": "exp-20931"}, "finished: dump written to s3")
    export.say("The export finished; the dump of all five tables is in the bucket.")
    out.append(export.scenario())
    return out


_TEST_NAMES = (
    "test_total_includes_tax", "test_refund_rounds_down", "test_coupon_expires",
    "test_empty_cart_total", "test_currency_conversion", "test_invoice_number_unique",
)  # fmt: skip


def _edit_test() -> list[Scenario]:
    """Edit, re-run the same test command, read changed output, edit again: each edit
    differs and the failures shrink until the suite passes."""
    out = []
    runners = (
        ("pytest", "run_tests", {"command": "pytest -q tests/test_cart.py"}, "src/cart.py"),
        ("npm", "bash", {"command": "npm test -- cart.spec.ts"}, "src/cart.ts"),
        ("cargo", "execute", {"cmd": "cargo test cart"}, "src/cart.rs"),
    )
    for name, tool, args, path in runners:
        script = _Script("edit_test", name, _AGENT_SYSTEM, f"Make the cart tests pass ({name}).")
        failing = list(_TEST_NAMES)
        script.call("read_file", {"path": path}, f"// {path}: cart totals, refunds and coupons")
        script.call(tool, args, _test_output(failing), "Running the cart tests first.")
        fix = 0
        while failing:
            fixed = failing.pop(0)
            fix += 1
            what = fixed.removeprefix("test_").replace("_", " ")
            script.call(
                "edit_file",
                {"path": path, "change": f"fix {what}", "line": 10 + 7 * fix},
                f"edited {path}: {what} handled",
                f"The failure says {what} is wrong; fixing that.",
            )
            script.call(tool, args, _test_output(failing), "Re-running the tests.")
        script.say("All cart tests pass now; each fix is a separate small edit.")
        out.append(script.scenario())
    return out


def _test_output(failing: Sequence[str]) -> str:
    if not failing:
        return f"{len(_TEST_NAMES)} passed"
    lines = [f"FAILED tests/test_cart.py::{name} - AssertionError" for name in failing]
    return "\n".join([*lines, f"{len(failing)} failed, {len(_TEST_NAMES) - len(failing)} passed"])


def _paging() -> list[Scenario]:
    """Next page, new content, until the last page."""
    out = []
    rng = random.Random("paging")
    families = (
        ("issues", "list_issues", "page", "Summarize the open issues of the tracker."),
        ("search", "search_web", "offset", "Collect every article about the cache rewrite."),
        ("logs", "read_log", "cursor", "Find when the payment errors started in the log."),
    )
    for name, tool, key, task in families:
        script = _Script("paging", name, _AGENT_SYSTEM, task)
        for page in range(8):
            items = rng.sample(list(_NOUNS), 3)
            verbs = rng.sample(list(_VERBS), 3)
            value: Any = page + 1 if key == "page" else page * 20
            if key == "cursor":
                value = f"after-{items[0]}-{verbs[0]}"
            rows = [
                f"- {verbs[i]} the {items[i]} ({_FINDINGS[(page + i) % len(_FINDINGS)]})"
                for i in range(3)
            ]
            last = page == 7
            rows.append("(last page)" if last else "(more results)")
            script.call(
                tool,
                {"source": name, key: value},
                "\n".join(rows),
                "Reading the next page." if page else "Starting at the first page.",
            )
        script.say(f"I read all eight pages of {name}; here is the summary of what they say.")
        out.append(script.scenario())
    return out


def _follow_ups() -> list[Scenario]:
    """A conversation: each user follow-up asks for something new, which the agent does
    with a few calls and answers."""
    out = []
    conversations: tuple[tuple[str, str, list[Any], list[Any]], ...] = (
        (
            "shop",
            "What did order 1042 contain?",
            [
                ("get_order", {"order_id": 1042}, "order 1042: two mugs and a teapot, paid"),
                ("get_shipment", {"order_id": 1042}, "shipped by parcel post, delivered Monday"),
            ],
            [
                (
                    "Can you refund the teapot?",
                    "refund_item",
                    {"order_id": 1042, "item": "teapot"},
                    "refund of the teapot issued to the card",
                ),
                (
                    "And change my address to Elm Street 4?",
                    "update_address",
                    {"street": "Elm Street 4"},
                    "address updated for future orders",
                ),
                (
                    "Which of my orders are still open?",
                    "list_orders",
                    {"status": "open"},
                    "orders 1077 and 1090 are open, both in packing",
                ),
                (
                    "Cancel 1090 please.",
                    "cancel_order",
                    {"order_id": 1090},
                    "order 1090 cancelled before it shipped",
                ),
            ],
        ),
        (
            "repo",
            "Where is the retry logic for uploads?",
            [
                ("search_code", {"query": "retry upload"}, "src/upload/retry.py: def backoff"),
                ("read_file", {"path": "src/upload/retry.py"}, "def backoff(n): exponential"),
            ],
            [
                (
                    "Add jitter to it.",
                    "edit_file",
                    {"path": "src/upload/retry.py", "change": "add jitter"},
                    "jitter added",
                ),
                ("Now run its tests.", "run_tests", {"path": "tests/test_retry.py"}, "7 passed"),
                (
                    "Update the changelog too.",
                    "edit_file",
                    {"path": "CHANGELOG.md", "change": "note jitter"},
                    "changelog entry added",
                ),
                (
                    "Open a pull request.",
                    "create_pull_request",
                    {"title": "Jitter in upload retries"},
                    "pull request 311 opened",
                ),
            ],
        ),
        (
            "travel",
            "Find me a flight from Lisbon to Oslo next Friday.",
            [
                (
                    "search_flights",
                    {"from": "LIS", "to": "OSL", "date": "friday"},
                    "TP 1234 at 09:10, SK 4421 at 14:35",
                ),
            ],
            [
                (
                    "Book the morning one.",
                    "book_flight",
                    {"flight": "TP 1234"},
                    "booked TP 1234, seat 14C",
                ),
                (
                    "Do I need a hotel near the airport?",
                    "search_hotels",
                    {"city": "Oslo", "near": "airport"},
                    "Park Inn Gardermoen, Radisson Blu Airport",
                ),
                (
                    "Book the Radisson for two nights.",
                    "book_hotel",
                    {"hotel": "Radisson Blu Airport", "nights": 2},
                    "hotel booked, free cancellation",
                ),
                (
                    "What is the weather there?",
                    "get_weather",
                    {"city": "Oslo"},
                    "light snow, minus three degrees",
                ),
            ],
        ),
    )
    for name, task, first_calls, follow_ups in conversations:
        script = _Script("follow_ups", name, _AGENT_SYSTEM, task)
        for tool, args, result in first_calls:
            script.call(tool, args, result, f"Using {tool} for that.")
        answers = [f"Here is what I found about: {task}"]
        for request, tool, args, result in follow_ups:
            script.say(answers[-1], user_follow_up=request)
            script.call(tool, args, result, f"On it: {request}")
            answers.append(f"Done: {result}.")
        script.say(answers[-1] + " Anything else?")
        out.append(script.scenario())
    return out


def productive_scenarios() -> list[Scenario]:
    """The hand-scripted productive agents: polling, edit and re-test, paging, follow-ups."""
    return [*_polling(), *_edit_test(), *_paging(), *_follow_ups()]


# -- the agent ------------------------------------------------------------------------------


class ScriptedAgent:
    """Plays one scenario: its scripted turns, then its loop, reacting to recovery
    messages by its policy. Knows its own ground truth (the phase of every turn)."""

    def __init__(self, scenario: Scenario, *, seed: int = DEFAULT_SEED) -> None:
        self.scenario = scenario
        self.work = FreshWork(random.Random(f"{seed}:{scenario.id}"), avoid=scenario.tools)
        self.phase_at: dict[int, Phase] = {}  # history index of an assistant message -> phase
        self.phases: list[Phase] = []  # phase of each turn made so far
        self.onset_turn: int | None = None  # 1-based turn that started the loop
        self.escape_turns: list[int] = []
        self.relapse_turn: int | None = None
        self.recoveries_in_loop = 0
        self._script_pos = 0
        self._loop_pos = 0
        self._queue: list[Phase] = []  # the turns decided by the last reaction
        self._asking = False
        self._escaped_for_good = False
        self._work_left = 0
        self._relapsed = False
        self._plans = 0

    @property
    def turns(self) -> int:
        return len(self.phases)

    @property
    def phase(self) -> Phase | None:
        """The phase of the newest turn (what a verdict right now is about)."""
        return self.phases[-1] if self.phases else None

    def judge_answer(self, request: JudgeRequest) -> float:
        """What a good judge says about the window it is shown: looping only when its last
        `JUDGE_LOOKBACK` assistant turns are all in a loop (ground truth by index)."""
        shown = [r["n"] for r in request.transcript if r.get("role") == "assistant"]
        recent = shown[-JUDGE_LOOKBACK:]
        looping = len(recent) == JUDGE_LOOKBACK and all(
            self.phase_at.get(n) in LOOPING_PHASES for n in recent
        )
        return LOOPING_CONFIDENCE if looping else PRODUCTIVE_CONFIDENCE

    def on_recovery(self) -> None:
        """React to a recovery message that was just appended to the history."""
        if self.phase not in LOOPING_PHASES or self._queue:
            # Not looping (a flag before the onset, or on a recovered agent): the agent
            # has nothing to escape from and goes on with what it was doing.
            return
        self.recoveries_in_loop += 1
        policy = self.scenario.policy
        if policy is Policy.IGNORE_WARNINGS:
            return
        if policy is Policy.ESCAPE_AFTER_SECOND_WARNING and self.recoveries_in_loop < 2:
            return
        if policy is Policy.ASK_USER:
            self._queue = [Phase.ASKED]
            self._escaped_for_good = True
            self._work_left = ESCAPE_WORK_TURNS
            return
        if policy is Policy.ESCAPE_THEN_RELAPSE and not self._relapsed:
            self._queue = [Phase.ESCAPED] * (1 + RELAPSE_AFTER_CALLS) + [Phase.RELAPSE]
            return
        self._queue = [Phase.ESCAPED]
        self._escaped_for_good = True
        self._work_left = ESCAPE_WORK_TURNS

    def next_turn(self, history_length: int) -> Turn | None:
        """The messages of the agent's next turn, or None when it is done."""
        phase = self._next_phase()
        if phase is None:
            return None
        if phase is Phase.PREFIX or phase is Phase.PRODUCTIVE:
            turn = self.scenario.script[self._script_pos]
            self._script_pos += 1
        elif phase in LOOPING_PHASES:
            if self.onset_turn is None:
                self.onset_turn = self.turns + 1
            if phase is Phase.RELAPSE and self.relapse_turn is None:
                self._relapsed = True
                self._loop_pos = 0
                self.relapse_turn = self.turns + 1
            turn = self.scenario.loop[self._loop_pos % len(self.scenario.loop)]
            self._loop_pos += 1
        elif phase is Phase.ASKED:
            self.escape_turns.append(self.turns + 1)
            turn = [
                {"role": "assistant", "content": self.work.question(self.scenario.tools)},
                {"role": "user", "content": self.work.instruction()},
            ]
        else:
            turn = self._escaped_turn()
        turn = self._fresh_ids(turn)
        self.phases.append(phase)
        self.phase_at[history_length] = phase
        return turn

    def _next_phase(self) -> Phase | None:
        if self._queue:
            return self._queue.pop(0)
        script_done = self._script_pos >= len(self.scenario.script)
        if not self.scenario.looping:
            return None if script_done else Phase.PRODUCTIVE
        if not script_done and self.onset_turn is None:
            return Phase.PREFIX
        if self.onset_turn is not None and self.turns - self.onset_turn + 1 >= (
            MAX_TURNS_AFTER_ONSET
        ):
            return None
        if self._escaped_for_good:
            if self._work_left <= 0:
                return None
            self._work_left -= 1
            return Phase.ESCAPED
        if self._relapsed:
            return Phase.RELAPSE
        return Phase.LOOP

    def _escaped_turn(self) -> Turn:
        last = self.phase
        if last not in RECOVERED_PHASES:
            # The first turn out of a loop is the plan, in plain text.
            self._plans += 1
            self.escape_turns.append(self.turns + 1)
            return [
                {"role": "assistant", "content": self.work.plan(self.scenario.tools, self._plans)}
            ]
        tool, args, result, thought = self.work.call()
        return [
            {
                "role": "assistant",
                "content": thought,
                "tool_calls": [
                    {
                        "id": "new",
                        "type": "function",
                        "function": {"name": tool, "arguments": _json(args)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "new", "content": result},
        ]

    def _fresh_ids(self, turn: Turn) -> Turn:
        """A copy of the turn whose tool call ids are unique in this run: a replayed loop
        repeats its recorded ids, which a history must not (results would be ambiguous)."""
        number = self.turns + 1
        ids: dict[str, str] = {}
        out: Turn = []
        for msg in turn:
            msg = dict(msg)
            calls = msg.get("tool_calls")
            if calls:
                renamed = []
                for k, call in enumerate(calls):
                    call = dict(call)
                    new = f"call_{number}_{k}"
                    if isinstance(call.get("id"), str):
                        ids[call["id"]] = new
                    call["id"] = new
                    renamed.append(call)
                msg["tool_calls"] = renamed
            elif msg.get("role") == "tool" and msg.get("tool_call_id") in ids:
                msg["tool_call_id"] = ids[msg["tool_call_id"]]
            out.append(msg)
        return out


# -- the harness ----------------------------------------------------------------------------


class _MemoEmbedder:
    """The shared sentence embedder, remembering each text's vector.

    Scripted agents replay the same recorded loop turns again and again, and 340 runs
    re-embed the same few hundred requests thousands of times (60 ms each for a long
    Magentic-One request), which alone would take the eval past its time budget. The model
    is deterministic and texts are embedded one by one as the detector does, so the
    vectors, and every verdict, are the same as without the memo.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._memo: dict[str, Any] = {}

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        for text in texts:
            if text not in self._memo:
                self._memo[text] = self._inner.embed([text])[0]
        return np.stack([self._memo[text] for text in texts])


DetectorFactory = Callable[[TrackerConfig], list[Detector]]


def memo_detectors() -> DetectorFactory:
    """A factory of the tracker's default detectors for one config, whose semantic detector
    (when the extra is installed and enabled) shares one `_MemoEmbedder`: the same
    detectors a tracker builds for itself, without re-embedding a replayed request."""
    memo: _MemoEmbedder | None = None

    def build(config: TrackerConfig) -> list[Detector]:
        nonlocal memo
        detectors = default_detectors(config)
        if not any(isinstance(d, SemanticRepeatDetector) for d in detectors):
            return detectors
        if memo is None:
            from judge.detectors.embeddings import shared_embedder

            memo = _MemoEmbedder(shared_embedder())
        return [
            SemanticRepeatDetector(memo) if isinstance(d, SemanticRepeatDetector) else d
            for d in detectors
        ]

    return build


def closed_loop_config(**overrides: Any) -> TrackerConfig:
    """The tracker settings of the closed-loop eval: the defaults (and any ``LOOP_JUDGE_*``
    variables, as in the replay eval) with the scripted judge's models, so every scenario
    runs the heuristics and the judge path."""
    models = {"fast_model": SCRIPTED_FAST_MODEL, "confirm_model": SCRIPTED_CONFIRM_MODEL}
    return TrackerConfig(**{**models, **overrides})


@dataclass(frozen=True, slots=True)
class FlagRecord:
    """One loop verdict and what the agent was really doing when it came."""

    turn: int  # the agent's newest turn when the verdict came (1-based)
    phase: Phase | None
    action: str
    source: str | None
    pattern: str | None
    kind: str | None
    summary: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "phase": self.phase.value if self.phase else None,
            "action": self.action,
            "source": self.source,
            "pattern": self.pattern,
            "kind": self.kind,
            "summary": self.summary,
        }


@dataclass(slots=True)
class RunResult:
    """What happened in one scenario, and the ground truth to score it."""

    id: str
    family: str
    origin: str
    kind: str
    policy: Policy
    looping: bool
    turns: int = 0
    onset_turn: int | None = None
    escape_turns: list[int] = field(default_factory=list)
    relapse_turn: int | None = None
    flags: list[FlagRecord] = field(default_factory=list)
    end: str = "finished"  # finished | stopped | cap | crashed
    stopped_phase: Phase | None = None
    judge_calls: int = 0
    judge_tokens: int = 0
    wall_s: float = 0.0
    crash: str | None = None

    def flags_in(self, phases: Iterable[Phase]) -> list[FlagRecord]:
        wanted = frozenset(phases)
        return [f for f in self.flags if f.phase in wanted]

    @property
    def stopped(self) -> bool:
        return self.end == "stopped"

    @property
    def loop_flagged(self) -> bool:
        return bool(self.flags_in([Phase.LOOP]))

    @property
    def first_loop_flag(self) -> int | None:
        flags = self.flags_in([Phase.LOOP])
        return flags[0].turn if flags else None

    @property
    def onset_to_flag(self) -> int | None:
        first = self.first_loop_flag
        return None if first is None or self.onset_turn is None else first - self.onset_turn

    @property
    def onset_to_escape(self) -> int | None:
        if not self.escape_turns or self.onset_turn is None:
            return None
        return self.escape_turns[0] - self.onset_turn

    @property
    def reflags(self) -> list[FlagRecord]:
        """Loop verdicts on an agent that had escaped and was doing new, distinct work."""
        return self.flags_in(RECOVERED_PHASES)

    @property
    def reflags_before_relapse(self) -> list[FlagRecord]:
        """Re-flags in the first escape only (a relapsing agent escapes a second time)."""
        relapse = self.relapse_turn
        return [f for f in self.reflags if relapse is None or f.turn < relapse]

    @property
    def stopped_after_recovery(self) -> bool:
        return self.stopped and self.stopped_phase in RECOVERED_PHASES

    @property
    def stopped_looping(self) -> bool:
        return self.stopped and self.stopped_phase in LOOPING_PHASES

    @property
    def ended_by_recovery(self) -> bool:
        """The agent escaped after a recovery message and was not stopped for it."""
        return bool(self.escape_turns) and not self.stopped_after_recovery

    @property
    def relapse_caught(self) -> bool:
        return bool(self.flags_in([Phase.RELAPSE]))

    @property
    def false_stop(self) -> bool:
        """A productive agent was stopped."""
        return self.stopped and self.stopped_phase is Phase.PRODUCTIVE

    @property
    def stopped_before_onset(self) -> bool:
        """Stopped during the recorded work before the labelled onset: reported, not a
        must-be-0 figure, since it rests on where a person put the onset (the replay eval
        calls its flags "FP<onset")."""
        return self.stopped and self.stopped_phase is Phase.PREFIX

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "family": self.family,
            "origin": self.origin,
            "kind": self.kind,
            "policy": self.policy.value,
            "looping": self.looping,
            "turns": self.turns,
            "onset_turn": self.onset_turn,
            "escape_turns": self.escape_turns,
            "relapse_turn": self.relapse_turn,
            "end": self.end,
            "stopped_phase": self.stopped_phase.value if self.stopped_phase else None,
            "onset_to_flag": self.onset_to_flag,
            "onset_to_escape": self.onset_to_escape,
            "reflags": len(self.reflags),
            "reflags_before_relapse": len(self.reflags_before_relapse),
            "judge_calls": self.judge_calls,
            "judge_tokens": self.judge_tokens,
            "wall_s": round(self.wall_s, 4),
            "crash": self.crash,
            "flags": [f.to_dict() for f in self.flags],
        }


def _flag(agent: ScriptedAgent, verdict: Verdict) -> FlagRecord:
    return FlagRecord(
        turn=agent.turns,
        phase=agent.phase,
        action=verdict.action.value,
        source=verdict.source,
        pattern=verdict.pattern,
        kind=verdict.kind.value if verdict.kind is not None else None,
        summary=verdict.summary,
    )


async def run_scenario(
    scenario: Scenario,
    config: TrackerConfig | None = None,
    *,
    seed: int = DEFAULT_SEED,
    detectors: DetectorFactory | None = None,
) -> RunResult:
    """Drive one scripted agent through a fresh tracker until it is stopped or done.

    Each turn: ``turn_started(history)``; on a loop verdict, ``stop`` ends the run, any
    other action appends the recovery message as a user message (as the README shows) and
    lets the policy react; then the agent adds its next turn. A crash (a tracker bug) is
    recorded on the result, not raised, so one scenario cannot hide all the others.
    ``detectors`` builds the tracker's detectors (default: the tracker's own).
    """
    config = config if config is not None else closed_loop_config()
    agent = ScriptedAgent(scenario, seed=seed)
    judge = ScriptedJudge(agent.judge_answer, analysis="closed-loop ground truth")
    result = RunResult(
        id=scenario.id,
        family=scenario.family,
        origin=scenario.origin,
        kind=scenario.kind,
        policy=scenario.policy,
        looping=scenario.looping,
    )
    started = time.perf_counter()
    history: list[Message] = [dict(m) for m in scenario.opening]
    try:
        tracker = LoopTracker(
            config, client=judge, detectors=detectors(config) if detectors else None
        )
        while True:
            verdict = await tracker.turn_started(history)
            if verdict:
                flag = _flag(agent, verdict)
                result.flags.append(flag)
                if verdict.action is Action.STOP:
                    result.end, result.stopped_phase = "stopped", flag.phase
                    break
                if verdict.recovery_message:
                    history.append({"role": "user", "content": verdict.recovery_message})
                agent.on_recovery()
            turn = agent.next_turn(len(history))
            if turn is None:
                capped = agent.onset_turn is not None and (
                    agent.turns - agent.onset_turn + 1 >= MAX_TURNS_AFTER_ONSET
                )
                result.end = "cap" if capped and agent.phase in LOOPING_PHASES else "finished"
                break
            history.extend(turn)
        result.judge_tokens = tracker.judge_tokens_used
    except Exception as exc:  # the harness boundary: a crash is a finding, not an abort
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" at {frame.filename}:{frame.lineno}" if frame else ""
        result.end, result.crash = "crashed", f"{type(exc).__name__}: {exc}{where}"
    result.turns = agent.turns
    result.onset_turn = agent.onset_turn
    result.escape_turns = list(agent.escape_turns)
    result.relapse_turn = agent.relapse_turn
    result.judge_calls = len(judge.calls)
    result.wall_s = time.perf_counter() - started
    return result


# -- metrics --------------------------------------------------------------------------------


def _median(values: Sequence[int]) -> float | None:
    return float(statistics.median(values)) if values else None


def _p90(values: Sequence[int]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = 0.9 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class PolicyMetrics:
    """The figures of one group of runs (a policy, the productive agents, or all)."""

    name: str
    runs: int
    loop_runs: int
    loops_flagged: int
    ended_by_recovery: int
    reflagged_runs: int
    reflags: int
    reflags_before_relapse: int
    stopped_after_recovery: int
    relapses: int
    relapses_caught: int
    stopped_looping: int
    capped: int
    flags_before_onset: int
    stopped_before_onset: int
    productive_runs: int
    productive_flagged: int
    false_stops: int
    onset_to_flag_median: float | None
    onset_to_flag_p90: float | None
    onset_to_escape_median: float | None
    onset_to_escape_p90: float | None
    judge_calls: int
    turns: int
    crashed: int

    @classmethod
    def of(cls, name: str, results: Sequence[RunResult]) -> PolicyMetrics:
        loops = [r for r in results if r.looping]
        productive = [r for r in results if not r.looping]
        to_flag = [d for r in loops if (d := r.onset_to_flag) is not None]
        to_escape = [d for r in loops if (d := r.onset_to_escape) is not None]
        return cls(
            name=name,
            runs=len(results),
            loop_runs=len(loops),
            loops_flagged=sum(r.loop_flagged for r in loops),
            ended_by_recovery=sum(r.ended_by_recovery for r in loops),
            reflagged_runs=sum(bool(r.reflags) for r in loops),
            reflags=sum(len(r.reflags) for r in loops),
            reflags_before_relapse=sum(len(r.reflags_before_relapse) for r in loops),
            stopped_after_recovery=sum(r.stopped_after_recovery for r in loops),
            relapses=sum(r.relapse_turn is not None for r in loops),
            relapses_caught=sum(r.relapse_caught for r in loops),
            stopped_looping=sum(r.stopped_looping for r in loops),
            capped=sum(r.end == "cap" for r in loops),
            flags_before_onset=sum(len(r.flags_in([Phase.PREFIX])) for r in loops),
            stopped_before_onset=sum(r.stopped_before_onset for r in loops),
            productive_runs=len(productive),
            productive_flagged=sum(bool(r.flags) for r in productive),
            false_stops=sum(r.false_stop for r in results),
            onset_to_flag_median=_median(to_flag),
            onset_to_flag_p90=_p90(to_flag),
            onset_to_escape_median=_median(to_escape),
            onset_to_escape_p90=_p90(to_escape),
            judge_calls=sum(r.judge_calls for r in results),
            turns=sum(r.turns for r in results),
            crashed=sum(r.crash is not None for r in results),
        )

    @property
    def failures(self) -> list[str]:
        """The figures that must be 0 and are not."""
        out = []
        if self.stopped_after_recovery:
            out.append(f"{self.stopped_after_recovery} run(s) stopped after the agent recovered")
        if self.false_stops:
            out.append(f"{self.false_stops} productive run(s) stopped")
        if self.crashed:
            out.append(f"{self.crashed} run(s) crashed")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(slots=True)
class ClosedLoopReport:
    """All runs of one closed-loop eval, with figures per policy and overall."""

    results: list[RunResult]
    config: dict[str, Any]
    elapsed_s: float = 0.0

    def by_policy(self) -> list[PolicyMetrics]:
        rows = []
        for policy in (*LOOP_POLICIES, Policy.PRODUCTIVE):
            group = [r for r in self.results if r.policy is policy]
            if group:
                rows.append(PolicyMetrics.of(policy.value, group))
        return rows

    def overall(self) -> PolicyMetrics:
        return PolicyMetrics.of("overall", self.results)

    def reflag_sources(self) -> dict[str, Counter[str]]:
        """Re-flags after an escape, by policy: ``source / kind`` -> count."""
        out: dict[str, Counter[str]] = {}
        for r in self.results:
            for f in r.reflags:
                out.setdefault(r.policy.value, Counter())[f"{f.source} / {f.kind}"] += 1
        return out

    def productive_families(self) -> list[PolicyMetrics]:
        families = sorted({r.family for r in self.results if not r.looping})
        return [
            PolicyMetrics.of(family, [r for r in self.results if r.family == family])
            for family in families
        ]

    @property
    def failures(self) -> list[str]:
        return self.overall().failures

    def to_dict(self) -> dict[str, Any]:
        return {
            "elapsed_s": round(self.elapsed_s, 3),
            "config": self.config,
            "constants": {
                "escape_work_turns": ESCAPE_WORK_TURNS,
                "relapse_after_calls": RELAPSE_AFTER_CALLS,
                "max_turns_after_onset": MAX_TURNS_AFTER_ONSET,
                "judge_lookback": JUDGE_LOOKBACK,
            },
            "overall": self.overall().to_dict(),
            "by_policy": {m.name: m.to_dict() for m in self.by_policy()},
            "productive_families": {m.name: m.to_dict() for m in self.productive_families()},
            "reflag_sources": {k: dict(v) for k, v in self.reflag_sources().items()},
            "failures": self.failures,
            "runs": [r.to_dict() for r in self.results],
        }


async def run_closed_loop(
    trajectories: Iterable[Trajectory],
    config: TrackerConfig | None = None,
    *,
    policies: Sequence[Policy] = LOOP_POLICIES,
    productive: bool = True,
    seed: int = DEFAULT_SEED,
    on_done: Callable[[RunResult], None] | None = None,
) -> ClosedLoopReport:
    """Run every looping trajectory under every policy, plus the productive agents.

    Scenarios run one after another: the work is CPU-bound (no judge waits), so overlapping
    them would only interleave the same work.
    """
    config = config if config is not None else closed_loop_config()
    scenarios = loop_scenarios(seeds_from_trajectories(trajectories), policies)
    if productive:
        scenarios += productive_scenarios()
    started = time.perf_counter()
    factory = memo_detectors()
    results = []
    for scenario in scenarios:
        result = await run_scenario(scenario, config, seed=seed, detectors=factory)
        results.append(result)
        if on_done is not None:
            on_done(result)
    return ClosedLoopReport(results, public_config(config), time.perf_counter() - started)


# -- report ---------------------------------------------------------------------------------

JSON_FILE = "closed_loop.json"
MARKDOWN_FILE = "closed_loop.md"
_MISSING = "-"
# Runs listed one by one in the markdown report for each kind of failure.
_LISTED_RUNS = 30

EXPLANATION = (
    "Each labelled looping run is cut at its onset and driven through a fresh tracker under"
    " each policy; productive agents are scripted by hand. flagged: runs with a loop "
    "verdict while the agent looped. recovered: the agent escaped after a recovery message "
    "and was not stopped for it. re-flagged / re-flags: runs with, and the number of, loop "
    "verdicts while the agent did new, distinct work after its escape (a plain-text plan, "
    "then new calls with new results; a relapsing agent's second escape included, its "
    "relapse not; reflags_before_relapse in the JSON counts the first escape alone). stop "
    "recov: runs stopped after the agent recovered (must be 0). relapse: relapses into the "
    "same loop that were flagged. stop loop: runs stopped while looping. prod flag: "
    "productive runs flagged. false stop: productive runs stopped (must be 0). flag delay, "
    "escape delay: median agent turns from the loop's first turn to the first flag, and to "
    "the escape (0 = right after it). calls: judge calls (a scripted judge: 0.95 when its "
    "last 3 assistant turns loop, else 0.1)."
)


def _num(value: float | None) -> str:
    return _MISSING if value is None else f"{value:g}"


def policy_table(report: ClosedLoopReport) -> TableData:
    """Per policy, the productive agents, and overall (columns: see `EXPLANATION`)."""
    columns = (
        "policy", "runs", "flagged", "recovered", "re-flagged", "re-flags", "stop recov",
        "relapse", "stop loop", "prod flag", "false stop", "flag delay", "escape delay",
        "calls",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for m in [*report.by_policy(), report.overall()]:
        loops = m.loop_runs > 0
        rows.append(
            (
                m.name,
                str(m.runs),
                f"{m.loops_flagged}/{m.loop_runs}" if loops else _MISSING,
                str(m.ended_by_recovery) if loops else _MISSING,
                str(m.reflagged_runs) if loops else _MISSING,
                str(m.reflags) if loops else _MISSING,
                str(m.stopped_after_recovery),
                f"{m.relapses_caught}/{m.relapses}" if m.relapses else _MISSING,
                str(m.stopped_looping) if loops else _MISSING,
                f"{m.productive_flagged}/{m.productive_runs}" if m.productive_runs else _MISSING,
                str(m.false_stops),
                _num(m.onset_to_flag_median),
                _num(m.onset_to_escape_median),
                str(m.judge_calls),
            )
        )
    return TableData("closed loop: per policy", columns, rows)


def reflag_table(report: ClosedLoopReport) -> TableData:
    """Which detectors flag agents that already escaped (source / loop kind), per policy."""
    sources = report.reflag_sources()
    # An agent that ignores every warning never escapes, so it has no column here.
    policies = [p.value for p in LOOP_POLICIES if p is not Policy.IGNORE_WARNINGS]
    total: Counter[str] = Counter()
    for counts in sources.values():
        total.update(counts)
    rows: list[tuple[str, ...]] = [
        (name, *(str(sources.get(p, Counter())[name]) for p in policies), str(count))
        for name, count in total.most_common()
    ]
    if not rows:
        rows = [("none", *("0" for _ in policies), "0")]  # same type as above
    return TableData(
        "closed loop: re-flags after escape by source / kind",
        ("source / kind", *policies, "total"),
        rows,
    )


def productive_table(report: ClosedLoopReport) -> TableData:
    rows: list[tuple[str, ...]] = [
        (
            m.name,
            str(m.runs),
            str(m.turns),
            str(m.productive_flagged),
            str(m.false_stops),
            str(m.judge_calls),
        )
        for m in report.productive_families()
    ]
    return TableData(
        "closed loop: productive agents",
        ("family", "runs", "turns", "flagged", "false stops", "judge calls"),
        rows,
    )


def closed_loop_tables(report: ClosedLoopReport) -> list[TableData]:
    return [policy_table(report), reflag_table(report), productive_table(report)]


def _run_line(result: RunResult, flags: Sequence[FlagRecord]) -> str:
    shown = "; ".join(
        f"turn {f.turn} ({f.phase.value if f.phase else '-'}) {f.action} by {f.source}"
        for f in flags
    )
    return (
        f"- `{result.id}`: onset turn {result.onset_turn}, escapes {result.escape_turns or '-'}"
        f", end {result.end}: {shown}"
    )


def write_closed_loop(
    report: ClosedLoopReport,
    out_dir: Path,
    *,
    settings: dict[str, Any],
    tables: Sequence[TableData] | None = None,
) -> tuple[Path, Path]:
    """Write ``closed_loop.json`` (figures and every run with its flags) and
    ``closed_loop.md`` (the tables and the runs behind each failure)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": settings,
        **report.to_dict(),
    }
    json_path = out_dir / JSON_FILE
    json_path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tables = list(tables) if tables is not None else closed_loop_tables(report)
    parts = ["# loop-judge closed-loop eval", ""]
    parts += [f"- {k}: `{v}`" for k, v in settings.items()]
    parts += ["", EXPLANATION, ""]
    parts += [markdown_table(t) for t in tables]
    sections: tuple[
        tuple[str, Callable[[Any], bool], Callable[[Any], list[FlagRecord]] | None], ...
    ] = (
        ("stopped after the agent recovered", lambda r: r.stopped_after_recovery, None),
        ("productive runs stopped", lambda r: r.false_stop, None),
        ("stopped before the loop's labelled onset", lambda r: r.stopped_before_onset, None),
        ("re-flagged after escape", lambda r: bool(r.reflags), lambda r: r.reflags),
        ("crashed", lambda r: r.crash is not None, None),
    )
    for title, wanted, flags_of in sections:
        runs = [r for r in report.results if wanted(r)]
        parts += [f"### {title} ({len(runs)})", ""]
        for run in runs[:_LISTED_RUNS]:
            listed = flags_of(run) if flags_of is not None else run.flags
            parts.append(f"- `{run.id}`: {run.crash}" if run.crash else _run_line(run, listed))
        if len(runs) > _LISTED_RUNS:
            parts.append(f"- ... and {len(runs) - _LISTED_RUNS} more (see {JSON_FILE})")
        if not runs:
            parts.append("none")
        parts.append("")
    md_path = out_dir / MARKDOWN_FILE
    md_path.write_text("\n".join(parts), encoding="utf-8")
    return json_path, md_path
