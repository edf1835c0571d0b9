"""One hook invocation: an agent's raw event in, the text to print out.

Both ways a hook event is answered end here: the command run in process
(``loop-judge hook <agent>``, `judge.cli.hook`, when no daemon answers) and the warm
daemon (`judge.hooks.daemon`), which prints exactly what this returns. It reads the
payload, hands Cursor's, Gemini CLI's and Codex's to their translators
(`judge.integrations.cursor`, `gemini_cli`, `codex`), answers the Claude Code event that
results with the session held under its lock (`judge.hooks.session`,
`judge.hooks.session_files`), and writes the answer in the agent's own fields. A hook
must never break the agent: whatever goes wrong is one line on stderr and no answer.
Apart from the session because it is the process's side (stdin, stdout, the lock, the
event loop or none), which the Claude Agent SDK's in-memory callbacks never use.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from judge.hooks.session import HookSession
from judge.hooks.session_cache import SessionCache, allowed_preflight_keeps
from judge.hooks.session_files import HookSessionFiles, default_state_dir
from judge.integrations.claude_code import (
    PRE_TOOL_USE,
    STOP_EVENTS,
    HookAnswer,
    HookEvent,
    HookInputError,
)

if TYPE_CHECKING:
    from judge.config import TrackerConfig

__all__ = [
    "EXIT_HOOK",
    "MAX_PAYLOAD_BYTES",
    "answer_raw",
    "answer_stdin",
    "handle_payload",
    "hook_config",
]

# The only exit code: 0 is "success" to Claude Code, which then reads stdout as the
# hook's JSON; 2 would block with stderr as the reason, anything else shows an error.
EXIT_HOOK = 0
# Hook payloads are kilobytes (a Write's content at most a file); a bigger stdin is not a
# hook event, and reading it whole would cost the agent time for nothing.
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024


def hook_config() -> TrackerConfig:
    """The tracker configuration a hook uses: ``LOOP_JUDGE_*`` as everywhere, except that
    the semantic detector is off unless ``LOOP_JUDGE_SEMANTIC`` asks for it: merely
    checking for its extra imports onnxruntime and numpy, about 0.4 s on every tool call."""
    from judge.config import ENV_PREFIX, TrackerConfig

    if f"{ENV_PREFIX}SEMANTIC" in os.environ:
        return TrackerConfig()
    return TrackerConfig(semantic="off")


def _run_without_loop(turn: Coroutine[Any, Any, HookAnswer]) -> HookAnswer:
    """Run a judge-less event's coroutine to its end without an event loop.

    Without a judge model the tracker never awaits anything that suspends (no judge check;
    the hook passes no ``on_loop``), so the coroutine ends on its first step. Starting an
    event loop for it (``anyio.run``) cost every PostToolUse and Stop the imports of asyncio
    and anyio's backend and a loop's set-up, more than the event's own work. Should it ever
    suspend, it is closed and this raises: the caller saves no state, so nothing is
    half-recorded.
    """
    try:
        turn.send(None)
    except StopIteration as done:
        answer: HookAnswer = done.value
        return answer
    turn.close()
    raise RuntimeError("a judge-less hook turn awaited an event loop")


def handle_payload(
    payload: Any,
    *,
    state_dir: Path | str | None = None,
    config: TrackerConfig | None = None,
    cache: SessionCache | None = None,
) -> HookAnswer:
    """Answer one decoded hook payload, with the session's state loaded and saved.

    Raises `HookInputError` for a payload that is not a hook event, `TimeoutError` when
    the session stays locked; the command turns every error into "no opinion". With
    ``cache`` (a long-lived process), the session comes from it when the state file is
    unchanged since this process wrote it, and goes back to it after the event.
    """
    import judge.tracker  # noqa: F401 - imported before the lock, not while others wait
    from judge.response.telemetry import Telemetry

    event = HookEvent.parse(payload)
    config = config if config is not None else hook_config()
    store = HookSessionFiles(state_dir if state_dir is not None else default_state_dir())
    with store.locked(event.session_key) as path:
        session = cache.take(path) if cache is not None else None
        if session is None:
            # No telemetry: the process ends before any exporter could send a span, and
            # looking for opentelemetry costs every tool call tens of milliseconds.
            session = HookSession(config, store.load(path), telemetry=Telemetry())
        keeps = (
            cache is not None and event.name == PRE_TOOL_USE and allowed_preflight_keeps(session)
        )
        if event.name == PRE_TOOL_USE:
            answer = session.preflight(event)  # no event loop to start: the common case
        elif not config.judge_enabled:
            answer = _run_without_loop(session.answer(event))
        else:
            import anyio

            answer = anyio.run(session.answer, event)
        if event.name != PRE_TOOL_USE or answer:
            written = store.save(path, session.state)
            if cache is not None:
                cache.put(path, written, session)
        elif keeps and cache is not None:
            # An allowed preflight changes nothing on file; the session is as it was.
            with contextlib.suppress(OSError):
                cache.put(path, path.read_bytes(), session)
    if event.name in STOP_EVENTS:
        store.prune()
    return answer


def _scrubbed(message: str) -> str:
    """An error message as stderr may show it: redacted whatever the settings (an
    exception's text can quote a payload), and still printed if the redactor fails."""
    try:
        from judge.llm.redaction import redact

        return redact(message)
    except Exception:  # the error line must go out whatever happens
        return "(message withheld)"


def answer_raw(
    raw: bytes | None,
    *,
    state_dir: Path | str | None = None,
    config: TrackerConfig | None = None,
    cache: SessionCache | None = None,
    agent: str = "claude-code",
) -> tuple[str, str]:
    """The text the hook prints for the event ``raw`` (read from stdin when None): its
    stdout (the answer's JSON line, or nothing) and its stderr (one "ignored" line, or
    nothing). Never raises. The command and the daemon both print exactly this.
    ``agent`` ``"gemini"`` reads and answers Gemini CLI's protocol
    (`judge.integrations.gemini_cli`), ``"codex"`` Codex's (`judge.integrations.codex`),
    ``"cursor"`` Cursor's (`judge.integrations.cursor`, also for a Cursor payload given
    to ``"claude-code"``), with the same session logic."""
    # The tracker logs loop verdicts; in a hook process nobody reads them, and Python's
    # last-resort handler would print each on stderr beside our one line. Added once: the
    # daemon answers many events in one process.
    logger = logging.getLogger("judge")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    try:
        if raw is None:
            raw = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
        if len(raw) > MAX_PAYLOAD_BYTES:
            raise HookInputError(f"hook input is over {MAX_PAYLOAD_BYTES} bytes")
        payload = json.loads(raw)
        if agent == "gemini":
            from judge.integrations import gemini_cli

            event = payload.get("hook_event_name") if isinstance(payload, dict) else None
            payload = gemini_cli.to_claude_payload(payload)
            answer = handle_payload(payload, state_dir=state_dir, config=config, cache=cache)
            # Gemini CLI parses stdout as JSON on exit 0: "{}" says "no opinion".
            shown = gemini_cli.gemini_json(answer, event if isinstance(event, str) else None)
            return json.dumps(shown, ensure_ascii=False) + "\n", ""
        if agent == "cursor" or (agent == "claude-code" and _from_cursor(payload)):
            from judge.integrations import cursor

            agent = "cursor"
            event = payload.get("hook_event_name") if isinstance(payload, dict) else None
            payload = cursor.to_claude_payload(payload)
            answer = handle_payload(payload, state_dir=state_dir, config=config, cache=cache)
            # Cursor reads stdout as JSON on exit 0: "{}" says "no opinion".
            shown = cursor.cursor_json(answer, event if isinstance(event, str) else None)
            return json.dumps(shown, ensure_ascii=False) + "\n", ""
        if agent == "codex":
            from judge.integrations import codex

            payload = codex.to_claude_payload(payload)
            answer = handle_payload(payload, state_dir=state_dir, config=config, cache=cache)
            out = json.dumps(codex.codex_json(answer), ensure_ascii=False) + "\n" if answer else ""
            return out, ""
        answer = handle_payload(payload, state_dir=state_dir, config=config, cache=cache)
        out = json.dumps(answer.to_json(), ensure_ascii=False) + "\n" if answer else ""
        return out, ""
    except Exception as exc:  # a hook must never break the agent: anything at all
        # Cursor reads an empty stdout as a failed hook, which a hook set to fail closed
        # turns into a refusal: "{}" lets the call through whatever its settings.
        return ("{}\n" if agent == "cursor" else ""), _ignored(exc)


def _from_cursor(payload: Any) -> bool:
    """Whether a payload given to the claude-code hook is Cursor's: Cursor runs Claude
    Code's settings.json hooks too (its "third-party hooks"), with its own payloads.
    The Cursor module is imported only for a payload with one of its fields."""
    if not isinstance(payload, dict) or not payload.keys() & {"conversation_id", "cursor_version"}:
        return False
    from judge.integrations import cursor

    return cursor.is_cursor_payload(payload)


def _ignored(exc: BaseException) -> str:
    # One line, the error's type and message only: never the payload (it quotes code).
    message = _scrubbed(" ".join(str(exc).split())[:300])
    return f"loop-judge hook: ignored ({type(exc).__name__}: {message})\n"


def answer_stdin(
    *, state_dir: str | None = None, raw: bytes | None = None, agent: str = "claude-code"
) -> int:
    """Answer the event on stdin (or ``raw``, when stdin was read already) on stdout;
    returns `EXIT_HOOK` whatever happens."""
    out, err = answer_raw(raw, state_dir=state_dir, agent=agent)
    try:
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
    except Exception as exc:  # as any other failure: one line, no answer
        err = _ignored(exc)
    if err:
        sys.stderr.write(err)
    return EXIT_HOOK
