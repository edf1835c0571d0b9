"""uvicorn's httptools protocol (a C HTTP/1.1 parser) with the same guards as the h11 one.

A subclass of uvicorn's own for the reason `judge.service.protocol` gives: uvicorn has no
per-request read deadline to set.

`judge.service.protocol` puts a read deadline on each request (slowloris) on top of h11,
uvicorn's pure-Python parser, whose parsing is a large share of the server's CPU for a
short turn. Where httptools is installed (the ``serve`` extra has
it on every platform with wheels), this protocol parses in C and keeps both guards h11
gave the sidecar:

- the deadline: each request, from its first byte (or from the connection opening), must
  have arrived whole within ``request_timeout_s``, else the connection is closed (408 when
  the head was still coming, a plain close once the app is reading the body, which then
  sees a disconnect);
- a cap on a request's head (`MAX_HEAD_BYTES`): h11 refuses a head over 16 KiB by itself,
  httptools would buffer one as long as the deadline lets a client send.

httptools reports a request through callbacks (message begin, headers complete, message
complete), so the deadline is armed at the first and disarmed at the last.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from judge.service.protocol import TIMEOUT_BODY, ReadDeadline, plain_response

# h11's default max_incomplete_event_size, the cap the h11 protocol has always applied: a
# request head (request line and headers) is a few hundred bytes; a bearer token and a
# Host header fit many times over.
MAX_HEAD_BYTES = 16 * 1024
# 431's body: names the limit, as the 408 does.
HEAD_TOO_LARGE_BODY = b"request head larger than 16 KiB\n"


def guarded_httptools_protocol(request_timeout_s: float) -> type[HttpToolsProtocol]:
    """An `HttpToolsProtocol` subclass with the per-request deadline and the head cap."""

    class GuardedHttpToolsProtocol(ReadDeadline, HttpToolsProtocol):
        _request_timeout_s = request_timeout_s
        # A request's head has begun and is not complete; how many bytes of it came.
        _head_open = False
        _head_bytes = 0
        # A request completed during the current data_received (pipelining): the bytes
        # of this chunk are then not all the next head's, so they are not counted.
        _completed_in_chunk = False

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            self._completed_in_chunk = False
            super().data_received(data)
            if self._head_open and not self._completed_in_chunk:
                # Every byte of this chunk was part of the open head (it began with the
                # chunk or before it); a pipelined chunk is counted from the next one,
                # so the cap can be passed by at most one read, never refused early.
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                    self._head_open = False
                    status = b"HTTP/1.1 431 Request Header Fields Too Large"
                    self.transport.write(plain_response(status, HEAD_TOO_LARGE_BODY))
                    self.transport.close()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_open = True
            self._head_bytes = 0
            if self._read_deadline is None:
                self._arm()  # a connection's first request keeps the deadline it opened with

        def on_headers_complete(self) -> None:
            self._head_open = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._completed_in_chunk = True
            # Until the next request's first byte, uvicorn's keep-alive timer governs.
            self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _expired(self) -> None:
            self._read_deadline = None
            if self.transport.is_closing():
                return
            answering = self.cycle is not None and not self.cycle.response_complete
            if not answering and not self._body_coming():
                status = b"HTTP/1.1 408 Request Timeout"
                self.transport.write(plain_response(status, TIMEOUT_BODY))
            self.transport.close()
            if answering:
                self.cycle.disconnected = True
                self.cycle.message_event.set()

        def _body_coming(self) -> bool:
            """Whether the late request's head was read (only its body is missing)."""
            return not self._head_open and self.cycle is not None and self.cycle.more_body

    return GuardedHttpToolsProtocol
