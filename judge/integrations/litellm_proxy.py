"""loop-judge as a litellm proxy guardrail: loop detection for agents that call through it.

Each chat request's ``messages`` is one turn of the session it belongs to; the guardrail
runs ``turn_started`` on it before the proxy forwards the request, and then, by mode:

- ``observe``: logs the verdict and counts it in `metrics`; the request goes on untouched;
- ``nudge``: appends the verdict's recovery message to the request, so the model the agent
  is talking to reads it in this very answer (the agent's own history is unchanged, so the
  next turn is judged on what the agent did, not on our text);
- ``block``: rejects the request with a guardrail error naming the loop.

The session id comes from, in order: the request's ``metadata.loop_judge_session_id``,
the ``x-loop-judge-session`` header, then litellm's own session conventions
(``litellm_session_id``, ``metadata.session_id``, ``litellm_metadata.session_id``).
Requests without one are passed through unjudged: without a session there is no history
to call a loop. A session belongs to the proxy key that sent it (the key's hash names its
namespace in the store), so a caller with another key that sends the same session id gets
a session of its own, never this one's ladder or history; an id outside the sidecar's
rule (1-128 of ``A-Za-z0-9._:@-``) is passed through unjudged.

The guardrail never fails a request because of itself: a history it cannot read, an
unreachable session store or a turn past its CPU budget is logged and counted, and the
request goes on. Only ``block`` mode with a loop verdict rejects.

The tracker runs in worker threads under the sidecar's CPU budget
(``turn_cpu_budget_s``, ``LOOP_JUDGE_TURN_CPU_BUDGET_S``; ``worker_threads``), never on
the proxy's event loop: reading a 10 MB history costs seconds of CPU, and on the loop
every other request of the proxy would wait for it.

Enable it in the proxy's ``config.yaml``::

    guardrails:
      - guardrail_name: loop-judge
        litellm_params:
          guardrail: judge.integrations.litellm_proxy.LoopJudgeGuardrail
          mode: pre_call
          default_on: true
          loop_judge_mode: nudge          # observe | nudge | block
          # redis_url: redis://redis:6379/0   # else LOOP_JUDGE_REDIS_URL, else in memory

This module imports litellm (3-5 s) at import time, because the class must subclass
litellm's `CustomGuardrail`; nothing else in loop-judge imports it.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Mapping
from enum import Enum
from typing import Any

from judge.config import TrackerConfig
from judge.errors import HistoryError
from judge.llm._litellm import _import_litellm
from judge.llm.client import LLMClient
from judge.llm.redaction import redact
from judge.service import (
    Metrics,
    ServedStore,
    ServerSettings,
    SessionStore,
    StoreError,
    TurnOverBudget,
    TurnRunner,
    bridge_judge,
    run_store_turn,
    store_from_settings,
)
from judge.verdict import Verdict

# Through judge.llm._litellm, the one place that imports litellm: it uses the bundled model cost
# map instead of downloading one. Inside the proxy litellm is already loaded.
_import_litellm()

from litellm.exceptions import GuardrailRaisedException  # noqa: E402
from litellm.integrations.custom_guardrail import CustomGuardrail  # noqa: E402
from litellm.types.guardrails import GuardrailEventHooks  # noqa: E402

logger = logging.getLogger("judge.integrations.litellm_proxy")

# The sidecar's session-id rule (judge/service/app.py), so a store key "<principal>/<id>"
# is never ambiguous whichever front wrote it.
_SESSION_ID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
# Principal of requests that carry no proxy key (a proxy run without auth).
ANONYMOUS = "anonymous"
# Hex digits of the key's SHA-256 that name its namespace: 96 bits, no collision in practice,
# and the key itself never reaches the store, a log or a metric.
PRINCIPAL_HEX = 24


def principal_of(user_api_key_dict: Any) -> str:
    """The proxy key a request came with, as a digest: its sessions are its own.

    litellm passes a `UserAPIKeyAuth`; its ``token`` is the stored (hashed) key, ``api_key``
    the one sent. Either identifies the caller; neither is kept as it is.
    """
    key = getattr(user_api_key_dict, "token", None) or getattr(user_api_key_dict, "api_key", None)
    if not isinstance(key, str) or not key:
        return ANONYMOUS
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:PRINCIPAL_HEX]


GUARDRAIL_NAME = "loop-judge"
METADATA_KEY = "loop_judge_session_id"
SESSION_HEADER = "x-loop-judge-session"
# Where litellm keeps request metadata: "metadata" on chat routes, "litellm_metadata" on
# routes whose own API already has a "metadata" field (Anthropic /v1/messages, responses).
_METADATA_BUCKETS = ("metadata", "litellm_metadata")
# What the nudge is sent as. "user" is what the README's own agent loop appends and every
# provider accepts after a tool result; a mid-conversation "system" message is rejected or
# hoisted by some providers.
DEFAULT_NUDGE_ROLE = "user"
# Server settings the guardrail accepts from its config.yaml block (the rest are HTTP-only).
_STORE_SETTINGS = (
    "redis_url",
    "session_ttl_s",
    "max_sessions",
    "lock_lease_s",
    "lock_wait_s",
    "key_prefix",
    "max_store_bytes",
)
# How the guardrail runs turns, from the same block: the sidecar's CPU budget and threads.
_RUNNER_SETTINGS = ("turn_cpu_budget_s", "worker_threads")


class GuardrailMode(str, Enum):
    """What the guardrail does with a loop verdict."""

    OBSERVE = "observe"
    NUDGE = "nudge"
    BLOCK = "block"


def _header(data: Mapping[str, Any], name: str) -> str | None:
    """A request header, wherever this litellm version put the headers (case-insensitive)."""
    candidates: list[Any] = []
    proxy_request = data.get("proxy_server_request")
    if isinstance(proxy_request, Mapping):
        candidates.append(proxy_request.get("headers"))
    for bucket in _METADATA_BUCKETS:
        meta = data.get(bucket)
        if isinstance(meta, Mapping):
            candidates.append(meta.get("headers"))
    for headers in candidates:
        if isinstance(headers, Mapping):
            for key, value in headers.items():
                if isinstance(key, str) and key.lower() == name and value:
                    return str(value)
    return None


def session_id_of(data: Mapping[str, Any], header: str = SESSION_HEADER) -> str | None:
    """The loop-judge session a proxy request belongs to, or None (see the module doc)."""
    buckets = [data.get(b) for b in _METADATA_BUCKETS]
    metas = [m for m in buckets if isinstance(m, Mapping)]
    for meta in metas:
        if meta.get(METADATA_KEY):
            return str(meta[METADATA_KEY])
    from_header = _header(data, header)
    if from_header:
        return from_header
    if data.get("litellm_session_id"):
        return str(data["litellm_session_id"])
    for meta in metas:
        if meta.get("session_id"):
            return str(meta["session_id"])
    return None


def block_message(verdict: Verdict) -> str:
    """The rejection text: what loop, where, and what the agent should do instead."""
    kind = verdict.kind.value if verdict.kind is not None else "unclassified"
    head = (
        f"loop-judge: the agent is stuck in a loop ({kind}, turn {verdict.turn}, "
        f"{verdict.source or 'unknown source'}, confidence "
        f"{verdict.confidence if verdict.confidence is not None else 'n/a'})"
    )
    detail = verdict.summary or verdict.analysis
    return f"{head}: {detail}" if detail else head


class LoopJudgeGuardrail(CustomGuardrail):
    """A pre-call guardrail that runs the loop tracker on every chat request of a session.

    Keyword arguments come from the guardrail's ``litellm_params`` in the proxy config;
    ``store``, ``config`` and ``judge_client`` are for embedding and tests.
    """

    def __init__(
        self,
        *,
        loop_judge_mode: GuardrailMode | str = GuardrailMode.OBSERVE,
        session_header: str = SESSION_HEADER,
        nudge_role: str = DEFAULT_NUDGE_ROLE,
        store: SessionStore | None = None,
        config: TrackerConfig | None = None,
        judge_client: LLMClient | None = None,
        **kwargs: Any,
    ) -> None:
        store_kwargs = {k: kwargs.pop(k) for k in _STORE_SETTINGS if kwargs.get(k) is not None}
        runner_kwargs = {k: kwargs.pop(k) for k in _RUNNER_SETTINGS if kwargs.get(k) is not None}
        kwargs.setdefault("guardrail_name", GUARDRAIL_NAME)
        kwargs.setdefault("event_hook", GuardrailEventHooks.pre_call)
        kwargs.setdefault("supported_event_hooks", [GuardrailEventHooks.pre_call])
        super().__init__(**kwargs)
        self.loop_judge_mode = GuardrailMode(loop_judge_mode)
        if nudge_role not in ("user", "system"):
            raise ValueError(f"nudge_role must be 'user' or 'system', got {nudge_role!r}")
        self.nudge_role = nudge_role
        self.session_header = session_header.lower()
        settings = ServerSettings(**store_kwargs, **runner_kwargs)
        if store is None:
            config = config if config is not None else TrackerConfig()
            store = store_from_settings(settings, config, judge_client=judge_client)
        self.store = store
        self.metrics = Metrics()
        self.runner = TurnRunner(
            threads=settings.worker_threads, cpu_budget_s=settings.turn_cpu_budget_s
        )
        if isinstance(store, ServedStore) and store.config.fast_model:
            # Judge requests go back to the proxy's loop, which owns the connection pools.
            bridge_judge(store, self.runner)

    async def _turn(self, key: str, messages: list[Any]) -> Verdict:
        return await run_store_turn(self.runner, self.store, key, messages)

    async def async_pre_call_hook(
        self,
        user_api_key_dict: Any,
        cache: Any,
        data: dict[str, Any],
        call_type: Any,
    ) -> dict[str, Any] | None:
        """Judge this request's turn; maybe nudge or block (see the module doc)."""
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            return data  # not a chat request: embeddings, images, ...
        session_id = session_id_of(data, self.session_header)
        if session_id is None:
            self.metrics.inc("loop_judge_unjudged_requests_total", reason="no_session")
            return data
        if not _SESSION_ID.fullmatch(session_id):
            logger.warning(
                "loop-judge: a session id outside 1-128 of A-Za-z0-9._:@- is not judged: %r",
                redact(session_id[:64]),
            )
            self.metrics.inc("loop_judge_unjudged_requests_total", reason="bad_session_id")
            return data
        key = f"{principal_of(user_api_key_dict)}/{session_id}"
        started = time.perf_counter()
        try:
            verdict = await self._turn(key, messages)
        except TurnOverBudget as exc:
            logger.warning("loop-judge: session %s: %s", redact(session_id), exc)
            self.metrics.inc("loop_judge_rejected_requests_total", reason="cpu_budget")
            return data
        except HistoryError as exc:
            logger.warning(
                "loop-judge: session %s: unreadable messages: %s",
                redact(session_id),
                redact(str(exc)),
            )
            self.metrics.inc("loop_judge_history_errors_total")
            return data
        except StoreError as exc:
            logger.warning(
                "loop-judge: session %s: store failed: %s", redact(session_id), redact(str(exc))
            )
            self.metrics.inc("loop_judge_store_errors_total", error=type(exc).__name__)
            return data
        self.metrics.record_turn(verdict, time.perf_counter() - started)
        if not verdict:
            return data
        # The summary is redacted by the tracker; the log redacts again whatever the
        # tracker's settings, since a log outlives the request.
        logger.warning(
            "loop-judge: session %s turn %d: %s (mode %s)",
            redact(session_id),
            verdict.turn,
            redact(verdict.summary or verdict.source or "-"),
            self.loop_judge_mode.value,
        )
        if self.loop_judge_mode is GuardrailMode.BLOCK:
            raise _blocked(self.guardrail_name, block_message(verdict))
        if self.loop_judge_mode is GuardrailMode.NUDGE and verdict.recovery_message:
            nudge = {"role": self.nudge_role, "content": verdict.recovery_message}
            return {**data, "messages": [*messages, nudge]}
        return data


def _blocked(guardrail_name: str | None, message: str) -> GuardrailRaisedException:
    """litellm's own block error, which the proxy answers with 400 and the message."""
    try:
        return GuardrailRaisedException(
            guardrail_name=guardrail_name,
            message=message,
            should_wrap_with_default_message=False,
            status_code=400,
            blocked_content=True,
        )
    except TypeError:  # litellm before status_code/blocked_content existed
        return GuardrailRaisedException(guardrail_name=guardrail_name, message=message)
