"""No secret in a saved tracker state or an override record: both are written to disk or a store.

The corpus of tests/data/secrets run through trackers as looping histories
(evals/bench_security.py, `measure_saved_state`): a subset here, the whole corpus in the
slow test. Before this change every one of the 488 cases leaked into ``tracker.state``.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from judge import LoopTracker, TrackerConfig
from judge.llm.redaction import redactor_for
from judge.state import STATE_VERSION, fit_state, redacted_by

pytestmark = pytest.mark.anyio

CONFIG = TrackerConfig(semantic="off")
# Every CASE_STRIDE-th case of the corpus for the fast test: prime to the four placements
# (the corpus cycles through them), so all four come up; 38 cases, a few seconds.
CASE_STRIDE = 13
GITHUB_PAT = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def _bench() -> Any:
    path = Path(__file__).resolve().parents[2] / "evals" / "bench_security.py"
    spec = importlib.util.spec_from_file_location("bench_security", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _history(command: str, turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Publish the release."}]
    for n in range(turns):
        call = {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"cmd": command})},
        }
        history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        history.append({"role": "tool", "tool_call_id": f"c{n}", "content": "403 Forbidden"})
    return history


def _sidecar_start(config: TrackerConfig = CONFIG) -> LoopTracker:
    return LoopTracker.from_state(config, LoopTracker(config).state.model_dump())


@pytest.mark.slow
def test_a_sample_of_the_corpus_leaks_nowhere_and_restores_alike() -> None:
    bench = _bench()
    cases = bench.load(bench.SECRETS_FILE)[::CASE_STRIDE]
    assert {c["placement"] for c in cases} == {"result", "arguments", "assistant", "task"}
    figures = bench.measure_saved_state(cases)
    assert figures["library"]["leaked"] == []
    assert figures["sidecar"]["leaked"] == []
    assert figures["differing"] == []
    # the measure itself works: without redaction every case is found in the state
    assert figures["leaks_without_redaction"] == len(cases)


@pytest.mark.slow
def test_the_whole_corpus_leaks_nowhere_and_restores_alike() -> None:
    figures = _bench().measure_saved_state()
    assert figures["secret_cases"] >= 400
    assert figures["library"]["leaked"] == [] and figures["sidecar"]["leaked"] == []
    assert figures["differing"] == []
    # restored every turn, a tracker reads what is new redacted and never redacts a copy
    # again: look-alikes stay as they are (a tracker saved once redacts the detectors'
    # lowercased copies with the same rules, which flag some code: at most 3%)
    assert figures["sidecar"]["falsely_redacted"] == []
    assert figures["library"]["false_redactions"] <= 0.03 * figures["lookalike_cases"]


async def test_clipped_and_lowercased_copies_of_a_secret_are_redacted_too() -> None:
    """Detectors keep a summary clipped mid-token and lowercased requests; the rules do not
    recognise those, the pieces of the secret found whole do."""
    tracker = LoopTracker(CONFIG)
    history = _history(f"git push https://github.com using {GITHUB_PAT} --force", 4)
    verdict = await tracker.turn_started(history)
    assert verdict.looping
    assert "…" in verdict.summary  # the detector's summary clips the call
    saved = tracker.state.model_dump_json()
    assert GITHUB_PAT[:10] not in saved and GITHUB_PAT[:10].lower() not in saved.lower()
    assert "[REDACTED:" in saved


async def test_restored_tracker_still_counts_a_loop_that_quotes_a_secret() -> None:
    """The state holds the redacted call; a restored tracker reads the next one redacted
    too, so the repeat is still a repeat, and check_call still refuses it."""
    command = f"curl -H 'Authorization: Bearer {GITHUB_PAT}' https://api.github.com/user"
    live = LoopTracker(CONFIG)
    restored = _sidecar_start()
    for turns in range(1, 6):
        expected = await live.turn_started(_history(command, turns))
        got = await restored.turn_started(_history(command, turns))
        assert (got.looping, got.kind, got.action) == (
            expected.looping,
            expected.kind,
            expected.action,
        )
        blob = restored.state.model_dump_json()
        assert GITHUB_PAT[:10] not in blob
        restored = LoopTracker.from_state(CONFIG, blob)
    assert expected.looping
    arguments = {"cmd": command}
    assert (
        restored.check_call("bash", arguments).looping == live.check_call("bash", arguments).looping
    )
    assert live.check_call("bash", arguments).looping


async def test_override_records_hold_no_secret() -> None:
    tracker = LoopTracker(CONFIG)
    verdict = await tracker.turn_started(_history(f"npm publish --token {GITHUB_PAT}", 4))
    assert verdict.looping and verdict.pattern
    returned = tracker.override(verdict, f"the token {GITHUB_PAT} is fine, go on")
    [kept] = tracker.overrides
    for record in (returned, kept):
        text = record.model_dump_json()
        assert GITHUB_PAT[:10] not in text and "[REDACTED:" in record.reason
    # an override still silences the loop it names (the ladder keeps its own pattern)
    assert not (
        await tracker.turn_started(_history(f"npm publish --token {GITHUB_PAT}", 5))
    ).looping


async def test_redaction_off_keeps_the_state_as_read() -> None:
    config = TrackerConfig(semantic="off", redact_secrets=False)
    tracker = LoopTracker(config)
    await tracker.turn_started(_history(f"npm publish --token {GITHUB_PAT}", 2))
    data = json.loads(tracker.state.model_dump_json())
    assert GITHUB_PAT in json.dumps(data) and data["redacted"] is False
    assert data["version"] == STATE_VERSION


def test_a_state_of_the_version_before_redaction_is_refused() -> None:
    """Version 3 states may hold secrets as read: a server starts such a session over."""
    from judge.errors import StateError

    data = LoopTracker(CONFIG).state.model_dump()
    data["version"] = 3
    with pytest.raises(StateError, match="version 3"):
        LoopTracker.from_state(CONFIG, data)


def test_each_string_is_redacted_once_across_saves() -> None:
    """A sidecar saves every turn: a string already redacted once costs a look-up."""
    redactor = redactor_for(enabled=True)
    assert redactor is not None
    calls: list[str] = []
    real = redactor.spans

    def counting(text: str) -> list[tuple[int, int, str]]:
        calls.append(text)
        return real(text)

    # unique to this run: the rules' memo is shared by every state saved with the redactor
    data = {"a": f"export NPM_TOKEN={GITHUB_PAT} && npm publish {uuid.uuid4()}", "b": "short"}
    redactor.spans = counting  # type: ignore[method-assign]
    try:
        _, strings = fit_state(dict(data), 1 << 20, redacted_by(redactor))
        once = len(calls)
        _, strings_again = fit_state(dict(data), 1 << 20, redacted_by(redactor))
        # a restored state's strings are the redacted forms: looked up too
        fit_state({"a": strings[0], "b": "short"}, 1 << 20, redacted_by(redactor))
    finally:
        del redactor.spans
    assert once >= 1 and len(calls) == once  # neither a second save nor the redacted form
    assert strings == strings_again and GITHUB_PAT not in strings[0]
