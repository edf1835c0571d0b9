"""The plain-dict fast path of `normalize_entry` must read exactly what the full path reads.

`judge.history._plain_message` takes the OpenAI dicts nearly every agent sends; anything it
is not sure of goes to the full path, which also names every error. These tests hold the two
paths to the same records, and to the same typed errors, on a table of odd messages and on
generated ones.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from judge import HistoryError
from judge.history import (
    MAX_CONTENT_CHARS,
    RAW_ARGUMENT_CHARS,
    HistoryCursor,
    _plain_message,
    normalize_entry,
    normalize_message,
)


def _call(name: Any = "read_file", arguments: Any = '{"path": "a.py"}', cid: Any = "c1") -> Any:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


# Entries the fast path reads itself: each must give what the full reader gives.
PLAIN: list[dict[str, Any]] = [
    {"role": "user", "content": "fix the bug"},
    {"role": "system", "content": None},
    {"role": "developer"},
    {"role": "assistant", "content": "", "tool_calls": []},
    {"role": "assistant", "content": "looking", "tool_calls": [_call()]},
    {"role": "assistant", "content": None, "tool_calls": [_call(cid=None), _call("grep", "{}")]},
    {"role": "assistant", "tool_calls": [_call(arguments='{"b": 1,  "a": [1, 2]}')]},
    {"role": "assistant", "tool_calls": [_call(arguments="ls   -la  /tmp")]},  # not JSON
    {"role": "assistant", "tool_calls": [_call(arguments="[" * 150 + "]" * 150)]},  # too deep
    {"role": "assistant", "tool_calls": [_call(arguments=json.dumps({"x": "y" * 40_000}))]},
    {"role": "assistant", "tool_calls": [_call(arguments="z" * (RAW_ARGUMENT_CHARS * 3))]},
    {"role": "assistant", "tool_calls": [_call(name="t\ud800ool", cid="i\udc00d")]},
    {"role": "assistant", "content": "x", "tool_calls": None, "function_call": None},
    {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": "read_file"},
    {"role": "tool", "tool_call_id": "c\ud800", "content": "caf\u00e9 \ud83d"},
    {"role": "tool", "tool_call_id": "c1", "content": "e" * (MAX_CONTENT_CHARS + 10)},
    {"role": "user", "content": "hi", "tool_call_id": "ignored for a user"},
    {"role": "function", "name": "legacy", "content": "result"},
    {"role": "user", "name": "ann", "content": "\u00fcnicode \u2603"},
    {"role": "assistant", "content": "a", "extra": {"anything": [1, 2]}},
]

# Entries the fast path leaves to the full path: each reads as it always did (the same
# record, or a HistoryError naming the message and the field).
LEFT_TO_FULL_PATH: list[tuple[dict[str, Any], str | None]] = [
    ({"content": "no role"}, "role"),
    ({"role": "wizard", "content": "x"}, "role"),
    ({"role": ["user"], "content": "x"}, "role"),
    ({"role": "tool", "content": "x"}, "tool_call_id"),
    ({"role": "tool", "content": "x", "tool_call_id": ""}, "tool_call_id"),
    ({"role": "tool", "content": "x", "tool_call_id": 7}, "tool_call_id"),
    ({"role": "function", "content": "x"}, "name"),
    ({"role": "user", "content": 12}, "content"),
    ({"role": "user", "content": b"bytes"}, "content"),
    ({"role": "user", "tool_calls": [_call()]}, "tool_calls"),
    ({"role": "assistant", "tool_calls": "read_file"}, "tool_calls"),
    ({"role": "assistant", "tool_calls": [{"id": "c1"}]}, "tool_calls[0]"),
    ({"role": "assistant", "tool_calls": [_call(name="")]}, "tool_calls[0].function.name"),
    ({"role": "assistant", "tool_calls": [_call(name=3)]}, "tool_calls[0].function.name"),
    ({"role": "assistant", "tool_calls": [_call(), 42]}, None),
    # valid, but not plain: the full path reads them
    ({"role": "assistant", "tool_calls": [_call(arguments={"path": "a.py"})]}, None),
    ({"role": "assistant", "tool_calls": [_call(arguments=None)]}, None),
    ({"role": "assistant", "tool_calls": [_call(cid=5)]}, None),
    ({"role": "assistant", "tool_calls": ({"function": {"name": "x"}},)}, None),
    ({"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}, None),
    ({"role": "user", "content": [{"type": "text", "text": "parts"}]}, None),
    ({"role": "user", "name": 5, "content": "x"}, None),
]


@pytest.mark.parametrize("raw", PLAIN)
def test_fast_path_reads_plain_dicts_as_the_full_path_does(raw: dict[str, Any]) -> None:
    fast = _plain_message(raw, 7)
    assert fast is not None, "a plain dict should take the fast path"
    assert fast == normalize_message(raw, 7)
    assert normalize_entry(raw, 7) == [fast]


@pytest.mark.parametrize(("raw", "field"), LEFT_TO_FULL_PATH)
def test_anything_else_is_left_to_the_full_path(raw: dict[str, Any], field: str | None) -> None:
    assert _plain_message(raw, 3) is None
    try:
        full = normalize_message(raw, 3) if not isinstance(raw.get("content"), list) else None
    except HistoryError as exc:
        # The error the caller gets names the same message index and field as before.
        with pytest.raises(HistoryError) as info:
            normalize_entry(raw, 3)
        assert (info.value.index, info.value.field) == (3, exc.field)
        assert exc.field == field
        assert str(info.value) == str(exc)
        return
    assert field is None, f"expected a HistoryError on {field!r}"
    entry = normalize_entry(raw, 3)
    if full is not None:
        assert entry == [full]


def test_str_subclasses_and_mapping_types_take_the_full_path() -> None:
    class Text(str):
        pass

    raw = {"role": Text("user"), "content": Text("hi")}
    assert _plain_message(raw, 0) is None
    assert normalize_entry(raw, 0) == normalize_entry({"role": "user", "content": "hi"}, 0)


def test_a_cursor_reads_the_same_records_either_way() -> None:
    # The cursor goes through normalize_entry: a history of plain dicts and the same
    # history as objects the full path must read (pydantic-like dumps) agree.
    class Dumped:
        def __init__(self, data: dict[str, Any]) -> None:
            self.data = data

        def model_dump(self, exclude_none: bool = False) -> dict[str, Any]:
            return dict(self.data)

    history = [raw for raw in PLAIN]
    plain, _ = HistoryCursor().advance(history)
    dumped, _ = HistoryCursor().advance([Dumped(raw) for raw in history])
    assert plain == dumped


_text = st.text(
    alphabet=st.characters(codec="utf-8") | st.sampled_from(["\ud800", "\udfff", " ", "{"]),
    max_size=40,
)
_scalar = st.none() | st.booleans() | st.integers() | _text
_json_value = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_arguments = _text | _json_value.map(json.dumps) | st.none() | _json_value
_tool_call = st.fixed_dictionaries(
    {"function": st.fixed_dictionaries({"name": _text | st.none(), "arguments": _arguments})},
    optional={"id": _text | st.none() | st.integers(), "type": st.just("function")},
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "function", "robot"])},
    optional={
        "content": _text | st.none() | st.integers(),
        "name": _text | st.none(),
        "tool_calls": st.lists(_tool_call, max_size=3) | st.none(),
        "tool_call_id": _text | st.none(),
    },
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_message)
def test_generated_messages_read_the_same_on_both_paths(raw: dict[str, Any]) -> None:
    try:
        expected: Any = normalize_message(raw, 11)
    except HistoryError as exc:
        expected = (type(exc), exc.index, exc.field, str(exc))
    fast = _plain_message(raw, 11)
    if fast is not None:
        assert fast == expected
    try:
        got: Any = normalize_entry(raw, 11)
    except HistoryError as exc:
        got = (type(exc), exc.index, exc.field, str(exc))
    else:
        got = got[0]
    assert got == expected
