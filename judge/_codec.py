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
from judge.errors import StateError
from judge.history import Message, ToolCall
from judge.verdict import LoopKind

# Finding is resolved lazily (judge.detectors.base imports this package's neighbours).
_RECORDS: dict[str, type | None] = {
    "Message": Message,
    "ToolCall": ToolCall,
    "Step": Step,
    "Finding": None,
}
_ENUMS: dict[str, type[Enum]] = {"Outcome": Outcome, "LoopKind": LoopKind}


def _finding_type() -> type:
    from judge.detectors.base import Finding

    return Finding


class StepPool:
    """Steps shared by several detectors' windows, stored once in a saved state.

    Every detector keeps its own window of the same recent steps; without the pool a saved
    state repeats each step (and its call's arguments) three or four times.
    """

    def __init__(self, table: list[Any] | None = None) -> None:
        self._ids: dict[int, int] = {}
        self._keep: list[Any] = []  # keeps ids valid while encoding
        self.table: list[Any] = table if table is not None else []
        self._decoded: dict[int, Any] = {}

    def ref(self, step: Any) -> dict[str, int]:
        key = id(step)
        if key not in self._ids:
            self._ids[key] = len(self.table)
            self._keep.append(step)
            self.table.append(_encode_record(step, None))
        return {"$ref": self._ids[key]}

    def get(self, index: int) -> Any:
        if index not in self._decoded:
            if not 0 <= index < len(self.table):
                raise StateError(f"step reference {index} is out of range")
            self._decoded[index] = decode(self.table[index])
        return self._decoded[index]


def _encode_record(value: Any, pool: StepPool | None) -> Any:
    name = type(value).__name__
    if name not in _RECORDS:
        raise TypeError(f"cannot encode {name}")
    fields = {f.name: encode(getattr(value, f.name), pool) for f in dataclasses.fields(value)}
    return {"$record": name, "f": fields}


def encode(value: Any, pool: StepPool | None = None) -> Any:
    if isinstance(value, Enum):  # before str: our enums are str enums
        return {"$enum": type(value).__name__, "v": value.value}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"$tuple": [encode(v, pool) for v in value]}
    if isinstance(value, deque):
        return {"$deque": [encode(v, pool) for v in value], "maxlen": value.maxlen}
    if isinstance(value, list):
        return [encode(v, pool) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {"$dict": {k: encode(v, pool) for k, v in value.items()}}
        return {"$pairs": [[encode(k, pool), encode(v, pool)] for k, v in value.items()]}
    if isinstance(value, Step) and pool is not None:
        return pool.ref(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _encode_record(value, pool)
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # a numpy vector
        return {"$vector": [float(x) for x in value.tolist()], "dtype": str(value.dtype)}
    raise TypeError(f"cannot encode {type(value).__name__}")


def decode(data: Any, pool: StepPool | None = None) -> Any:
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v, pool) for v in data]
    if not isinstance(data, dict):
        raise StateError(f"unexpected {type(data).__name__} in state")
    try:
        if "$enum" in data:
            return _ENUMS[data["$enum"]](data["v"])
        if "$ref" in data:
            if pool is None:
                raise StateError("a step reference outside a step pool")
            return pool.get(data["$ref"])
        if "$tuple" in data:
            return tuple(decode(v, pool) for v in data["$tuple"])
        if "$deque" in data:
            return deque((decode(v, pool) for v in data["$deque"]), maxlen=data["maxlen"])
        if "$dict" in data:
            return {k: decode(v, pool) for k, v in data["$dict"].items()}
        if "$pairs" in data:
            return {decode(k, pool): decode(v, pool) for k, v in data["$pairs"]}
        if "$record" in data:
            name = data["$record"]
            cls = _finding_type() if name == "Finding" else _RECORDS[name]
            assert cls is not None
            return cls(**{k: decode(v, pool) for k, v in data["f"].items()})
        if "$vector" in data:
            import numpy as np

            return np.asarray(data["$vector"], dtype=data["dtype"])
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"unreadable state entry: {exc}") from exc
    raise StateError(f"unknown state entry with keys {sorted(data)}")


def dump_attrs(obj: object, names: tuple[str, ...], pool: StepPool | None = None) -> dict[str, Any]:
    return {name: encode(getattr(obj, name), pool) for name in names}


def load_attrs(
    obj: object, names: tuple[str, ...], data: dict[str, Any], pool: StepPool | None = None
) -> None:
    missing = [n for n in names if n not in data]
    if missing:
        raise StateError(f"{type(obj).__name__} state lacks {missing}")
    for name in names:
        setattr(obj, name, decode(data[name], pool))
