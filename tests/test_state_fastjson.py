"""The one-pass save (`TrackerState.fast_json`, with a tracker's `EncodeMemo`) writes the
same state as the full path (issue 11: a sidecar saves every turn).

Pinned on the recorded and handmade trajectories replayed as the sidecar runs them (each
turn appended, saved with `dump_session`): every save reads back to the same state as
``model_dump_json``, a tracker restored from it continues alike, and what it cannot write
(scrubbing, shedding, non-finite numbers) falls back to the full path.
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path
from typing import Any

import pytest

from judge import LoopTracker, TrackerConfig
from judge._codec import CannotWrite, CompactWriter, EncodeMemo, compact, expand
from judge.errors import StateError
from judge.service.state import (
    SESSION_FORMAT,
    dump_session,
    dump_tracker,
    load_session,
    new_tracker,
    stored_tail,
)
from judge.state import MAX_STATE_BYTES, PLAIN_MAX_BYTES, TrackerState
from judge.turns import assistant_turn_ends
from judge_eval.dataset import load_dataset

pytestmark = pytest.mark.anyio

CONFIG = TrackerConfig(semantic="off")
DATA = Path(__file__).resolve().parent.parent / "evals" / "data"
# Trajectories replayed (every TRAJECTORY_STRIDE-th of the recorded and handmade sets):
# each of the seven sources comes up, in a few seconds.
TRAJECTORY_STRIDE = 9
GITHUB_PAT = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def _trajectories() -> list[Any]:
    folders = [p for p in DATA.glob("recorded/*") if p.is_dir()] + [DATA / "handmade"]
    trajectories, _ = load_dataset(folders)
    return list(trajectories)[::TRAJECTORY_STRIDE]


def _read(data: bytes | str) -> dict[str, Any]:
    """A serialized state as the loader sees it: validated, then dumped without compacting."""
    state = TrackerState.model_validate_json(data)
    return {name: getattr(state, name) for name in type(state).model_fields}


def _full(tracker: LoopTracker) -> bytes:
    return tracker.state.model_dump_json().encode("utf-8")


def _add_step(history: list[dict[str, Any]], n: int, tool: str, path: str, result: str) -> None:
    """One assistant turn calling ``tool`` on ``path`` and its result, appended."""
    call = {
        "id": f"c{n}",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps({"path": path})},
    }
    history.append({"role": "assistant", "content": f"Step {n}.", "tool_calls": [call]})
    history.append({"role": "tool", "tool_call_id": f"c{n}", "content": result})


async def test_recorded_saves_read_back_as_the_full_path_writes_them() -> None:
    saves = 0
    for trajectory in _trajectories():
        messages = trajectory.messages
        tracker = new_tracker(CONFIG)
        for end in assistant_turn_ends(messages) or [len(messages)]:
            await tracker.turn_started(messages[:end])
            fast = dump_tracker(tracker)  # through the tracker's memo, reused turn to turn
            full = _read(_full(tracker))
            assert _read(fast) == full
            # Both fast writers, whichever dump_tracker took for this state's size.
            state = tracker.state
            compacted, plain = state.fast_json(), state.plain_json(max_bytes=MAX_STATE_BYTES)
            assert compacted is not None and _read(compacted) == full
            assert plain is not None and _read(plain) == full
            saves += 1
        restored = LoopTracker.from_state(CONFIG, fast.decode("utf-8"))
        assert _read(dump_tracker(restored)) == _read(fast)
    assert saves > 100


async def test_a_restored_session_continues_alike() -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Publish the release."}]
    live = new_tracker(CONFIG)
    length, tail = 0, None
    verdicts = []
    for n in range(12):
        call = {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"cmd": "npm publish"})},
        }
        history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        history.append({"role": "tool", "tool_call_id": f"c{n}", "content": "403 Forbidden"})
        verdict = await live.turn_started(history)
        length, tail = len(history), stored_tail(live, history[-1])
        blob = dump_session(live, length, tail)
        restored = load_session(CONFIG, blob).tracker
        assert _read(dump_tracker(restored)) == _read(_full(live))
        verdicts.append(verdict.looping)
        live = restored  # the next turn runs on what was saved
    assert any(verdicts)


async def test_no_secret_in_a_fast_save() -> None:
    tracker = new_tracker(CONFIG)
    history: list[dict[str, Any]] = [{"role": "user", "content": f"token {GITHUB_PAT} please"}]
    for n in range(6):
        call = {
            "id": f"c{n}",
            "type": "function",
            "function": {
                "name": "bash",
                "arguments": json.dumps({"cmd": f"curl -H 'Authorization: {GITHUB_PAT}'"}),
            },
        }
        history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        history.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"no: {GITHUB_PAT}"})
        await tracker.turn_started(history)
        blob = dump_session(tracker, len(history), stored_tail(tracker, history[-1]))
        text = zlib.decompress(blob[len(SESSION_FORMAT) :]).decode("utf-8")
        assert GITHUB_PAT[4:14] not in text
        assert GITHUB_PAT[4:14].lower() not in text.lower()
        assert _read(json.dumps(json.loads(text)["state"])) == _read(_full(tracker))


async def test_an_unrestored_tracker_takes_the_scrubbing_path() -> None:
    tracker = LoopTracker(CONFIG)  # reads raw: its save must scrub every string
    await tracker.turn_started([{"role": "user", "content": f"key {GITHUB_PAT}"}])
    assert tracker.state.fast_json() is None
    assert GITHUB_PAT not in dump_tracker(tracker).decode("utf-8")


async def test_a_state_over_its_cap_is_shed_by_the_full_path() -> None:
    config = CONFIG.model_copy(update={"max_state_bytes": 4096})
    tracker = new_tracker(config)
    history = [{"role": "user", "content": "word " * 4000}]
    await tracker.turn_started(history)
    assert tracker.state.fast_json() is None
    assert len(dump_tracker(tracker)) <= 4096 + 1024  # the full path's estimate, shed


def test_the_writer_matches_compact_on_awkward_data() -> None:
    long = "x" * 60
    data = {
        "\x00nul": [long, long, "short", 1, 2.5, True, None],
        long: {"$dict": {"\x00\x00k": long + "y"}},
        "nested": [[[[{"a": "é\u2028\n\x00"}]]]],
        "big": 10**30,
    }
    memo = EncodeMemo()
    for _ in range(2):  # the second time with the keys' text remembered by the memo
        writer = CompactWriter(memo)
        writer.write(data)
        text = "".join(writer.out)
        assert expand(json.loads(text), json.loads(writer.strings_json())) == data
    packed, strings = compact(data)
    assert expand(packed, strings) == data
    for awkward in (math.inf, math.nan, (1, 2), {1: "a"}):
        with pytest.raises(CannotWrite):
            CompactWriter().write({"v": awkward})


def test_the_key_table_stops_growing_and_keys_past_it_are_still_written() -> None:
    from judge._codec import MAX_KEY_TEXTS

    data = {f"path/{n}.py": n for n in range(MAX_KEY_TEXTS + 500)}
    memo = EncodeMemo()
    for _ in range(2):
        writer = CompactWriter(memo)
        writer.write({"$dict": data, "\x00k": [True, "s", 1, None]})
        assert len(memo.key_text) == MAX_KEY_TEXTS
        expected = {"$dict": data, "\x00\x00k": [True, "s", 1, None]}
        assert json.loads("".join(writer.out)) == expected
    # A table is its tracker's: another memo starts empty.
    assert EncodeMemo().key_text == {}


def test_expand_in_place_reads_what_the_copying_expand_reads() -> None:
    """`load_session` expands the JSON it just parsed in place; `TrackerState` copies (its
    input may be the caller's). Both read the same data back, and only in place changes
    the input."""
    long = "y" * 70
    data = {
        "\x00nul": [long, {"k": long}, "short", 1, None],
        long: {"$dict": {"\x00\x00k": long + "z", "plain": [long, [long]]}},
        "nested": [[[{"a": long}]]],
    }
    packed, strings = compact(data)
    text = json.dumps(packed)
    untouched = json.loads(text)
    assert expand(untouched, strings) == data
    assert untouched == json.loads(text)  # the copying expand left its input alone
    parsed = json.loads(text)
    assert expand(parsed, strings, in_place=True) == data
    with pytest.raises(StateError, match="out of range"):
        expand(json.loads(text), strings[:1], in_place=True)


def test_the_writer_refuses_deep_nesting() -> None:
    deep: Any = "leaf"
    for _ in range(200):
        deep = [deep]
    with pytest.raises(CannotWrite, match="deep"):
        CompactWriter().write(deep)


async def test_the_memo_keeps_only_the_last_save() -> None:
    tracker = new_tracker(CONFIG)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Read every file."}]
    memo = EncodeMemo()
    sizes = []
    for n in range(90):
        _add_step(history, n, "read", f"f{n}.py", f"body {n}")
        await tracker.turn_started(history)
        with memo.active():
            state = tracker.state
            fast = state.fast_json(memo)
        assert fast is not None and _read(fast) == _read(_full(tracker))
        sizes.append(len(memo.by_encoded))
    # Bounded by the windows the tracker keeps, not by the turns seen.
    assert max(sizes[60:]) <= max(sizes[:60])


async def test_a_small_state_is_saved_plain_and_a_large_one_compacted() -> None:
    """A sidecar's save skips the table of long strings while the state is small
    (`TrackerState.plain_json`) and compacts it past PLAIN_MAX_BYTES; both read back as
    the full path writes them, and a restored tracker goes on from either."""
    tracker = new_tracker(CONFIG)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Summarize every log."}]
    kinds = []
    for n in range(40):
        body = f"log {n}: " + " ".join(f"line {n}-{i} ok" for i in range(300))
        _add_step(history, n, "cat", f"logs/{n}.txt", body)
        await tracker.turn_started(history)
        saved = dump_tracker(tracker)
        kinds.append("strings" in json.loads(saved))
        assert _read(saved) == _read(_full(tracker))
        assert len(saved) <= PLAIN_MAX_BYTES or kinds[-1]  # never plain past the bound
        restored = LoopTracker.from_state(CONFIG, saved.decode("utf-8"))
        assert _read(dump_tracker(restored)) == _read(saved)
    assert not kinds[0] and kinds[-1]  # plain at first, compacted once it grew


async def test_a_state_saved_large_is_not_written_plain_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once a save is over PLAIN_MAX_BYTES, the next goes straight to the compact writer
    (writing it plain first, to be refused, doubled the cost of every large save)."""
    tracker = new_tracker(CONFIG)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Read the logs."}]
    plain_calls = []
    real = TrackerState.plain_json

    def counting(self: TrackerState, max_bytes: int = PLAIN_MAX_BYTES) -> bytes | None:
        plain_calls.append(max_bytes)
        return real(self, max_bytes)

    monkeypatch.setattr(TrackerState, "plain_json", counting)
    sizes = []
    for n in range(40):
        body = " ".join(f"entry {n}-{i} fine" for i in range(300))
        _add_step(history, n, "cat", f"logs/{n}.txt", body)
        await tracker.turn_started(history)
        before = len(plain_calls)
        sizes.append(len(dump_tracker(tracker)))
        tried_plain = len(plain_calls) > before
        assert tried_plain == (n == 0 or sizes[-2] <= PLAIN_MAX_BYTES)
    assert sizes[-1] > PLAIN_MAX_BYTES


def test_the_plain_form_keeps_awkward_keys_and_writes_numbers_as_pydantic_does() -> None:
    long = "z" * 80
    detectors = {
        "x": {"\x00s": 3, "\x00#1": long, long: [long, long], "nan": math.nan, "big": 10**30}
    }
    state = TrackerState(detectors=detectors)
    plain = state.plain_json()
    assert plain is not None and b'"strings"' not in plain
    assert _read(plain) == _read(state.model_dump_json())
    assert TrackerState.model_validate_json(plain).detectors["x"]["\x00s"] == 3


def test_the_plain_form_is_refused_where_the_compact_one_might_not_fit_the_cap() -> None:
    state = TrackerState(detectors={"x": {"text": "w " * 500}})
    size = len(state.plain_json() or b"")
    assert size > 1000
    assert state.with_max_bytes(2 * size + 16).plain_json() is not None
    assert state.with_max_bytes(2 * size + 15).plain_json() is None
    assert state.with_max_bytes(MAX_STATE_BYTES).plain_json(max_bytes=size - 1) is None


async def test_an_unrestored_tracker_is_never_saved_plain() -> None:
    tracker = LoopTracker(CONFIG)  # reads raw: its save must scrub every string
    await tracker.turn_started([{"role": "user", "content": f"key {GITHUB_PAT}"}])
    assert tracker.state.plain_json() is None


async def test_streamed_text_is_scrubbed_by_every_writer_and_skipped_only_when_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import judge.state

    scrubbers = []
    real = judge.state.redacted_by

    def counting(redactor: Any) -> Any:
        scrubbers.append(redactor)
        return real(redactor)

    monkeypatch.setattr(judge.state, "redacted_by", counting)
    tracker = new_tracker(CONFIG)  # a restored tracker: the fast writers serve it
    await tracker.turn_started([{"role": "user", "content": "Deploy it."}])
    quiet = tracker.state
    scrubbers.clear()
    assert quiet.plain_json() is not None and quiet.fast_json() is not None
    assert scrubbers == []  # no streamed text: no scrubbing pass over it
    tracker.content_chunk(f"Using the token {GITHUB_PAT} to push")
    state = tracker.state
    scrubbers.clear()
    plain, compacted = state.plain_json(), state.fast_json()
    assert len(scrubbers) == 2  # each writer scrubbed the streamed text on its way out
    for saved in (plain, compacted, _full(tracker)):
        assert saved is not None
        assert GITHUB_PAT[4:14] not in saved.decode("utf-8")
        assert _read(saved) == _read(_full(tracker))


async def test_a_session_whose_tail_holds_a_lone_surrogate_reads_back() -> None:
    """pydantic-core's parser refuses a lone surrogate's escape, which ``json`` writes for
    a message that held one (JSON allows it): `load_session` reads it with ``json``."""
    tracker = new_tracker(CONFIG)
    history: list[dict[str, Any]] = [{"role": "user", "content": "half an emoji: \ud83d"}]
    await tracker.turn_started(history)
    blob = dump_session(tracker, 1, stored_tail(tracker, history[-1]))
    session = load_session(CONFIG, blob)
    assert session.length == 1 and session.tail["content"] == "half an emoji: \ud83d"
    assert _read(dump_tracker(session.tracker)) == _read(dump_tracker(tracker))


def test_a_planted_session_nested_past_any_parser_is_a_state_format_error() -> None:
    from judge.service.state import StateFormatError

    depth = 100_000
    body = b'{"length":1,"tail":' + b"[" * depth + b"]" * depth + b',"state":{}}'
    with pytest.raises(StateFormatError):
        load_session(CONFIG, SESSION_FORMAT + zlib.compress(body))


def test_a_fresh_ladder_state_and_stats_equal_their_defaults_and_share_nothing() -> None:
    """Built without pydantic reading the default factories (`_fresh_state`,
    `TrackerStats.fresh`): equal to the validated defaults, and no two share a dict."""
    from judge.response.ladder import LadderState, _fresh_state
    from judge.response.stats import TrackerStats

    assert _fresh_state() == LadderState()
    assert TrackerStats.fresh() == TrackerStats()
    one, two = TrackerStats.fresh(), TrackerStats.fresh()
    one.actions["stop"] = 1
    one.detections_by_kind["action"] = 1
    assert two.actions == {} and two.detections_by_kind == {}
    first, second = _fresh_state(), _fresh_state()
    first.overrides.append(None)  # type: ignore[arg-type]
    assert second.overrides == [] and first.patterns is not second.patterns
