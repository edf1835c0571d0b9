"""Turn detector state into JSON-able data and back, exactly.

Detector state is made of a few kinds of values: scalars, tuples, deques, dicts, our
frozen records (`ToolCall`, `Step`, `Finding`), enums and (for the semantic detector)
vectors. Tuples and deques are tagged so that a round trip compares equal: detectors
compare tuples with ``==``, and a list never equals a tuple.

What a record can derive is not stored: a call's parsed arguments are JSON's reading of its
canonical text (`judge.history.canonical_arguments` makes that exact) and signatures are
rebuilt from their parts. `compact` then stores each distinct long string of a whole saved
state once, so a message quoted by the judge window, a detector window and a finding costs
its length once.
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

from judge.detectors.outcome import Outcome
from judge.detectors.steps import Step
from judge.errors import StateError
from judge.history import SIGNATURE_CHARS, Message, ToolCall, bounded
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
        self._refs: dict[int, dict[str, int]] = {}
        self._keep: list[Any] = []  # keeps ids valid while encoding
        self.table: list[Any] = table if table is not None else []
        self._decoded: dict[int, Any] = {}

    def ref(self, step: Any) -> dict[str, int]:
        """The step's reference, one dict per step: each detector's window refers to the
        same steps."""
        found = self._refs.get(id(step))
        if found is None:
            found = self._refs[id(step)] = {"$ref": len(self.table)}
            self._keep.append(step)
            self.table.append(_encode_record(step, None))
        return found

    def get(self, index: int) -> Any:
        if index not in self._decoded:
            if not 0 <= index < len(self.table):
                raise StateError(f"step reference {index} is out of range")
            self._decoded[index] = decode(self.table[index])
        return self._decoded[index]


def _encode_call(call: ToolCall) -> dict[str, Any]:
    """A call as its text alone: the parsed value is read again from the canonical text,
    the raw arguments are left out when they are the canonical text, the signature is
    rebuilt by `ToolCall` itself."""
    fields: dict[str, Any] = {"id": call.id, "name": call.name, "canonical": call.canonical}
    if call.arguments != call.canonical:
        fields["arguments"] = call.arguments
    if call.parsed is not None:
        fields["json"] = True
    if call.signature != f"{call.name}({bounded(call.canonical, SIGNATURE_CHARS)})":
        fields["signature"] = call.signature
    return {"$call": fields}


def _decode_call(fields: dict[str, Any]) -> ToolCall:
    canonical = fields["canonical"]
    if not isinstance(canonical, str):
        raise StateError("a saved call's canonical arguments are not text")
    try:
        parsed = json.loads(canonical) if fields.get("json") else None
    except (ValueError, RecursionError):
        parsed = None  # clipped to fit the state's byte cap (judge.state.fit_state)
    return ToolCall(
        id=fields["id"],
        name=fields["name"],
        arguments=fields.get("arguments", canonical),
        canonical=canonical,
        parsed=parsed,
        signature=fields.get("signature", ""),
    )


# Each record type's field names: `dataclasses.fields` builds its tuple anew at every call,
# a third of encoding a message.
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(kind: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(kind)
    if names is None:
        names = _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(kind))
    return names


def _encode_record(value: Any, pool: StepPool | None) -> Any:
    name = type(value).__name__
    if name not in _RECORDS:
        raise TypeError(f"cannot encode {name}")
    if isinstance(value, ToolCall):
        return _encode_call(value)
    fields = {field: encode(getattr(value, field), pool) for field in _field_names(type(value))}
    if isinstance(value, Step) and value.signature == value.call.signature:
        del fields["signature"]  # the step copies its call's; rebuilt on loading
    return {"$record": name, "f": fields}


def encode(value: Any, pool: StepPool | None = None) -> Any:
    kind = type(value)
    if kind is str or kind is int or value is None or kind is bool or kind is float:
        return value  # exact scalars first: most of what a state holds
    if isinstance(value, Enum):  # before str: our enums are str enums
        return {"$enum": type(value).__name__, "v": value.value}
    if isinstance(value, (bool, int, float, str)):  # subclasses of them
        return value
    if kind is Step and pool is not None:  # the steps of the detectors' windows
        return pool.ref(value)
    if kind is Message or kind is ToolCall:
        return _encode_record(value, pool)
    if isinstance(value, tuple):
        return {"$tuple": _encode_items(value, pool)}
    if isinstance(value, deque):
        return {"$deque": _encode_items(value, pool), "maxlen": value.maxlen}
    if isinstance(value, list):
        return _encode_items(value, pool)
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


def _encode_items(values: Iterable[Any], pool: StepPool | None) -> list[Any]:
    """`encode` of each item, exact scalars and the steps of a pool without a call each:
    the detectors' windows are mostly these."""
    out: list[Any] = []
    add = out.append
    for value in values:
        kind = type(value)
        if kind is str or kind is int or value is None or kind is bool or kind is float:
            add(value)
        elif kind is Step and pool is not None:
            add(pool.ref(value))
        else:
            add(encode(value, pool))
    return out


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
        if "$call" in data:
            return _decode_call(data["$call"])
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
    obj: object,
    names: tuple[str, ...],
    data: dict[str, Any],
    pool: StepPool | None = None,
    optional: frozenset[str] = frozenset(),
) -> None:
    """Set each of ``names`` from ``data``; one of ``optional`` that a state saved by an
    earlier version lacks keeps the value it has (its reset value)."""
    missing = [n for n in names if n not in data and n not in optional]
    if missing:
        raise StateError(f"{type(obj).__name__} state lacks {missing}")
    for name in names:
        if name in data:
            setattr(obj, name, decode(data[name], pool))


# -- one copy of each long string -------------------------------------------------------

# Strings at least this long are stored once in a saved state's table and referred to by
# position: a reference costs about 12 bytes, so shorter strings are not worth it.
INTERN_MIN_CHARS = 48
# Markers of the compact form. Keys that start with NUL are escaped by doubling it, so no
# key of the data can pass for a marker.
_NUL = "\x00"
_KEY_REF = _NUL + "#"  # a dict key that is a reference: NUL # position
_VALUE_REF = _NUL + "s"  # {NUL s: position}: a string value that is a reference


def compact(data: Any, scrub: Callable[[str], str] | None = None) -> tuple[Any, list[str]]:
    """``data`` (JSON-able) with each string of INTERN_MIN_CHARS or more replaced by a
    reference into a table of distinct strings, returned with that table.

    ``scrub`` (the tracker's redactor, memoized by `judge.state`) is applied to every
    string, keys included, on its way in: this walk is the one place every text of a saved
    state passes, whichever detector kept it, so nothing saved can skip redaction.

    Walked with an explicit stack, so any nesting the data has costs no recursion, and in
    time linear in its size (strings are hashed once each).
    """
    table: list[str] = []
    index: dict[str, int] = {}

    def ref(text: str) -> int:
        at = index.get(text)
        if at is None:
            at = index[text] = len(table)
            table.append(text)
        return at

    def key(k: str) -> str:
        if scrub is not None:
            k = scrub(k)
        if len(k) >= INTERN_MIN_CHARS:
            return f"{_KEY_REF}{ref(k)}"
        return _NUL + k if k.startswith(_NUL) else k

    def value(v: Any) -> Any:
        if not isinstance(v, str):
            return v
        if scrub is not None:
            v = scrub(v)
        if len(v) >= INTERN_MIN_CHARS:
            return {_VALUE_REF: ref(v)}
        return v

    root: list[Any] = [data]
    stack: list[tuple[Any, Any]] = [(root, 0)]  # (container, key or position) to fill in
    while stack:
        parent, slot = stack.pop()
        item = parent[slot]
        if isinstance(item, dict):
            out: dict[str, Any] = {}
            for k, v in item.items():
                if not isinstance(k, str):
                    raise TypeError(f"state keys must be strings, got {type(k).__name__}")
                out[key(k)] = v
            parent[slot] = out
            stack.extend((out, k) for k in out)
        elif isinstance(item, list):
            copy = list(item)
            parent[slot] = copy
            stack.extend((copy, i) for i in range(len(copy)))
        else:
            parent[slot] = value(item)
    return root[0], table


def expand(data: Any, table: list[Any], *, in_place: bool = False) -> Any:
    """The inverse of `compact`; a reference out of range is a `StateError`.

    ``in_place``: ``data`` is the caller's own (just parsed from JSON), so its lists and
    dicts are changed where they stand instead of copied; a dict is rebuilt only when one
    of its keys is a reference or escaped. Only containers are walked, so a session read
    from Redis costs one pass over its structure.
    """

    def lookup(position: Any) -> str:
        if not isinstance(position, int) or not 0 <= position < len(table):
            raise StateError(f"string reference {position!r} is out of range")
        text = table[position]
        if not isinstance(text, str):
            raise StateError(f"string table entry {position} is not a string")
        return text

    def key(k: str) -> str:
        if not k.startswith(_NUL):
            return k
        if k.startswith(_KEY_REF):
            digits = k[len(_KEY_REF) :]
            if not digits.isdigit():
                raise StateError(f"bad key reference {k!r}")
            return lookup(int(digits))
        return k[1:]

    root: list[Any] = [data]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    push = stack.append
    containers = (dict, list)
    while stack:
        parent, slot = stack.pop()
        item = parent[slot]
        if isinstance(item, dict):
            if len(item) == 1 and _VALUE_REF in item:
                parent[slot] = lookup(item[_VALUE_REF])
                continue
            rebuild = not in_place
            if not rebuild:
                for k in item:
                    if k.startswith(_NUL):
                        rebuild = True
                        break
            out = item
            if rebuild:
                out = parent[slot] = {key(k): v for k, v in item.items()}
            for k, v in out.items():
                if isinstance(v, containers):
                    push((out, k))
        elif isinstance(item, list):
            copy = item if in_place else list(item)
            parent[slot] = copy
            for i, v in enumerate(copy):
                if isinstance(v, containers):
                    push((copy, i))
    return root[0]
