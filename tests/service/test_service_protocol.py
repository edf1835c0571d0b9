"""Slow clients cannot hold the sidecar's connections (slowloris).

A real uvicorn server on 127.0.0.1 (started and stopped here) with the guarded protocol
and a short request deadline; raw sockets play the slow clients.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("uvicorn", reason="the serve extra is not installed")

import uvicorn

from judge import TrackerConfig
from judge.cli.serve import http_protocol, uvicorn_config
from judge.service.app import create_app
from judge.service.protocol import guarded_protocol
from judge.service.settings import ServerSettings
from judge.service.store import MemoryStore
from tests.serving import free_port

pytestmark = pytest.mark.anyio
# Short enough to keep the tests quick, long enough that a loaded machine answers a
# well-behaved request well inside it.
REQUEST_TIMEOUT_S = 0.5
# How long after the deadline a connection may still be open (loop latency on CI).
SLACK_S = 2.0
TOKEN = "protocol-token-0123456789abcdef"


def _protocols() -> list[Any]:
    """Both guarded protocols: h11 always, httptools where it is installed (the serve
    extra has it; `loop-judge serve` prefers it)."""
    cases: list[Any] = [pytest.param(guarded_protocol, id="h11")]
    try:
        from judge.service.protocol_httptools import guarded_httptools_protocol
    except ImportError:
        cases.append(pytest.param(None, id="httptools", marks=pytest.mark.skip("no httptools")))
    else:
        cases.append(pytest.param(guarded_httptools_protocol, id="httptools"))
    return cases


@pytest.fixture(params=_protocols())
async def port(request: pytest.FixtureRequest) -> AsyncIterator[int]:
    settings = ServerSettings(
        server_token=TOKEN,
        port=free_port(),
        request_timeout_s=REQUEST_TIMEOUT_S,
        keep_alive_s=5,
    )
    config = uvicorn_config(create_app(settings, MemoryStore(TrackerConfig())), settings)
    config.http = request.param(REQUEST_TIMEOUT_S)
    config.log_level = "warning"
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn did not start"
        await asyncio.sleep(0.01)
    try:
        yield settings.port
    finally:
        server.should_exit = True
        await task


async def closed_after(reader: asyncio.StreamReader) -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and when it closed (a reset
    while we were still writing loses what was buffered: asyncio raises it first)."""
    started = time.monotonic()
    data = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), REQUEST_TIMEOUT_S + SLACK_S + 5):
            data += chunk
    except ConnectionError:
        data = b"<reset>"
    return data, time.monotonic() - started


@pytest.mark.slow
async def test_a_silent_connection_is_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data, seconds = await closed_after(reader)
    writer.close()
    assert seconds < REQUEST_TIMEOUT_S + SLACK_S
    assert data.startswith(b"HTTP/1.1 408")


@pytest.mark.slow
async def test_a_trickled_request_head_is_cut_off(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    head = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 200
    try:
        for byte in head:  # one byte every 20 ms: would take 5 s to finish
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.02)
            if reader.at_eof():
                break
    except ConnectionError:
        pass
    data, _ = await closed_after(reader)
    writer.close()
    assert time.monotonic() - started < REQUEST_TIMEOUT_S + SLACK_S
    assert data.startswith((b"HTTP/1.1 408", b"<reset>"))


@pytest.mark.slow
async def test_a_trickled_body_is_cut_off(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/sessions/s/turns HTTP/1.1\r\nHost: localhost\r\n"
        + f"Authorization: Bearer {TOKEN}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        + b'{"messages": ['
    )
    await writer.drain()
    data, seconds = await closed_after(reader)
    writer.close()
    assert seconds < REQUEST_TIMEOUT_S + SLACK_S
    assert b" 200 " not in data


def request(port: int, sock: socket.socket) -> bytes:
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data or not data.endswith(b"}"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.slow
async def test_keep_alive_requests_under_the_deadline_are_served(port: int) -> None:
    def two_requests() -> list[Any]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            first = request(port, sock)
            time.sleep(REQUEST_TIMEOUT_S * 1.5)  # idle between requests: keep-alive rules
            return [first, request(port, sock)]

    first, second = await asyncio.to_thread(two_requests)
    assert first.startswith(b"HTTP/1.1 200") and second.startswith(b"HTTP/1.1 200")


def test_the_access_log_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_JUDGE_ACCESS_LOG", "false")
    settings = ServerSettings(server_token=TOKEN)
    assert settings.access_log is False
    app = create_app(settings, MemoryStore(TrackerConfig()))
    assert uvicorn_config(app, settings).access_log is False
    assert uvicorn_config(app, ServerSettings(server_token=TOKEN, access_log=True)).access_log


async def test_a_request_head_over_16_kib_is_refused(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n" + b"X-Big: " + b"a" * 8192 + b"\r\n"
    try:
        for _ in range(4):  # 32 KiB of head in four reads, never finished
            writer.write(head if _ == 0 else b"X-More: " + b"b" * 8192 + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)
    except ConnectionError:
        pass
    data, _seconds = await closed_after(reader)
    writer.close()
    # h11 answers 400 (uvicorn's reply to its parse error), httptools our 431; neither 200
    assert data.startswith((b"HTTP/1.1 400", b"HTTP/1.1 431", b"<reset>"))


async def test_a_pipelined_request_after_a_body_is_served(port: int) -> None:
    body = b'{"messages": [{"role": "user", "content": "hi"}]}'
    turn = (
        b"POST /v1/sessions/pipe/turns HTTP/1.1\r\nHost: localhost\r\n"
        + f"Authorization: Bearer {TOKEN}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(turn + b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    await writer.drain()
    data, _seconds = await closed_after(reader)
    writer.close()
    assert data.count(b"HTTP/1.1 200") == 2, data


def test_serve_prefers_httptools_and_falls_back_to_h11(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    chosen = http_protocol(1.0)
    try:
        import httptools  # noqa: F401
    except ImportError:
        assert chosen.__name__ == "GuardedH11Protocol"
    else:
        assert chosen.__name__ == "GuardedHttpToolsProtocol"
    # Without httptools (no wheel for the platform), the h11 protocol serves.
    monkeypatch.setitem(sys.modules, "httptools", None)
    monkeypatch.delitem(sys.modules, "judge.service.protocol_httptools", raising=False)
    monkeypatch.delitem(sys.modules, "uvicorn.protocols.http.httptools_impl", raising=False)
    assert http_protocol(1.0).__name__ == "GuardedH11Protocol"
