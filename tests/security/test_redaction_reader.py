"""The redactor reads text as its reader would: JSON escapes decoded, colour codes dropped,
an Authorization header of any scheme, a clip never cutting a secret in two.

Secrets here are made up in each provider's format; none is a live credential.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from judge.conversation import Conversation
from judge.history import normalize_history
from judge.llm.redaction import redact
from judge.llm.transcript import CUT_WINDOW, clip, clip_whole, fit_prompt
from tests.redaction_support import assert_redaction_grows_linearly

GHP = "ghp_R7kQ2mX9vL4pT8wZ1nB6cJ3hF5dS0aE2yU7i"
ANTHROPIC = (
    "sk-ant-api03-" + "Qm7Xr2Lk9Pz4Tw8Vn1Bc6Jh3Fd5Sa0Ey2Ui7Oq" * 2 + "b4Nz8Kc1Wg5Rt9YhMx3DA" + "AA"
)
OKTA = "00Xk2Lm9Qr4Tz8Wn1Bc6Jh3Fd5Sa0Ey2Ui7Op4Gv"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiJ1c2VyLTQyIiwiaWF0IjoxNzMyNzAwMDAwfQ."
    "Qm7Xr2Lk9Pz4Tw8Vn1Bc6Jh3Fd5Sa0Ey2Ui7Oq4Gv"
)


def _pieces(secret: str, size: int = 10) -> list[str]:
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def _holds_piece(text: str, secret: str) -> bool:
    return any(piece in text for piece in _pieces(secret))


# -- JSON as it sits in a tool call ----------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        f"gh auth token\n{GHP}",
        f"cat ~/.config/gh/hosts.yml\ntoken: {GHP}",
        f"curl -v\nauthorization: Bearer {JWT}",
        f"printenv\n\t{ANTHROPIC}",
    ],
)
def test_a_secret_after_an_escaped_line_break_is_redacted_and_the_json_stays_json(
    line: str,
) -> None:
    arguments = json.dumps({"cmd": line, "timeout": 60})
    clean = redact(arguments)
    assert not any(_holds_piece(clean, s) for s in (GHP, JWT, ANTHROPIC))
    parsed = json.loads(clean)  # still JSON, same keys, same layout around the secret
    assert parsed["timeout"] == 60 and "[REDACTED:" in parsed["cmd"]
    assert clean.startswith('{"cmd": "') and clean.endswith('", "timeout": 60}')


def test_json_quoted_inside_json_is_read_two_levels_down() -> None:
    body = json.dumps({"auth": {"note": "rotated\ntoken: " + GHP}})
    arguments = json.dumps({"method": "POST", "body": body})
    clean = redact(arguments)
    assert not _holds_piece(clean, GHP)
    inner = json.loads(json.loads(clean)["body"])
    assert inner["auth"]["note"].startswith("rotated\ntoken: [REDACTED:")


def test_text_without_secrets_keeps_every_character() -> None:
    texts = [
        json.dumps({"cmd": "ls -la\ncat README.md\t# notes", "path": "C:\\Users\\dev"}),
        json.dumps({"id": "3f2b8c1e-9d4a-4e7b-8f21-6c0d5a9e7b13", "sha": "9fceb02d0ae598e9"}),
        "\x1b[32mPASSED\x1b[0m tests/test_api.py::test_ok",
        "b'GET / HTTP/1.1\\r\\nHost: example.com\\r\\nAccept: */*\\r\\n\\r\\n'",
    ]
    for text in texts:
        assert redact(text) == text


def test_an_escaped_unicode_character_maps_back_to_whole_escapes() -> None:
    text = json.dumps({"note": "caf\u00e9 \u2713\ntoken: " + GHP + "\nend"})
    clean = redact(text)
    assert "\\u00e9 \\u2713" in clean and "\\nend" in clean
    assert json.loads(clean)["note"] == "caf\u00e9 \u2713\ntoken: [REDACTED:github_token]\nend"


# -- colour codes -----------------------------------------------------------------------------


@pytest.mark.parametrize("on, off", [("\x1b[1;33m", "\x1b[0m"), ("\x1b[38;5;208m", "\x1b[m")])
def test_a_coloured_token_is_redacted(on: str, off: str) -> None:
    for line in (
        f"{on}{GHP}{off}",
        f"token: {on}{GHP}{off}",
        f"Authorization: SSWS {on}{OKTA}{off}",
    ):
        clean = redact(line)
        assert not _holds_piece(clean, GHP) and not _holds_piece(clean, OKTA), clean


def test_colour_codes_escaped_in_json_are_dropped_too() -> None:
    result = json.dumps({"stdout": f"\x1b[33m{GHP}\x1b[0m\n"})
    assert "\\u001b" in result
    clean = redact(result)
    assert not _holds_piece(clean, GHP)
    assert json.loads(clean)["stdout"] == "\x1b[33m[REDACTED:github_token]\x1b[0m\n"


def test_a_placeholder_after_a_colour_code_stays() -> None:
    text = "GITHUB_TOKEN=\x1b[33m${GITHUB_TOKEN}\x1b[0m"
    assert redact(text) == text


# -- HTTP dumps and Authorization schemes -------------------------------------------------------


@pytest.mark.parametrize("scheme", ["SSWS", "OAuth", "Negotiate", "GenieKey", "Bearer", "token"])
def test_every_authorization_scheme_hides_its_credential(scheme: str) -> None:
    dump = f"POST /api HTTP/1.1\r\nHost: example.com\r\nAuthorization: {scheme} {OKTA}\r\n\r\n"
    for text in (dump, repr(dump.encode()), json.dumps({"request": dump})):
        clean = redact(text)
        assert not _holds_piece(clean, OKTA), text
        assert f"Authorization: {scheme} [REDACTED:" in clean


def test_an_authorization_header_without_a_credential_keeps_its_scheme() -> None:
    for text in ("Authorization: Bearer\nnext", "Authorization: Bearer <YOUR_TOKEN>"):
        assert redact(text) == text


# -- look-alikes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "OPENAI_API_KEY=your-api-key-here",
        "export GITHUB_TOKEN=<YOUR_TOKEN>",
        "api_key = settings.api_key",
        "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
    ],
)
def test_documented_examples_and_placeholders_stay(text: str) -> None:
    for form in (text, json.dumps({"cmd": "echo\n" + text})):
        assert redact(form) == form


def test_a_real_aws_key_beside_the_example_is_still_redacted() -> None:
    text = "aws_access_key_id = AKIA2E0A8F3B244C9986"
    assert redact(text) == "aws_access_key_id = [REDACTED:aws_access_key_id]"


# -- what a clip leaves -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "summary, secret",
    [
        (f'bash({{"cmd":"gh auth status\\n{GHP[:30]}…) called 3x', GHP[:30]),
        ("psql postgres://app:3jFzJVB11aycdDl5…) called 3x", "3jFzJVB11aycdDl5"),
        (f"id_token: {JWT[:50]}…)", JWT[:50]),
        ("https://hooks.slack.com/services/TDJONUDUD/B…", "TDJONUDUD/B"),
    ],
)
def test_a_clipped_credential_is_redacted(summary: str, secret: str) -> None:
    assert secret not in redact(summary)


def test_a_clipped_word_is_not_a_secret() -> None:
    for text in ("the AKIA…", "running tests…", "auth = requests.au…", "see sk-…"):
        assert redact(text) == text


# -- clipping after redacting -------------------------------------------------------------------


def _straddling(limit: int, secret: str, total: int) -> tuple[str, int]:
    """A text of about ``total`` characters with ``secret`` across `clip`'s head cut."""
    keep = max(limit - 40, 2)
    cut = keep * 2 // 3
    start = cut - len(secret) // 2
    head = ("x" * 63 + "\n") * (start // 64 + 1)
    text = head[: start - 1] + "\n" + secret + "\n" + "y" * total
    return text, cut


def test_clip_whole_moves_each_cut_off_a_secret() -> None:
    text, _ = _straddling(2000, ANTHROPIC, 6000)
    assert _holds_piece(clip(text, 2000), ANTHROPIC)  # what a plain clip would keep
    clipped = clip_whole(text, 2000, redact_spans)
    assert not _holds_piece(clipped, ANTHROPIC)
    tail_text = "z" * 5000 + "\n" + ANTHROPIC + "\n" + "w" * 640
    clipped = clip_whole(tail_text, 2000, redact_spans)
    assert not _holds_piece(clipped, ANTHROPIC) and clipped.endswith("w" * 640)


def test_clip_whole_equals_clip_without_secrets_and_reads_only_windows() -> None:
    text = "".join(f"line {i:06d} of plain output\n" for i in range(40_000))  # ~1 MB
    read: list[int] = []

    def spans(window: str) -> Sequence[tuple[int, int, str]]:
        read.append(len(window))
        return redact_spans(window)

    assert clip_whole(text, 8000, spans) == clip(text, 8000)
    assert len(read) == 2 and max(read) <= 2 * CUT_WINDOW


def redact_spans(text: str) -> list[tuple[int, int, str]]:
    from judge.llm.redaction import default_redactor

    return default_redactor().spans(text)


def test_the_conversation_keeps_no_piece_of_a_cut_secret() -> None:
    text, _ = _straddling(400 * 4, ANTHROPIC, 3000)
    conversation = Conversation(history_messages=10, message_chars=400)
    history = [
        {"role": "user", "content": "deploy it"},
        {"role": "assistant", "content": "", "tool_calls": [_call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": text},
    ]
    conversation.read(history)
    kept = conversation.recent[-1].content
    assert len(kept) < len(text) and not _holds_piece(kept, ANTHROPIC)


def _call(call_id: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}


def test_the_judge_prompt_redacts_a_long_argument_before_clipping_it() -> None:
    arguments = json.dumps({"cmd": "x" * 590 + "\ntoken: " + GHP + "\n" + "y" * 9000})
    history = [
        {"role": "user", "content": "deploy it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    messages = normalize_history(history)
    _, prompt = fit_prompt(
        messages[1:], messages[0], message_chars=1300, task_chars=2000, scrub=redact
    )
    assert not _holds_piece(prompt[1]["content"], GHP)


# -- cost -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "unit",
    ["\\n", "\\u001b[", "\x1b[1;", '\\"a', "\\\\\\n", "\\u00e9ghp_", "token: \\r\\n", "…ghp_a"],
)
@pytest.mark.slow
def test_views_grow_linearly(unit: str) -> None:
    """Twice the input costs about twice the time, never four times (quadratic)."""
    assert_redaction_grows_linearly(unit)
