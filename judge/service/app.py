"""The sidecar's HTTP API: one `LoopTracker` per session, kept in a `SessionStore`.

Status codes say whose fault a failure is: 401 (token), 413 (body too large), 422 (the
caller's history is malformed; names the message index and field), 409/503 (the session
store: a lost lock, a busy session, Redis down; retry). A judge model failure is never an
HTTP error: it is reported on the verdict, as the library does.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from judge.errors import HistoryError
from judge.service.metrics import CONTENT_TYPE, Metrics
from judge.service.settings import DEFAULT_HOST, ServerSettings
from judge.service.store import (
    SessionBusy,
    SessionLockLost,
    SessionStore,
    StoreError,
    StoreUnavailable,
    store_from_settings,
)
from judge.verdict import Verdict

API_TITLE = "loop-judge sidecar"
API_VERSION = "1"
# The committed schema (regenerate with `loop-judge serve --dump-openapi`).
OPENAPI_FILE = Path(__file__).with_name("openapi.json")
# Session ids are path segments and Redis key parts: no slashes, braces or spaces. 128
# chars fits a UUID, a ULID or "<agent>:<run>:<uuid>".
SESSION_ID_PATTERN = r"^[A-Za-z0-9._:@-]{1,128}$"
# Seconds a client should wait before retrying a 503 from the store: a busy session
# normally frees within one turn (~1 ms heuristics, seconds with a judge check).
RETRY_AFTER_S = 1


class TurnRequest(BaseModel):
    """One turn: the agent's whole history so far, as OpenAI chat messages.

    Send the full history each time (the tracker reads only the new tail); the messages
    are validated by the tracker, whose errors name the message index and field.
    """

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]] = Field(
        description="OpenAI chat messages: role, content, tool_calls, tool_call_id, name"
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


class _BodyTooLarge(Exception):
    pass


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
        body = json.dumps(
            {
                "detail": f"request body larger than {self.max_bytes} bytes "
                "(LOOP_JUDGE_MAX_BODY_BYTES)"
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


_bearer = HTTPBearer(auto_error=False, description="the value of LOOP_JUDGE_SERVER_TOKEN")
SessionId = Annotated[
    str, PathParam(pattern=SESSION_ID_PATTERN, description="the caller's id for the session")
]


class _Unauthorized(Exception):
    """Raised by the auth dependency; answered 401 with a WWW-Authenticate header."""


async def authorize(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Check the bearer token when the server has one (constant-time comparison)."""
    token: bytes | None = request.app.state.token
    if token is None:
        return
    given = credentials.credentials.encode() if credentials is not None else b""
    if not hmac.compare_digest(given, token):
        raise _Unauthorized


def _history_error_response(exc: HistoryError) -> JSONResponse:
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
    return JSONResponse(status_code=422, content={"detail": [item]})


def _store_error_response(exc: StoreError) -> JSONResponse:
    if isinstance(exc, SessionLockLost):
        return JSONResponse(status_code=409, content={"detail": str(exc)})
    status = 503 if isinstance(exc, (StoreUnavailable, SessionBusy)) else 500
    return JSONResponse(
        status_code=status,
        content={"detail": str(exc)},
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def create_app(
    settings: ServerSettings | None = None, store: SessionStore | None = None
) -> FastAPI:
    """Build the ASGI app; ``store`` defaults to the one ``settings`` describes.

    The store is closed when the app shuts down. Raises `ConfigError` for a bind that
    needs a token and has none, so no insecure app can be built, even by hand.
    """
    settings = settings if settings is not None else ServerSettings()
    settings.check_bind()
    store = store if store is not None else store_from_settings(settings)
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await store.aclose()

    app = FastAPI(
        title=API_TITLE,
        version=API_VERSION,
        description=(__doc__ or "").strip(),
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.metrics = metrics
    app.state.settings = settings
    app.state.token = (
        settings.server_token.get_secret_value().encode() if settings.server_token else None
    )
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)

    @app.exception_handler(_Unauthorized)
    async def _unauthorized(_request: Request, _exc: _Unauthorized) -> JSONResponse:
        return JSONResponse(
            status_code=401,
            content={"detail": "missing or wrong bearer token"},
            headers={"WWW-Authenticate": "Bearer"},
        )

    @app.exception_handler(HistoryError)
    async def _history(_request: Request, exc: HistoryError) -> JSONResponse:
        metrics.inc("loop_judge_history_errors_total")
        return _history_error_response(exc)

    @app.exception_handler(StoreError)
    async def _store(_request: Request, exc: StoreError) -> JSONResponse:
        metrics.inc("loop_judge_store_errors_total", error=type(exc).__name__)
        return _store_error_response(exc)

    authorized = [Depends(authorize)]

    @app.post(
        "/v1/sessions/{session_id}/turns",
        response_model=Verdict,
        dependencies=authorized,
        summary="Count one turn and say whether the agent is looping",
        responses={422: {"description": "malformed history (names message index and field)"}},
    )
    async def turn(session_id: SessionId, body: TurnRequest) -> Verdict:
        started = time.perf_counter()
        async with store.session(session_id) as tracker:
            verdict = await tracker.turn_started(body.messages)
        metrics.record_turn(verdict, time.perf_counter() - started)
        return verdict

    @app.post(
        "/v1/sessions/{session_id}/calls",
        response_model=Verdict,
        dependencies=authorized,
        summary="Would this tool call be a repeat past its limit? (counts no turn)",
    )
    async def call(session_id: SessionId, body: CallRequest) -> Verdict:
        started = time.perf_counter()
        async with store.session(session_id, readonly=True) as tracker:
            verdict = tracker.check_call(body.name, body.arguments)
        metrics.record_call(verdict, time.perf_counter() - started)
        return verdict

    @app.delete(
        "/v1/sessions/{session_id}",
        response_model=DeleteResponse,
        dependencies=authorized,
        summary="Forget a session (its turn count, detector windows, strikes)",
    )
    async def delete(session_id: SessionId) -> DeleteResponse:
        return DeleteResponse(deleted=await store.delete(session_id))

    @app.get(
        "/healthz",
        response_model=HealthResponse,
        summary="Liveness and store reachability (no token needed)",
        responses={503: {"description": "the session store is unreachable"}},
    )
    async def healthz() -> HealthResponse:
        await store.ping()
        return HealthResponse(store=store.kind)

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        dependencies=authorized,
        summary="Prometheus metrics (text format 0.0.4)",
    )
    async def metrics_endpoint() -> PlainTextResponse:
        try:
            live: int | None = await store.live_sessions()
        except StoreError:
            live = None  # a scrape must not fail because Redis blinked
        return PlainTextResponse(metrics.render(sessions_live=live), media_type=CONTENT_TYPE)

    return app


def openapi_schema() -> dict[str, Any]:
    """The API's schema, independent of settings (what `OPENAPI_FILE` holds)."""
    from judge.service.store import MemoryStore

    return create_app(ServerSettings(host=DEFAULT_HOST), MemoryStore()).openapi()


def openapi_text() -> str:
    return json.dumps(openapi_schema(), indent=2, ensure_ascii=False) + "\n"
