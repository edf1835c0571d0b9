"""Turn detector state into JSON-able data and back, exactly.

Detector state is made of a few kinds of values: scalars, tuples, deques, dicts, our
frozen records (`ToolCall`, `Step`, `Finding`), enums and (for the semantic detector)
vectors. Tuples and deques are tagged so that a round trip compares equal: detectors
compare tuples with ``==``, and a list never equals a tuple.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from enum import Enum
from typing import Any

from judge.detectors.outcome import Outcome
from judge.detectors.steps import Step
from judge.history import Message, ToolCall
from judge.verdict import LoopKind

# Finding is resolved lazily (judge.detectors.base imports this package's neighbours).
_RECORDS: dict[str, type | None] = {
    "Message": Message, "ToolCall": ToolCall, "Step": Step, "Finding": None,
}
_ENUMS: dict[str, type[Enum]] = {"Outcome": Outcome, "LoopKind": LoopKind}


def _finding_type() -> type:
    from judge.detectors.base import Finding

    return Finding


class StateError(ValueError):
    """Serialized state that cannot be read back (wrong version, tampered, truncated)."""


def encode(value: Any) -> Any:
    if isinstance(value, Enum):  # before str: our enums are str enums
        return {"$enum": type(value).__name__, "v": value.value}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, deque):
        return {"$deque": [encode(v) for v in value], "maxlen": value.maxlen}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {"$dict": {k: encode(v) for k, v in value.items()}}
        return {"$pairs": [[encode(k), encode(v)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if name not in _RECORDS:
            raise TypeError(f"cannot encode {name}")
        fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"$record": name, "f": fields}
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # a numpy vector
        return {"$vector": [float(x) for x in value.tolist()], "dtype": str(value.dtype)}
    raise TypeError(f"cannot encode {type(value).__name__}")


def decode(data: Any) -> Any:
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        raise StateError(f"unexpected {type(data).__name__} in state")
    try:
        if "$enum" in data:
            return _ENUMS[data["$enum"]](data["v"])
        if "$tuple" in data:
            return tuple(decode(v) for v in data["$tuple"])
        if "$deque" in data:
            return deque((decode(v) for v in data["$deque"]), maxlen=data["maxlen"])
        if "$dict" in data:
            return {k: decode(v) for k, v in data["$dict"].items()}
        if "$pairs" in data:
            return {decode(k): decode(v) for k, v in data["$pairs"]}
        if "$record" in data:
            name = data["$record"]
            cls = _finding_type() if name == "Finding" else _RECORDS[name]
            assert cls is not None
            return cls(**{k: decode(v) for k, v in data["f"].items()})
        if "$vector" in data:
            import numpy as np

            return np.asarray(data["$vector"], dtype=data["dtype"])
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"unreadable state entry: {exc}") from exc
    raise StateError(f"unknown state entry with keys {sorted(data)}")


def dump_attrs(obj: object, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: encode(getattr(obj, name)) for name in names}


def load_attrs(obj: object, names: tuple[str, ...], data: dict[str, Any]) -> None:
    missing = [n for n in names if n not in data]
    if missing:
        raise StateError(f"{type(obj).__name__} state lacks {missing}")
    for name in names:
        setattr(obj, name, decode(data[name]))
