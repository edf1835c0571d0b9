"""uvicorn's HTTP/1.1 protocol with a deadline on reading each request (slowloris).

A subclass of uvicorn's own, since uvicorn (0.54, every HTTP protocol it has) has no read
deadline to set: the request-start and request-complete timeouts planned upstream
(encode/uvicorn issue 157) were never added.

uvicorn times out idle keep-alive connections, but not a connection that opened and sent
nothing, nor one that trickles a request's head or body a byte at a time: any byte cancels
its keep-alive timer, and nothing else ever fires. A few hundred such connections hold a
replica's sockets for good. Here each request, from its first byte (or from the connection
opening), must have arrived whole within ``request_timeout_s``; otherwise the connection is
closed (408 when the head was still coming, a plain close once the app is reading the
body, which then sees a disconnect).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# 408's body: says which limit it was, so an operator reading a client log can find it.
TIMEOUT_BODY = b"request not received in time (LOOP_JUDGE_REQUEST_TIMEOUT_S)\n"


def plain_response(status_line: bytes, body: bytes) -> bytes:
    """A complete text/plain response that closes the connection: what a guard writes
    straight to the transport, outside the app."""
    return (
        status_line
        + b"\r\ncontent-type: text/plain\r\nconnection: close\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


class ReadDeadline:
    """The per-request read deadline both guarded protocols share (this h11 one and
    `judge.service.protocol_httptools`): armed when a request starts arriving, disarmed
    when it is whole; each protocol says when, and what `_expired` answers."""

    _read_deadline: asyncio.TimerHandle | None = None
    _request_timeout_s: float
    loop: asyncio.AbstractEventLoop

    def _expired(self) -> None:
        raise NotImplementedError

    def _arm(self) -> None:
        self._disarm()
        self._read_deadline = self.loop.call_later(self._request_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None


def guarded_protocol(request_timeout_s: float) -> type[H11Protocol]:
    """An `H11Protocol` subclass that enforces ``request_timeout_s`` per request."""

    class GuardedH11Protocol(ReadDeadline, H11Protocol):
        _request_timeout_s = request_timeout_s

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._track()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # Until the next request's first byte, uvicorn's keep-alive timer governs.
            self._disarm()
            if self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:
                self._arm()  # a pipelined request is already partly here

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _track(self) -> None:
            # IDLE with bytes buffered: a head is arriving; SEND_BODY: a body is. Anything
            # else (DONE, closed) means the request is complete or over.
            state = self.conn.their_state
            if state is h11.SEND_BODY or (state is h11.IDLE and self.conn.trailing_data[0]):
                if self._read_deadline is None:
                    self._arm()
            else:
                self._disarm()

        def _expired(self) -> None:
            self._read_deadline = None
            if self.transport.is_closing():
                return
            if self.conn.their_state is h11.IDLE and (
                self.cycle is None or self.cycle.response_complete
            ):
                self.transport.write(plain_response(b"HTTP/1.1 408 Request Timeout", TIMEOUT_BODY))
            self.transport.close()
            if self.cycle is not None and not self.cycle.response_complete:
                self.cycle.disconnected = True
                self.cycle.message_event.set()

    return GuardedH11Protocol
