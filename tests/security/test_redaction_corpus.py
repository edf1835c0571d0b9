"""The independent secrets corpus (tests/data/secrets/independent.json) run end to end.

Each case's line goes into a real tracker's history in every placement the bench knows
(escaped JSON arguments, a JSON result, coloured output, an HTTP dump with literal
``\\r\\n``, a long message cut across either clip, raw text), with a judge answering over
HTTP from a local endpoint that quotes the prompt back in its analysis; then every sink is
read: the prompts as the endpoint received them, the verdicts, the saved state, the log
lines; and the Claude Code hook's state file and stderr. No piece of a secret may be in
any of them, and no look-alike may be redacted. The whole corpus is slow (about half a
minute); a sample of it runs with the fast tests.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from judge.integrations import claude_code
from tests.redaction_support import assert_no_leaks, security_bench

pytestmark = pytest.mark.model_requests

# One secret per family of placement trouble, and look-alikes the old rules got wrong.
SAMPLE = (
    "github_classic_pat",
    "anthropic_key",
    "okta_ssws",
    "jwt_bearer",
    "rsa_private_key",
    "slack_webhook",
    "postgres_url_password",
    "aws_example_key_id",
    "placeholder_angle",
    "uuid_json",
    "base64_png",
)


def test_the_corpus_is_what_the_bench_reads() -> None:
    corpus = security_bench().load_independent()
    assert len(corpus["secrets"]) >= 30 and len(corpus["lookalikes"]) >= 15
    for case in corpus["secrets"]:
        assert "{secret}" in case["line"] and all(s in case["secret"] for s in case["secrets"])
    for case in corpus["lookalikes"]:
        assert "{value}" in case["line"]
    assert all(s in {c["id"] for c in corpus["secrets"] + corpus["lookalikes"]} for s in SAMPLE)


@pytest.mark.slow
def test_a_sample_of_the_corpus_reaches_no_sink() -> None:
    figures = security_bench().measure_independent(list(SAMPLE))
    assert figures["secret_cases"] == 7 and figures["lookalike_cases"] == 4
    assert_no_leaks(figures)


@pytest.mark.slow
def test_the_whole_corpus_reaches_no_sink() -> None:
    assert_no_leaks(security_bench().measure_independent())


# -- the hook's own sinks -------------------------------------------------------------------

GHP = "ghp_R7kQ2mX9vL4pT8wZ1nB6cJ3hF5dS0aE2yU7i"
PASSWORD = "Tr0ub4dor-horse-staple-91"


def _post(folder: Path, n: int, command: str, response: Any) -> claude_code.HookAnswer:
    return claude_code.handle_payload(
        {
            "hook_event_name": "PostToolUse",
            "session_id": "s1",
            "tool_name": "Bash",
            "tool_input": {"command": command, "password": PASSWORD},
            "tool_use_id": f"toolu_{n}",
            "tool_response": response,
        },
        state_dir=folder,
    )


def test_the_hook_state_file_holds_no_secret_and_detection_is_unchanged(tmp_path: Path) -> None:
    """The state file keeps the last message fed redacted; a tracker restored from it still
    finds its place (no rewind) and flags the loop on the same call as with plain text."""
    actions: dict[str, list[str]] = {}
    for label, command in (("secret", f"gh auth status\n{GHP}"), ("plain", "gh auth status")):
        folder = tmp_path / label
        actions[label] = [
            _post(folder, n, command, f"checking\n\x1b[33m{GHP}\x1b[0m\n").action.value
            for n in range(6)
        ]
        saved = "\n".join(p.read_text() for p in folder.rglob("*.json"))
        assert GHP[4:14] not in saved and PASSWORD[:10] not in saved
        state = json.loads(next(folder.rglob("*.json")).read_text())
        assert state["fed"] == 12
    assert actions["secret"] == actions["plain"]
    assert actions["secret"][-1] != "continue"


def test_pending_calls_read_from_the_transcript_are_kept_redacted(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    call = {
        "type": "assistant",
        "uuid": "u1",
        "message": {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_9",
                    "name": "Bash",
                    "input": {"command": f"echo\n{GHP}", "db_password": PASSWORD},
                }
            ],
        },
    }
    transcript.write_text(json.dumps(call) + "\n")
    claude_code.handle_payload(
        {
            "hook_event_name": "Stop",
            "session_id": "s2",
            "transcript_path": str(transcript),
            "stop_hook_active": False,
        },
        state_dir=tmp_path / "state",
    )
    saved = json.loads(next((tmp_path / "state").rglob("*.json")).read_text())
    pending = json.dumps(saved["pending"])
    assert "toolu_9" in pending and "[REDACTED:" in pending
    assert GHP[4:14] not in pending and PASSWORD[:10] not in pending


@pytest.mark.parametrize(
    "field, value",
    [
        ("tool_use_id", [f"token: {GHP}"]),
        ("error", {"message": GHP}),
        ("stop_hook_active", f"password={PASSWORD}"),
        ("session_id", 42),
    ],
)
def test_the_hook_stderr_line_quotes_no_payload(field: str, value: Any) -> None:
    payload: dict[str, Any] = {
        "hook_event_name": "PostToolUse",
        "session_id": "s3",
        "tool_name": "Bash",
    }
    payload[field] = value
    err = io.StringIO()
    stdin = type("In", (), {"buffer": io.BytesIO(json.dumps(payload).encode())})()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        old, sys.stdin = sys.stdin, stdin
        try:
            assert claude_code.answer_stdin(state_dir=None) == claude_code.EXIT_HOOK
        finally:
            sys.stdin = old
    line = err.getvalue()
    assert line.startswith("loop-judge hook: ignored (HookInputError:") and field in line
    assert GHP[4:14] not in line and PASSWORD[:10] not in line


def _transcript_session(folder: Path, secret: bool) -> tuple[list[str], str]:
    """A session fed from its transcript (calls wait as pending until their results come),
    one Stop per turn; the actions and the state file's text at the end."""
    transcript = folder / "t.jsonl"
    folder.mkdir()
    transcript.write_text("")
    actions = []
    for n in range(7):
        value = GHP if secret else "none"
        call_input = {"command": f"gh auth status\n{value}", "db_password": PASSWORD}
        entries = [
            {
                "type": "assistant",
                "uuid": f"a{n}",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "trying again"},
                        {
                            "type": "tool_use",
                            "id": f"toolu_{n}",
                            "name": "Bash",
                            "input": call_input,
                        },
                    ],
                },
            },
            {
                "type": "user",
                "uuid": f"u{n}",
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": f"toolu_{n}",
                            "content": f"token: {value}",
                        }
                    ],
                },
            },
        ]
        with transcript.open("a") as out:
            out.write("".join(json.dumps(e) + "\n" for e in entries))
        answer = claude_code.handle_payload(
            {
                "hook_event_name": "Stop",
                "session_id": "s4",
                "transcript_path": str(transcript),
                "stop_hook_active": False,
                "last_assistant_message": "trying again",
            },
            state_dir=folder / "state",
        )
        actions.append(answer.action.value)
    return actions, next((folder / "state").rglob("*.json")).read_text()


@pytest.mark.slow
def test_a_transcript_fed_session_detects_alike_with_secrets_and_keeps_none(tmp_path: Path) -> None:
    with_secret, saved = _transcript_session(tmp_path / "secret", secret=True)
    plain, _ = _transcript_session(tmp_path / "plain", secret=False)
    assert with_secret == plain and with_secret[-1] == "stop"
    assert GHP[4:14] not in saved and PASSWORD[:10] not in saved
    assert json.loads(saved)["fed"] == 21  # every message once: the cursor never rewound
