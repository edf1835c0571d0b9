"""A tracker to bytes and back, so a session can live in Redis between turns.

The real format is the tracker's own serializable state (``tracker.state``, a pydantic
``TrackerState``, and ``LoopTracker.from_state``). Until the tracker has it, a pickle of
the tracker's per-conversation attributes stands in; the two are told apart by their first
byte, so stored sessions keep loading across the switch.
"""

from __future__ import annotations

import pickle
from typing import Any

from judge._llm import LLMClient
from judge.config import TrackerConfig
from judge.errors import LoopJudgeError
from judge.tracker import LoopTracker

# JSON state always starts with "{"; pickle protocol 2+ starts with 0x80.
_JSON_START = b"{"
_PICKLE_START = b"\x80"

# STOPGAP (to be replaced by TrackerState): the tracker's per-conversation memory is
# pickled attribute by attribute, descending into objects that do not pickle whole (they
# hold callbacks or compiled patterns) and skipping what cannot be pickled at all. Rebuilt
# from the server's config instead: the config itself, the judge client, the lock (per
# process), the redactor (config-derived) and the circuit breaker (its clock is
# time.monotonic, meaningless in another process). Objects with state()/load_state() (the
# detector suite) use them. Pickle from a shared store is code execution for whoever can
# write to it: acceptable only because the JSON state replaces it before release.
_NOT_STATE = frozenset({"config", "_judge", "_lock", "_redactor", "_breaker"})
# Nesting depth of the attribute walk: tracker -> responder -> ladder -> its state.
_MAX_DEPTH = 4


def _attributes(obj: object) -> dict[str, Any]:
    names: dict[str, Any] = dict(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(obj, name):
                names[name] = getattr(obj, name)
    return names


# How each attribute path was found to serialize ("value", "walk", "skip"), decided by a
# trial pickle the first time and reused: the trial doubles the cost of a save otherwise.
_HOW: dict[str, str] = {}


def _how(path: str, value: object, depth: int) -> str:
    how = _HOW.get(path)
    if how is None:
        try:
            pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            how = "value"
        except (pickle.PicklingError, TypeError, AttributeError):
            how = "walk" if depth < _MAX_DEPTH and _attributes(value) else "skip"
        _HOW[path] = how
    return how


def _snapshot(obj: object, depth: int, path: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in _attributes(obj).items():
        if (depth == 0 and name in _NOT_STATE) or callable(value):
            continue
        if hasattr(value, "state") and hasattr(value, "load_state") and callable(value.state):
            out[name] = ("state", value.state())
            continue
        here = f"{path}.{name}"
        how = _how(here, value, depth)
        if how == "value":
            out[name] = ("value", value)
        elif how == "walk":
            out[name] = ("walk", _snapshot(value, depth + 1, here))
    return out


def _restore(obj: object, snapshot: dict[str, Any]) -> None:
    for name, (how, data) in snapshot.items():
        if how == "value":
            setattr(obj, name, data)
        elif how == "state":
            getattr(obj, name).load_state(data)
        else:
            _restore(getattr(obj, name), data)


class StateFormatError(LoopJudgeError, ValueError):
    """Stored session bytes that are neither tracker JSON state nor the stopgap pickle."""


def _has_state_api() -> bool:
    return hasattr(LoopTracker, "state") and hasattr(LoopTracker, "from_state")


def new_tracker(config: TrackerConfig, client: LLMClient | None = None) -> LoopTracker:
    """A fresh tracker for a new session."""
    return LoopTracker(config, client=client)


def dump_tracker(tracker: LoopTracker) -> bytes:
    """Serialize everything the tracker remembers about its conversation."""
    if _has_state_api():
        return tracker.state.model_dump_json().encode("utf-8")  # type: ignore[attr-defined]
    # STOPGAP: see _NOT_STATE.
    return pickle.dumps(_snapshot(tracker, 0), protocol=pickle.HIGHEST_PROTOCOL)


def load_tracker(
    config: TrackerConfig, data: bytes, client: LLMClient | None = None
) -> LoopTracker:
    """Rebuild a tracker from `dump_tracker` bytes, under the server's config."""
    if data.startswith(_JSON_START):
        if not _has_state_api():
            raise StateFormatError("session holds JSON tracker state, which this version lacks")
        from judge.tracker import TrackerState  # type: ignore[attr-defined]

        state = TrackerState.model_validate_json(data)
        kwargs: dict[str, Any] = {} if client is None else {"client": client}
        return LoopTracker.from_state(config, state, **kwargs)  # type: ignore[attr-defined]
    if not data.startswith(_PICKLE_START):
        raise StateFormatError("session bytes are not tracker state")
    # STOPGAP: see _NOT_STATE.
    snapshot = pickle.loads(data)
    tracker = new_tracker(config, client)
    _restore(tracker, snapshot)
    return tracker
