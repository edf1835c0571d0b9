"""A scripted OpenAI-compatible endpoint on 127.0.0.1 that misbehaves on purpose.

Each request to ``/v1/chat/completions`` gets the next `Reply` of the script (the last one
repeats), or whatever a handler function returns for it: a delay before anything is sent,
a body trickled a byte at a time, any status, headers and body, or a connection closed
without a word. It runs its own asyncio loop in a thread, so it serves whichever event loop
and transport (aiohttp or httpx) litellm uses, and `stop()` (or leaving the ``with`` block)
closes every connection and joins the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Seconds to wait for the server thread to start and to stop.
THREAD_WAIT_S = 5.0
# Largest request we read: judge prompts are capped at 60k chars (~240 KB as UTF-8).
MAX_REQUEST_BYTES = 8 * 1024 * 1024
_REASONS = {
    200: "OK",
    307: "Temporary Redirect",
    400: "Bad Request",
    401: "Unauthorized",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class Reply:
    """How to answer one request.

    ``delay_s`` passes before anything is sent; ``trickle_s`` sends the body one byte at a
    time with that pause between bytes (the headers go at once, so only a total deadline
    catches it); ``close`` drops the connection without a response.
    """

    status: int = 200
    body: bytes | str | dict[str, Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    trickle_s: float | None = None
    close: bool = False

    def encoded(self) -> bytes:
        if isinstance(self.body, dict):
            return json.dumps(self.body).encode()
        if isinstance(self.body, str):
            return self.body.encode()
        return self.body


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def model(self) -> str | None:
        try:
            return str(self.json().get("model"))
        except ValueError:
            return None


def completion(
    content: str | None,
    *,
    finish: str = "stop",
    status: int = 200,
    choices: list[dict[str, Any]] | None = None,
    **message: Any,
) -> Reply:
    """A chat-completion reply in OpenAI's wire format."""
    if choices is None:
        choices = [
            {
                "index": 0,
                "finish_reason": finish,
                "message": {"role": "assistant", "content": content, **message},
            }
        ]
    body = {
        "id": "cmpl-fault",
        "object": "chat.completion",
        "created": 0,
        "model": "x",
        "choices": choices,
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
    }
    return Reply(status=status, body=body, headers={"content-type": "application/json"})


def error(status: int, message: str = "scripted failure", **headers: str) -> Reply:
    return Reply(
        status=status,
        body={"error": {"message": message, "type": "scripted", "code": status}},
        headers={"content-type": "application/json", **headers},
    )


def gzip_bomb(decoded_bytes: int, *, level: int = 9) -> Reply:
    """A 200 reply whose gzip body inflates to ``decoded_bytes`` of zeros (~1000:1), made
    a MiB at a time so building it costs no more memory than the bomb itself."""
    import zlib

    packer = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\0" * (1 << 20)
    parts = [packer.compress(chunk) for _ in range(decoded_bytes >> 20)]
    parts.append(packer.compress(b"\0" * (decoded_bytes & ((1 << 20) - 1))))
    parts.append(packer.flush())
    return Reply(body=b"".join(parts), headers={"content-encoding": "gzip"})


def redirect(location: str, status: int = 307) -> Reply:
    """A redirect to ``location``: a client that follows it re-sends the prompt there."""
    return Reply(status=status, body=b"", headers={"location": location})


def closed_port() -> int:
    """A port nothing listens on: bound, then released, so connecting is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


Handler = Callable[[Request], Reply]


class FaultServer:
    """The scripted server; use as a context manager."""

    def __init__(self, script: list[Reply] | Handler) -> None:
        self._script = script
        self.requests: list[Request] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._lock = threading.Lock()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FaultServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fault-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(THREAD_WAIT_S):
            raise RuntimeError("fault server did not start")

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already ended
            loop.call_soon_threadsafe(self._shutdown)
        thread.join(THREAD_WAIT_S)
        if thread.is_alive():
            raise RuntimeError("fault server thread did not stop")
        self._loop = self._thread = None

    def _next(self, request: Request) -> Reply:
        if callable(self._script):
            return self._script(request)
        with self._lock:
            return self._script.pop(0) if len(self._script) > 1 else self._script[0]

    # -- the server thread -------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        async with self._server:
            await self._stopped.wait()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        self._stopped.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        try:
            request = await self._read(reader)
            if request is None:
                return
            self.requests.append(request)
            await self._answer(self._next(request), writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client gave up first: that is what half of these tests provoke
        except asyncio.CancelledError:
            # Only stop() cancels, and asyncio's stream callback would log a cancelled
            # handler as an error; this loop ends right after, so nothing is lost.
            pass
        finally:
            self._tasks.discard(task)  # type: ignore[arg-type]
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    @staticmethod
    async def _read(reader: asyncio.StreamReader) -> Request | None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        length = min(int(headers.get("content-length", "0")), MAX_REQUEST_BYTES)
        body = await reader.readexactly(length) if length else b""
        return Request(method=method, path=path, headers=headers, body=body)

    @staticmethod
    async def _answer(reply: Reply, writer: asyncio.StreamWriter) -> None:
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.close:
            transport = writer.transport
            transport.abort()  # RST, no response at all
            return
        body = reply.encoded()
        headers = {
            "content-type": "application/json",
            **{k.lower(): v for k, v in reply.headers.items()},
            "content-length": str(len(body)),
            "connection": "close",
        }
        status_line = f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}\r\n"
        head = status_line + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer.write(head.encode("latin-1"))
        await writer.drain()
        if reply.trickle_s is None:
            writer.write(body)
            await writer.drain()
            return
        for i in range(len(body)):
            writer.write(body[i : i + 1])
            await writer.drain()
            await asyncio.sleep(reply.trickle_s)
