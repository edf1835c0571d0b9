"""The one module that talks to litellm.

It imports litellm lazily in a worker thread (the import takes seconds and must neither
block the event loop nor delay cancellation), turns litellm's exceptions into our
`JudgeError` family at one boundary, and retries transient failures with tenacity. litellm's
and the provider SDK's own retries are switched off so attempts do not multiply.

``ALLOW_MODEL_REQUESTS`` (as pydantic-ai's ``models.ALLOW_MODEL_REQUESTS``) is the one
switch for real model requests: while it is ``False``, `LiteLLMClient.complete` raises
`ModelRequestsDisabled` before litellm is imported or called, so no request can leave the
process by accident. It is ``True`` by default; the test suite turns it off for every test
(``tests/conftest.py``) and turns it back on only for the tests that talk to a local fake
endpoint (``@pytest.mark.model_requests``).
"""

from __future__ import annotations

import email.utils
import logging
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)
from tenacity.stop import stop_base

from judge.config import DEFAULT_MAX_PROMPT_CHARS, DEFAULT_MAX_REPLY_TOKENS, env_name
from judge.errors import (
    JudgeConnectionError,
    JudgeContextError,
    JudgeError,
    JudgeHTTPError,
    JudgeOutputError,
    JudgeRateLimited,
    JudgeTimeout,
)
from judge.llm._http import guarded_client, redirect_refused, reply_too_large, server_props
from judge.llm.budget import token_count

# The seam is re-exported for code that imported it from here before it had its own module.
from judge.llm.client import LLMClient as LLMClient
from judge.llm.client import ModelReply as ModelReply

logger = logging.getLogger("judge.llm")

# The default reply cap (max_tokens); a setting, `TrackerConfig.max_reply_tokens`.
JUDGE_MAX_TOKENS = DEFAULT_MAX_REPLY_TOKENS
# Backoff between retries when the server gave no Retry-After: 0.5 s, 1 s, 2 s ... capped
# at 8 s, plus up to 0.5 s of jitter so that many trackers do not retry in lockstep.
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 8.0
BACKOFF_JITTER_S = 0.5
# Local OpenAI-compatible servers (llama.cpp, vLLM) ignore the key, but the OpenAI SDK
# refuses to send a request without one.
PLACEHOLDER_API_KEY = "not-needed"
# litellm reports a missing or wrong key as a 500, or (Gemini) as an APIConnectionError;
# it is a configuration error, not an outage, and a retry cannot fix it.
_CREDENTIAL_HINTS = (
    "missing credentials",
    "api_key client option must be set",
    "api key not found",
    "api key not valid",
    "invalid api key",
    "incorrect api key",
    "invalid x-api-key",
    "no api key",
)
_CREDENTIAL_PATTERN = re.compile(r"missing \w+( \w+)? api[ _]key", re.IGNORECASE)
# An error stored on a verdict is one line (docs/judge.md promises it in verdict.errors): litellm
# folds a traceback into some messages, which stops at the first of these.
# The statuses a server answers a missing or rejected key with.
_AUTH_STATUSES = (401, 403)
_TRACEBACK_MARKER = "Traceback (most recent call last)"
MAX_ERROR_CHARS = 500
# litellm reports a refused or dropped connection as a 500 whose text says so; it is an
# unreachable endpoint, not a server error, and the verdict should say which.
_CONNECTION_HINTS = ("connection error", "connection refused", "server disconnected")
# Time for retries on top of one timeout_s, per model and check: a judge outage costs a
# turn at most timeout_s + this (+ the watchdog's grace). The default backoff for two
# retries sums to under 4 s; 10 s also leaves room for a short Retry-After.
RETRY_TIME_BUDGET_S = 10.0
# No retry is started with less time than this left: it could not get an answer anyway.
# A retry after a timeout needs a whole timeout_s instead: the server just took that long
# without answering, so a shorter attempt would only time out again (and a server that
# serves one request at a time is still computing the abandoned one).
MIN_ATTEMPT_S = 1.0
# Slack on top of timeout_s for our own watchdog, in case the transport ignores its timeout.
WATCHDOG_GRACE_S = 1.0

SCHEMA_NAME = "unproductive_state_assessment"
# Ways to ask for structured output, most precise first; a provider that rejects one is
# asked with the next (llama.cpp's server takes json_object+schema, not json_schema).
FORMAT_MODES = ("json_schema", "json_object_schema", "json_object", "none")
_FORMAT_HINTS = ("response_format", "json_schema", "schema", "json_object")

Sleep = Callable[[float], Awaitable[None]]

# Set to False to refuse every real model request (tests do; see the module docstring).
ALLOW_MODEL_REQUESTS = True


class ModelRequestsDisabled(RuntimeError):
    """A real model request was made while ``ALLOW_MODEL_REQUESTS`` is off.

    Deliberately not a `JudgeError`: the tracker would fail open on one and hide the call.
    """


def check_model_requests_allowed(model: str) -> None:
    """Raise `ModelRequestsDisabled` unless ``ALLOW_MODEL_REQUESTS`` is on."""
    if not ALLOW_MODEL_REQUESTS:
        raise ModelRequestsDisabled(
            f"refusing a real request to model {model!r}: "
            "judge.llm._litellm.ALLOW_MODEL_REQUESTS is False "
            "(in tests, mark the test @pytest.mark.model_requests to allow it)"
        )


_litellm: Any = None
_import_lock = threading.Lock()


def _import_litellm() -> Any:
    global _litellm
    with _import_lock:
        if _litellm is None:
            # Use the cost map bundled with litellm instead of downloading one at import.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            # litellm prints a "Give Feedback" banner to stdout on every mapped error;
            # an agent's own stdout is no place for that.
            litellm.suppress_debug_info = True
            _litellm = litellm
    return _litellm


# The one background import of litellm (`start_import`) and the error it ended with.
_import_thread: threading.Thread | None = None
_import_error: BaseException | None = None
_import_thread_lock = threading.Lock()
# How often a check waiting for that import looks whether it is done: from 10 ms, doubling
# to 100 ms. A thousand trackers waiting cost a few thousand wake-ups a second, where a
# worker thread each (blocked on the import's lock) cost a thousand threads per wave.
IMPORT_POLL_MIN_S = 0.01
IMPORT_POLL_MAX_S = 0.1


def _background_import() -> None:
    global _import_error
    try:
        _import_litellm()
    except BaseException as exc:  # kept for the waiter to raise, as its own import would
        _import_error = exc


def start_import() -> threading.Thread | None:
    """Start importing litellm in a daemon thread, once per process: None when it is
    imported already or model requests are disabled, else the import's thread."""
    global _import_thread, _import_error
    if _litellm is not None or not ALLOW_MODEL_REQUESTS:
        return None
    with _import_thread_lock:
        if _import_thread is None or not _import_thread.is_alive():
            _import_error = None
            _import_thread = threading.Thread(
                target=_background_import, name="loop-judge-import-litellm", daemon=True
            )
            _import_thread.start()
        return _import_thread


async def load_litellm() -> Any:
    """litellm, imported once in the background import's thread (`start_import`); the
    wait is a cancellable sleep, never a thread per waiter.

    None while model requests are disabled: nothing can be sent, so the import (seconds)
    would buy nothing, and the client's own refusal is what a test must see.
    """
    if _litellm is not None:
        return _litellm
    if not ALLOW_MODEL_REQUESTS:
        return None
    thread = start_import()
    delay = IMPORT_POLL_MIN_S
    while _litellm is None and thread is not None and thread.is_alive():
        await anyio.sleep(delay)
        delay = min(delay * 2, IMPORT_POLL_MAX_S)
    if _litellm is not None:
        return _litellm
    # The background import failed: import here (off the loop) to raise its error.
    return await anyio.to_thread.run_sync(_import_litellm, abandon_on_cancel=True)


# Name of the thread that asks litellm whether a judge model's provider key is set.
KEY_CHECK_THREAD = "loop-judge-key-check"
# Models already checked in this process: a missing key is reported once, not per tracker.
_keys_checked: set[str] = set()
_keys_lock = threading.Lock()


def missing_keys(model: str) -> list[str]:
    """The variables ``model``'s provider reads its key from, when none of them is set.

    Asks litellm (``validate_environment``), which knows every provider's variables;
    [] when the key is there or litellm does not know the provider. Imports litellm, so
    call it off the event loop (`check_keys_in_background`) or from the CLI.
    """
    litellm = _import_litellm()
    try:
        found = litellm.validate_environment(model=model)
    except Exception:  # an unknown provider prefix raises inside litellm's lookup
        return []
    if found.get("keys_in_environment"):
        return []
    return [str(name) for name in found.get("missing_keys") or []]


def _warn_missing_keys(models: list[str]) -> None:
    for model in models:
        missing = missing_keys(model)
        if missing:
            logger.warning(
                "judge model %s has no API key: none of %s is set, so every judge check "
                "will fail (heuristics still run); set one, or LOOP_JUDGE_API_KEY, and see "
                "`loop-judge doctor`",
                model,
                ", ".join(missing),
            )


def check_keys_in_background(models: list[str | None]) -> threading.Thread | None:
    """Warn once per model, soon after a tracker is built, when its provider key is
    missing, instead of failing silently at the first check (turn 30, or later).

    litellm takes seconds to import, so the check runs in a daemon thread: never on the
    event loop, never at ``import judge``. Returns the thread (tests join it), or None when
    every model was checked already.
    """
    if not ALLOW_MODEL_REQUESTS:
        return None  # nothing can be sent, so no key is needed (and litellm stays unloaded)
    with _keys_lock:
        wanted = [m for m in dict.fromkeys(models) if m and m not in _keys_checked]
        _keys_checked.update(wanted)
    if not wanted:
        return None
    thread = threading.Thread(
        target=_warn_missing_keys, args=(wanted,), name=KEY_CHECK_THREAD, daemon=True
    )
    thread.start()
    return thread


def _header(headers: Any, name: str) -> str | None:
    if headers is None:
        return None
    try:
        value = headers.get(name)
    except AttributeError:
        return None
    return str(value) if value is not None else None


def retry_after_seconds(exc: BaseException) -> float | None:
    """The server's Retry-After (seconds or an HTTP date) from a litellm exception."""
    response = getattr(exc, "response", None)
    for headers in (
        getattr(exc, "litellm_response_headers", None),
        getattr(response, "headers", None),
    ):
        value = _header(headers, "retry-after")
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            continue
        return max(0.0, when.timestamp() - time.time())
    return None


def _status(exc: BaseException) -> int | None:
    for attr in ("status_code", "code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    return None


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line: no folded traceback, no repeated ``litellm.Type:``
    prefix, whitespace collapsed, at most MAX_ERROR_CHARS."""
    name = type(exc).__name__
    message = str(exc).split(_TRACEBACK_MARKER, 1)[0]
    message = " ".join(message.split())
    prefixes = (f"litellm.{name}: ", f"{name}: ")
    while message.startswith(prefixes):  # litellm may add its own prefix more than once
        message = message.split(": ", 1)[1]
    return f"{name}: {message}"[:MAX_ERROR_CHARS]


def is_credential_error(exc: BaseException) -> bool:
    """A missing or rejected API key, whatever class litellm raised it as."""
    litellm = _litellm
    if litellm is not None and isinstance(exc, litellm.AuthenticationError):
        return True
    text = str(exc).lower()
    return any(hint in text for hint in _CREDENTIAL_HINTS) or bool(_CREDENTIAL_PATTERN.search(text))


def map_exception(exc: Exception, model: str) -> JudgeError:
    """Translate a litellm/openai/httpx exception into our family, most specific first.

    Authentication and configuration problems come first: litellm raises a missing Gemini
    key as an APIConnectionError, which would otherwise be retried as an outage.
    """
    litellm = _litellm
    text = one_line(exc)
    if isinstance(exc, JudgeError):
        return exc
    too_large = reply_too_large(exc)
    if too_large is not None:  # a reply we refused to read: retrying brings the same
        return JudgeOutputError(f"reply refused: {too_large}", model=model)
    redirected = redirect_refused(exc)
    if redirected is not None:  # the prompt goes to the configured endpoint or nowhere
        return JudgeHTTPError(str(redirected), model=model, status=redirected.status)
    if is_credential_error(exc):
        # "HTTP 401: " only when a server refused the key; litellm raises a missing Gemini
        # key itself, with a made-up 500 that must not make it retryable.
        sent = _status(exc)
        refused = sent if sent in _AUTH_STATUSES else None
        said = f"HTTP {refused}: " if refused is not None else ""
        return JudgeHTTPError(
            f"{said}no usable API key for {model}: {text}", model=model, status=refused or 401
        )
    if isinstance(exc, TimeoutError) or (litellm and isinstance(exc, litellm.Timeout)):
        return JudgeTimeout(f"timed out: {text}", model=model)
    if litellm and isinstance(exc, litellm.RateLimitError):
        return JudgeRateLimited(
            f"rate limited (429): {text}", model=model, retry_after=retry_after_seconds(exc)
        )
    if litellm and isinstance(exc, litellm.APIConnectionError):
        return JudgeConnectionError(f"connection failed: {text}", model=model)
    status = _status(exc)
    if status == 500 and any(hint in text.lower() for hint in _CONNECTION_HINTS):
        return JudgeConnectionError(f"connection failed: {text}", model=model)
    if status == 429:
        return JudgeRateLimited(
            f"rate limited (429): {text}", model=model, retry_after=retry_after_seconds(exc)
        )
    if status is not None:
        return JudgeHTTPError(f"HTTP {status}: {text}", model=model, status=status)
    name = type(exc).__name__.lower()
    if "timeout" in name:
        return JudgeTimeout(f"timed out: {text}", model=model)
    if "connect" in name:
        return JudgeConnectionError(f"connection failed: {text}", model=model)
    # Anything else from inside litellm is a bug or misuse we cannot fix by retrying.
    return JudgeHTTPError(f"unexpected error: {text}", model=model, status=400)


# How servers word a prompt that does not fit the context window: OpenAI and vLLM ("maximum
# context length is N tokens"), llama-cpp-python ("Requested tokens (N) exceed context
# window of M", or OpenAI's wording), llama.cpp's server ("exceeds the available context
# size", with n_prompt_tokens and n_ctx in the body), litellm's ContextWindowExceededError.
_CONTEXT_HINTS = (
    "context length",
    "context_length_exceeded",
    "context window",
    "context size",
    "exceed_context_size",
    "maximum context",
    "contextwindowexceeded",
)
_CONTEXT_LIMIT = (
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
    re.compile(r"context window of (\d+)", re.IGNORECASE),
    re.compile(r"\bn_ctx['\"]?\s*[:=]\s*(\d+)", re.IGNORECASE),
    re.compile(r"context (?:size|length|window) (?:of|is) (\d+)", re.IGNORECASE),
)
_CONTEXT_PROMPT = (
    re.compile(r"\((\d+) in the messages", re.IGNORECASE),
    re.compile(r"requested tokens \((\d+)\)", re.IGNORECASE),
    re.compile(r"\bn_prompt_tokens['\"]?\s*[:=]\s*(\d+)", re.IGNORECASE),
    re.compile(r"messages resulted in (\d+) tokens", re.IGNORECASE),
)
# Characters per token for the prompt's size when the server did not count it (the same
# estimate as the token budget's).
CHARS_PER_TOKEN = 4
# What a llama.cpp server needs for our prompts (up to ~10k tokens) plus the reply.
SUGGESTED_CONTEXT_TOKENS = 16_384


# Seconds for the one GET /props at the first call (a local server answers in milliseconds).
PROPS_TIMEOUT_S = 5.0


def _props_context(props: Any) -> int | None:
    """n_ctx from llama.cpp's GET /props (in default_generation_settings, or at the top)."""
    if not isinstance(props, dict):
        return None
    for source in (props.get("default_generation_settings"), props):
        value = source.get("n_ctx") if isinstance(source, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _first_number(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for pattern in patterns:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None


def _error_bodies(exc: BaseException) -> list[str]:
    """The parsed error bodies in ``exc``'s chain: llama.cpp's server gives the sizes as
    fields (n_prompt_tokens, n_ctx) that litellm leaves out of its message."""
    found: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        body = getattr(current, "body", None)
        if isinstance(body, dict):
            found.append(repr(body))
        current = current.__cause__ or current.__context__
    return found


def context_error(
    exc: BaseException,
    model: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    known_limit: int | None = None,
) -> JudgeContextError | None:
    """A `JudgeContextError` naming the prompt's size and the server's limit when ``exc``
    says the prompt did not fit the context window; None for any other error.

    A server that serves a smaller context than our prompts need (llama-cpp-python's
    default is 2,048 tokens) answers each check with a 400; a bare "HTTP 400" would leave
    the user guessing what to set.
    """
    litellm = _litellm
    status = _status(exc)
    if status in (*_AUTH_STATUSES, 429):
        return None
    raw = " ".join([str(exc), *_error_bodies(exc)])
    lowered = raw.lower()
    known = litellm is not None and isinstance(
        exc, getattr(litellm, "ContextWindowExceededError", ())
    )
    if not known and not any(hint in lowered for hint in _CONTEXT_HINTS):
        return None
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    estimate = chars // CHARS_PER_TOKEN
    counted = _first_number(_CONTEXT_PROMPT, raw)
    limit = _first_number(_CONTEXT_LIMIT, raw)
    if limit is None:
        limit = known_limit  # what the server's /props said at the first call
    size = f"{chars:,} chars, ~{estimate:,} tokens"
    if counted is not None:
        size += f" ({counted:,} as the server counted)"
    server = (
        f"the server's context is {limit:,} tokens"
        if limit is not None
        else "the server's context is smaller (it did not say its size)"
    )
    return JudgeContextError(
        f"the judge prompt does not fit the model's context window: the prompt is {size} "
        f"and the reply may take up to {max_tokens:,} more ({env_name('max_reply_tokens')}), "
        f"but {server}. Serve the model with a larger context (llama-cpp-python: --n_ctx "
        f"{SUGGESTED_CONTEXT_TOKENS}; llama.cpp: -c {SUGGESTED_CONTEXT_TOKENS}) or lower "
        f"{env_name('max_prompt_chars')}. Server said: {one_line(exc)}"[: MAX_ERROR_CHARS * 2],
        model=model,
        status=status if status is not None else 400,
        prompt_tokens=counted if counted is not None else estimate,
        context_tokens=limit,
    )


def _response_format(mode: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": True},
        }
    if mode == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    if mode == "json_object":
        return {"type": "json_object"}
    return None


def _is_format_rejection(err: JudgeError) -> bool:
    if isinstance(err, JudgeContextError):
        return False  # another response_format cannot make the prompt fit
    if not isinstance(err, JudgeHTTPError) or err.status not in (400, 422, 500):
        return False
    text = str(err).lower()
    return any(hint in text for hint in _FORMAT_HINTS)


class _Deadline:
    """A time budget for one model call: real time elapsed plus the sleeps asked for.

    ``attempt_s`` is timeout_s: a retry after a timeout is started only when a whole one
    still fits (see MIN_ATTEMPT_S), and then gets all of it.
    """

    def __init__(self, seconds: float, attempt_s: float) -> None:
        self.seconds = seconds
        self.attempt_s = attempt_s
        self._end = time.monotonic() + seconds
        self._slept = 0.0

    def spent(self, seconds: float) -> None:
        self._slept += seconds

    def left(self) -> float:
        # A floor keeps a last attempt meaningful instead of timing out at once.
        return max(self._end - time.monotonic() - self._slept, MIN_ATTEMPT_S)

    def stop(self, state: RetryCallState) -> bool:
        """Stop when the coming wait plus the attempt it needs (a whole timeout_s after a
        timeout, else MIN_ATTEMPT_S) would pass the deadline."""
        remaining = self._end - time.monotonic() - self._slept
        exc = state.outcome.exception() if state.outcome else None
        needed = self.attempt_s if isinstance(exc, JudgeTimeout) else MIN_ATTEMPT_S
        return state.upcoming_sleep + needed > remaining


class _StopAtDeadline(stop_base):
    """A tenacity stop strategy (so it combines with ``|``) that ends the retries when
    the next wait would pass the call's deadline."""

    def __init__(self, deadline: _Deadline) -> None:
        self._deadline = deadline

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self._deadline.stop(retry_state)


class _WaitStrategy:
    """Honour Retry-After when the server sent one, else jittered exponential backoff."""

    def __init__(self) -> None:
        self._backoff = wait_exponential(
            multiplier=BACKOFF_INITIAL_S, max=BACKOFF_MAX_S
        ) + wait_random(0, BACKOFF_JITTER_S)

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, JudgeRateLimited) and exc.retry_after is not None:
            return exc.retry_after
        return self._backoff(state)


class LiteLLMClient:
    """Sends one judge request through litellm with bounded, logged retries."""

    @classmethod
    def from_config(cls, config: Any, *, sleep: Sleep | None = None) -> LiteLLMClient:
        """The client a `TrackerConfig` describes (endpoint, key, timeout, retries): the one
        place both the tracker and the eval CLI build it."""
        key = config.api_key.get_secret_value() if config.api_key else None
        client = cls(
            api_base=config.api_base,
            api_key=key,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
            max_retry_after_s=config.max_retry_after_s,
            max_reply_tokens=config.max_reply_tokens,
            max_prompt_chars=config.max_prompt_chars,
            sleep=sleep,
        )
        if key is None and config.api_base is None:
            # With its own key or endpoint the caller chose the auth; else the provider's
            # variables must be set, and a missing one is said now, once.
            client.key_check = check_keys_in_background([config.fast_model, config.confirm_model])
        return client

    def __init__(
        self,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        max_retry_after_s: float = 60.0,
        max_reply_tokens: int = JUDGE_MAX_TOKENS,
        max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
        sleep: Sleep | None = None,
    ) -> None:
        self.api_base = api_base
        self._api_key = api_key
        self.timeout_s = timeout_s
        self.max_reply_tokens = max_reply_tokens
        self.max_prompt_chars = max_prompt_chars
        # The context size the server reported at the first call (llama.cpp's server only),
        # and whether that first look was taken.
        self.server_context_tokens: int | None = None
        self._context_checked = False
        self.max_retries = max_retries
        self.max_retry_after_s = max_retry_after_s
        self._sleep: Sleep = sleep or anyio.sleep
        # The background key check `from_config` started, if any (see check_keys_in_background).
        self.key_check: threading.Thread | None = None
        # model -> index into FORMAT_MODES that the endpoint accepted or we fell back to
        self._format_mode: dict[str, int] = {}

    def _initial_mode(self, litellm: Any, model: str) -> int:
        if model not in self._format_mode:
            try:
                native = bool(litellm.supports_response_schema(model=model))
            except Exception:  # unknown model strings raise inside litellm's map lookup
                native = False
            self._format_mode[model] = 0 if native else 1
        return self._format_mode[model]

    def _retryable(self, exc: BaseException) -> bool:
        if not isinstance(exc, JudgeError):
            return False
        if isinstance(exc, JudgeRateLimited) and exc.retry_after is not None:
            # A server that asks for a longer pause than we allow is down for this check.
            return exc.retry_after <= self.max_retry_after_s
        return exc.retryable or exc.format_rejected

    async def complete(
        self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
    ) -> ModelReply:
        check_model_requests_allowed(model)  # before litellm is imported or called
        litellm = await load_litellm()
        attempts = 0
        # The whole call, retries and waits included, ends by this deadline; sleeps are
        # counted as asked for, so an injected fake sleep keeps the same budget.
        budget = _Deadline(self.timeout_s + RETRY_TIME_BUDGET_S, self.timeout_s)
        timed_out = False

        async def sleep(seconds: float) -> None:
            budget.spent(seconds)
            await self._sleep(seconds)

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1) | _StopAtDeadline(budget),
            wait=_WaitStrategy(),
            retry=retry_if_exception(self._retryable),
            sleep=sleep,
            reraise=True,
            before_sleep=self._log_retry,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    # After a timeout the stop rule let this retry start only if a whole
                    # timeout_s fits; any other retry gets what is left, up to timeout_s.
                    timeout = self.timeout_s if timed_out else min(self.timeout_s, budget.left())
                    try:
                        return await self._once(litellm, model, messages, schema, attempts, timeout)
                    except JudgeTimeout:
                        timed_out = True
                        raise
                    except JudgeError:
                        timed_out = False
                        raise
        except JudgeError as exc:
            exc.attempts = attempts
            if isinstance(exc, JudgeTimeout) and attempts <= self.max_retries:
                # Retries were left, but not the time for a whole attempt: say so, or the
                # user cannot tell why a slow model got a single try.
                exc.args = (
                    f"{exc}; not retried: another {self.timeout_s:g} s attempt would pass "
                    f"this check's {budget.seconds:g} s budget (timeout_s + "
                    f"{RETRY_TIME_BUDGET_S:g} s)",
                )
            raise
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover

    @staticmethod
    def _log_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        logger.warning(
            "judge call failed (attempt %d), retrying in %.1f s: %s",
            state.attempt_number,
            wait,
            exc,
        )

    async def _once(
        self,
        litellm: Any,
        model: str,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        attempt: int,
        timeout: float,
    ) -> ModelReply:
        mode = self._initial_mode(litellm, model)
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "timeout": timeout,
            "num_retries": 0,  # litellm's own retries
            "max_retries": 0,  # the provider SDK's retries
            "temperature": 0,
            "max_tokens": self.max_reply_tokens,
            "drop_params": True,
        }
        response_format = _response_format(FORMAT_MODES[mode], schema)
        if response_format is not None:
            kwargs["response_format"] = response_format
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        elif self.api_base and model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
            kwargs["api_key"] = PLACEHOLDER_API_KEY
        # No redirects, a bounded reply (judge/llm/_http.py); one client per call.
        guarded = await guarded_client(
            litellm, model, api_base=self.api_base, api_key=kwargs.get("api_key"), timeout=timeout
        )
        if guarded is not None:
            kwargs["client"] = guarded.client
        try:
            with anyio.fail_after(timeout + WATCHDOG_GRACE_S):
                response = await litellm.acompletion(**kwargs)
        except Exception as exc:  # the boundary: every foreign error is translated here
            err = context_error(
                exc, model, messages, self.max_reply_tokens, self.server_context_tokens
            ) or map_exception(exc, model)
            if isinstance(err, JudgeTimeout):
                err = JudgeTimeout(self._timeout_text(timeout), model=model)
            if _is_format_rejection(err) and mode + 1 < len(FORMAT_MODES):
                self._format_mode[model] = mode + 1
                logger.info(
                    "%s rejected response_format %s; falling back to %s",
                    model,
                    FORMAT_MODES[mode],
                    FORMAT_MODES[mode + 1],
                )
                err.format_rejected = True
            raise err from exc
        finally:
            if guarded is not None:
                with anyio.CancelScope(shield=True):
                    await guarded.aclose()
        await self._check_server_context(response, model)
        return self._reply(litellm, response, model, attempt, self.max_reply_tokens)

    async def _check_server_context(self, response: Any, model: str) -> None:
        """At the first reply from llama.cpp's own server (its replies carry ``timings``),
        ask it for its context size (GET /props) and warn, once, when our largest prompt
        plus the reply cap would not fit: the first long window would otherwise fail with
        a context error many turns later. Other servers do not say their context size
        (llama-cpp-python's), so nothing is asked of them; their context errors still name
        it (`context_error`)."""
        if self._context_checked or not self.api_base:
            return
        self._context_checked = True
        if getattr(response, "timings", None) is None:
            return
        props = await server_props(self.api_base, api_key=self._api_key, timeout=PROPS_TIMEOUT_S)
        n_ctx = _props_context(props)
        if n_ctx is None:
            return
        self.server_context_tokens = n_ctx
        needed = -(-self.max_prompt_chars // CHARS_PER_TOKEN) + self.max_reply_tokens
        if n_ctx < needed:
            logger.warning(
                "judge server %s serves a context of %d tokens, but a judge prompt may take "
                "~%d (%s=%d chars) plus %d for the reply (%s): checks with a long window "
                "will fail. Start the server with a larger context (llama.cpp: -c %d) or "
                "lower %s",
                self.api_base,
                n_ctx,
                needed - self.max_reply_tokens,
                env_name("max_prompt_chars"),
                self.max_prompt_chars,
                self.max_reply_tokens,
                env_name("max_reply_tokens"),
                SUGGESTED_CONTEXT_TOKENS,
                env_name("max_prompt_chars"),
            )

    def _timeout_text(self, timeout: float) -> str:
        """The configured timeout, not litellm's "timeout value=" of the attempt: a user
        sets timeout_s and must find that number in the error."""
        setting = f"timeout_s={self.timeout_s:g} s ({env_name('timeout_s')})"
        if timeout >= self.timeout_s:
            return f"timed out: no reply within {setting}"
        return (
            f"timed out: no reply within {timeout:.1f} s, what was left of this check's "
            f"time budget after earlier attempts ({setting})"
        )

    @staticmethod
    def _reply(
        litellm: Any, response: Any, model: str, attempt: int, max_tokens: int | None = None
    ) -> ModelReply:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise JudgeOutputError("the reply has no choices", model=model)
        choice = choices[0]
        message = getattr(choice, "message", None)
        refusal = getattr(message, "refusal", None)
        if refusal:
            raise JudgeOutputError(f"the model refused: {str(refusal)[:200]}", model=model)
        usage = getattr(response, "usage", None)
        try:
            cost: float | None = float(litellm.completion_cost(completion_response=response))
        except Exception:  # no price known (local models): cost unknown, not a failure
            cost = None
        return ModelReply(
            content=getattr(message, "content", None),
            finish_reason=getattr(choice, "finish_reason", None),
            prompt_tokens=token_count(getattr(usage, "prompt_tokens", None)),
            completion_tokens=token_count(getattr(usage, "completion_tokens", None)),
            cost_usd=cost,
            attempts=attempt,
            max_tokens=max_tokens,
        )
