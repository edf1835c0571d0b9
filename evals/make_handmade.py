"""Generate the hand-made evaluation cases in evals/data/handmade/ (deterministic).

Each case is a small Python function that drives a :class:`Run` builder - system prompt,
user task, assistant turns with tool calls and the tool results - and returns the index of
the assistant message where the loop starts (``None`` for non-looping runs). Labels follow
shared/recorded/LABELING.md: looping needs >=3 identical calls, >=4 varied attempts failing
the same way, a repeated cycle, re-requesting the same goal, or near-identical text; changing
results (polling, edit -> rerun, paging) are progress, not loops.

Writing the cases as code keeps them reviewable and lets us regenerate the JSON exactly::

    .venv/bin/python evals/make_handmade.py          # rewrites evals/data/handmade/*.json
"""

from __future__ import annotations

import json
import random
import shutil
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parent / "data" / "handmade"

SYSTEM_CODER = (
    "You are a software engineering agent working in a sandboxed Linux repository at "
    "/workspace. Use the tools to inspect and modify files and run commands. Make minimal, "
    "correct changes and verify them with the test suite before finishing."
)
SYSTEM_SWE = (
    "SETTING: You are an autonomous programmer working directly in the command line with a "
    "special interface. Commands: open <path> [<line>], goto <line>, scroll_down, scroll_up, "
    "search_dir <term> [<dir>], search_file <term> [<file>], find_file <name> [<dir>], "
    "edit <start>:<end> <replacement> end_of_edit, submit. One command per response."
)
SYSTEM_ASSISTANT = (
    "You are a helpful assistant with access to tools. Call tools when they help answer the "
    "user's request, then reply concisely."
)
SYSTEM_AIRLINE = (
    "# Airline Agent Policy\nYou are an airline customer service agent. You can help users "
    "book, modify, or cancel flight reservations. Before taking consequential actions that "
    "update the booking database, you must list the action details and obtain explicit user "
    "confirmation (yes) to proceed. You should only make one tool call at a time."
)
SYSTEM_ORCH = (
    "You are the Orchestrator of a team of agents: WebSurfer (browses the web), FileSurfer "
    "(reads local files), Coder (writes Python) and ComputerTerminal (runs code). Plan, "
    "delegate one instruction at a time, track progress, and give the final answer."
)
SYSTEM_RESEARCH = (
    "You are a research agent. Use web_search and web_fetch to gather evidence and answer "
    "with citations."
)


class Run:
    """Builds one OpenAI-chat trajectory; methods return the index of the message they add."""

    def __init__(self, name: str, id_style: str = "openai") -> None:
        self.name = name
        self.messages: list[dict[str, Any]] = []
        self._rng = random.Random(name)
        self._id_style = id_style

    def _call_id(self) -> str:
        alphabet = string.ascii_letters + string.digits
        if self._id_style == "anthropic":
            return "toolu_01" + "".join(self._rng.choice(alphabet) for _ in range(22))
        if self._id_style == "plain":
            count = sum(len(m.get("tool_calls", [])) for m in self.messages) + 1
            return f"call_{count:04d}"
        return "call_" + "".join(self._rng.choice(alphabet) for _ in range(24))

    def system(self, text: str) -> int:
        self.messages.append({"role": "system", "content": text})
        return len(self.messages) - 1

    def user(self, text: str, name: str | None = None) -> int:
        message: dict[str, Any] = {"role": "user", "content": text}
        if name:
            message["name"] = name
        self.messages.append(message)
        return len(self.messages) - 1

    def say(self, text: str, name: str | None = None) -> int:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if name:
            message["name"] = name
        self.messages.append(message)
        return len(self.messages) - 1

    def calls(self, items: list[tuple[str, dict[str, Any], str]], text: str = "") -> int:
        """One assistant message with several (parallel) tool calls, then their results."""
        ids = [self._call_id() for _ in items]
        self.messages.append(
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": tool, "arguments": json.dumps(args)},
                    }
                    for call_id, (tool, args, _) in zip(ids, items, strict=True)
                ],
            }
        )
        index = len(self.messages) - 1
        for call_id, (_, _, result) in zip(ids, items, strict=True):
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        return index

    def call(self, tool: str, args: dict[str, Any], result: str, text: str = "") -> int:
        return self.calls([(tool, args, result)], text)


@dataclass
class Case:
    name: str
    looping: bool
    kind: str
    note: str
    build: Callable[[Run], int | None]
    confidence: str = "high"
    agent: str = "generic tool-calling agent"
    id_style: str = "openai"
    tags: list[str] = field(default_factory=list)


CASES: list[Case] = []


def case(
    name: str,
    kind: str,
    note: str,
    *,
    confidence: str = "high",
    agent: str = "generic tool-calling agent",
    id_style: str = "openai",
) -> Callable[[Callable[[Run], int | None]], Callable[[Run], int | None]]:
    """Register a case; ``kind='none'`` means a (hard) negative."""

    def register(build: Callable[[Run], int | None]) -> Callable[[Run], int | None]:
        CASES.append(Case(name, kind != "none", kind, note, build, confidence, agent, id_style))
        return build

    return register


def _listing(files: list[str]) -> str:
    return "\n".join(files)


def _py_file(path: str, lines: int, seed: int) -> str:
    """Plausible numbered source text for ``path`` (content depends on path and seed)."""
    rng = random.Random(f"{path}:{seed}")
    words = ["config", "parser", "value", "result", "items", "client", "cache", "path", "key"]
    out = []
    for n in range(1, lines + 1):
        w1, w2 = rng.choice(words), rng.choice(words)
        kind = rng.randrange(4)
        if kind == 0:
            text = f"def {w1}_{w2}_{n}(self, {w2}):"
        elif kind == 1:
            text = f"    {w1} = self.{w2}.get({w1!r})"
        elif kind == 2:
            text = f"    return {w1}_{w2}"
        else:
            text = f"    # handle {w1} {w2}"
        out.append(f"{n:>4}\t{text}")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# Looping cases
# ---------------------------------------------------------------------------------------


@case(
    "exact-repeat-read-file-12x",
    "exact_repeat",
    "read_file('src/app/settings.py') 12 times in a row with identical content, never edits",
    agent="coding agent (read_file/write_file tools)",
)
def _read_file_12x(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("The app ignores DEBUG=0 from the environment. Find out why and fix it.")
    r.call("list_files", {"path": "src/app"}, _listing(["__init__.py", "settings.py", "main.py"]))
    content = _py_file("src/app/settings.py", 30, 1)
    onset = r.call(
        "read_file",
        {"path": "src/app/settings.py"},
        content,
        "Let me look at how settings are loaded.",
    )
    thoughts = [
        "I need to check the settings file again to see how DEBUG is parsed.",
        "Let me re-read settings.py to confirm.",
        "Checking settings.py once more.",
        "Let me look at settings.py again.",
    ]
    for i in range(11):
        r.call("read_file", {"path": "src/app/settings.py"}, content, thoughts[i % 4])
    r.say("I was unable to determine the cause.")
    return onset


@case(
    "exact-repeat-get-weather-11x",
    "exact_repeat",
    "get_weather(Paris) called 11 times with the same answer while the user asked once",
)
def _weather_11x(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    r.user("Should I take an umbrella in Paris tomorrow?")
    result = json.dumps(
        {"city": "Paris", "forecast": "light rain", "precip_prob": 0.7, "temp_c": 14}
    )
    onset = r.call("get_weather", {"city": "Paris", "day": "tomorrow"}, result)
    for _ in range(10):
        r.call("get_weather", {"city": "Paris", "day": "tomorrow"}, result)
    r.say("Yes, take an umbrella: light rain is likely (70%).")
    return onset


@case(
    "exact-repeat-write-file-3x",
    "exact_repeat",
    "write_file with the identical path and content 3 times (modifying call repeated)",
    agent="coding agent (read_file/write_file tools)",
)
def _write_file_3x(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Add a .editorconfig with 4-space indentation for Python files.")
    r.call("list_files", {"path": "."}, _listing(["README.md", "pyproject.toml", "src", "tests"]))
    body = "root = true\n\n[*.py]\nindent_style = space\nindent_size = 4\n"
    onset = r.call(
        "write_file",
        {"path": ".editorconfig", "content": body},
        "Wrote 58 bytes to .editorconfig",
        "Creating the file.",
    )
    r.call(
        "write_file",
        {"path": ".editorconfig", "content": body},
        "Wrote 58 bytes to .editorconfig",
        "Let me make sure the file is written.",
    )
    r.call(
        "write_file",
        {"path": ".editorconfig", "content": body},
        "Wrote 58 bytes to .editorconfig",
        "Writing .editorconfig.",
    )
    r.say("Added .editorconfig.")
    return onset


@case(
    "exact-repeat-send-message-3x",
    "exact_repeat",
    "MCP slack post_message with the same channel and text sent 3 times",
    agent="MCP assistant",
    id_style="anthropic",
)
def _send_message_3x(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    r.user("Tell #deploys that the 2.4.1 release is out.")
    r.call(
        "mcp__slack__list_channels",
        {"limit": 20},
        json.dumps(
            {"channels": [{"id": "C01", "name": "general"}, {"id": "C07", "name": "deploys"}]}
        ),
    )
    args = {"channel_id": "C07", "text": "Release 2.4.1 is out :rocket:"}
    ok = json.dumps({"ok": True, "channel": "C07", "ts": "1718031234.000200"})
    onset = r.call("mcp__slack__post_message", args, ok, "Posting the announcement.")
    r.call("mcp__slack__post_message", args, ok, "Posting to #deploys.")
    r.call("mcp__slack__post_message", args, ok, "Sending the release message to #deploys.")
    r.call("mcp__slack__post_message", args, ok)
    r.say("Done, #deploys has been notified.")
    return onset


@case(
    "exact-repeat-failing-pytest-3x",
    "exact_repeat",
    "same bash pytest command fails with the same ModuleNotFoundError 4 times, no fix between",
    agent="coding agent (bash tool)",
)
def _failing_pytest(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Run the API tests and fix whatever fails.")
    r.call("bash", {"command": "ls tests"}, "conftest.py\ntest_api.py\ntest_models.py")
    err = (
        "ImportError while loading conftest '/workspace/tests/conftest.py'.\n"
        "tests/conftest.py:3: in <module>\n    import httpx_mock\n"
        "E   ModuleNotFoundError: No module named 'httpx_mock'"
    )
    onset = r.call(
        "bash", {"command": "python -m pytest tests/test_api.py -q"}, err, "Running the API tests."
    )
    r.call(
        "bash",
        {"command": "python -m pytest tests/test_api.py -q"},
        err,
        "Let me run the tests again.",
    )
    r.call(
        "bash",
        {"command": "python -m pytest tests/test_api.py -q"},
        err,
        "Running the tests once more to see the failure.",
    )
    r.call("bash", {"command": "python -m pytest tests/test_api.py -q"}, err)
    return onset


@case(
    "exact-repeat-http-401-3x",
    "exact_repeat",
    "identical http_request GET returns 401 Unauthorized 3 times; token never changed",
)
def _http_401(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    r.user("How many open issues does the internal tracker project LOOP have?")
    args = {
        "method": "GET",
        "url": "https://tracker.internal/api/v2/projects/LOOP/issues",
        "params": {"state": "open"},
    }
    err = json.dumps({"status": 401, "error": "Unauthorized: missing or expired token"})
    onset = r.call("http_request", args, err, "Querying the tracker API.")
    r.call("http_request", args, err, "Retrying the request.")
    r.call("http_request", args, err, "Trying again.")
    r.say("I could not access the tracker; the API says the token is missing or expired.")
    return onset


@case(
    "exact-repeat-interleaved-order-status",
    "exact_repeat",
    "get_order_status(#W4821) repeated 4 times with the same answer, other lookups between",
    agent="customer-service agent",
)
def _interleaved(r: Run) -> int | None:
    r.system(SYSTEM_AIRLINE.replace("airline", "retail").replace("flight reservations", "orders"))
    r.user("Where is my order #W4821? It was supposed to arrive yesterday.")
    status = json.dumps({"order_id": "#W4821", "status": "processing", "carrier": None})
    onset = r.call("get_order_status", {"order_id": "#W4821"}, status)
    r.call(
        "get_user_details",
        {"user_id": "mia_li_3668"},
        json.dumps({"name": "Mia Li", "orders": ["#W4821", "#W1170"]}),
    )
    r.call("get_order_status", {"order_id": "#W4821"}, status)
    r.call("list_shipping_options", {}, json.dumps(["standard", "express"]))
    r.call("get_order_status", {"order_id": "#W4821"}, status)
    r.call(
        "get_product_details",
        {"product_id": "8310926033"},
        json.dumps({"name": "Water bottle", "available": True}),
    )
    r.call("get_order_status", {"order_id": "#W4821"}, status)
    r.say("Your order #W4821 is still processing.")
    return onset


@case(
    "exact-repeat-parallel-batch-4x",
    "exact_repeat",
    "the same parallel batch (web_search + web_fetch) issued 4 times with identical results",
    agent="research agent (parallel tool calls)",
)
def _parallel_batch(r: Run) -> int | None:
    r.system(SYSTEM_RESEARCH)
    r.user("What is the current stable version of SQLite and when was it released?")
    batch = [
        (
            "web_search",
            {"query": "SQLite latest release"},
            "1. SQLite Release History - sqlite.org/chronology.html\n2. SQLite News",
        ),
        (
            "web_fetch",
            {"url": "https://sqlite.org/chronology.html"},
            "Error: fetch blocked by robots policy",
        ),
    ]
    onset = r.calls(batch, "Searching and fetching the release history.")
    for text in ["Let me try that again.", "Retrying both.", "Once more."]:
        r.calls(batch, text)
    r.say("I could not confirm the release date.")
    return onset


@case(
    "alternation-view-two-files",
    "alternation",
    "str_replace_editor view a.py / view b.py alternated 4 times with identical output",
    agent="OpenHands-style agent (str_replace_editor)",
)
def _alt_view(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Make Client.retry respect the max_retries setting from config.")
    a = _py_file("/workspace/client/retry.py", 25, 2)
    b = _py_file("/workspace/client/config.py", 25, 3)
    onset = None
    for i in range(4):
        idx = r.call(
            "str_replace_editor",
            {"command": "view", "path": "/workspace/client/retry.py"},
            a,
            "Let me look at the retry logic." if i == 0 else "",
        )
        onset = idx if onset is None else onset
        r.call(
            "str_replace_editor",
            {"command": "view", "path": "/workspace/client/config.py"},
            b,
            "And the config it reads from.",
        )
    return onset


@case(
    "alternation-apply-revert-edit",
    "alternation",
    "applies an edit then reverts it, 3 full cycles; tests fail identically either way",
    agent="OpenHands-style agent (str_replace_editor + execute_bash)",
)
def _alt_apply_revert(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("test_timeout fails intermittently. Fix it.")
    path = "/workspace/src/net.py"
    fail = (
        "FAILED tests/test_net.py::test_timeout - AssertionError: 5.0 != 2.5\n1 failed, 41 passed"
    )
    onset = None
    for _ in range(3):
        idx = r.call(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": path,
                "old_str": "timeout = 5.0",
                "new_str": "timeout = 2.5",
            },
            f"The file {path} has been edited.",
            "Lower the timeout.",
        )
        onset = idx if onset is None else onset
        r.call(
            "execute_bash",
            {"command": "pytest tests/test_net.py -q"},
            "FAILED tests/test_net.py::test_connect - AssertionError: 2.5 != 5.0\n"
            "1 failed, 41 passed",
        )
        r.call(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": path,
                "old_str": "timeout = 2.5",
                "new_str": "timeout = 5.0",
            },
            f"The file {path} has been edited.",
            "That broke test_connect; revert.",
        )
        r.call("execute_bash", {"command": "pytest tests/test_net.py -q"}, fail)
    return onset


@case(
    "alternation-abc-webshop",
    "alternation",
    "search -> click same item -> Back to Search, same 3-step cycle 3 times",
    agent="ReAct WebShop-style agent",
    id_style="plain",
)
def _alt_abc_shop(r: Run) -> int | None:
    r.system("Webshop. Follow the instruction; actions are search[...] and click[...].")
    r.user(
        "WebShop [SEP] Instruction: [SEP] i need a gluten free peanut butter, 16 oz, "
        "price lower than 20.00 dollars [SEP] Search"
    )
    results = (
        "[Back to Search] Page 1 (Total results: 50) [Next >] [B07K5Q9RLX] Organic "
        "Peanut Butter Creamy 12 oz $9.99 [B01N9S1LXA] PB2 Powdered 6.5 oz $8.49"
    )
    item = (
        "[Back to Search] [< Prev] size [12 oz][28 oz] Organic Peanut Butter Creamy "
        "Price: $9.99 Rating: N.A. [Description] [Buy Now]"
    )
    onset = None
    for _ in range(3):
        idx = r.call(
            "search",
            {"query": "gluten free peanut butter 16 oz"},
            results,
            "I should search for gluten free peanut butter.",
        )
        onset = idx if onset is None else onset
        r.call("click", {"element": "B07K5Q9RLX"}, item)
        r.call(
            "click",
            {"element": "Back to Search"},
            "WebShop [SEP] Instruction: ... [Search]",
            "No 16 oz option. I'll go back and search again.",
        )
    return onset


@case(
    "alternation-abc-build-clean",
    "alternation",
    "cmake -> make (same link error) -> rm -rf build, identical 3-step cycle 3 times",
    agent="coding agent (bash tool)",
)
def _alt_abc_build(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("The project does not build. Get `make` to succeed.")
    err = (
        "[ 92%] Linking CXX executable app\n/usr/bin/ld: CMakeFiles/app.dir/main.cpp.o: "
        "undefined reference to `zlib_compress(char const*, unsigned long)'\n"
        "collect2: error: ld returned 1 exit status\nmake: *** [Makefile:84: all] Error 2"
    )
    onset = None
    for _ in range(3):
        idx = r.call(
            "bash",
            {"command": "mkdir -p build && cd build && cmake .."},
            "-- Configuring done\n-- Generating done\n-- Build files written to /workspace/build",
            "Configure a fresh build.",
        )
        onset = idx if onset is None else onset
        r.call("bash", {"command": "cd build && make -j8"}, err)
        r.call("bash", {"command": "rm -rf build"}, "", "Maybe the build dir is stale; clean it.")
    return onset


@case(
    "similar-retry-search-typos",
    "similar_retry",
    "search('fo0'), search('f00'), search('fo o'), search('foo ') all return no results",
)
def _sr_typos(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    r.user("Find the internal wiki page about the foo service rollout.")
    none = "No results found."
    onset = r.call("wiki_search", {"query": "fo0 service rollout"}, none)
    r.call("wiki_search", {"query": "f00 service rollout"}, none, "Trying a different spelling.")
    r.call("wiki_search", {"query": "fo o service rollout"}, none)
    r.call("wiki_search", {"query": "foo  service rollout "}, none, "Let me adjust the query.")
    r.call("wiki_search", {"query": "fo0 service  rollout"}, none)
    r.say("I couldn't find that page.")
    return onset


@case(
    "similar-retry-read-path-variants",
    "similar_retry",
    "read('./data.csv'), read('data.csv'), read('./data.csv '), ... same FileNotFoundError",
    agent="data-analysis agent",
)
def _sr_paths(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT + " Files are in the user's upload folder.")
    r.user("Summarise the sales in data.csv by region.")
    err = "FileNotFoundError: [Errno 2] No such file or directory: 'data.csv'"
    onset = r.call("read_file", {"path": "./data.csv"}, err)
    r.call("read_file", {"path": "data.csv"}, err, "Let me try without the ./ prefix.")
    r.call("read_file", {"path": "./data.csv "}, err)
    r.call("read_file", {"path": "./././data.csv"}, err, "Trying the path again.")
    r.call("read_file", {"path": "data.csv"}, err)
    r.say("I can't find data.csv. Could you upload it again?")
    return onset


@case(
    "similar-retry-str-replace-no-match",
    "similar_retry",
    "5 str_replace attempts with whitespace-varied old_str, all 'did not appear verbatim'",
    agent="OpenHands-style agent (str_replace_editor)",
)
def _sr_str_replace(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Rename the `verbose` flag of `run()` in cli.py to `debug`.")
    path = "/workspace/cli.py"
    r.call(
        "str_replace_editor",
        {"command": "view", "path": path, "view_range": [10, 20]},
        "    10\tdef run(args,\n    11\t        verbose=False):\n    12\t    setup(args)",
    )
    err = f"ERROR:\nNo replacement was performed, old_str `{{}}` did not appear verbatim in {path}."
    variants = [
        "def run(args, verbose=False):",
        "def run(args,  verbose=False):",
        "def run(args,\n    verbose=False):",
        "def run(args,\n\tverbose=False):",
        "def run(args, verbose = False):",
    ]
    onset = None
    for i, old in enumerate(variants):
        idx = r.call(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": path,
                "old_str": old,
                "new_str": old.replace("verbose", "debug"),
            },
            err.format(old),
            "Let me fix the whitespace." if i else "",
        )
        onset = idx if onset is None else onset
    return onset


@case(
    "similar-retry-sql-column",
    "similar_retry",
    "4 rephrasings of one SQL query, each fails with column user_name does not exist",
    agent="SQL agent (MCP postgres)",
    id_style="anthropic",
)
def _sr_sql(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    r.user("Which 5 users placed the most orders last month?")
    err = 'ERROR:  column "user_name" does not exist\nLINE 1: SELECT user_name, count(*)'
    queries = [
        "SELECT user_name, count(*) FROM orders GROUP BY user_name ORDER BY 2 DESC LIMIT 5",
        "SELECT user_name, COUNT(*) AS n FROM orders GROUP BY user_name ORDER BY n DESC LIMIT 5",
        "SELECT user_name, count(id) FROM orders WHERE created_at > now() - interval '1 month' "
        "GROUP BY user_name ORDER BY 2 DESC LIMIT 5",
        "select user_name, count(*) from public.orders group by 1 order by 2 desc limit 5",
    ]
    onset = None
    for q in queries:
        idx = r.call("mcp__postgres__query", {"sql": q}, err)
        onset = idx if onset is None else onset
    r.say("The query keeps failing.")
    return onset


@case(
    "similar-retry-flight-airport-code",
    "similar_retry",
    "search_direct_flight with JFK/jfk/'JFK '/New York variants, all 'no flights found'",
    agent="tau-bench-style airline agent",
)
def _sr_flights(r: Run) -> int | None:
    r.system(SYSTEM_AIRLINE)
    r.user("I want a direct flight from New York JFK to Seattle on May 20.")
    none = "[]"
    onset = r.call(
        "search_direct_flight", {"origin": "JFK", "destination": "SEA", "date": "2024-05-20"}, none
    )
    r.call(
        "search_direct_flight", {"origin": "jfk", "destination": "SEA", "date": "2024-05-20"}, none
    )
    r.call(
        "search_direct_flight", {"origin": "JFK ", "destination": "SEA", "date": "2024-05-20"}, none
    )
    r.call(
        "search_direct_flight",
        {"origin": "New York", "destination": "SEA", "date": "2024-05-20"},
        none,
    )
    r.say("I'm sorry, I could not find any direct flights for that route.")
    return onset


@case(
    "similar-retry-max-depth-creep",
    "similar_retry",
    "directory_tree max_depth 2,3,4,5,6 always returns the same small tree",
    agent="MCP filesystem agent",
    id_style="anthropic",
)
def _sr_depth(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Where is the database migration code in this repo?")
    tree = "repo/\n  app/\n    models.py\n    views.py\n  scripts/\n    seed.py\n  README.md"
    onset = None
    for depth in range(2, 7):
        idx = r.call(
            "mcp__filesystem__directory_tree",
            {"path": "/repo", "max_depth": depth},
            tree,
            "Let me look deeper in the tree." if depth > 2 else "",
        )
        onset = idx if onset is None else onset
    return onset


@case(
    "error-cycle-externally-managed",
    "error_cycle",
    "4 different install commands all fail with externally-managed-environment",
    agent="coding agent (bash tool)",
)
def _ec_pip(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Install the package in development mode and run its CLI --help.")
    err = (
        "error: externally-managed-environment\n\n× This environment is externally managed\n"
        "╰─> To install Python packages system-wide, try apt install python3-xyz"
    )
    onset = r.call("bash", {"command": "pip install -e ."}, err)
    r.call("bash", {"command": "pip3 install --editable ."}, err, "Try pip3.")
    r.call("bash", {"command": "python3 -m pip install -e . --user"}, err)
    r.call("bash", {"command": "pip install ."}, err, "Maybe a non-editable install works.")
    r.call("bash", {"command": "python -m pip install -e .[dev]"}, err)
    return onset


@case(
    "error-cycle-whack-a-mole",
    "error_cycle",
    "fixing the circular import brings a NameError, fixing that brings it back: A,B,A,B,A",
    agent="coding agent (edit_file + bash)",
)
def _ec_whack(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("`python -m app` crashes on start. Fix it.")
    a = (
        "ImportError: cannot import name 'Session' from partially initialized module "
        "'app.db' (most likely due to a circular import)"
    )
    b = "NameError: name 'Session' is not defined"
    r.call("bash", {"command": "python -m app"}, a)
    edits = [
        ("from app.db import Session", "import app.db", b),
        ("import app.db", "from app.db import Session  # noqa", a),
        ("from app.db import Session  # noqa", "Session = None  # set in init()", b),
        ("Session = None  # set in init()", "from .db import Session", a),
        ("from .db import Session", "if TYPE_CHECKING:\n    from .db import Session", b),
    ]
    onset = None
    for old, new, err in edits:
        idx = r.call(
            "edit_file",
            {"path": "app/models.py", "old": old, "new": new},
            "OK: 1 replacement",
            "Adjusting the import.",
        )
        onset = idx if onset is None else onset
        r.call("bash", {"command": "python -m app"}, err)
    return onset


@case(
    "error-cycle-permission-denied",
    "error_cycle",
    "5 different ways of writing under /etc all fail with Permission denied",
)
def _ec_perm(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Configure the service to listen on port 8081.")
    r.call("read_file", {"path": "/etc/myservice/config.toml"}, "port = 8080\nworkers = 4")
    onset = r.call(
        "write_file",
        {"path": "/etc/myservice/config.toml", "content": "port = 8081\nworkers = 4\n"},
        "PermissionError: [Errno 13] Permission denied: '/etc/myservice/config.toml'",
    )
    r.call(
        "bash",
        {"command": "sed -i 's/8080/8081/' /etc/myservice/config.toml"},
        "sed: couldn't open temporary file /etc/myservice/sedX3k2: Permission denied",
    )
    r.call(
        "bash",
        {"command": "echo 'port = 8081' > /etc/myservice/config.toml"},
        "bash: /etc/myservice/config.toml: Permission denied",
    )
    r.call(
        "bash",
        {"command": "cp /tmp/config.toml /etc/myservice/config.toml"},
        "cp: cannot create regular file '/etc/myservice/config.toml': Permission denied",
    )
    r.call(
        "write_file",
        {"path": "/etc/myservice/config.toml.new", "content": "port = 8081\n"},
        "PermissionError: [Errno 13] Permission denied: '/etc/myservice/config.toml.new'",
    )
    return onset


@case(
    "error-cycle-rate-limit",
    "error_cycle",
    "alternating different searches/fetches all hit 429 Too Many Requests, no backoff",
    agent="research agent",
)
def _ec_429(r: Run) -> int | None:
    r.system(SYSTEM_RESEARCH)
    r.user("Compare the licenses of DuckDB and ClickHouse.")
    err = "HTTP 429 Too Many Requests: rate limit exceeded, retry after 60s"
    onset = r.call("web_search", {"query": "DuckDB license"}, err)
    r.call("web_fetch", {"url": "https://github.com/duckdb/duckdb/blob/main/LICENSE"}, err)
    r.call("web_search", {"query": "ClickHouse license Apache"}, err)
    r.call("web_fetch", {"url": "https://clickhouse.com/docs/en/about-us/license"}, err)
    r.call("web_search", {"query": "duckdb MIT license"}, err)
    r.say("I'm being rate limited.")
    return onset


@case(
    "text-repetition-apologies",
    "text_repetition",
    "assistant sends near-identical apology/retry messages 5 times without acting",
    agent="customer-service chat agent",
)
def _tr_apology(r: Run) -> int | None:
    r.system(SYSTEM_AIRLINE)
    r.user("I need to change my flight, reservation 4WQ150.")
    r.call(
        "get_reservation_details",
        {"reservation_id": "4WQ150"},
        json.dumps(
            {
                "reservation_id": "4WQ150",
                "flights": [{"flight_number": "HAT170"}],
                "cabin": "economy",
            }
        ),
    )
    onset = r.say(
        "I apologize for the confusion. Let me help you with changing your flight. "
        "Could you tell me the new date you would like?"
    )
    r.user("May 24, same route.")
    r.say(
        "I apologize for the confusion. Let me help you with changing your flight. Could you "
        "please tell me the new date you'd like?"
    )
    r.user("I just told you, May 24!")
    r.say(
        "I apologize for any confusion. Let me help you with changing your flight. Could you "
        "tell me the new date you would like to travel?"
    )
    r.user("MAY 24.")
    r.say(
        "I apologize for the confusion. Let me help you change your flight. Could you tell me "
        "the new date you would like?"
    )
    return onset


@case(
    "text-repetition-degenerate-the",
    "text_repetition",
    "assistant output degenerates into 'the the the ...' (one message)",
)
def _tr_the(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    r.user("Summarise this paragraph: 'The committee approved the budget after a long debate.'")
    return r.say("The committee approved the budget after " + "the " * 120 + "the")


@case(
    "text-repetition-same-line-block",
    "text_repetition",
    "two assistant messages that repeat 'I will now run the tests.' dozens of times",
    agent="coding agent (bash tool)",
)
def _tr_lines(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Please run the unit tests and report failures.")
    onset = r.say("I will now run the tests.\n" * 40)
    r.user("Go ahead.")
    r.say("I will now run the tests.\n" * 35 + "I will now run the tests.")
    return onset


@case(
    "text-repetition-asks-same-question",
    "text_repetition",
    "asks the user for the booking reference 4 times although it was given",
    agent="customer-service chat agent",
)
def _tr_question(r: Run) -> int | None:
    r.system(SYSTEM_AIRLINE)
    r.user("Hi, I'd like to add a checked bag to my booking.")
    onset = r.say("Sure! Could you please provide your booking reference?")
    r.user("It's XK92PL.")
    r.say("Thanks! Could you please provide your booking reference so I can look it up?")
    r.user("XK92PL, as I said.")
    r.say("Of course. Could you please provide your booking reference?")
    r.user("X K 9 2 P L")
    r.say("Thank you! Could you please provide your booking reference?")
    return onset


@case(
    "cognitive-subagent-rephrased",
    "cognitive",
    "Orchestrator asks WebSurfer for the same 2019 revenue figure 5 times, reworded each time",
    agent="Magentic-One-style orchestrator",
)
def _cog_subagent(r: Run) -> int | None:
    r.system(SYSTEM_ORCH)
    r.user("What was Acme Robotics' total revenue in fiscal year 2019, in USD?")
    requests = [
        "Search the web for Acme Robotics 2019 annual revenue and report the number.",
        "Please find Acme Robotics' total revenue for fiscal 2019.",
        "Look up the FY2019 revenue of Acme Robotics (USD) and tell me the figure.",
        "Could you search for how much revenue Acme Robotics made in 2019?",
        "Find the 2019 revenue figure for Acme Robotics, e.g. from a news article or report.",
    ]
    answers = [
        "I searched 'Acme Robotics 2019 revenue'. Results show the company homepage and a "
        "Crunchbase profile; no revenue figure is listed.",
        "I typed 'Acme Robotics total revenue fiscal 2019'. The top results are the company "
        "homepage and a Crunchbase page without revenue data.",
        "Search results for 'Acme Robotics FY2019 revenue USD' list the homepage and Crunchbase; "
        "neither shows revenue.",
        "I searched 'how much revenue Acme Robotics 2019' and saw the homepage and Crunchbase "
        "profile; no revenue is mentioned.",
        "The search 'Acme Robotics 2019 revenue news' shows the same homepage and Crunchbase "
        "profile, with no figure.",
    ]
    onset = None
    for req, ans in zip(requests, answers, strict=True):
        idx = r.call(
            "WebSurfer",
            {"request": req},
            ans,
            "Next speaker WebSurfer. We still need the revenue figure.",
        )
        onset = idx if onset is None else onset
    return onset


@case(
    "cognitive-replanning",
    "cognitive",
    "update_plan called 4 times with reworded versions of the same unexecuted plan",
    agent="planning agent (update_plan tool)",
    id_style="anthropic",
)
def _cog_plan(r: Run) -> int | None:
    r.system(SYSTEM_CODER + " Keep a plan with update_plan.")
    r.user("Add pagination to the /users endpoint.")
    plans = [
        ["Read the /users handler", "Add page and per_page params", "Write tests"],
        ["Inspect users handler", "Implement page/per_page", "Add tests for pagination"],
        ["Look at the /users route", "Add pagination parameters", "Test the pagination"],
        ["Review handler for /users", "Support page & per_page query args", "Write unit tests"],
    ]
    onset = None
    for plan in plans:
        idx = r.call(
            "update_plan",
            {"steps": plan, "current": 0},
            "Plan updated.",
            "Let me first make a clear plan before starting.",
        )
        onset = idx if onset is None else onset
    return onset


@case(
    "cognitive-delegate-same-task",
    "cognitive",
    "delegates 'find why login test fails' to a Task sub-agent 4 times with new wording",
    agent="Claude-Code-style agent (Task sub-agent)",
    id_style="anthropic",
)
def _cog_task(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("tests/test_auth.py::test_login fails on CI. Figure out why and fix it.")
    prompts = [
        "Investigate why tests/test_auth.py::test_login fails and report the root cause.",
        "Find the root cause of the failing test_login in tests/test_auth.py.",
        "Please look into test_login (tests/test_auth.py) and explain why it fails.",
        "Determine the reason tests/test_auth.py::test_login is failing on CI.",
    ]
    answer = (
        "I ran the test locally and it passes. I could not reproduce the CI failure; it "
        "may depend on the CI environment."
    )
    onset = None
    for prompt in prompts:
        idx = r.call(
            "Task",
            {
                "description": "Investigate test_login",
                "prompt": prompt,
                "subagent_type": "general-purpose",
            },
            answer,
        )
        onset = idx if onset is None else onset
    return onset


# ---------------------------------------------------------------------------------------
# Hard negatives (repetition that is progress)
# ---------------------------------------------------------------------------------------


@case(
    "negative-poll-ci-status",
    "none",
    "polls CI run status 8 times; the output changes every time until success",
)
def _n_poll_ci(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Push the fix and wait for CI to go green.")
    r.call(
        "bash",
        {"command": "git push origin fix/retry"},
        "To github.com:acme/api.git\n   3f2a1c9..8be04d1  fix/retry -> fix/retry",
    )
    states = [
        "queued",
        "in_progress (lint: running)",
        "in_progress (lint: passed, tests: 12%)",
        "in_progress (tests: 38%)",
        "in_progress (tests: 71%)",
        "in_progress (tests: 94%)",
        "in_progress (tests: passed, build: running)",
        "completed: success (5m12s)",
    ]
    for i, state in enumerate(states):
        r.call(
            "bash",
            {"command": "gh run view --branch fix/retry --json status"},
            json.dumps({"run_id": 9912, "status": state, "elapsed_s": 40 * i}),
            "Checking CI." if i == 0 else "",
        )
    r.say("CI is green.")
    return None


@case(
    "negative-tail-training-log",
    "none",
    "tails a training log 6 times; step and loss change each time",
)
def _n_tail(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Start the fine-tuning run and tell me when the loss drops below 1.0.")
    r.call(
        "bash",
        {"command": "nohup python train.py --config cfg.yaml > train.log 2>&1 &"},
        "[1] 48213",
    )
    loss = 2.41
    for step in range(100, 700, 100):
        loss = round(loss * 0.83, 3)
        r.call(
            "bash",
            {"command": "sleep 60; tail -n 2 train.log"},
            f"step {step} | loss {loss} | lr 2e-5\nstep {step + 10} | loss {loss - 0.01:.3f}",
        )
    r.say("Loss is below 1.0 at step 600.")
    return None


@case(
    "negative-tests-after-each-fix",
    "none",
    "edit -> pytest cycles where failures shrink 4 -> 2 -> 1 -> 0",
    agent="coding agent",
)
def _n_tests(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Make the test suite pass.")
    results = [
        "4 failed, 56 passed",
        "2 failed, 58 passed",
        "1 failed, 59 passed",
        "60 passed in 3.21s",
    ]
    fixes = [
        ("src/dates.py", "parse_date"),
        ("src/money.py", "round_half_even"),
        ("src/users.py", "normalize_email"),
    ]
    r.call("bash", {"command": "pytest -q"}, "FAILED tests/test_dates.py::test_iso\n" + results[0])
    for (path, fn), res in zip(fixes, results[1:], strict=True):
        r.call(
            "edit_file",
            {"path": path, "old": f"def {fn}(value):", "new": f"def {fn}(value: str):"},
            "OK: 1 replacement",
            f"Fix {fn}.",
        )
        r.call("bash", {"command": "pytest -q"}, res)
    r.say("All tests pass.")
    return None


@case(
    "negative-edit-one-file-stepwise",
    "none",
    "8 successful str_replace edits to the same file, each different",
    agent="OpenHands-style agent (str_replace_editor)",
)
def _n_stepwise(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Add type hints to every function in utils.py.")
    path = "/workspace/utils.py"
    r.call("str_replace_editor", {"command": "view", "path": path}, _py_file(path, 40, 4))
    funcs = [
        "slugify",
        "chunk",
        "flatten",
        "retry",
        "parse_bool",
        "human_size",
        "deep_merge",
        "first",
    ]
    for fn in funcs:
        r.call(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": path,
                "old_str": f"def {fn}(value):",
                "new_str": f"def {fn}(value: str) -> str:",
            },
            f"The file {path} has been edited. Here's the result of running `cat -n` on a "
            f"snippet:\n    12\tdef {fn}(value: str) -> str:",
        )
    r.call(
        "execute_bash", {"command": "mypy utils.py"}, "Success: no issues found in 1 source file"
    )
    return None


@case(
    "negative-bulk-edit-many-files", "none", "the same kind of edit applied to 12 different files"
)
def _n_bulk(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Replace `from typing import List` with the builtin `list` across the package.")
    files = [
        f"pkg/{name}.py"
        for name in [
            "api",
            "auth",
            "cache",
            "cli",
            "config",
            "db",
            "io",
            "jobs",
            "models",
            "routes",
            "tasks",
            "utils",
        ]
    ]
    r.call(
        "grep",
        {"pattern": "from typing import List", "path": "pkg"},
        "\n".join(f"{f}:1:from typing import List" for f in files),
    )
    for f in files:
        r.call(
            "edit_file",
            {"path": f, "old": "from typing import List\n", "new": ""},
            "OK: 1 replacement",
        )
    r.call("bash", {"command": "ruff check pkg && pytest -q"}, "All checks passed!\n88 passed")
    return None


@case(
    "negative-read-many-files",
    "none",
    "reads 15 different files once each while exploring a codebase",
)
def _n_read_many(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Give me an overview of how requests flow through this service.")
    files = [
        "main.py",
        "app.py",
        "routes/__init__.py",
        "routes/users.py",
        "routes/orders.py",
        "middleware/auth.py",
        "middleware/logging.py",
        "services/users.py",
        "services/orders.py",
        "db/session.py",
        "db/models.py",
        "schemas/user.py",
        "schemas/order.py",
        "config.py",
        "errors.py",
    ]
    for f in files:
        r.call("read_file", {"path": f"src/{f}"}, _py_file(f, 12, 5))
    r.say(
        "Requests enter in main.py, pass auth and logging middleware, hit routes/* which call "
        "services/*, which use db/session.py."
    )
    return None


@case(
    "negative-paging-with-offset",
    "none",
    "reads a 2,000-line log in pages (offset 0, 200, 400, ...), content changes each page",
)
def _n_paging(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Find the first ERROR in logs/server.log.")
    for offset in range(0, 1400, 200):
        lines = "\n".join(
            f"{offset + i + 1}: 2024-06-01T10:{(offset + i) % 60:02d} INFO req ok" for i in range(4)
        )
        if offset == 1200:
            lines += "\n1337: 2024-06-01T12:17 ERROR db pool exhausted"
        r.call(
            "read_file",
            {"path": "logs/server.log", "offset": offset, "limit": 200},
            lines + "\n...",
        )
    r.say("The first ERROR is at line 1337: db pool exhausted.")
    return None


@case("negative-ls-many-dirs", "none", "ls of 10 different directories, one each")
def _n_ls(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Where are the Terraform modules for the staging environment?")
    dirs = [
        "/infra",
        "/infra/envs",
        "/infra/envs/staging",
        "/infra/modules",
        "/infra/modules/network",
        "/infra/modules/db",
        "/infra/modules/k8s",
        "/infra/envs/prod",
        "/infra/scripts",
        "/infra/envs/staging/overrides",
    ]
    for d in dirs:
        name = d.rsplit("/", 1)[-1]
        r.call(
            "execute_bash",
            {"command": f"ls -la {d}"},
            f"total 16\ndrwxr-xr-x 4 dev dev 4096 Jun  1 10:00 .\n-rw-r--r-- 1 dev dev  812 "
            f"Jun  1 10:00 {name}_main.tf\n-rw-r--r-- 1 dev dev  233 Jun  1 10:00 vars.tf",
        )
    r.say("Staging uses /infra/envs/staging which references /infra/modules/{network,db,k8s}.")
    return None


@case(
    "negative-search-refined-then-succeeds",
    "none",
    "grep refined twice (no hits) then finds it on the third try; bounded, succeeds",
    confidence="medium",
)
def _n_refine(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Where is the retry backoff computed?")
    r.call("grep", {"pattern": "backoff", "path": "src"}, "No matches found.")
    r.call("grep", {"pattern": "back_off", "path": "src"}, "No matches found.")
    r.call(
        "grep",
        {"pattern": "retry.*delay", "path": ".", "-i": True},
        "vendor/http/retry.py:41:    delay = min(cap, base * 2 ** attempt)",
    )
    r.call("read_file", {"path": "vendor/http/retry.py"}, _py_file("retry", 50, 6))
    r.say("It's in vendor/http/retry.py line 41: exponential delay capped at `cap`.")
    return None


@case(
    "negative-retry-succeeds-second",
    "none",
    "one identical retry after a 503, the second attempt succeeds",
    confidence="medium",
)
def _n_retry(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    r.user("What's the EUR to JPY rate right now?")
    args = {"base": "EUR", "symbols": "JPY"}
    r.call("get_exchange_rate", args, "HTTP 503 Service Unavailable")
    r.call(
        "get_exchange_rate",
        args,
        json.dumps({"base": "EUR", "rates": {"JPY": 168.42}}),
        "Temporary error, retrying once.",
    )
    r.say("1 EUR = 168.42 JPY.")
    return None


@case(
    "negative-weather-many-cities",
    "none",
    "get_weather for 6 different cities in two parallel batches",
)
def _n_weather(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    r.user("Compare tomorrow's weather in Paris, Lyon, Nice, Berlin, Rome and Madrid.")
    cities = ["Paris", "Lyon", "Nice", "Berlin", "Rome", "Madrid"]
    temps = [14, 17, 21, 11, 23, 25]
    batch = [
        (
            "get_weather",
            {"city": c, "day": "tomorrow"},
            json.dumps({"city": c, "temp_c": t, "forecast": "sunny" if t > 20 else "cloudy"}),
        )
        for c, t in zip(cities, temps, strict=True)
    ]
    r.calls(batch[:3], "Fetching the French cities first.")
    r.calls(batch[3:])
    r.say("Warmest: Madrid (25°C); coolest: Berlin (11°C).")
    return None


@case(
    "negative-airline-multiple-reservations",
    "none",
    "looks up 4 different reservations with the same tool, then cancels one after consent",
    agent="tau-bench-style airline agent",
)
def _n_airline(r: Run) -> int | None:
    r.system(SYSTEM_AIRLINE)
    r.user("Cancel whichever of my reservations goes to Denver. My user id is omar_davis_3817.")
    r.call(
        "get_user_details",
        {"user_id": "omar_davis_3817"},
        json.dumps({"reservations": ["JG7FMM", "LQ940Q", "2FBBAH", "X7BYG1"]}),
    )
    dest = {"JG7FMM": "LAX", "LQ940Q": "ORD", "2FBBAH": "DEN", "X7BYG1": "SEA"}
    for rid, d in dest.items():
        r.call(
            "get_reservation_details",
            {"reservation_id": rid},
            json.dumps({"reservation_id": rid, "origin": "BOS", "destination": d}),
        )
    r.say("Reservation 2FBBAH (BOS -> DEN) goes to Denver. Shall I cancel it? (yes/no)")
    r.user("yes")
    r.call(
        "cancel_reservation",
        {"reservation_id": "2FBBAH"},
        json.dumps({"reservation_id": "2FBBAH", "status": "cancelled"}),
    )
    r.say("Done, 2FBBAH is cancelled; the refund goes to your original payment method.")
    return None


@case(
    "negative-web-research",
    "none",
    "7 different web searches and fetches, then an answer with citations",
    agent="research agent",
)
def _n_research(r: Run) -> int | None:
    r.system(SYSTEM_RESEARCH)
    r.user("Which Python versions does NumPy 2.0 support, and when did it come out?")
    r.call(
        "web_search",
        {"query": "NumPy 2.0 release date"},
        "1. NumPy 2.0.0 Release Notes - numpy.org\n2. NumPy 2.0 released (June 2024) - blog",
    )
    r.call(
        "web_fetch",
        {"url": "https://numpy.org/doc/stable/release/2.0.0-notes.html"},
        "NumPy 2.0.0 Release Notes ... This release supports Python 3.9-3.12 ...",
    )
    r.call(
        "web_search",
        {"query": "NumPy 2.0 announcement June 16 2024"},
        "1. numpy.org/news - NumPy 2.0 release - June 16, 2024",
    )
    r.call(
        "web_fetch", {"url": "https://numpy.org/news/"}, "NumPy 2.0 release date: June 16, 2024 ..."
    )
    r.say("NumPy 2.0.0 was released on 16 June 2024 and supports Python 3.9-3.12 [1][2].")
    return None


@case(
    "negative-swe-scroll",
    "none",
    "SWE-agent scrolls through a long file 6 times; each window shows new lines",
    agent="SWE-agent (text actions)",
    id_style="plain",
)
def _n_scroll(r: Run) -> int | None:
    r.system(SYSTEM_SWE)
    r.user(
        "We're solving this issue: `TimeDelta` serialization rounds down instead of to "
        "nearest. Find where the rounding happens."
    )
    r.call(
        "open",
        {"args": "src/marshmallow/fields.py"},
        "[File: src/marshmallow/fields.py (1997 lines total)]\n" + _py_file("f0", 8, 0),
    )
    for i in range(1, 7):
        r.call(
            "scroll_down",
            {"args": ""},
            "[File: src/marshmallow/fields.py (1997 lines total)]\n"
            + _py_file(f"f{i}", 8, i).replace("   1\t", f"{100 * i + 1:>4}\t"),
            "The TimeDelta class is further down; keep scrolling.",
        )
    r.call(
        "search_file",
        {"args": "TimeDelta"},
        'Found 3 matches for "TimeDelta" in src/marshmallow/fields.py:\nLine 1457:class '
        "TimeDelta(Field):",
    )
    return None


@case(
    "negative-walk-list-items",
    "none",
    "Orchestrator asks WebSurfer about items 1..5 of a list, same phrasing, different items",
    agent="Magentic-One-style orchestrator",
)
def _n_walk(r: Run) -> int | None:
    r.system(SYSTEM_ORCH)
    r.user("Which of the top 5 results for 'best espresso grinder 2024' costs under $300?")
    prices = [549, 289, 429, 199, 699]
    for i, price in enumerate(prices, start=1):
        r.call(
            "WebSurfer",
            {"request": f"Open search result #{i} and report the grinder's name and price."},
            f"Result #{i} is the Grinder Model G{i}0, listed at ${price}.",
            f"Next speaker WebSurfer. Checking result {i} of 5.",
        )
    r.say("Results #2 (G20, $289) and #4 (G40, $199) cost under $300.")
    return None


@case(
    "negative-git-status-between-edits",
    "none",
    "git status/diff after each of 3 edits; the output changes each time",
    agent="coding agent (execute_bash)",
)
def _n_git(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Update the copyright year to 2025 in the three license headers.")
    done: list[str] = []
    for f in ["LICENSE", "src/main.c", "src/util.c"]:
        r.call("execute_bash", {"command": f"sed -i 's/2024/2025/' {f}"}, "")
        done.append(f)
        r.call(
            "execute_bash", {"command": "git status --short"}, "\n".join(f" M {d}" for d in done)
        )
    return None


@case(
    "negative-edit-run-cycle-changing",
    "none",
    "edit -> run cycles (A-B shape) with different edits and changing errors until it works",
    agent="coding agent (bash tool)",
)
def _n_edit_run(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("scripts/report.py crashes. Make it produce report.html.")
    steps = [
        (
            "load_csv(path)",
            "load_csv(Path(path))",
            "TypeError: expected str, bytes or os.PathLike object, not NoneType",
        ),
        ("args.input", "args.input or 'data/sales.csv'", "KeyError: 'region'"),
        (
            "row['region']",
            "row.get('region', 'unknown')",
            "jinja2.exceptions.TemplateNotFound: report.html.j2",
        ),
        ("'report.html.j2'", "'templates/report.html.j2'", "Wrote report.html (14 rows)"),
    ]
    r.call(
        "bash",
        {"command": "python scripts/report.py"},
        "AttributeError: 'NoneType' object has no attribute 'open'",
    )
    for old, new, out in steps:
        r.call(
            "edit_file", {"path": "scripts/report.py", "old": old, "new": new}, "OK: 1 replacement"
        )
        r.call("bash", {"command": "python scripts/report.py"}, out)
    return None


@case(
    "negative-docker-build-after-fixes",
    "none",
    "docker build re-run 3 times after different Dockerfile fixes, errors change, then succeeds",
)
def _n_docker(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Make `docker build .` work.")
    outs = [
        "ERROR: failed to solve: python:3.13-slimm: not found",
        'ERROR: process "/bin/sh -c pip install -r requirements.txt" did not complete: '
        "No such file: requirements.txt",
        "Successfully built 4c1d8e2a9f10",
    ]
    fixes = [
        ("FROM python:3.13-slimm", "FROM python:3.13-slim"),
        (
            "RUN pip install -r requirements.txt",
            "COPY requirements.txt .\nRUN pip install -r requirements.txt",
        ),
    ]
    r.call("bash", {"command": "docker build -t app ."}, outs[0])
    for (old, new), out in zip(fixes, outs[1:], strict=True):
        r.call(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": "/workspace/Dockerfile",
                "old_str": old,
                "new_str": new,
            },
            "File edited.",
        )
        r.call("bash", {"command": "docker build -t app ."}, out)
    return None


@case(
    "negative-bounded-retry-then-ask",
    "none",
    "3 varied searches find nothing, then the agent stops and asks the user (<=3, bounded)",
    confidence="medium",
)
def _n_bounded(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    r.user("Find the email of the person who approved PR 4411.")
    r.call(
        "github_get_pull_request",
        {"repo": "acme/api", "number": 4411},
        json.dumps({"number": 4411, "reviews": [{"user": "kpatel", "state": "APPROVED"}]}),
    )
    r.call(
        "github_get_user", {"username": "kpatel"}, json.dumps({"login": "kpatel", "email": None})
    )
    r.call("directory_search", {"query": "kpatel"}, "No results.")
    r.call("directory_search", {"query": "K. Patel"}, "No results.")
    r.say(
        "kpatel approved it, but their email is not public or in the directory. Do you have "
        "another way to reach them (e.g. Slack)?"
    )
    return None


@case(
    "negative-paginated-api",
    "none",
    "list_issues pages 1..6, new issues on every page",
    agent="MCP GitHub agent",
    id_style="anthropic",
)
def _n_pages(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    r.user("Count open issues labelled 'bug' in acme/api.")
    for page in range(1, 7):
        n = 30 if page < 6 else 7
        items = [
            {"number": 5000 - 30 * (page - 1) - i, "title": f"bug {page}-{i}"}
            for i in range(min(n, 3))
        ]
        r.call(
            "mcp__github__list_issues",
            {
                "owner": "acme",
                "repo": "api",
                "labels": ["bug"],
                "state": "open",
                "page": page,
                "per_page": 30,
            },
            json.dumps({"count": n, "items": items, "has_next": page < 6}),
        )
    r.say("There are 157 open 'bug' issues.")
    return None


@case(
    "negative-webshop-next-pages",
    "none",
    "clicks Next > 4 times in search results, different products on each page",
    agent="ReAct WebShop-style agent",
    id_style="plain",
)
def _n_next(r: Run) -> int | None:
    r.system("Webshop. Follow the instruction; actions are search[...] and click[...].")
    r.user(
        "WebShop [SEP] Instruction: [SEP] i want a blue yoga mat, extra thick, under 40 "
        "dollars [SEP] Search"
    )
    r.call(
        "search",
        {"query": "blue yoga mat extra thick"},
        "[Back to Search] Page 1 (Total results: 50) [Next >] [B01] Pink mat $19 [B02] Grey mat",
    )
    for page in range(2, 6):
        found = page == 5
        r.call(
            "click",
            {"element": "Next >"},
            f"Page {page} (Total results: 50) [Next >] [B{page}1] "
            + ("Blue Extra Thick Yoga Mat 1/2 inch $29.99" if found else f"Green mat v{page}"),
        )
    r.call("click", {"element": "B51"}, "Blue Extra Thick Yoga Mat ... [Buy Now]")
    r.call("click", {"element": "Buy Now"}, "Thank you for shopping with us!")
    return None


@case(
    "negative-similar-phrasing-different-content",
    "none",
    "assistant creates 6 tickets with template-like messages about different bugs",
    agent="MCP Jira agent",
    id_style="anthropic",
)
def _n_tickets(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    r.user(
        "File a ticket for each bug in this list: login timeout, broken CSV export, wrong "
        "currency symbol, slow search, missing avatar, 500 on /settings."
    )
    bugs = [
        "Login times out after 30s",
        "CSV export produces empty file",
        "Wrong currency symbol for GBP",
        "Search takes 12s on large accounts",
        "Avatar missing after upload",
        "HTTP 500 on /settings save",
    ]
    for i, bug in enumerate(bugs, start=101):
        r.call(
            "mcp__jira__create_issue",
            {"project": "WEB", "type": "Bug", "summary": bug},
            json.dumps({"key": f"WEB-{i}", "url": f"https://jira.acme.io/browse/WEB-{i}"}),
            f"Creating a ticket for: {bug.lower()}.",
        )
    r.say("Created WEB-101 to WEB-106.")
    return None


@case(
    "negative-fever-react",
    "none",
    "ReAct fact check: search two different entities, lookup a keyword, finish",
    agent="ReAct FEVER-style agent",
    id_style="plain",
)
def _n_fever(r: Run) -> int | None:
    r.system(
        "Determine if there is Observation that SUPPORTS or REFUTES a Claim, or if there is "
        "NOT ENOUGH INFORMATION. Actions: Search[entity], Lookup[keyword], Finish[answer]."
    )
    r.user("Claim: The Eiffel Tower was completed before the Statue of Liberty was dedicated.")
    r.call(
        "search",
        {"entity": "Eiffel Tower"},
        "The Eiffel Tower is a wrought-iron lattice tower ... constructed from 1887 to 1889.",
        "Thought 1: I need the completion year of the Eiffel Tower.",
    )
    r.call(
        "search",
        {"entity": "Statue of Liberty"},
        "The Statue of Liberty ... was dedicated on October 28, 1886.",
        "Thought 2: Now the dedication date of the Statue of Liberty.",
    )
    r.call(
        "lookup",
        {"keyword": "dedicated"},
        "(Result 1 / 1) The statue was dedicated on October 28, 1886.",
        "Thought 3: Confirm the dedication date.",
    )
    r.call(
        "finish",
        {"answer": "REFUTES"},
        "Episode finished, reward = 1",
        "Thought 4: 1889 is after 1886, so the claim is refuted.",
    )
    return None


@case(
    "negative-reread-after-edit",
    "none",
    "reads the same file before and after an edit (content differs), 2 reads only",
)
def _n_reread(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Bump the version to 1.4.0.")
    r.call("read_file", {"path": "pyproject.toml"}, '[project]\nname = "tool"\nversion = "1.3.2"')
    r.call(
        "edit_file",
        {"path": "pyproject.toml", "old": 'version = "1.3.2"', "new": 'version = "1.4.0"'},
        "OK: 1 replacement",
    )
    r.call(
        "read_file",
        {"path": "pyproject.toml"},
        '[project]\nname = "tool"\nversion = "1.4.0"',
        "Verify.",
    )
    return None


@case(
    "negative-chat-qa",
    "none",
    "multi-turn chat: the user asks different questions, answers differ (no tools)",
)
def _n_chat(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT)
    qa = [
        (
            "What's a Python generator?",
            "A generator is a function that yields values lazily using `yield`.",
        ),
        (
            "And how is it different from a list comprehension?",
            "A list comprehension builds the whole list in memory; a generator expression yields "
            "items one by one.",
        ),
        (
            "Can I iterate a generator twice?",
            "No. Once exhausted it stays empty; create a new generator to iterate again.",
        ),
        (
            "Show me an example with itertools.islice.",
            "`from itertools import islice; list(islice(count(), 5))` gives [0, 1, 2, 3, 4].",
        ),
    ]
    for q, a in qa:
        r.user(q)
        r.say(a)
    return None


@case(
    "negative-long-coding-session",
    "none",
    "45-turn productive session: explore, implement feature across files, test, fix, docs",
    agent="coding agent (mixed tools, parallel calls)",
    id_style="anthropic",
)
def _n_long(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user(
        "Add CSV export to the reports module: `reports export --format csv`, with tests "
        "and a docs entry."
    )
    r.call(
        "bash",
        {"command": "git log --oneline -5"},
        "a1b2c3d Add JSON export\n9f8e7d6 Refactor report model\n1234abc Initial reports",
    )
    r.call(
        "list_files",
        {"path": "reports"},
        _listing(["__init__.py", "cli.py", "export.py", "model.py", "formats/json.py"]),
    )
    r.calls(
        [
            ("read_file", {"path": f"reports/{f}"}, _py_file(f, 20, 7))
            for f in ["cli.py", "export.py", "model.py", "formats/json.py"]
        ],
        "Reading the relevant modules in parallel.",
    )
    r.call(
        "grep",
        {"pattern": "register_format", "path": "reports"},
        "reports/export.py:12:def register_format(name, writer):\n"
        "reports/formats/json.py:3:register_format('json', write_json)",
    )
    r.call(
        "write_file",
        {
            "path": "reports/formats/csv.py",
            "content": "import csv\n\ndef write_csv(report, fh):\n    ...\n",
        },
        "Wrote 210 bytes to reports/formats/csv.py",
    )
    edits = [
        (
            "reports/formats/csv.py",
            "    ...",
            "    w = csv.writer(fh)\n    w.writerow(report.columns)",
        ),
        (
            "reports/formats/csv.py",
            "w.writerow(report.columns)",
            "w.writerow(report.columns)\n    w.writerows(report.rows)",
        ),
        ("reports/formats/__init__.py", "from . import json", "from . import csv, json"),
        ("reports/cli.py", "choices=['json']", "choices=['json', 'csv']"),
        (
            "reports/formats/csv.py",
            "import csv",
            "import csv\n\nfrom ..export import register_format",
        ),
        (
            "reports/formats/csv.py",
            "w.writerows(report.rows)",
            "w.writerows(report.rows)\n\nregister_format('csv', write_csv)",
        ),
    ]
    for path, old, new in edits:
        r.call("edit_file", {"path": path, "old": old, "new": new}, "OK: 1 replacement")
    r.call(
        "bash",
        {"command": "python -m reports export --format csv --out /tmp/r.csv"},
        "Traceback ... ImportError: cannot import name 'register_format' (circular import)",
    )
    r.call("read_file", {"path": "reports/export.py"}, _py_file("export2", 25, 8))
    r.call(
        "edit_file",
        {
            "path": "reports/export.py",
            "old": "from .formats import json",
            "new": "def _load_formats():\n    from .formats import csv, json",
        },
        "OK: 1 replacement",
        "Break the cycle with a lazy import.",
    )
    r.call(
        "edit_file",
        {
            "path": "reports/export.py",
            "old": "def export(report, fmt, fh):",
            "new": "def export(report, fmt, fh):\n    _load_formats()",
        },
        "OK: 1 replacement",
    )
    r.call(
        "bash",
        {"command": "python -m reports export --format csv --out /tmp/r.csv"},
        "Exported 12 rows to /tmp/r.csv",
    )
    r.call(
        "bash",
        {"command": "head -3 /tmp/r.csv"},
        "date,region,total\n2024-05-01,EU,1200\n2024-05-01,US,3400",
    )
    r.call("read_file", {"path": "tests/test_export.py"}, _py_file("test_export", 30, 9))
    tests = [
        "test_csv_header",
        "test_csv_rows",
        "test_csv_empty_report",
        "test_cli_csv_choice",
        "test_csv_unicode",
    ]
    for t in tests:
        r.call(
            "edit_file",
            {
                "path": "tests/test_export.py",
                "old": "# --- end ---",
                "new": f"def {t}(tmp_path):\n    ...\n\n# --- end ---",
            },
            "OK: 1 replacement",
            f"Add {t}.",
        )
    r.call(
        "bash",
        {"command": "pytest tests/test_export.py -q"},
        "FAILED tests/test_export.py::test_csv_unicode - UnicodeEncodeError\n1 failed, 9 passed",
    )
    r.call(
        "edit_file",
        {
            "path": "reports/cli.py",
            "old": "open(out, 'w')",
            "new": "open(out, 'w', encoding='utf-8', newline='')",
        },
        "OK: 1 replacement",
    )
    r.call("bash", {"command": "pytest tests/test_export.py -q"}, "10 passed in 0.41s")
    r.call("bash", {"command": "pytest -q"}, "143 passed in 6.02s")
    r.call("read_file", {"path": "docs/reports.md"}, "# Reports\n\n## Export\n\nJSON: ...")
    r.call(
        "edit_file",
        {
            "path": "docs/reports.md",
            "old": "JSON: ...",
            "new": "JSON: ...\n\nCSV: `reports export --format csv`",
        },
        "OK: 1 replacement",
    )
    r.call("bash", {"command": "ruff check reports tests"}, "All checks passed!")
    r.call(
        "bash",
        {"command": "git diff --stat"},
        " docs/reports.md | 2 +\n reports/cli.py | 4 +-\n reports/export.py | 6 +-\n"
        " reports/formats/csv.py | 14 +\n tests/test_export.py | 40 +\n 5 files changed",
    )
    r.say(
        "CSV export is implemented (reports/formats/csv.py), wired into the CLI, tested "
        "(10 tests) and documented."
    )
    return None


@case(
    "negative-health-check-polling",
    "none",
    "curl /healthz 5 times while a deployment rolls out; status changes to healthy",
    agent="DevOps agent (execute_bash)",
)
def _n_health(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Deploy v2.3 to staging and confirm it is healthy.")
    r.call(
        "execute_bash",
        {"command": "kubectl -n staging set image deploy/api api=api:v2.3"},
        "deployment.apps/api image updated",
    )
    outs = [
        "0/3 replicas updated",
        "1/3 replicas updated",
        "2/3 replicas updated",
        "3/3 replicas updated, 2/3 ready",
        'deployment "api" successfully rolled out',
    ]
    for out in outs:
        r.call(
            "execute_bash",
            {"command": "kubectl -n staging rollout status deploy/api --timeout=30s"},
            out,
        )
    r.call(
        "execute_bash",
        {"command": "curl -s https://staging.acme.io/healthz"},
        '{"status":"ok","version":"2.3"}',
    )
    return None


@case(
    "negative-ab-search-open-different",
    "none",
    "search -> open result pairs with a different query and result each time",
    agent="research agent",
)
def _n_ab(r: Run) -> int | None:
    r.system(SYSTEM_RESEARCH)
    r.user("Find the maintainers of requests, httpx and aiohttp.")
    for lib, who in [
        ("requests", "Nate Prewitt, Seth Larson"),
        ("httpx", "Tom Christie (encode)"),
        ("aiohttp", "Andrew Svetlov, Sam Bull"),
    ]:
        r.call(
            "web_search",
            {"query": f"{lib} python maintainers"},
            f"1. {lib} - GitHub\n2. {lib} on PyPI",
        )
        r.call(
            "web_fetch",
            {"url": f"https://pypi.org/project/{lib}/"},
            f"{lib} ... Maintainers: {who}",
        )
    r.say(
        "requests: Nate Prewitt, Seth Larson; httpx: Tom Christie; aiohttp: Andrew Svetlov, "
        "Sam Bull."
    )
    return None


@case(
    "negative-two-identical-reads-apart",
    "none",
    "the same config file is read twice 20 turns apart in a productive run (only 2x)",
    confidence="medium",
)
def _n_two_reads(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Add a `--dry-run` flag to the sync command.")
    cfg = _py_file("sync/config.py", 15, 10)
    r.call("read_file", {"path": "sync/config.py"}, cfg)
    for i, f in enumerate(["sync/cli.py", "sync/runner.py", "sync/remote.py"]):
        r.call("read_file", {"path": f}, _py_file(f, 10, 11 + i))
        r.call(
            "edit_file",
            {"path": f, "old": "def run(", "new": "def run(dry_run=False, "},
            "OK: 1 replacement",
        )
    r.call("read_file", {"path": "sync/config.py"}, cfg, "Check whether config has a default.")
    r.call("bash", {"command": "pytest -q tests/test_sync.py"}, "12 passed")
    return None


# ---------------------------------------------------------------------------------------
# Loops that hide from identical-call counting, and their productive look-alikes
# (creeping arguments, path variants, unchanged re-reads)
# ---------------------------------------------------------------------------------------


@case(
    "similar-retry-limit-creep",
    "similar_retry",
    "list_files(config, limit=10/20/40/80/100): the folder has 6 entries, every listing is the "
    "same 6 (only the reported timing differs); the wanted override file is not there",
    agent="coding agent (list_files/read_file tools)",
)
def _sr_limit_creep(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user(
        "Staging ignores the retry settings. Check whether there is a settings.local.yaml "
        "override in the config folder that wins over settings.yaml."
    )
    names = ["base.yaml", "logging.yaml", "retry.yaml", "settings.yaml", "staging.yaml", "README"]
    thoughts = [
        "Let me list the config folder.",
        "I don't see settings.local.yaml; maybe the listing was cut off. Raising the limit.",
        "Still not there. It could be further down the listing; let me ask for more entries.",
        "Let me try an even larger limit in case the override is sorted last.",
        "One more time with the maximum limit to be sure nothing is hidden.",
    ]
    onset = None
    for i, limit in enumerate((10, 20, 40, 80, 100)):
        timing = (12, 9, 15, 11, 10)[i]
        listing = _listing(names) + f"\n(6 entries, listed in 0.0{timing}s)"
        idx = r.call("list_files", {"path": "config", "limit": limit}, listing, thoughts[i])
        onset = idx if onset is None else onset
    r.say("There is no settings.local.yaml in config/.")
    return onset


@case(
    "similar-retry-ls-path-variants",
    "similar_retry",
    "ls -la of ./src, src/, ./src again, /workspace/src, src: one folder listed 5 times under "
    "cosmetically different paths, identical output, looking for a file that is not in it",
    agent="coding agent (bash tool)",
)
def _sr_ls_variants(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Our feature flags are read from flags.toml somewhere under src. Where is it loaded?")
    listing = (
        "total 40\n"
        "drwxr-xr-x 5 dev dev 4096 Jun  3 09:12 .\n"
        "drwxr-xr-x 9 dev dev 4096 Jun  3 09:12 ..\n"
        "-rw-r--r-- 1 dev dev  812 Jun  3 09:12 __init__.py\n"
        "drwxr-xr-x 2 dev dev 4096 Jun  3 09:12 api\n"
        "-rw-r--r-- 1 dev dev 2301 Jun  3 09:12 app.py\n"
        "drwxr-xr-x 2 dev dev 4096 Jun  3 09:12 core\n"
        "-rw-r--r-- 1 dev dev 1544 Jun  3 09:12 settings.py\n"
        "drwxr-xr-x 2 dev dev 4096 Jun  3 09:12 workers"
    )
    r.call("bash", {"command": "pwd"}, "/workspace")
    paths = ["./src", "src/", "./src", "/workspace/src", "src"]
    thoughts = [
        "Let me look at the source folder.",
        "flags.toml isn't listed. Let me list src/ to be sure I'm in the right place.",
        "Let me check ./src once more; maybe I missed it.",
        "Maybe the relative path is wrong. Using the absolute path.",
        "Let me list src again, it must be there.",
    ]
    onset = None
    for path, thought in zip(paths, thoughts, strict=True):
        idx = r.call("bash", {"command": f"ls -la {path}"}, listing, thought)
        onset = idx if onset is None else onset
    r.say("flags.toml does not seem to exist under src.")
    return onset


@case(
    "exact-repeat-reread-unchanged-file",
    "exact_repeat",
    "Reads the same unchanged 40-line file 6 times in a row, each time with a new "
    "justification, never edits (under the class limit of 10 identical reads)",
    agent="Claude-Code-style agent (Read/Grep/Edit tools)",
    id_style="anthropic",
)
def _reread_unchanged(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Requests to /export time out after 30 s. Make the export endpoint stream its rows.")
    path = "/workspace/api/export.py"
    r.call(
        "Grep",
        {"pattern": "def export", "path": "/workspace/api"},
        "/workspace/api/export.py:18:def export(request):",
    )
    content = _py_file("api/export.py", 40, 3)
    thoughts = [
        "Let me read the export handler.",
        "Before changing anything I want to see how the rows are collected.",
        "Let me double-check where the response object is built.",
        "I should confirm which helper serializes each row.",
        "Let me look at the imports at the top of the file once more.",
        "I want to re-verify the loop over the queryset before editing.",
    ]
    onset = None
    for thought in thoughts:
        idx = r.call("Read", {"file_path": path}, content, thought)
        onset = idx if onset is None else onset
    r.say("I need more information about the export format before editing.")
    return onset


@case(
    "negative-limit-creep-finds-it",
    "none",
    "raises list_files' limit 10 -> 20 -> 40 on a big folder: each listing is longer, the third "
    "is complete and shows the wanted file, which is then read",
    agent="coding agent (list_files/read_file tools)",
)
def _n_limit_creep(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Is there a migration that adds the `archived_at` column? Check migrations/.")
    names = [f"{n:04d}_{w}.py" for n, w in enumerate(["init", "users", "orders", "items"] * 6, 1)]
    names[22] = "0023_add_archived_at.py"
    for limit in (10, 20, 40):
        shown = names[:limit]
        rest = len(names) - len(shown)
        listing = _listing(shown) + (f"\n... {rest} more entries" if rest > 0 else "")
        r.call(
            "list_files",
            {"path": "migrations", "limit": limit},
            listing,
            "The listing is truncated; asking for more entries." if limit > 10 else "",
        )
    r.call(
        "read_file",
        {"path": "migrations/0023_add_archived_at.py"},
        "operations = [\n    migrations.AddField('order', 'archived_at', models.DateTimeField"
        "(null=True)),\n]",
    )
    r.say("Yes: migrations/0023_add_archived_at.py adds order.archived_at.")
    return None


@case(
    "negative-path-variant-then-found",
    "none",
    "ls ./service/src fails, ls service/src/ fails the same way, then the absolute path of "
    "the right checkout lists the folder and the agent moves on (one bounded retry)",
    agent="coding agent (bash tool)",
)
def _n_path_found(r: Run) -> int | None:
    r.system(SYSTEM_CODER)
    r.user("Find the gRPC service definitions of the billing service.")
    missing = "ls: cannot access '{}': No such file or directory"
    r.call("bash", {"command": "ls ./service/src"}, missing.format("./service/src"))
    r.call(
        "bash",
        {"command": "ls service/src/"},
        missing.format("service/src/"),
        "Maybe the trailing slash matters.",
    )
    r.call("bash", {"command": "ls /workspace"}, "billing-service\ndocs\ntools")
    r.call(
        "bash",
        {"command": "ls /workspace/billing-service/src"},
        "billing.proto\nserver.py\nclient.py\nmodels.py",
        "The service lives in billing-service.",
    )
    r.call(
        "bash",
        {"command": "grep -n 'rpc ' /workspace/billing-service/src/billing.proto"},
        "12:  rpc Charge(ChargeRequest) returns (ChargeReply);\n"
        "13:  rpc Refund(RefundRequest) returns (RefundReply);",
    )
    r.say("The definitions are in billing-service/src/billing.proto (Charge, Refund).")
    return None


@case(
    "negative-poll-rollout-timestamps",
    "none",
    "polls a rollout 7 times; every reply carries a new timestamp and request id, and the "
    "updated-replica count moves (twice it stays put for one poll) until all are ready",
    agent="ops agent (deployment tools)",
)
def _n_poll_rollout(r: Run) -> int | None:
    r.system(SYSTEM_ASSISTANT + " You operate the staging Kubernetes cluster.")
    r.user("Roll out web v2.8.1 to staging and tell me when every replica is updated.")
    r.call("set_image", {"deployment": "web", "image": "registry/web:2.8.1"}, "image updated")
    updated = [0, 1, 1, 3, 4, 4, 6]
    for i, count in enumerate(updated):
        reply = json.dumps(
            {
                "request_id": f"req-{9137 + 71 * i:x}",
                "observed_at": f"2024-06-03T14:{2 + i:02d}:{(17 * i) % 60:02d}Z",
                "deployment": "web",
                "updated_replicas": count,
                "replicas": 6,
                "status": "complete" if count == 6 else "progressing",
            }
        )
        r.call("get_rollout_status", {"deployment": "web"}, reply, "Checking the rollout.")
    r.say("All 6 replicas run web 2.8.1.")
    return None


@case(
    "negative-scroll-back-once",
    "none",
    "scrolls down a long file, scrolls back up once to re-read the previous window, then "
    "edits the function it found (one return to a window already read)",
    agent="SWE-agent-style agent",
    id_style="plain",
)
def _n_scroll_back(r: Run) -> int | None:
    r.system(SYSTEM_SWE)
    r.user("We're solving this issue: `Table.pformat` drops the unit row when `max_lines` is set.")
    header = "[File: astropy/table/pprint.py (780 lines total)]\n"
    windows = [header + _py_file(f"pprint{i}", 8, i) for i in range(4)]
    r.call("open", {"args": "astropy/table/pprint.py"}, windows[0])
    r.call("scroll_down", {"args": ""}, windows[1])
    r.call("scroll_down", {"args": ""}, windows[2])
    r.call("scroll_down", {"args": ""}, windows[3], "Here is where max_lines is applied.")
    r.call(
        "scroll_up",
        {"args": ""},
        windows[2],
        "I need the lines just above to see where the unit row is appended.",
    )
    r.call(
        "edit",
        {"args": "412:414\n        if show_unit:\n            n_header += 1\nend_of_edit"},
        "File updated. Please review the changes.",
    )
    r.call("python", {"args": "reproduce.py"}, "unit row present: True")
    return None


def build_all() -> list[dict[str, Any]]:
    """Build every case into the documented JSON record (checked for basic consistency)."""
    records = []
    seen: set[str] = set()
    for c in CASES:
        if c.name in seen:
            raise SystemExit(f"duplicate case name {c.name}")
        seen.add(c.name)
        run = Run(c.name, c.id_style)
        onset = c.build(run)
        if c.looping and (onset is None or run.messages[onset]["role"] != "assistant"):
            raise SystemExit(f"{c.name}: looping case needs an assistant onset")
        if not c.looping and onset is not None:
            raise SystemExit(f"{c.name}: negative case must not have an onset")
        records.append(
            {
                "id": f"handmade-{c.name}",
                "source": {
                    "repo": "loop-judge",
                    "path": "evals/make_handmade.py",
                    "license": "MIT",
                    "record": c.name,
                    "author": "hand-made for loop-judge",
                },
                "meta": {"agent": c.agent, "kind": "hand-made scenario"},
                "labels": {
                    "looping": c.looping,
                    "onset_message_index": onset,
                    "kind": c.kind,
                    "confidence": c.confidence,
                    "note": c.note,
                },
                "messages": run.messages,
            }
        )
    return records


def main() -> int:
    """Rewrite evals/data/handmade/ from scratch."""
    records = build_all()
    if OUTPUT.exists():
        shutil.rmtree(OUTPUT)
    OUTPUT.mkdir(parents=True)
    for record in records:
        path = OUTPUT / f"{record['id']}.json"
        path.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n")
    looping = sum(r["labels"]["looping"] for r in records)
    print(f"wrote {len(records)} cases ({looping} looping) to {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
