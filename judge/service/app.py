"""The sidecar's HTTP API: one `LoopTracker` per session, kept in a `SessionStore`.

Every session belongs to the principal whose bearer token created it; another principal
cannot see, change or delete it (it gets 404, as for a session that does not exist).

Status codes say whose fault a failure is: 400 (a Host header this server does not
answer), 401 (token), 404 (no such session for this principal), 413 (body too large, or
the turn exceeded its CPU budget), 422 (the caller's history, session id or
Idempotency-Key is malformed; names the message index and field, or the header), 409
(appended messages do not continue the stored session, or the session's lock was lost:
every 409 carries ``expected_start``, where the stored history ends), 503 (the session
store: a busy session, Redis down; retry), 507 (the in-memory store is at its byte cap:
no new session). A judge model failure is never an HTTP error: it is reported on the
verdict, as the library does.

A turn is counted once however often its request is sent: the session keeps its last
request's digest, Idempotency-Key and answer, and a resend of that request (the same
key, or without a key the same body) gets that answer again (``Idempotent-Replayed:
true``) without a new turn. A session with no stored state whose history already holds
earlier turns of the agent (it expired, was evicted, or Redis lost it) is counted from
turn 1 again, and the response says so (``Loop-Judge-Session: restarted``), as the log does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import Depends, FastAPI, Header, Request, Response
from fastapi import Path as PathParam
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from judge.errors import HistoryError, LoopJudgeError
from judge.service.metrics import CONTENT_TYPE, Metrics
from judge.service.session_codec import request_digest
from judge.service.settings import (
    ANONYMOUS_PRINCIPAL,
    DEFAULT_HOST,
    ServerSettings,
)
from judge.service.store import (
    ServedStore,
    Session,
    SessionBusy,
    SessionLockLost,
    SessionStore,
    StoreError,
    StoreFull,
    StoreUnavailable,
    store_from_settings,
)
from judge.service.turns import AppendConflict, appended_history, run_call, run_turn
from judge.service.worker import TurnOverBudget, TurnRunner, bridge_judge
from judge.state import MAX_STATE_BYTES
from judge.verdict import Verdict

logger = logging.getLogger("judge.service.app")

API_TITLE = "loop-judge sidecar"
API_VERSION = "1"
# The committed schema (regenerate with `loop-judge serve --dump-openapi`).
OPENAPI_FILE = Path(__file__).with_name("openapi.json")
# Session ids are path segments and parts of store keys ("<principal>/<id>"): no slashes,
# braces or spaces. 128 chars fits a UUID, a ULID or "<agent>:<run>:<uuid>".
SESSION_ID_CHARS = "A-Za-z0-9._:@-"
SESSION_ID_MAX = 128
# "." and ".." are refused: URL parsers (fetch, browsers, httpx) resolve them as path steps,
# so such a session could be reached only by clients that send the path unnormalized. Some
# character other than a dot, or three dots or more; the length is `max_length`'s.
_NOT_DOT = SESSION_ID_CHARS.replace(".", "")
SESSION_ID_PATTERN = rf"^(?:[{SESSION_ID_CHARS}]*[{_NOT_DOT}][{SESSION_ID_CHARS}]*|\.{{3,}})$"
# Seconds a client should wait before retrying a 503 from the store: a busy session
# normally frees within one turn (~1 ms heuristics, seconds with a judge check).
RETRY_AFTER_S = 1
# Paths answered whatever the Host header says: load balancers and orchestrators probe
# by IP address, and liveness reveals nothing about any session.
HOST_EXEMPT_PATHS = frozenset({"/healthz"})
# A turn this small runs inline on the event loop instead of in a worker thread: the hop
# to a thread and the GIL hand-over cost about as much as a short turn's own work. An
# append turn is 2-4 messages, 0.5-3 KB of JSON, and the detectors' cost is linear in
# new text, so a turn within both bounds holds the loop briefly; anything larger keeps
# to the threads.
INLINE_MAX_BODY_BYTES = 4 * 1024
INLINE_MAX_MESSAGES = 8
# A store that persists (Redis) also writes the session's whole state after the turn, in
# time linear in its size (a 30-turn session's state is about 28 KB). A small turn of a
# session whose last save was at most this big still runs inline; a bigger state, or one
# not yet saved here, keeps to the threads.
INLINE_MAX_STATE_BYTES = 32 * 1024
# An inline turn cannot be stopped mid-way, so turns stay on the watched threads when the
# CPU budget is below this: a budget that tight means the operator wants every turn
# bounded, and 1 s is hundreds of times what an inline turn costs.
INLINE_MIN_BUDGET_S = 1.0
# A body up to this size is digested (for recognising a resend) on the event loop; a
# larger one in a thread (blake2b releases the GIL, and the largest body is 8 MiB).
INLINE_DIGEST_BYTES = 64 * 1024
# The header a client names a turn request with, so that resending it counts no new turn.
IDEMPOTENCY_HEADER = "Idempotency-Key"
# Keys are the client's (a UUID, a ULID, "<run>:<turn>"): visible ASCII, at most this long.
IDEMPOTENCY_KEY_MAX = 255
_IDEMPOTENCY_KEY = re.compile(rf"[\x21-\x7e]{{1,{IDEMPOTENCY_KEY_MAX}}}")
# A session found without stored state whose history already holds this many assistant
# messages was counted before (it expired, was evicted, or Redis lost it), not begun: an
# agent's first turn holds at most one (the call whose result it reports).
RESTARTED_MIN_ASSISTANT = 2
# What the response of such a session's turn carries (with a log line and a metric).
SESSION_HEADER = "Loop-Judge-Session"


class TurnRequest(BaseModel):
    """One turn: the agent's history, whole or only what was added since the last turn.

    Without ``start``, ``messages`` is the whole history so far (the tracker reads only
    its new tail). With ``start``, ``messages`` are only the new ones and ``start`` the
    index the first of them has in the agent's history, which must be where the stored
    session ends (else 409: send the whole history once, then append again).
    """

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]] = Field(
        description="OpenAI chat messages: role, content, tool_calls, tool_call_id, name"
    )
    start: int | None = Field(
        default=None,
        ge=0,
        description="append mode: the index of messages[0] in the agent's whole history",
    )


class CallRequest(BaseModel):
    """A tool call the agent is about to make (preflight: counts no turn)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the tool's name")
    arguments: Any = Field(
        default=None, description="a JSON object, or its JSON text as in OpenAI tool calls"
    )


class DeleteResponse(BaseModel):
    deleted: bool = Field(description="false when the session did not exist")


class HealthResponse(BaseModel):
    status: str = "ok"
    store: str = Field(description='"memory" or "redis"')


class ErrorResponse(BaseModel):
    detail: str


class ConflictResponse(BaseModel):
    detail: str
    expected_start: int = Field(
        description="where the stored history ends: append from there, or send it all "
        "(0 when nothing is stored)"
    )


class StoreFullResponse(BaseModel):
    detail: str
    limit: str = Field(description="the setting that bounds it")


class OverBudgetResponse(BaseModel):
    detail: str
    limit: str = Field(description="the setting that bounds it")
    budget_s: float


def _json_error(status: int, content: dict[str, Any], **headers: str) -> Response:
    # ASCII JSON: a string from the request (a lone surrogate's escape, say) is written
    # as an escape again, where UTF-8 could not encode it (a 500 and a closed connection).
    return Response(
        json.dumps(content).encode(),
        status_code=status,
        media_type="application/json",
        headers=headers or None,
    )


class _BodyTooLarge(Exception):
    pass


class BadIdempotencyKey(LoopJudgeError):
    """An Idempotency-Key that is malformed, or that named another request (422)."""


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, before they are buffered.

    Checks Content-Length up front and counts streamed (chunked) bodies as they arrive,
    so a client cannot make a replica hold more than the limit by lying or omitting it.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        too_large = False
        refused = False

        async def counted_receive() -> Message:
            nonlocal seen, too_large
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    too_large = True
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            # FastAPI turns an error while reading the body into its own 400; once the
            # limit was hit, whatever the app answers is replaced by our 413.
            nonlocal refused
            if not too_large:
                await send(message)
            elif not refused:
                refused = True
                await self._refuse(send)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except _BodyTooLarge:
            if not refused:
                refused = True
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        detail = f"request body larger than {self.max_bytes} bytes (LOOP_JUDGE_MAX_BODY_BYTES)"
        await _send_json(send, 413, {"detail": detail}, close=True)


async def _send_json(send: Send, status: int, content: dict[str, Any], *, close: bool) -> None:
    body = json.dumps(content).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def host_name(header: bytes) -> str:
    """The name in a Host header, lower case, without port or IPv6 brackets."""
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1 : text.find("]")] if "]" in text else text
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


class HostCheck:
    """Answer only requests whose Host header names this server (DNS rebinding).

    A web page can make a browser resolve its own domain to 127.0.0.1 and then call the
    sidecar; the browser still sends the page's domain as Host, which is refused here.
    """

    def __init__(self, app: ASGIApp, names: frozenset[str] | None, metrics: Metrics) -> None:
        self.app = app
        self.names = names
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.names is None or scope["path"] in HOST_EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or ()).get(b"host", b"")
        name = host_name(header)
        if name in self.names:
            await self.app(scope, receive, send)
            return
        self.metrics.inc("loop_judge_rejected_requests_total", reason="host")
        detail = (
            f"Host {name[:100]!r} is not served here: add it to LOOP_JUDGE_ALLOWED_HOSTS "
            "(comma list) if clients reach this sidecar by that name"
        )
        await _send_json(send, 400, {"detail": detail}, close=False)


def _small_save(session: Session) -> bool:
    """Whether the session's last save here was small enough for its next one to run on
    the event loop: within INLINE_MAX_STATE_BYTES and within half the state's byte cap
    (a state near its cap is written twice and shed, several passes over it)."""
    size = session.state_bytes
    cap = session.tracker.config.max_state_bytes or MAX_STATE_BYTES
    return size is not None and size <= min(INLINE_MAX_STATE_BYTES, cap // 2)


class TurnHandler:
    """One turn, from a validated request to its response, and its failures' answers."""

    def __init__(
        self,
        store: ServedStore,
        runner: TurnRunner,
        metrics: Metrics,
        principals: dict[bytes, str] | None,
        *,
        inline: bool = False,
    ) -> None:
        self.store = store
        self.runner = runner
        self.metrics = metrics
        self.principals = principals
        # Whether small turns may run on the event loop (`inline_allowed`).
        self.inline = inline

    async def run(
        self,
        principal: str,
        session_id: str,
        messages: list[dict[str, Any]],
        start: int | None,
        *,
        small: bool = False,
        body: bytes | None = None,
        idempotency_key: str | None = None,
    ) -> Response:
        """The verdict's response; raises what the route's exception handlers answer.

        ``small``: the request is within `INLINE_MAX_BODY_BYTES` and `INLINE_MAX_MESSAGES`,
        so it runs on the event loop when this handler allows it (`inline_allowed`).
        ``body``: the request's bytes, whose digest recognises a resend of the session's
        last request (with ``idempotency_key``, the key decides; see the module doc).
        """
        started = time.perf_counter()
        if idempotency_key is not None and not _IDEMPOTENCY_KEY.fullmatch(idempotency_key):
            raise BadIdempotencyKey(
                f"{IDEMPOTENCY_HEADER} must be 1-{IDEMPOTENCY_KEY_MAX} visible ASCII "
                "characters (a UUID, say)"
            )
        digest = None
        if body is not None:
            digest = (
                request_digest(body)
                if len(body) <= INLINE_DIGEST_BYTES
                else await anyio.to_thread.run_sync(request_digest, body)
            )
        key = store_key(principal, session_id)
        headers: dict[str, str] = {}
        async with self.store.open(key) as session:
            replayed = _replayed(session, digest, idempotency_key)
            if replayed is not None:
                session.unchanged = True  # nothing to save: the lock is just released
                self.metrics.inc("loop_judge_replayed_turns_total")
                return Response(
                    replayed,
                    media_type="application/json",
                    headers={"Idempotent-Replayed": "true"},
                )
            if session.fresh and not start:
                self._note_restart(key, messages, headers)
            history = messages if start is None else appended_history(session, start, messages)
            persists = self.store.persists
            request = (digest, idempotency_key) if digest is not None else None
            measure = bool(getattr(self.store, "measures", False))
            work = partial(
                run_turn,
                session,
                history,
                persists,
                measure=measure,
                request=request,
                sent_bytes=len(body) if body is not None else None,
            )
            inline = (small and self.inline) and (not persists or _small_save(session))
            try:
                outcome = await (work() if inline else self.runner.run(work))
            except TurnOverBudget:
                session.discard()  # stopped mid-way: the tracker may be half-updated
                raise
        self.metrics.record_turn(outcome.verdict, time.perf_counter() - started)
        return Response(outcome.body, media_type="application/json", headers=headers or None)

    def _note_restart(
        self, key: str, messages: list[dict[str, Any]], headers: dict[str, str]
    ) -> None:
        """A session with no stored state: say so if the client's whole history shows
        it was counted before (an append past message 0 is a 409 saying so instead)."""
        assistants = 0
        for message in messages:
            if message.get("role") == "assistant":
                assistants += 1
                if assistants >= RESTARTED_MIN_ASSISTANT:
                    break
        if assistants < RESTARTED_MIN_ASSISTANT:
            return  # a session's first turn
        headers[SESSION_HEADER] = "restarted"
        self.metrics.inc("loop_judge_sessions_restarted_total")
        logger.warning(
            "session %s: nothing is stored for it but the client sent a history of %d "
            "messages with earlier turns: its state was lost (idle past "
            "LOOP_JUDGE_SESSION_TTL_S, evicted by Redis, whose maxmemory-policy must be "
            "noeviction, or a Redis restart without persistence); it is counted from "
            "turn 1 again",
            key,
            len(messages),
        )

    def error_response(
        self,
        exc: HistoryError | StoreError | AppendConflict | TurnOverBudget | BadIdempotencyKey,
    ) -> Response:
        """The answer to a turn's failure (the route's exception handlers use it too)."""
        if isinstance(exc, BadIdempotencyKey):
            self.metrics.inc("loop_judge_rejected_requests_total", reason="idempotency_key")
            item = {
                "loc": ["header", IDEMPOTENCY_HEADER.lower()],
                "msg": str(exc),
                "type": "idempotency_key",
            }
            return _json_error(422, {"detail": [item]})
        if isinstance(exc, HistoryError):
            self.metrics.inc("loop_judge_history_errors_total")
            return _history_error_response(exc)
        if isinstance(exc, StoreError):
            self.metrics.inc("loop_judge_store_errors_total", error=type(exc).__name__)
            return _store_error_response(exc)
        if isinstance(exc, AppendConflict):
            self.metrics.inc("loop_judge_rejected_requests_total", reason="append_conflict")
            return _json_error(409, {"detail": str(exc), "expected_start": exc.expected_start})
        self.metrics.inc("loop_judge_rejected_requests_total", reason="cpu_budget")
        content = {"detail": str(exc), "limit": "turn_cpu_budget_s", "budget_s": exc.budget_s}
        return _json_error(413, content)


class SidecarApp(FastAPI):
    """FastAPI with the Host check and the body limit in front.

    They wrap the whole app rather than sit in its middleware stack, so a request they
    refuse never reaches FastAPI's own layers; everything else passes through them.
    """

    front: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.front is not None and scope["type"] == "http":
            await self.front(scope, receive, send)
        else:
            await self._inner(scope, receive, send)

    async def _inner(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)


_bearer = HTTPBearer(
    auto_error=False,
    description="a token of LOOP_JUDGE_SERVER_TOKEN(S); its principal owns the sessions",
)
SessionId = Annotated[
    str,
    PathParam(
        pattern=SESSION_ID_PATTERN,
        min_length=1,
        max_length=SESSION_ID_MAX,
        description=f"the caller's id for the session: 1-{SESSION_ID_MAX} of {SESSION_ID_CHARS}",
    ),
]


class _Unauthorized(Exception):
    """Raised by the auth dependency; answered 401 with a WWW-Authenticate header."""


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


async def principal_of(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The caller's principal, from its bearer token.

    Tokens are compared by their SHA-256 digests, looked up in a dict: the time taken says
    nothing about how much of a guess was right (no prefix of a digest can be aimed at).
    """
    principals: dict[bytes, str] | None = request.app.state.principals
    if principals is None:
        return ANONYMOUS_PRINCIPAL
    given = credentials.credentials.encode() if credentials is not None else b""
    principal = principals.get(_digest(given)) if given else None
    if principal is None:
        raise _Unauthorized
    return principal


Principal = Annotated[str, Depends(principal_of)]


def store_key(principal: str, session_id: str) -> str:
    """The store key of a principal's session: '/' appears in neither part, so no two
    (principal, session) pairs share a key."""
    return f"{principal}/{session_id}"


def _history_error_response(exc: HistoryError) -> Response:
    # Same shape as FastAPI's own 422 (a list of {loc, msg, type}), so one client-side
    # parser handles both; loc points into the request body.
    loc: list[str | int] = ["body", "messages"]
    if exc.index is not None:
        loc.append(exc.index)
    if exc.field:
        loc.append(exc.field)
    item = {
        "loc": loc,
        "msg": str(exc),
        "type": "history_error",
        "index": exc.index,
        "field": exc.field,
    }
    return _json_error(422, {"detail": [item]})


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


async def _name_surrogate_field(request: Request, error: dict[str, Any]) -> None:
    """Say which field of the body holds a lone surrogate (an escape such as ``\\ud800``
    that is no text). pydantic names the body itself when it is a field's name."""
    loc = list(error.get("loc", ()))
    subject = f"field {loc[-1]!r}" if len(loc) > 1 else "the body"
    if loc == ["body"]:
        try:
            data = json.loads(await request.body())
        except ValueError:
            data = None
        named = (
            next((k for k in data if _has_surrogate(k)), None) if isinstance(data, dict) else None
        )
        if named is not None:
            error["loc"] = loc = ["body", named]
            subject = f"the field name {named!r}"
    error["msg"] = (
        f"{subject} holds a lone surrogate escape (\\ud800-\\udfff alone), which is not "
        "text: encode the text as UTF-8 before escaping it"
    )


def _replayed(session: Session, digest: str | None, key: str | None) -> bytes | None:
    """The answer to send again when this request resends the session's last one: the
    same Idempotency-Key (with the same body, else `BadIdempotencyKey`), or without a key
    the same body. None for a new request."""
    replay = session.replay
    if replay is None or digest is None:
        return None
    if key is not None:
        if replay.key != key:
            return None
        if replay.digest != digest:
            raise BadIdempotencyKey(
                f"{IDEMPOTENCY_HEADER} {key!r} named this session's last turn, whose body "
                "was different: send a new key with a new request"
            )
        return replay.body
    return replay.body if replay.digest == digest else None


def _store_error_response(exc: StoreError) -> Response:
    if isinstance(exc, SessionLockLost):
        return _json_error(409, {"detail": str(exc), "expected_start": exc.expected_start})
    if isinstance(exc, StoreFull):
        return _json_error(507, {"detail": str(exc), "limit": "max_store_bytes"})
    status = 503 if isinstance(exc, (StoreUnavailable, SessionBusy)) else 500
    return _json_error(status, {"detail": str(exc)}, **{"Retry-After": str(RETRY_AFTER_S)})


def inline_allowed(store: ServedStore, settings: ServerSettings) -> bool:
    """Whether this server may run small turns on its event loop.

    Only where a small turn's work is small and pure Python: not with a judge model (a
    check builds and redacts a prompt over the recent window, then waits for the model),
    not with the semantic detector (an ONNX embedding per message, which releases the GIL
    and so runs beside the loop in a thread), and not under a CPU budget tight enough that
    a turn on the loop, which nothing can stop, could exceed it. In a store that persists,
    each turn also checks the size of the state it will save (`INLINE_MAX_STATE_BYTES`).
    """
    from judge.detectors import embeddings

    config = store.config
    semantic = config.semantic == "on" or (config.semantic == "auto" and embeddings.available())
    budget = settings.turn_cpu_budget_s
    return not (
        config.fast_model or semantic or (budget is not None and budget < INLINE_MIN_BUDGET_S)
    )


def _served(store: SessionStore) -> ServedStore:
    if not isinstance(store, ServedStore):
        raise TypeError(
            f"{type(store).__name__} cannot back the server: it needs open() and persists "
            "(MemoryStore and RedisStore have them)"
        )
    return store


def create_app(
    settings: ServerSettings | None = None, store: SessionStore | None = None
) -> FastAPI:
    """Build the ASGI app; ``store`` defaults to the one ``settings`` describes.

    The store is closed when the app shuts down. Raises `ConfigError` for settings that
    would serve unsafely (no token without the loopback-only opt-out), so no insecure app
    can be built, even by hand.
    """
    settings = settings if settings is not None else ServerSettings()
    settings.check_bind()
    served = _served(store if store is not None else store_from_settings(settings))
    metrics = Metrics()
    runner = TurnRunner(threads=settings.worker_threads, cpu_budget_s=settings.turn_cpu_budget_s)
    if served.config.fast_model:
        # Judge requests go back to the server's loop, which owns the connection pools.
        bridge_judge(served, runner)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await served.aclose()

    app = SidecarApp(
        title=API_TITLE,
        version=API_VERSION,
        description=(__doc__ or "").strip(),
        lifespan=lifespan,
    )
    app.state.store = served
    app.state.metrics = metrics
    app.state.settings = settings
    app.state.runner = runner
    tokens = settings.principals()
    app.state.principals = (
        {_digest(token.encode()): name for token, name in tokens.items()} if tokens else None
    )
    handler = TurnHandler(
        served, runner, metrics, app.state.principals, inline=inline_allowed(served, settings)
    )
    app.front = HostCheck(
        BodyLimit(app._inner, max_bytes=settings.max_body_bytes),
        names=settings.host_names(),
        metrics=metrics,
    )

    @app.exception_handler(_Unauthorized)
    async def _unauthorized(_request: Request, _exc: _Unauthorized) -> Response:
        metrics.inc("loop_judge_rejected_requests_total", reason="token")
        return _json_error(
            401, {"detail": "missing or wrong bearer token"}, **{"WWW-Authenticate": "Bearer"}
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        # A bad session id gets a sentence naming the rule, not only the regex.
        for error in exc.errors():
            if tuple(error.get("loc", ())) == ("path", "session_id"):
                error["msg"] = (
                    f"session id must be 1-{SESSION_ID_MAX} characters of {SESSION_ID_CHARS} "
                    "(no '/', spaces or braces; not '.' or '..')"
                )
            elif error.get("type") == "string_unicode":
                await _name_surrogate_field(request, error)
        # FastAPI's own handler writes UTF-8, which cannot hold the lone surrogate a
        # request's escape made (it echoes the input): ASCII JSON keeps the escape.
        return _json_error(422, {"detail": jsonable_encoder(exc.errors())})

    async def _turn_failed(
        _request: Request,
        exc: HistoryError | StoreError | AppendConflict | TurnOverBudget | BadIdempotencyKey,
    ) -> Response:
        return handler.error_response(exc)

    for failure in (HistoryError, StoreError, AppendConflict, TurnOverBudget, BadIdempotencyKey):
        app.add_exception_handler(failure, _turn_failed)  # type: ignore[arg-type]

    @app.post(
        "/v1/sessions/{session_id}/turns",
        response_model=Verdict,
        summary="Count one turn and say whether the agent is looping",
        responses={
            409: {"model": ConflictResponse, "description": "continue from expected_start"},
            413: {"model": OverBudgetResponse, "description": "body or CPU budget exceeded"},
            422: {
                "description": "malformed history (names message index and field) or "
                "Idempotency-Key"
            },
            507: {"model": StoreFullResponse, "description": "in-memory store full"},
        },
    )
    async def turn(
        session_id: SessionId,
        body: TurnRequest,
        principal: Principal,
        request: Request,
        idempotency_key: Annotated[
            str | None,
            Header(
                alias=IDEMPOTENCY_HEADER,
                description="names this request: a resend with the same key (and body) "
                "is answered as the first was, without counting another turn",
            ),
        ] = None,
    ) -> Response:
        raw = await request.body()
        small = len(raw) <= INLINE_MAX_BODY_BYTES and len(body.messages) <= INLINE_MAX_MESSAGES
        return await handler.run(
            principal,
            session_id,
            body.messages,
            body.start,
            small=small,
            body=raw,
            idempotency_key=idempotency_key,
        )

    @app.post(
        "/v1/sessions/{session_id}/calls",
        response_model=Verdict,
        summary="Would this tool call be a repeat past its limit? (counts no turn)",
        responses={413: {"model": OverBudgetResponse, "description": "CPU budget exceeded"}},
    )
    async def call(session_id: SessionId, body: CallRequest, principal: Principal) -> Response:
        started = time.perf_counter()
        key = store_key(principal, session_id)
        # Read-only first: nearly every call is allowed, and that needs no lock or save.
        async with served.open(key, readonly=True) as session:
            outcome = await runner.run(partial(run_call, session, body.name, body.arguments))
        if outcome.verdict.looping:
            # A refusal: recorded in the session, so the identical call stays refused (one
            # rung higher each time) and its echo in the next turn's history is no attempt.
            async with served.open(key) as session:
                work = partial(
                    run_call,
                    session,
                    body.name,
                    body.arguments,
                    refuse=True,
                    serialize=served.persists,
                )
                outcome = await runner.run(work)
        metrics.record_call(outcome.verdict, time.perf_counter() - started)
        return Response(outcome.body, media_type="application/json")

    @app.delete(
        "/v1/sessions/{session_id}",
        response_model=DeleteResponse,
        summary="Forget a session (its turn count, detector windows, strikes)",
        responses={404: {"model": ErrorResponse, "description": "no such session"}},
    )
    async def delete(session_id: SessionId, principal: Principal) -> Any:
        if await served.delete(store_key(principal, session_id)):
            return DeleteResponse(deleted=True)
        # The same answer whether the session never existed or is another principal's.
        return _json_error(404, {"detail": f"no session {session_id!r}"})

    @app.get(
        "/healthz",
        response_model=HealthResponse,
        summary="Liveness and store reachability (no token or Host check)",
        responses={503: {"description": "the session store is unreachable"}},
    )
    async def healthz() -> HealthResponse:
        await served.ping()
        return HealthResponse(store=served.kind)

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        summary="Prometheus metrics of all principals together (text format 0.0.4)",
    )
    async def metrics_endpoint(_principal: Principal) -> PlainTextResponse:
        try:
            live: int | None = await served.live_sessions()
        except StoreError:
            live = None  # a scrape must not fail because Redis blinked
        return PlainTextResponse(metrics.render(sessions_live=live), media_type=CONTENT_TYPE)

    return app


def openapi_schema() -> dict[str, Any]:
    """The API's schema, independent of settings (what `OPENAPI_FILE` holds)."""
    from judge.service.store import MemoryStore

    settings = ServerSettings(
        host=DEFAULT_HOST,
        insecure_no_token=True,
        server_token=None,
        server_tokens=None,
        server_tokens_file=None,
        allowed_hosts=None,
    )
    return create_app(settings, MemoryStore()).openapi()


def openapi_text() -> str:
    return json.dumps(openapi_schema(), indent=2, ensure_ascii=False) + "\n"
