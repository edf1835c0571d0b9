"""`loop-judge scan PATH...`: runs read from OTLP GenAI spans, Langfuse exports and
trajectory files, replayed, and reported as a table, JSON and an HTML timeline.

The fixtures in scan_fixtures/ follow the documented shapes: otlp_two_runs.json holds a
looping run (structured ``gen_ai.input.messages`` / ``gen_ai.output.messages`` attributes,
``execute_tool`` spans, one ``gen_ai.conversation.id``) and a productive one (the
deprecated ``gen_ai.*.message`` / ``gen_ai.choice`` span events) in separate traces;
langfuse_trace.json is a Langfuse trace download (GENERATION, TOOL and EVENT
observations) of an agent alternating between two searches; trajectory_chat.json is an
OpenAI chat trajectory as ``eval`` reads it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from judge.config import ENV_PREFIX, TrackerConfig
from judge_eval.scan import SCHEMA, estimate_judge, load_runs, read_paths
from judge_eval.scan_cli import EXIT_LOOPED
from judge_eval.scan_history import TraceFormatError, TraceRun
from tests.fakes import answer
from tests.fault_server import FaultServer, completion
from tests.redaction_support import leaks

FIXTURES = Path(__file__).resolve().parent / "scan_fixtures"
OTLP = FIXTURES / "otlp_two_runs.json"
LANGFUSE = FIXTURES / "langfuse_trace.json"
TRAJECTORY = FIXTURES / "trajectory_chat.json"
LOOPING_RUN = "conv-loop-1"  # the looping trace's gen_ai.conversation.id
PRODUCTIVE_RUN = "0af7651916cd43dd8448eb211c80319c"  # the productive trace's id
# The console script as a user runs it, beside this interpreter.
LOOP_JUDGE = str(Path(sys.executable).with_name("loop-judge"))
# Each scan is a fresh interpreter: imports and a tracker per run, on a shared CI runner.
SCAN_TIMEOUT_S = 120
CHROMIUM_TIMEOUT_S = 60
# A GitHub token's shape (ghp_ and 36 characters), made up for the test.
TOKEN = "ghp_" + "Zq8Xw3Lm0Pk7Rt2Yv5Nb9Hc4Jd6Fs1Ga8Ue3"


def env(**extra: str) -> dict[str, str]:
    """The caller's environment without any LOOP_JUDGE_* (an exported one must not change
    the outcome), the semantic detector off (it changes no verdict here and loads slowly)."""
    out = {k: v for k, v in os.environ.items() if not k.upper().startswith(ENV_PREFIX)}
    out[ENV_PREFIX + "SEMANTIC"] = "off"
    out.update(extra)
    return out


def scan(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOOP_JUDGE, "scan", *args],
        capture_output=True,
        text=True,
        timeout=SCAN_TIMEOUT_S,
        env=env(**extra),
        stdin=subprocess.DEVNULL,
    )


def runs_by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {run["id"]: run for run in report["runs"]}


# -- readers ---------------------------------------------------------------------------


def test_otlp_spans_become_one_history_per_run() -> None:
    runs = {run.id: run for run in load_runs(OTLP)}
    assert set(runs) == {LOOPING_RUN, PRODUCTIVE_RUN}
    looping = runs[LOOPING_RUN].messages
    # system instructions, the task, then 8 turns of a tool call and its result, each once
    # although every chat span re-sends the whole history and every tool span its result.
    assert [m["role"] for m in looping[:2]] == ["system", "user"]
    assert [m["role"] for m in looping[2:]] == ["assistant", "tool"] * 8
    call = looping[4]["tool_calls"][0]
    assert call["function"] == {
        "name": "run_tests",
        "arguments": json.dumps({"path": "tests/test_dates.py"}),
    }
    assert looping[5]["tool_call_id"] == call["id"]
    assert "AssertionError" in looping[5]["content"]
    # gen_ai.usage.input_tokens + output_tokens of the call that wrote each assistant message
    assert runs[LOOPING_RUN].reported_tokens[2] == 400 + 30
    productive = runs[PRODUCTIVE_RUN].messages  # from the deprecated per-message events
    assert [m["role"] for m in productive] == ["system", "user"] + ["assistant", "tool"] * 4
    assert [m["tool_calls"][0]["function"]["name"] for m in productive[2::2]] == [
        "read_file",
        "read_file",
        "edit_file",
        "run_tests",
    ]
    assert productive[-1]["content"] == "3 passed in 0.12s"


def test_langfuse_observations_become_one_history() -> None:
    (run,) = load_runs(LANGFUSE)
    assert run.id == "lf-trace-7" and run.format == "langfuse"
    roles = [m["role"] for m in run.messages]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 8  # EVENTs add nothing
    names = [m["tool_calls"][0]["function"]["name"] for m in run.messages[2::2]]
    assert names == ["search_orders", "search_customers"] * 4
    assert run.reported_tokens[2] == 150 + 20


def otlp_request(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def test_a_bad_messages_attribute_names_file_span_and_attribute(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    span = {
        "traceId": "ab" * 16,
        "spanId": "cd" * 8,
        "startTimeUnixNano": "1",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.input.messages", "value": {"stringValue": "[{not json"}},
        ],
    }
    bad.write_text(json.dumps(otlp_request([span])))
    with pytest.raises(TraceFormatError) as caught:
        load_runs(bad)
    assert caught.value.path == str(bad)
    assert caught.value.where == f"span {'cd' * 8}, attribute gen_ai.input.messages"
    assert "invalid JSON" in str(caught.value)


def test_a_bad_line_of_an_otlp_jsonl_export_is_named(tmp_path: Path) -> None:
    lines = tmp_path / "spans.jsonl"
    good = otlp_request([])
    broken = otlp_request([{"spanId": "01" * 8, "attributes": []}])  # no traceId
    lines.write_text(json.dumps(good) + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(TraceFormatError, match=r"line 2, span 0101010101010101: 'traceId'"):
        load_runs(lines)


# -- the command, as typed ---------------------------------------------------------------


@pytest.mark.slow
def test_scan_prints_the_table_writes_json_and_exits_10(tmp_path: Path) -> None:
    report_file = tmp_path / "scan.json"
    done = scan(str(FIXTURES), "--json", str(report_file))
    assert done.returncode == EXIT_LOOPED == 10, done.stderr
    cells = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in done.stdout.splitlines()
        if "│" in line
    ]
    rows = {row[0]: row[2:] for row in cells}  # past run and file
    assert set(rows) == {LOOPING_RUN, PRODUCTIVE_RUN, "lf-trace-7", "chat-productive"}
    # messages, turns, looped, onset turn, kind, wasted turns, wasted tokens
    assert rows[LOOPING_RUN] == ["18", "8", "yes", "2", "exact_repeat", "6", "4200"]
    assert rows[PRODUCTIVE_RUN] == ["10", "4", "no", "-", "-", "-", "-"]
    assert rows["chat-productive"] == ["4", "2", "no", "-", "-", "-", "-"]
    assert "4 runs, 2 looped (heuristics only)" in done.stdout

    report = json.loads(report_file.read_text())
    assert report["schema"] == SCHEMA and report["judge"] is False
    assert report["totals"]["runs"] == 4 and report["totals"]["looped"] == 2
    assert report["errors"] == []
    runs = runs_by_id(report)
    looping = runs[LOOPING_RUN]
    # run_tests first ran at turn 2 and failed the same way at 3 and 4: flagged at 4,
    # the onset is the first of the repeats, and turns 3..8 are after it.
    assert (looping["flagged_turn"], looping["onset_turn"]) == (4, 2)
    assert looping["kind"] == "exact_repeat" and looping["source"] == "heuristic:exact_repeat"
    assert looping["wasted_turns"] == 6
    # turns 3..8 reported (400 + 60 * i) + 30 tokens for i = 2..7
    assert looping["wasted_tokens"] == sum(430 + 60 * i for i in range(2, 8))
    assert looping["tokens_source"] == "reported"
    flagged = [mark["turn"] for mark in looping["timeline"] if mark["flagged"]]
    assert flagged == [4, 5, 6, 7, 8]
    assert looping["timeline"][3]["evidence_turns"] == [2, 3, 4]
    assert runs[PRODUCTIVE_RUN]["looped"] is False and runs[PRODUCTIVE_RUN]["wasted_turns"] == 0
    assert runs["chat-productive"]["format"] == "openai_chat"
    assert runs["lf-trace-7"]["kind"] == "alternation"


@pytest.mark.slow
def test_a_productive_run_exits_0_and_estimates_nothing() -> None:
    done = scan(str(TRAJECTORY))
    assert done.returncode == 0, done.stderr
    assert "1 runs, 0 looped" in done.stdout


@pytest.mark.slow
def test_a_bad_file_is_reported_and_the_others_still_scanned(tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    shutil.copy(TRAJECTORY, folder / "good.json")
    (folder / "broken.json").write_text(json.dumps(otlp_request([{"spanId": "09" * 8}])))
    report_file = tmp_path / "scan.json"
    done = scan(str(folder), "--json", str(report_file))
    assert done.returncode == 1, done.stdout
    broken = folder / "broken.json"
    assert f"error: {broken}: span {'09' * 8}: 'traceId' missing" in done.stderr
    report = json.loads(report_file.read_text())
    assert [run["id"] for run in report["runs"]] == ["chat-productive"]
    assert report["errors"] == [
        {"file": str(broken), "reason": f"span {'09' * 8}: 'traceId' missing"}
    ]


@pytest.mark.slow
def test_a_secret_in_a_tool_argument_reaches_no_report(tmp_path: Path) -> None:
    """The loop's summary quotes the repeated call's arguments; the tracker redacts it."""
    arguments = json.dumps({"url": "https://api.example.com/v1/deploy", "token": TOKEN})
    spans = []
    messages: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"type": "text", "content": "Deploy the service."}]}
    ]
    for i in range(6):
        call_id = f"call_{i}"
        out = {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": call_id, "name": "http_post", "arguments": arguments}
            ],
        }
        attrs = [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.input.messages", "value": {"stringValue": json.dumps(messages)}},
            {"key": "gen_ai.output.messages", "value": {"stringValue": json.dumps([out])}},
        ]
        spans.append(
            {
                "traceId": "ee" * 16,
                "spanId": f"{i:016x}",
                "startTimeUnixNano": str(i),
                "attributes": attrs,
            }
        )
        result = {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": call_id, "response": "HTTP 503"}],
        }
        messages = [*messages, out, result]
    spans.append(
        {
            "traceId": "ee" * 16,
            "spanId": "ff" * 8,
            "startTimeUnixNano": "99",
            "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                {"key": "gen_ai.input.messages", "value": {"stringValue": json.dumps(messages)}},
            ],
        }
    )
    trace = tmp_path / "secret.json"
    trace.write_text(json.dumps(otlp_request(spans)))
    report_file, page = tmp_path / "scan.json", tmp_path / "scan.html"
    done = scan(str(trace), "--json", str(report_file), "--html", str(page))
    assert done.returncode == EXIT_LOOPED, done.stderr
    report = json.loads(report_file.read_text())
    (run,) = report["runs"]
    assert run["looped"] and "http_post" in run["summary"]  # the call is quoted, redacted
    for text in (report_file.read_text(), page.read_text(), done.stdout, done.stderr):
        assert not leaks(text, [TOKEN])


# -- the HTML report in a browser ---------------------------------------------------------


class _Marks(HTMLParser):
    """The timeline marks and evidence panels of a rendered report, per run."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: dict[str, dict[str, Any]] = {}
        self.current: dict[str, Any] | None = None
        self.in_panel: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "section" and "run" in classes:
            self.current = {"flagged": [], "turns": [], "evidence": [], "panels": {}}
            self.runs[str(a.get("data-run"))] = self.current
        elif tag == "li" and "turn" in classes and self.current is not None:
            turn = int(str(a.get("data-turn")))
            self.current["turns"].append(turn)
            if "flagged" in classes:
                self.current["flagged"].append(turn)
            if "evidence" in classes:
                self.current["evidence"].append(turn)
        elif tag == "details" and self.current is not None:
            self.in_panel = []
            self.current["panels"][int(str(a.get("data-turn")))] = self.in_panel

    def handle_endtag(self, tag: str) -> None:
        if tag == "details":
            self.in_panel = None

    def handle_data(self, data: str) -> None:
        if self.in_panel is not None:
            self.in_panel.append(data)


@pytest.mark.skipif(
    shutil.which("chromium") is None,
    reason="chromium is not installed (apt-get install chromium; .ci/run installs it)",
)
@pytest.mark.slow
def test_the_html_report_renders_the_flagged_turns_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "scan.html"
    done = scan(str(FIXTURES), "--html", str(page))
    assert done.returncode == EXIT_LOOPED, done.stderr
    html = page.read_text()
    # Self-contained: nothing is fetched when the page opens.
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)
    assert "<link" not in html
    rendered = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=CHROMIUM_TIMEOUT_S,
    )
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    marks = _Marks()
    marks.feed(rendered.stdout)
    looping = marks.runs[LOOPING_RUN]
    assert looping["turns"] == list(range(1, 9))
    assert looping["flagged"] == [4, 5, 6, 7, 8]
    assert looping["evidence"] == [2, 3, 4, 5, 6, 7, 8]
    panel = "".join(looping["panels"][4])
    assert 'run_tests({"path":"tests/test_dates.py"}) called 3x in a row' in panel
    assert "evidence: messages 4, 6, 8 (turns 2, 3, 4)" in panel
    assert marks.runs[PRODUCTIVE_RUN]["flagged"] == [] and marks.runs[PRODUCTIVE_RUN]["turns"] == [
        1,
        2,
        3,
        4,
    ]
    assert marks.runs["lf-trace-7"]["flagged"] == [6, 7, 8]


# -- the judge: counted and priced before, asked for ---------------------------------------


@pytest.mark.slow  # two interpreters that import litellm
def test_judge_calls_are_announced_and_need_yes(tmp_path: Path) -> None:
    with FaultServer([completion(answer(0.95, "the same failing test, again"))]) as server:
        judge = {
            ENV_PREFIX + "FAST_MODEL": "openai/judge-x",
            ENV_PREFIX + "API_BASE": server.api_base,
            ENV_PREFIX + "API_KEY": "k",
            ENV_PREFIX + "MAX_RETRIES": "0",
        }
        refused = scan(str(OTLP), **judge)
        assert refused.returncode == 2, refused.stdout
        assert re.search(r"this scan makes at most \d+ judge calls", refused.stderr)
        assert "pass --yes" in refused.stderr
        assert server.requests == []  # nothing was sent before the answer

        report_file = tmp_path / "scan.json"
        done = scan(str(OTLP), "--yes", "--json", str(report_file), **judge)
        assert done.returncode == EXIT_LOOPED, done.stderr
        report = json.loads(report_file.read_text())
        assert report["judge"] is True
        calls = sum(run["judge_calls"] for run in report["runs"])
        announced = int(re.search(r"at most (\d+) judge calls", done.stderr).group(1))  # type: ignore[union-attr]
        assert 0 < calls == len(server.requests) <= announced


# -- the other shapes of each export ---------------------------------------------------------


def test_langfuse_observation_lines_and_spans_named_after_a_pending_call(tmp_path: Path) -> None:
    """Observations one per line (the API's and the table export's shape); a SPAN is the
    tool only when a model call asked for a tool of its name, other SPANs are app steps."""
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    observations = [
        {
            "id": "g1",
            "traceId": "t1",
            "type": "GENERATION",
            "startTime": "2025-11-28T01:00:00.000Z",
            "input": [{"role": "user", "content": "Find order 7."}],
            "output": {"role": "assistant", "content": None, "tool_calls": [call]},
            "usage": {"input": 10, "output": 5, "total": 15},
        },
        {
            "id": "s0",
            "traceId": "t1",
            "type": "SPAN",
            "name": "retriever-setup",
            "startTime": "2025-11-28T01:00:00.500Z",
            "output": "ok",
        },
        {
            "id": "s1",
            "traceId": "t1",
            "type": "SPAN",
            "name": "lookup",
            "startTime": "2025-11-28T01:00:01.000Z",
            "input": {},
            "output": {"status": "shipped"},
        },
    ]
    path = tmp_path / "observations.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in observations))
    (run,) = load_runs(path)
    assert run.messages == [
        {"role": "user", "content": "Find order 7."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"status": "shipped"}'},
    ]
    assert run.reported_tokens == {1: 15}


def test_a_bad_langfuse_message_names_the_observation_and_field(tmp_path: Path) -> None:
    trace = {
        "id": "t9",
        "observations": [
            {"id": "gen-3", "type": "GENERATION", "input": [{"role": "robot", "content": "x"}]}
        ],
    }
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    with pytest.raises(TraceFormatError, match=r"observation gen-3, field input\[0\]: 'role'"):
        load_runs(path)


def test_deprecated_events_as_log_records_join_their_span(tmp_path: Path) -> None:
    """The older conventions sent each message as a log record naming its span."""
    trace_id, span_id = "12" * 16, "34" * 8

    def record(name: str, body: dict[str, Any], at: int) -> dict[str, Any]:
        return {
            "timeUnixNano": str(at),
            "traceId": trace_id,
            "spanId": span_id,
            "attributes": [{"key": "event.name", "value": {"stringValue": name}}],
            "body": {"stringValue": json.dumps(body)},
        }

    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    request = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": span_id,
                                "startTimeUnixNano": "5",
                                "attributes": [
                                    {
                                        "key": "gen_ai.operation.name",
                                        "value": {"stringValue": "chat"},
                                    },
                                    {
                                        "key": "gen_ai.usage.input_tokens",
                                        "value": {"intValue": "70"},
                                    },
                                    {"key": "gen_ai.usage.output_tokens", "value": {"intValue": 9}},
                                ],
                            }
                        ]
                    }
                ]
            }
        ],
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            record("gen_ai.user.message", {"content": "List the files."}, 5),
                            record(
                                "gen_ai.choice", {"index": 0, "message": {"tool_calls": [call]}}, 6
                            ),
                        ]
                    }
                ]
            }
        ],
    }
    path = tmp_path / "spans_and_logs.json"
    path.write_text(json.dumps(request))
    (run,) = load_runs(path)
    assert run.id == trace_id
    assert run.messages == [
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    assert run.reported_tokens == {1: 79}


def test_the_judge_estimate_bounds_calls_per_prompt() -> None:
    """At most one check per shortest interval, afresh after each user prompt (the
    schedule restarts there); a confirm model doubles it; max_judge_calls caps a run."""
    turn = [{"role": "assistant", "content": "working"}]
    messages = [{"role": "user", "content": "a"}, *turn * 6, {"role": "user", "content": "b"}]
    run = TraceRun("r", Path("r.json"), "openai_chat", [*messages, *turn * 6])
    fast = TrackerConfig(fast_model="openai/judge-x", initial_interval=3, min_interval=5)
    assert estimate_judge([run], fast).calls == 2 * (6 // 3 + 1)
    both = fast.model_copy(update={"confirm_model": "openai/judge-y"})
    assert estimate_judge([run], both).calls == 2 * 2 * (6 // 3 + 1)
    capped = both.model_copy(update={"max_judge_calls": 4})
    assert estimate_judge([run, run], capped).calls == 2 * 4
    assert estimate_judge([run], fast).cost_usd is None  # litellm has no price for judge-x


def test_an_empty_folder_and_a_missing_file_are_problems_not_clean_scans(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    runs, problems = read_paths([empty, tmp_path / "missing.json"])
    assert runs == []
    assert [(p.file, p.reason) for p in problems] == [
        (str(empty), "no .json, .jsonl or .traj file in it"),
        (str(tmp_path / "missing.json"), "no such file"),
    ]
