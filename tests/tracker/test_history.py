from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import BaseModel

from judge import HistoryError
from judge.history import HistoryCursor, normalize_history, normalize_message


def call(name: str, args: Any, cid: str = "c1") -> dict[str, Any]:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize(
    ("history", "index", "field"),
    [
        ({"role": "user"}, None, None),
        ("hello", None, None),
        ([{"role": "user", "content": "x"}, 42], 1, None),
        ([{"content": "x"}], 0, "role"),
        ([{"role": "wizard", "content": "x"}], 0, "role"),
        ([{"role": "tool", "content": "x"}], 0, "tool_call_id"),
        (
            [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}],
            0,
            "tool_calls[0].function.name",
        ),
        ([{"role": "user", "content": 12}], 0, "content"),
        ([{"role": ["user"], "content": "x"}], 0, "role"),
        ([{"role": "tool", "content": "x", "tool_call_id": ""}], 0, "tool_call_id"),
        ([{"role": "tool", "content": "x", "tool_call_id": 7}], 0, "tool_call_id"),
        ([{"role": "function", "content": "x"}], 0, "name"),
        ([{"role": "user", "content": b"bytes"}], 0, "content"),
        ([{"role": "user", "tool_calls": [call("read", "{}")]}], 0, "tool_calls"),
        ([{"role": "assistant", "tool_calls": "read_file"}], 0, "tool_calls"),
        ([{"role": "assistant", "tool_calls": [{"id": "c1"}]}], 0, "tool_calls[0]"),
        ([{"role": "assistant", "tool_calls": [call("", "{}")]}], 0, "tool_calls[0].function.name"),
    ],
)
def test_structural_errors_name_index_and_field(
    history: Any, index: int | None, field: str | None
) -> None:
    with pytest.raises(HistoryError) as info:
        normalize_history(history)
    assert info.value.index == index and info.value.field == field
    if index is not None:
        assert f"message {index}" in str(info.value)


def test_odd_but_valid_content() -> None:
    msgs = normalize_history(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "x"}},
                ],
            },
            {"role": "assistant", "content": None, "tool_calls": [call("bash", "ls -la  /tmp")]},
            {"role": "tool", "tool_call_id": "c1", "content": "bad \ud800 surrogate"},
        ]
    )
    # a non-text part is named and told apart by a digest of its data
    assert re.fullmatch(r"look\n\[image_url [0-9a-f]{12}\]", msgs[0].content)
    assert msgs[1].content == "" and msgs[1].tool_calls[0].canonical == "ls -la /tmp"
    assert msgs[1].tool_calls[0].parsed is None
    assert "\ud800" not in msgs[2].content
    msgs[2].content.encode("utf-8")


def test_argument_key_order_and_call_ids_do_not_matter() -> None:
    a = normalize_message(
        {"role": "assistant", "tool_calls": [call("read", '{"path": "a", "limit": 10}', "x1")]}, 0
    )
    b = normalize_message(
        {"role": "assistant", "tool_calls": [call("read", '{ "limit":10,"path":"a" }', "x2")]}, 0
    )
    assert a.tool_calls[0].signature == b.tool_calls[0].signature


def test_pydantic_message_objects_are_accepted() -> None:
    class Msg(BaseModel):
        role: str
        content: str | None = None

    msgs = normalize_history([Msg(role="user", content="hi"), Msg(role="assistant")])
    assert [m.role for m in msgs] == ["user", "assistant"]


def test_cursor_reads_each_message_once_and_detects_rewrites() -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "a"}]
    cursor = HistoryCursor()
    new, rewound = cursor.advance(history)
    assert [m.index for m in new] == [0] and not rewound
    history.append({"role": "assistant", "content": "b"})
    new, rewound = cursor.advance(history)
    assert [m.index for m in new] == [1] and not rewound
    new, rewound = cursor.advance(list(history))  # same content, new list: nothing new
    assert new == [] and not rewound
    compacted = [{"role": "user", "content": "summary"}]
    new, rewound = cursor.advance(compacted)
    assert rewound and [m.content for m in new] == ["summary"]


def test_bad_message_leaves_cursor_unchanged() -> None:
    cursor = HistoryCursor()
    cursor.advance([{"role": "user", "content": "a"}])
    with pytest.raises(HistoryError):
        cursor.advance([{"role": "user", "content": "a"}, {"role": "nope"}])
    assert cursor.seen == 1
