"""Saved state under hostile input: an agent's calls and results can be any size or shape.

Every input the tracker accepts round-trips through its state; the state stores each
distinct long string once and does not grow with the size of an argument or a result; an
argument nested thousands of levels deep neither breaks saving nor wedges a sidecar session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from judge import LoopTracker, StateError, TrackerConfig, Verdict
from judge._codec import INTERN_MIN_CHARS, compact, expand
from judge.history import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    MAX_CONTENT_CHARS,
    canonical_arguments,
    normalize_history,
)
from judge.state import MAX_STATE_BYTES, STATE_VERSION, TrackerState
from judge.turns import assistant_turn_ends

CONFIG = TrackerConfig(semantic="off")
# Nesting depths around every limit that broke saving: pydantic's JSON reader (~200), its
# serializer (~255), our codec's recursion (~450), json's own (~1000), and far past them.
DEPTHS = [100, 150, 199, 200, 201, 255, 256, 400, 900, 999, 1000, 1001, 2000, 5000]
# A MB of arguments may add at most this many bytes to a state (a clip marker or two):
# before the fix it added 11 MB, one copy per place that quoted the call.
GROWTH_PER_MB_LIMIT = 1024


def call_turns(arguments: list[Any], result: str = "ok", task: str = "Do it.") -> list[dict]:
    """A history of one call per turn with the given arguments (strings sent as they are)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for i, args in enumerate(arguments):
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "run", "arguments": args},
                    }
                ],
            }
        )
        history.append({"role": "tool", "tool_call_id": f"c{i}", "content": result})
    return history


async def replay(
    history: list[dict[str, Any]], config: TrackerConfig = CONFIG
) -> tuple[list[Verdict], list[Verdict], list[int]]:
    """Verdicts of a tracker kept in memory and of one rebuilt from JSON every turn, and
    the size of each saved state."""
    live, restarted = LoopTracker(config), LoopTracker(config)
    a, b, sizes = [], [], []
    for end in assistant_turn_ends(history):
        a.append(await live.turn_started(history[:end]))
        b.append(await restarted.turn_started(history[:end]))
        blob = restarted.state.model_dump_json()
        sizes.append(len(blob.encode()))
        restarted = LoopTracker.from_state(config, blob)
    return a, b, sizes


def dumps(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    return [v.model_dump() for v in verdicts]


# -- deep nesting ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", DEPTHS)
def test_deeply_nested_arguments_round_trip_and_loop_is_still_told(n: int) -> None:
    nested = "[" * n + "]" * n
    history = call_turns([nested] * 5)
    live, restarted, sizes = anyio.run(replay, history)
    assert dumps(live) == dumps(restarted)
    assert any(live), "five identical calls are an exact repeat, however deep"
    assert max(sizes) < 64_000


@pytest.mark.parametrize("n", [100, 101, 400, 5000])
def test_deep_python_arguments_are_hashed_not_recursed(n: int) -> None:
    value: list[Any] = []
    inner = value
    for _ in range(n - 1):
        inner.append([])
        inner = inner[0]
    canonical, parsed = canonical_arguments(value)
    if n <= MAX_ARGUMENT_DEPTH:
        assert parsed == value
    else:
        assert parsed is None and "nested too deeply" in canonical
        other: list[Any] = [value, 1]  # a different deep value hashes differently
        assert canonical_arguments(other)[0] != canonical
    history = call_turns([value] * 4)
    live, restarted, _ = anyio.run(replay, history)
    assert dumps(live) == dumps(restarted)


def _nested(shape: list[tuple[str, int]]) -> str:
    opens = "".join(("[" if kind == "list" else '{"k":') * depth for kind, depth in shape)
    closes = "".join(("]" if kind == "list" else "}") * depth for kind, depth in reversed(shape))
    return opens + "1" + closes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.lists(
        st.tuples(st.sampled_from(["list", "dict"]), st.integers(1, 1200)), min_size=1, max_size=4
    ),
    repeats=st.integers(1, 4),
)
@pytest.mark.slow
def test_any_nesting_round_trips_through_state(shape: list[tuple[str, int]], repeats: int) -> None:
    history = call_turns([_nested(shape)] * repeats)
    live, restarted, sizes = anyio.run(replay, history)
    assert dumps(live) == dumps(restarted)
    assert max(sizes) < 128_000


@settings(max_examples=40, deadline=None)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=80),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=60), children, max_size=4)
        ),
        max_leaves=30,
    )
)
@pytest.mark.slow
def test_parsed_arguments_are_what_json_reads_from_the_canonical_text(value: Any) -> None:
    """The saved state keeps only the canonical text: parsing it must give the value back."""
    for arguments in (value, json.dumps(value)):
        canonical, parsed = canonical_arguments(arguments)
        if parsed is not None:
            assert json.loads(canonical) == parsed


# -- size -----------------------------------------------------------------------------------


def _sized_history(mb: float, kind: str) -> list[dict[str, Any]]:
    blob = "x" * int(mb * 1_000_000)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Write the file."}]
    for i in range(6):
        args = {"path": "a.py", "content": blob + str(i % 2)} if kind == "arguments" else {}
        result = f"Error: {blob}{i % 3}" if kind == "result" else "File written."
        history += call_turns([json.dumps(args)], result)[1:]
        history[-2]["tool_calls"][0]["id"] = history[-1]["tool_call_id"] = f"c{i}"
    return history


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["arguments", "result"])
def test_state_does_not_grow_with_argument_or_result_size(kind: str) -> None:
    small = anyio.run(replay, _sized_history(0.1, kind))
    large = anyio.run(replay, _sized_history(2.0, kind))
    assert dumps(large[0]) == dumps(large[1])
    assert [bool(v) for v in small[0]] == [bool(v) for v in large[0]]
    growth = (max(large[2]) - max(small[2])) / 1.9
    assert growth < GROWTH_PER_MB_LIMIT, f"{growth:.0f} bytes per MB"
    assert max(large[2]) < 256_000


def test_each_distinct_long_string_is_stored_once() -> None:
    value = "unique-" + "y" * 5000  # under the argument bound: kept whole
    history = call_turns([json.dumps({"content": value})] * 4)
    tracker = LoopTracker(CONFIG)
    for end in assistant_turn_ends(history):
        anyio.run(tracker.turn_started, history[:end])
    blob = tracker.state.model_dump_json()
    # One whole copy (the canonical text); the raw text, the signature, the pattern and
    # the findings quote at most a few kB of it.
    data = json.loads(blob)
    assert len(data["strings"]) == len(set(data["strings"]))
    whole = [s for s in data["strings"] if "unique-" in s and len(s) >= len(value)]
    assert len(whole) == 1, [s[:40] for s in whole]
    assert len(blob) < len(value) + 12_000
    again = LoopTracker.from_state(CONFIG, blob)
    # restored from a redacted state, it reads redacted; otherwise the very same state
    assert again.state.model_copy(update={"read_redacted": False}) == tracker.state


def test_long_messages_and_arguments_are_bounded_but_compare_exactly() -> None:
    base = "a" * (MAX_CONTENT_CHARS * 3)
    one, two = base + "1", base + "2"
    messages = normalize_history(
        [
            {"role": "user", "content": one},
            {"role": "user", "content": two},
            {"role": "user", "content": one},
        ]
    )
    assert all(len(m.content) <= MAX_CONTENT_CHARS for m in messages)
    assert messages[0].content == messages[2].content != messages[1].content
    args = json.dumps({"path": "f.py", "content": "b" * (MAX_ARGUMENT_CHARS * 4)})
    canonical, parsed = canonical_arguments(args)
    assert len(canonical) <= MAX_ARGUMENT_CHARS and parsed["path"] == "f.py"
    assert canonical_arguments(args.replace("bbbb", "bbbc", 1))[0] != canonical


@pytest.mark.slow
def test_byte_cap_sheds_the_judge_window_before_detector_memory() -> None:
    config = TrackerConfig(semantic="off", max_state_bytes=48_000)
    texts = [f"step {i}: " + "z" * 9_000 + str(i) for i in range(12)]
    history: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    for i, text in enumerate(texts):
        history.append({"role": "assistant", "content": text})
        history.append({"role": "user", "content": f"next {i}"})
    history += call_turns(['{"a":1}'] * 4)[1:]
    live, restarted, sizes = anyio.run(replay, history, config)
    assert max(sizes) <= 48_000
    # the heuristics' findings do not depend on the judge window
    assert [(v.looping, v.pattern, v.turn) for v in live] == [
        (v.looping, v.pattern, v.turn) for v in restarted
    ]
    assert any(live)
    assert MAX_STATE_BYTES >= 1_000_000


# -- format ---------------------------------------------------------------------------------


def test_state_of_an_older_version_is_refused_naming_it() -> None:
    state = LoopTracker(CONFIG).state.model_dump(mode="json")
    state["version"] = STATE_VERSION - 1
    with pytest.raises(StateError, match=f"version {STATE_VERSION - 1}"):
        LoopTracker.from_state(CONFIG, state)


def test_compact_form_keeps_keys_that_look_like_markers() -> None:
    long = "L" * INTERN_MIN_CHARS
    data = {
        "\x00#0": "a NUL key that looks like a reference",
        "\x00s": 5,
        long: [long, {"\x00s": 0}, {long: long}],
        "plain": [1, 2.5, None, True, "short"],
    }
    packed, table = compact(data)
    assert table == [long]
    assert expand(json.loads(json.dumps(packed)), table) == data


def test_compact_form_refuses_bad_references() -> None:
    with pytest.raises(StateError, match="out of range"):
        expand({"a": {"\x00s": 3}}, ["only one"])
    with pytest.raises(StateError, match="out of range"):
        expand({"\x00#9": 1}, [])
    state = LoopTracker(CONFIG).state.model_dump(mode="json")
    state["strings"] = "not a list"
    with pytest.raises(ValueError, match="string table"):
        TrackerState.model_validate(state)


# -- the sidecar and the proxy guardrail ---------------------------------------------------

TOKEN = "state-limits-token-0123456789"


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from tests.serving import redis_server

    with redis_server(Path(tmp_path_factory.mktemp("redis"))) as url:
        yield url


@pytest.mark.parametrize("n", [200, 400, 900])
def test_sidecar_session_with_nested_arguments_keeps_its_ladder(redis_url: str, n: int) -> None:
    """Before: n = 400 answered 500 on every later turn; n = 200 silently started the
    session over each turn, so the ladder never climbed. Now every turn answers as the
    library does in process."""
    from judge.service.app import create_app
    from judge.service.settings import ServerSettings
    from judge.service.store import RedisStore
    from tests.serving import unique_prefix

    history = call_turns(["[" * n + "]" * n] * 6, result="Error: still failing")
    ends = assistant_turn_ends(history)

    async def run() -> tuple[list[Verdict], list[Verdict]]:
        store = RedisStore(TrackerConfig(), url=redis_url, key_prefix=unique_prefix())
        app = create_app(ServerSettings(server_token=TOKEN), store)
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        got = []
        async with httpx.AsyncClient(
            transport=transport, base_url="http://localhost", headers=headers
        ) as client:
            for end in ends:
                r = await client.post("/v1/sessions/deep/turns", json={"messages": history[:end]})
                assert r.status_code == 200, r.text
                got.append(Verdict.model_validate(r.json()))
        await store.aclose()
        library = LoopTracker(TrackerConfig())
        expected = [await library.turn_started(history[:end]) for end in ends]
        return got, expected

    got, expected = anyio.run(run)
    assert dumps(got) == dumps(expected)
    assert [v.turn for v in got] == list(range(1, len(ends) + 1))
    assert sum(bool(v) for v in got) >= 2  # flagged, and flagged again: the ladder climbs


def test_proxy_guardrail_passes_nested_arguments_through(redis_url: str) -> None:
    pytest.importorskip("litellm")
    from judge.integrations.litellm_proxy import LoopJudgeGuardrail
    from judge.service.store import RedisStore
    from tests.serving import unique_prefix

    history = call_turns(["[" * 400 + "]" * 400] * 5)

    async def run() -> list[Any]:
        store = RedisStore(TrackerConfig(), url=redis_url, key_prefix=unique_prefix())
        guardrail = LoopJudgeGuardrail(store=store)
        out = []
        for end in assistant_turn_ends(history):
            data = {"model": "m", "messages": history[:end], "metadata": {}}
            data["metadata"]["loop_judge_session_id"] = "deep"
            out.append(await guardrail.async_pre_call_hook(None, None, data, "completion"))
        await store.aclose()
        return out

    results = anyio.run(run)
    assert all(r is not None and r["messages"] for r in results)
