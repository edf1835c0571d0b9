"""A tracker to bytes and back, so a session can live in Redis between turns.

The format is the tracker's own serializable state (`judge.state.TrackerState`) as JSON:
no pickle, so whoever can write to the store cannot run code in the server.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from judge.config import TrackerConfig
from judge.errors import StateError
from judge.llm._litellm import LLMClient
from judge.state import TrackerState
from judge.tracker import LoopTracker


class StateFormatError(StateError):
    """Stored session bytes that are not readable tracker state (a `StateError`, so one
    ``except StateError`` covers a state from the store and one handed in directly)."""


def new_tracker(config: TrackerConfig, client: LLMClient | None = None) -> LoopTracker:
    """A fresh tracker for a new session."""
    return LoopTracker(config, client=client)


def dump_tracker(tracker: LoopTracker) -> bytes:
    """Serialize everything the tracker remembers about its conversation."""
    return tracker.state.model_dump_json().encode("utf-8")


def load_tracker(
    config: TrackerConfig, data: bytes | str, client: LLMClient | None = None
) -> LoopTracker:
    """Rebuild a tracker from `dump_tracker` bytes, under the server's config."""
    try:
        state = TrackerState.model_validate_json(data)
        kwargs: dict[str, Any] = {} if client is None else {"client": client}
        return LoopTracker.from_state(config, state, **kwargs)
    except (ValidationError, StateError) as exc:
        raise StateFormatError(f"session bytes are not readable tracker state: {exc}") from exc
