"""A session to bytes and back, so it can live in Redis between turns.

A session is the tracker's serializable state (`judge.state.TrackerState`) plus the
server's own bookkeeping for the append API: how long the agent's history was at the last
turn and its last entry (redacted as the state is, `stored_tail`). Stored as
zlib-compressed JSON (level 1: ~0.1 ms for a 30 kB state, a fifth of the bytes) behind a
format tag; no pickle, so whoever can write to the store cannot run code in the server,
and the decompressed size is capped, so a planted value cannot exhaust memory either.
"""

from __future__ import annotations

import hashlib
import json
import threading
import zlib
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from judge.config import TrackerConfig
from judge.errors import StateError
from judge.llm.client import LLMClient
from judge.llm.redaction import redactor_for
from judge.state import TrackerState, expand_state, redacting_reader
from judge.tracker import LoopTracker

# Leads every stored session of this format; anything else is another version's.
SESSION_FORMAT = b"lj-session-1\n"
# zlib level 1: most of the size win (JSON of repeated keys and messages) at the least CPU.
COMPRESS_LEVEL = 1
# A stored session never legitimately decompresses beyond this: the request body cap
# (8 MiB) bounds what one turn adds, and the tracker keeps bounded windows of it.
MAX_SESSION_BYTES = 64 * 1024 * 1024


class StateFormatError(StateError):
    """Stored session bytes that are not readable tracker state (a `StateError`, so one
    ``except StateError`` covers a state from the store and one handed in directly)."""


@dataclass(frozen=True)
class Replay:
    """The answer to a session's last turn request, kept so that a client retrying that
    request (its response lost) is answered alike instead of counting another turn."""

    digest: str  # of the request's body (`request_digest`)
    key: str | None  # the request's Idempotency-Key header, if it sent one
    body: bytes  # the verdict's JSON as it was sent


@dataclass
class SessionData:
    """One session as the server keeps it between turns."""

    tracker: LoopTracker
    length: int = 0  # messages in the agent's history at the last turn
    tail: Any = None  # that history's last entry, redacted (None when it was empty)
    replay: Replay | None = None  # the last turn request's answer


def new_tracker(config: TrackerConfig, client: LLMClient | None = None) -> LoopTracker:
    """A fresh tracker for a new session.

    Continued from an empty tracker's state, so it reads the conversation as its saved
    state will hold it (redacted) from the first message on, exactly as each later restore
    of it will: the session's detection does not depend on where a turn was restored.
    """
    kwargs: dict[str, Any] = {} if client is None else {"client": client}
    return LoopTracker.from_state(config, _empty_state(config), **kwargs)


# Configurations whose empty state is kept: a server has one, its tests a few.
MAX_EMPTY_STATES = 8
# Each configuration's empty state, validated once: building a tracker, dumping its state
# and validating that is most of what a new session costs, and a busy sidecar starts
# thousands. Restoring reads a state without changing or keeping any part of it, so every
# new session of a configuration can continue from the same one.
_EMPTY_STATES: dict[int, tuple[TrackerConfig, TrackerState]] = {}
_EMPTY_STATES_LOCK = threading.Lock()


def _empty_state(config: TrackerConfig) -> TrackerState:
    with _EMPTY_STATES_LOCK:
        kept = _EMPTY_STATES.get(id(config))
    if kept is not None and kept[0] is config:  # the config itself, not a reused id
        return kept[1]
    state = TrackerState.model_validate(LoopTracker(config).state.model_dump())
    with _EMPTY_STATES_LOCK:
        if len(_EMPTY_STATES) >= MAX_EMPTY_STATES:
            _EMPTY_STATES.clear()
        _EMPTY_STATES[id(config)] = (config, state)
    return state


def empty_state_bytes(config: TrackerConfig) -> int:
    """Bytes of a new session's state as a save writes it (computed once per config)."""
    with _EMPTY_STATES_LOCK:
        kept = _EMPTY_STATE_BYTES.get(id(config))
    if kept is not None and kept[0] is config:
        return kept[1]
    size = len(dump_tracker(new_tracker(config)))
    with _EMPTY_STATES_LOCK:
        if len(_EMPTY_STATE_BYTES) >= MAX_EMPTY_STATES:
            _EMPTY_STATE_BYTES.clear()
        _EMPTY_STATE_BYTES[id(config)] = (config, size)
    return size


_EMPTY_STATE_BYTES: dict[int, tuple[TrackerConfig, int]] = {}


def dump_tracker(tracker: LoopTracker) -> bytes:
    """Serialize everything the tracker remembers about its conversation (plain JSON)."""
    return tracker.state.model_dump_json().encode("utf-8")


def load_tracker(
    config: TrackerConfig, data: bytes | str, client: LLMClient | None = None
) -> LoopTracker:
    """Rebuild a tracker from `dump_tracker` bytes, under the server's config."""
    try:
        state = TrackerState.model_validate_json(data)
        return _from_state(config, state, client)
    except (ValidationError, StateError) as exc:
        raise StateFormatError(f"session bytes are not readable tracker state: {exc}") from exc


def _from_state(
    config: TrackerConfig, state: TrackerState, client: LLMClient | None
) -> LoopTracker:
    kwargs: dict[str, Any] = {} if client is None else {"client": client}
    return LoopTracker.from_state(config, state, **kwargs)


def stored_tail(tracker: LoopTracker, entry: Any) -> Any:
    """The history's last entry as the session keeps it: redacted the way the tracker's
    saved state is, so the store holds no secret the state does not.

    The next append hands this copy back to the tracker as the message before the new
    ones; a session's tracker reads every message redacted (`new_tracker`), and redacting
    twice changes nothing, so the copy still matches the message it stands for.
    """
    redactor = redactor_for(
        enabled=tracker.config.redact_secrets, patterns=tracker.config.redact_patterns
    )
    return entry if redactor is None else redacting_reader(redactor)(entry)


def dump_session(
    tracker: LoopTracker, length: int, tail: Any, replay: Replay | None = None
) -> bytes:
    """A session's stored bytes: format tag, then compressed JSON."""
    return pack_session(session_json(tracker, length, tail, replay))


def session_json(
    tracker: LoopTracker, length: int, tail: Any, replay: Replay | None = None
) -> bytes:
    """A session's JSON before compression (`pack_session` makes the stored bytes)."""
    fields: dict[str, Any] = {"length": length, "tail": tail}
    if replay is not None:
        # The verdict as sent: its text holds what the tracker redacted, nothing more.
        fields["replay"] = {
            "digest": replay.digest,
            "key": replay.key,
            "body": replay.body.decode("utf-8", "surrogatepass"),
        }
    head = json.dumps(fields, separators=(",", ":"))
    # The state is spliced in as its own JSON text: no second pass over the largest part.
    return head[:-1].encode("utf-8") + b',"state":' + dump_tracker(tracker) + b"}"


def pack_session(body: bytes) -> bytes:
    return SESSION_FORMAT + zlib.compress(body, COMPRESS_LEVEL)


def _parse(text: bytes) -> Any:
    """JSON by pydantic-core's parser (about twice as fast as ``json``'s on a session), and
    by ``json``'s where it refuses text that ``json`` reads (a lone
    surrogate's escape), so both read every session either ever wrote."""
    import pydantic_core

    try:
        return pydantic_core.from_json(text)
    except ValueError:
        return json.loads(text)


def _replay(data: Any) -> Replay | None:
    """A stored `Replay` (absent from sessions saved before it existed)."""
    if data is None:
        return None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("digest"), str)
        or not isinstance(data.get("body"), str)
        or not isinstance(data.get("key"), (str, type(None)))
    ):
        raise StateFormatError("stored session has a malformed replay record")
    body = data["body"].encode("utf-8", "surrogatepass")
    return Replay(data["digest"], data["key"], body)


def held_bytes(session: SessionData, state_part: int | None = None) -> tuple[int, int]:
    """(bytes ``session`` holds, its tracker state's part of them): the state as a save
    writes it (``state_part`` when already counted) plus its kept history entry and reply
    as JSON, the form `session_json` stores them in."""
    if state_part is None:
        state_part = len(dump_tracker(session.tracker))
    try:
        tail = len(json.dumps(session.tail, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError):
        tail = len(repr(session.tail))  # not JSON (a caller's object): as much as its text
    replay = len(session.replay.body) if session.replay is not None else 0
    return state_part + tail + replay, state_part


def request_digest(body: bytes) -> str:
    """What identifies a turn request's body: a resend of the same bytes has the same."""
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def load_session(
    config: TrackerConfig, data: bytes, client: LLMClient | None = None
) -> SessionData:
    """Rebuild a session from `dump_session` bytes; `StateFormatError` if unreadable."""
    if not data.startswith(SESSION_FORMAT):
        raise StateFormatError("stored session is not in this server's format")
    inflate = zlib.decompressobj()
    try:
        text = inflate.decompress(data[len(SESSION_FORMAT) :], MAX_SESSION_BYTES)
    except zlib.error as exc:
        raise StateFormatError(f"stored session is not valid zlib data: {exc}") from exc
    if inflate.unconsumed_tail:
        raise StateFormatError(f"stored session inflates beyond {MAX_SESSION_BYTES} bytes")
    try:
        raw = _parse(text)
        state = TrackerState.model_validate(expand_state(raw["state"], in_place=True))
        length, tail = raw["length"], raw["tail"]
        if not isinstance(length, int) or length < 0:
            raise StateFormatError(f"stored session has a bad history length {length!r}")
        replay = _replay(raw.get("replay"))
        return SessionData(_from_state(config, state, client), length, tail, replay)
    except (ValueError, KeyError, TypeError, RecursionError, ValidationError, StateError) as exc:
        if isinstance(exc, StateFormatError):
            raise
        raise StateFormatError(f"stored session is not readable tracker state: {exc}") from exc
