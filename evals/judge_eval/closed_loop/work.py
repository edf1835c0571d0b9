"""The words of an escaped agent's new, distinct work: its plan, calls, and questions.

An agent that obeys a recovery message must do work the detectors have never seen in this
run, in words and not only in numbers; `FreshWork` makes that work from seeded word lists
(shared with the productive paging scripts), so every run is deterministic.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

# Tries at drawing a call not made before in this run before giving up.
_DISTINCT_TRIES = 200

# New work must differ in words, not only in numbers: the detectors mask numbers, ids and
# times, so "read part 7" after "read part 6" would rightly look like the same call.
NOUNS = (
    "invoice", "ledger", "cache", "router", "session", "schema", "payload", "billing",
    "parser", "scheduler", "token", "widget", "catalog", "profile", "report", "archive",
    "gateway", "metrics", "inventory", "checkout", "locale", "thumbnail", "webhook",
    "migration", "quota", "sitemap", "backup", "tenant", "channel", "plugin", "cursor",
    "ticket", "shipment", "coupon", "avatar", "digest", "render", "ranking", "payroll",
    "forecast",
)  # fmt: skip
VERBS = (
    "load", "merge", "verify", "encode", "split", "flush", "index", "sync", "resolve",
    "publish", "compact", "sample", "validate", "export", "refresh", "normalize", "schedule",
    "archive", "throttle", "prefetch",
)  # fmt: skip
FINDINGS = (
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
            a, b, c = self._pick(NOUNS, 3)
            verb, verb2 = self._pick(VERBS, 2)
            args, result, thought = self._render(tool, a, b, c, verb, verb2)
            key = f"{tool}:{sorted(args.items())}"
            if key not in self._used:
                self._used.add(key)
                return tool, args, result, thought
        raise RuntimeError("FreshWork ran out of distinct calls")  # pragma: no cover

    def _render(
        self, tool: str, a: str, b: str, c: str, verb: str, verb2: str
    ) -> tuple[dict[str, Any], str, str]:
        finding, finding2 = self._pick(FINDINGS, 2)
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
        a, b, c = self._pick(NOUNS, 3)
        verb = self._pick(VERBS, 1)[0]
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
        a, b = self._pick(NOUNS, 2)
        return (
            f"I have tried {repeated} several times and keep getting the same outcome, so I "
            "have stopped. Should I keep working on this in a different way, or would you "
            f"rather I move on to the {a} {b} part first? What do you prefer?"
        )

    def instruction(self) -> str:
        a, b = self._pick(NOUNS, 2)
        verb = self._pick(VERBS, 1)[0]
        return (
            f"Leave that for now. Please look into how the {a} code does its {verb} for "
            f"{b}, and tell me what you find."
        )


def json_arguments(value: Any) -> str:
    """A tool call's arguments as compact JSON, as an agent sends them."""
    return json.dumps(value, separators=(",", ":"))
