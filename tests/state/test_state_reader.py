"""A restored tracker's reader (`judge.state.redacting_reader`) keeps a message the
redactor leaves alone instead of decoding a copy of it (the copy was most of a sidecar
turn's reading). Pinned against the full round trip it replaces: on every message and raw
entry of the recorded and handmade trajectories, and on values holding secrets, where the
copy must still come back redacted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from judge._codec import compact, decode, encode, expand
from judge.history import normalize_entry
from judge.llm.redaction import redactor_for
from judge.state import redacted_by, redacting_reader
from judge_eval.dataset import load_dataset

DATA = Path(__file__).resolve().parents[2] / "evals" / "data"
# Every RAW_STRIDE-th trajectory of the recorded and handmade sets: each source comes up.
RAW_STRIDE = 3
GITHUB_PAT = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def _redactor() -> Any:
    redactor = redactor_for(enabled=True, patterns=())
    assert redactor is not None
    return redactor


def _round_trip(value: Any) -> Any:
    """What the reader did before the shortcut, with a scrubber of its own."""
    packed, strings = compact(encode(value), redacted_by(_redactor()))
    return decode(expand(packed, strings))


def _entries() -> list[tuple[Any, int]]:
    folders = [p for p in DATA.glob("recorded/*") if p.is_dir()] + [DATA / "handmade"]
    trajectories, _ = load_dataset(folders)
    out: list[tuple[Any, int]] = []
    for trajectory in list(trajectories)[::RAW_STRIDE]:
        out.extend((raw, index) for index, raw in enumerate(trajectory.messages))
    return out


@pytest.mark.slow
def test_recorded_messages_read_as_the_round_trip_reads_them() -> None:
    kept = copied = 0
    for raw, index in _entries():
        for value in [raw, *normalize_entry(raw, index)]:
            # A reader of its own, as the reference's scrubber is: a secret learned from
            # one message redacts its pieces in every later one, by design.
            got = redacting_reader(_redactor())(value)
            assert got == _round_trip(value)
            if got is value:
                kept += 1
            else:
                copied += 1
    # Most recorded text holds no secret, and some does (keys in logs, tokens in URLs):
    # both branches ran.
    assert kept > 10 * copied > 0


@pytest.mark.parametrize(
    "value",
    [
        {"role": "tool", "content": f"token {GITHUB_PAT} ok"},
        {"role": "user", "content": [{"type": "text", "text": f"use {GITHUB_PAT}"}]},
        {"role": "assistant", "content": None, "extra": {f"k {GITHUB_PAT}": 1}},
        ("nested", ["deep", {"x": f"password = hunter2-{GITHUB_PAT}"}]),
    ],
)
def test_a_secret_anywhere_comes_back_redacted_in_a_copy(value: Any) -> None:
    got = redacting_reader(_redactor())(value)
    assert got is not value
    assert GITHUB_PAT not in repr(got)
    assert got == _round_trip(value)


def test_a_clean_value_is_returned_itself() -> None:
    value = {"role": "assistant", "content": "Reading the file.", "n": [1, 2.5, None, True]}
    assert redacting_reader(_redactor())(value) is value


@pytest.mark.slow
def test_leaves_alone_walks_keys_values_and_depth() -> None:
    def scrubber() -> Any:
        return redacted_by(_redactor())

    assert scrubber().leaves_alone({"a": ["b", {"c": 1}], "d": None})
    assert not scrubber().leaves_alone({"a": ["ok", {"c": f"key {GITHUB_PAT}"}]})
    assert not scrubber().leaves_alone({f"key {GITHUB_PAT}": 1})
    # Answers remembered from an earlier string do not hide a later secret.
    clean = scrubber()
    assert clean.leaves_alone(["plain text", "more"])
    assert not clean.leaves_alone(["plain text", GITHUB_PAT])
    deep: Any = GITHUB_PAT
    for _ in range(100_000):  # no recursion: any nesting is walked
        deep = [deep]
    assert not scrubber().leaves_alone(deep)
