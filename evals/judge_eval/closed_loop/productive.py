"""The hand-scripted productive agents, which the tracker must never stop.

Polling a changing status, editing and re-running the same tests, paging through results,
and a user's follow-ups: work that repeats a tool on purpose and makes progress each time.
Each script is a `Scenario` under `Policy.PRODUCTIVE`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from judge_eval.closed_loop.model import Message, Policy, Turn
from judge_eval.closed_loop.scenarios import Scenario
from judge_eval.closed_loop.work import FINDINGS, NOUNS, VERBS, json_arguments


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
                            "function": {"name": tool, "arguments": json_arguments(arguments)},
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
            items = rng.sample(list(NOUNS), 3)
            verbs = rng.sample(list(VERBS), 3)
            value: Any = page + 1 if key == "page" else page * 20
            if key == "cursor":
                value = f"after-{items[0]}-{verbs[0]}"
            rows = [
                f"- {verbs[i]} the {items[i]} ({FINDINGS[(page + i) % len(FINDINGS)]})"
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
