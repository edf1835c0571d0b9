"""Each detector on a clear loop and on its nearest legitimate look-alike."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from judge import Action, LoopKind, LoopTracker, TrackerConfig, Verdict
from judge.config import ResponseMode
from judge.decision import Combined, combine
from judge.detectors.base import Finding
from judge.detectors.outcome import Outcome, classify, result_key, volatile_masked
from judge.detectors.suite import DetectorSuite
from judge.detectors.text_repetition import degenerate, prose, questions
from judge.history import normalize_history
from tests.fakes import Agent, replay_turns


def replay(agent: Agent, **config: Any) -> list[Verdict]:
    """turn_started at the start of every turn after an assistant message."""
    tracker = LoopTracker(TrackerConfig(**config))
    return anyio.run(replay_turns, tracker, agent.history)


def first_flag(verdicts: list[Verdict]) -> int | None:
    return next((i + 1 for i, v in enumerate(verdicts) if v), None)


# -- exact repeat -----------------------------------------------------------------------


def test_modifying_tool_third_identical_call_is_a_loop() -> None:
    agent = Agent()
    for _ in range(3):
        agent.call("write_file", {"path": "a.txt", "content": "x"}, "File written.")
    verdicts = replay(agent)
    assert first_flag(verdicts) == 3
    v = verdicts[2]
    assert v.source == "heuristic:exact_repeat" and v.kind is LoopKind.EXACT_REPEAT
    assert "write_file" in (v.summary or "") and "3x" in (v.summary or "")
    assert v.recovery_message and "do not call write_file" in v.recovery_message.lower()
    assert v.evidence == [2, 4, 6]


def _legs(*flights: str) -> dict[str, Any]:
    return {
        "reservation_id": "XEWRD9",
        "flights": [{"flight_number": f, "date": "2024-05-13"} for f in flights],
    }


def test_a_retry_still_passing_what_the_error_named_continues_the_failed_run() -> None:
    agent = Agent()
    error = "Error: flight HAT030 not available on date 2024-05-13"
    agent.call("update_reservation", _legs("HAT030", "HAT223", "HAT052"), error)
    agent.call("update_reservation", _legs("HAT030", "HAT223", "HAT052"), error)
    # one leg fewer, but HAT030 (and its date) are booked again: the same error can only
    # come back
    agent.call("update_reservation", _legs("HAT030", "HAT052"), error)
    verdicts = replay(agent)
    assert first_flag(verdicts) == 3
    flagged = verdicts[2]
    assert flagged.source == "heuristic:exact_repeat" and flagged.evidence == [2, 4, 6]
    assert "variants still passing what the error named" in (flagged.summary or "")


def test_a_variant_run_survives_saving_the_detectors_at_every_message() -> None:
    agent = Agent()
    error = "Error: flight HAT030 not available on date 2024-05-13"
    for flights in (("HAT030", "HAT223"), ("HAT030", "HAT223"), ("HAT030",)):
        agent.call("update_reservation", _legs(*flights), error)
    config = TrackerConfig(semantic="off")
    live, restored = DetectorSuite(config), DetectorSuite(config)
    for msg in normalize_history(agent.history):
        live.feed(msg)
        restored.feed(msg)
        again = DetectorSuite(config)
        again.restore(json.loads(json.dumps(restored.snapshot())))
        restored = again
    found = {f.detector: f for f in restored.findings()}
    assert found["exact_repeat"].score == 1.0
    assert restored.findings() == live.findings()


def test_a_retry_that_changes_what_the_error_named_is_a_new_attempt() -> None:
    agent = Agent()
    for flight in ("HAT030", "HAT031", "HAT032"):  # each one the error named is replaced
        agent.call(
            "update_reservation",
            _legs(flight, "HAT052"),
            f"Error: flight {flight} not available on date 2024-05-13",
        )
    assert first_flag(replay(agent)) is None


def test_the_same_error_naming_no_argument_does_not_join_variants() -> None:
    agent = Agent()
    for flights in (("HAT030", "HAT052"), ("HAT031",), ("HAT032", "HAT124")):
        agent.call("update_reservation", _legs(*flights), "Error: payment declined")
    assert first_flag(replay(agent)) is None


def test_exploration_tool_gets_ten_identical_calls() -> None:
    # a targetless exploration call (a status poll); re-reading one file unchanged has the
    # lower limit of judge.detectors.revisit
    agent = Agent()
    for _ in range(11):
        agent.call("get_queue_status", {"queue": 7}, '{"depth": 3, "state": "draining"}')
    verdicts = replay(agent)
    assert first_flag(verdicts) == 11


def test_other_tool_fourth_call_and_per_tool_override() -> None:
    # "weather" is neither a read nor a write by name: the other class's limit (3) holds.
    agent = Agent()
    for _ in range(4):
        agent.call("weather", {"city": "Lima"}, '{"temp": 18}')
    assert first_flag(replay(agent)) == 4
    assert first_flag(replay(agent, tool_limits={"weather": 1})) == 2
    # A read-only tool by name asks for the same thing again: its third identical answer
    # in a row is the read rule's loop (judge.detectors.revisit), whatever the class limit.
    reader = Agent()
    for _ in range(4):
        reader.call("get_weather", {"city": "Lima"}, '{"temp": 18}')
    assert first_flag(replay(reader, explore_tools=("ls",))) == 3


def test_identical_failures_loop_from_the_third_whatever_the_tool() -> None:
    agent = Agent()
    for _ in range(3):
        agent.call("ls", {"path": "/missing"}, "ls: cannot access '/missing': No such file")
    assert first_flag(replay(agent)) == 3


def test_polling_with_changing_results_is_progress() -> None:
    agent = Agent()
    for i in range(15):
        agent.call(
            "bash",
            {"command": "gh run view 42 --json status"},
            json.dumps({"status": "in_progress", "step": i}),
        )
    assert first_flag(replay(agent)) is None


def test_argument_key_order_and_ids_do_not_matter() -> None:
    agent = Agent()
    agent.call("edit", {"path": "a", "text": "x"}, "ok")
    agent.history.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "zz",
                    "type": "function",
                    "function": {"name": "edit", "arguments": '{"text":"x",  "path":"a"}'},
                }
            ],
        }
    )
    agent.history.append({"role": "tool", "tool_call_id": "zz", "content": "ok"})
    agent.call("edit", {"text": "x", "path": "a"}, "ok")
    assert first_flag(replay(agent)) == 3


def test_parallel_calls_count_one_by_one() -> None:
    agent = Agent()
    agent.parallel(
        [
            ("write_file", {"path": "a"}, "written"),
            ("write_file", {"path": "a"}, "written"),
            ("write_file", {"path": "a"}, "written"),
        ]
    )
    assert first_flag(replay(agent)) == 1


def test_recurring_call_with_others_between() -> None:
    agent = Agent()
    for i in range(4):
        agent.call("get_order_status", {"id": "W1"}, '{"status": "processing"}')
        agent.call("get_product", {"id": str(i)}, json.dumps({"name": f"p{i}"}))
    verdicts = replay(agent)
    assert first_flag(verdicts) == 7
    assert "in between" in (verdicts[6].summary or "")


def test_rereading_an_edited_file_is_progress() -> None:
    agent = Agent()
    for i in range(6):
        agent.call("read_file", {"path": "app.py"}, f"def f():\n    return {i}\n")
        agent.call("edit_file", {"path": "app.py", "line": 2, "text": f"return {i + 1}"}, "ok")
    assert first_flag(replay(agent)) is None


def test_preflight_refuses_the_repeat_before_it_runs() -> None:
    agent = Agent()
    for _ in range(2):
        agent.call("write_file", {"path": "a.txt", "content": "x"}, "File written.")
    tracker = LoopTracker(TrackerConfig())

    async def run() -> tuple[Verdict, Verdict, Verdict, int]:
        await tracker.turn_started(agent.history)
        turn = tracker.turn
        same = tracker.check_call("write_file", {"content": "x", "path": "a.txt"})
        other = tracker.check_call("write_file", '{"path": "b.txt", "content": "x"}')
        again = tracker.check_call("write_file", {"content": "x", "path": "a.txt"})
        assert tracker.turn == turn
        return same, other, again, turn

    same, other, again, _ = anyio.run(run)
    assert same and same.action is Action.WARN and "write_file" in (same.summary or "")
    assert not other
    assert again.looping  # preflight changes no state


# -- cycles -----------------------------------------------------------------------------


def test_ab_cycle_three_times() -> None:
    agent = Agent()
    for _ in range(3):
        agent.call("click", {"element": "item B09"}, "item page B09")
        agent.call("click", {"element": "< Prev"}, "search results page 1")
    verdicts = replay(agent)
    assert first_flag(verdicts) == 6
    assert verdicts[5].kind is LoopKind.ALTERNATION


def test_abc_cycle_twice_and_rotation_is_one_pattern() -> None:
    agent = Agent()
    for _ in range(2):
        agent.call("open", {"f": "a"}, "A")
        agent.call("open", {"f": "b"}, "B")
        agent.call("open", {"f": "c"}, "C")
    tracker_verdicts = replay(agent)
    assert first_flag(tracker_verdicts) == 6
    from judge.detectors.cycle import CycleDetector
    from judge.detectors.steps import StepBuilder
    from judge.history import normalize_history

    def pattern(order: list[str]) -> str:
        det, builder = CycleDetector(3, 2), StepBuilder()
        a = Agent()
        for _ in range(2):
            for name in order:
                a.call("open", {"f": name}, name.upper())
        found = None
        for msg in normalize_history(a.history):
            for step in builder.feed(msg):
                found = det.observe(step)
        assert found is not None
        return found.pattern

    assert pattern(["a", "b", "c"]) == pattern(["b", "c", "a"])


def test_edit_test_cycle_with_changing_failures_is_progress() -> None:
    agent = Agent()
    for i in range(5):
        agent.call("edit_file", {"path": "m.py", "patch": f"fix {i}"}, "ok")
        agent.call("bash", {"command": "pytest -q"}, f"{5 - i} failed, {i} passed")
    assert first_flag(replay(agent)) is None


# -- near-identical retries ---------------------------------------------------------------


def test_near_identical_retries_failing_the_same_way() -> None:
    agent = Agent()
    for path in ["./data.csv", "data.csv", "./Data.csv", "data.csv ", "/data.csv"]:
        agent.call("read", {"path": path}, f"Error: file {path} not found")
    verdicts = replay(agent)
    flagged = first_flag(verdicts)
    assert flagged is not None and flagged <= 5
    assert any(v.kind is LoopKind.SIMILAR_RETRY for v in verdicts if v)


def test_search_typo_variants() -> None:
    agent = Agent()
    for q in ["fo0", "f00", "foo0", "fooo"]:
        agent.call("search", {"query": q}, "No results found")
    assert first_flag(replay(agent)) == 4


def test_refined_search_that_succeeds_is_not_a_loop() -> None:
    agent = Agent()
    agent.call("search", {"query": "fo0"}, "No results found")
    agent.call("search", {"query": "foo"}, "No results found")
    agent.call("search", {"query": "foo bar"}, '[{"title": "Foo Bar", "url": "x"}]')
    assert first_flag(replay(agent)) is None


def test_acknowledgements_are_never_the_same_result() -> None:
    agent = Agent()
    for i in range(6):
        agent.call("write_file", {"path": f"src/mod_{i}.py", "content": "x"}, "File written.")
    assert first_flag(replay(agent)) is None


# -- result and error cycles ---------------------------------------------------------------


def test_different_calls_same_error() -> None:
    agent = Agent()
    cmds = ["pip install x", "pip install --user x", "sudo pip install x", "pip3 install x"]
    for cmd in cmds:
        agent.call(
            "bash", {"command": cmd}, f"error: externally-managed-environment (took {len(cmd)}ms)"
        )
    verdicts = replay(agent)
    # Four different calls with the same error in a row: result_cycle's streak. (The
    # same-failure rule's third is for obstacles no change of input fixes, such as spent
    # credits; an installer's refusal may yield to the next flag, so it waits for four.)
    assert first_flag(verdicts) == 4
    assert verdicts[3].source == "heuristic:result_cycle"


def test_different_lookups_returning_different_data_is_exploration() -> None:
    agent = Agent()
    for i in range(8):
        agent.call("lookup", {"keyword": f"k{i}"}, f"Result {i}: something new about k{i}")
    assert first_flag(replay(agent)) is None


def test_whack_a_mole_errors() -> None:
    agent = Agent()
    errors = ["ImportError: cannot import name 'a'", "TypeError: bad operand"]
    for i in range(5):
        agent.call("bash", {"command": "python app.py"}, "Traceback:\n" + errors[i % 2])
        agent.call("edit_file", {"path": "app.py", "patch": f"p{i}"}, "ok")
    verdicts = replay(agent)
    flagged = first_flag(verdicts)
    assert flagged is not None
    # each run follows a new edit, so it is the flip-flop rule that names it
    assert any("flipping between the same two errors" in (v.summary or "") for v in verdicts if v)


def test_error_masking() -> None:
    a = "Error: request 3f2a9c81 failed after 1.52s at 2024-05-01T10:00:00Z in /tmp/xyz/1"
    b = "Error: request 9bd01e77 failed after 0.98s at 2024-06-11T11:30:00Z in /tmp/abc/2"
    assert classify(a) is Outcome.ERROR
    assert result_key(a, Outcome.ERROR) == result_key(b, Outcome.ERROR)
    data_a, data_b = "total: 41 items", "total: 42 items"
    assert result_key(data_a, classify(data_a)) != result_key(data_b, classify(data_b))
    assert classify("42") is Outcome.NUMBER
    assert classify("File written successfully") is Outcome.ACK


def test_request_ids_are_masked_and_words_holding_id_are_not() -> None:
    assert volatile_masked("ok request_id=ab12cd") != "ok request_id=ab12cd"
    assert volatile_masked("a valid grid, did idle") == "a valid grid, did idle"
    one, two = "Request-ID: 1 accepted", "Request-ID: 2 accepted"
    assert result_key(one, Outcome.OK) == result_key(two, Outcome.OK)


# -- text repetition ------------------------------------------------------------------------


def test_questions_are_the_pieces_ending_in_a_question_mark() -> None:
    assert questions("Could you tell me the booking reference please.") == []
    asked = questions("Could you tell me the booking reference please?")
    assert asked == ["could you tell me the booking reference please?"]


@pytest.mark.parametrize(
    "text",
    ["", "```", "a```x```b", "x\r\ny\r\n| t |\r\n", "- item\n# head\nplain words here",
     "```python\nprint(1)\n```\n" * 5 + "and then", "\n\n\n   \t"],
)  # fmt: skip
def test_prose_is_never_longer_than_its_text(text: str) -> None:
    """repeated_feedback skips reading messages shorter than an answer on this ground."""
    assert len(" ".join(prose(text).split())) <= len(text)


# -- text repetition ------------------------------------------------------------------------


def test_near_identical_assistant_messages() -> None:
    agent = Agent()
    text = "I am going to check the configuration file again to find the port setting."
    for _ in range(3):
        agent.say(text)
        agent.user("ok")
    verdicts = replay(agent)
    assert first_flag(verdicts) == 3
    assert verdicts[2].kind is LoopKind.TEXT_REPETITION


def test_similar_status_lines_with_new_results_are_progress() -> None:
    agent = Agent()
    for i in range(6):
        agent.call("scroll_down", {}, f"page {i}: lines {i * 100}-{i * 100 + 99} of the file")
        agent.say("The class is further down the file; I will keep scrolling to find it.")
    assert first_flag(replay(agent)) is None


def test_degenerate_text_in_one_message() -> None:
    agent = Agent()
    agent.say("Let me think about this. the the the the answer is near.")
    assert first_flag(replay(agent)) == 1
    assert degenerate("I will retry now. I will retry now. I will retry now.") is not None


def test_code_tables_and_lists_do_not_trip_degenerate_text() -> None:
    code = "```python\n" + "x = call()\n" * 10 + "```"
    table = "\n".join(["| name | value |"] + ["| item one here | 1 |"] * 5)
    bullets = "\n".join(["- run the full test suite again"] * 4)
    assert degenerate(code) is None
    assert degenerate(table) is None
    assert degenerate(bullets) is None


def test_streaming_catches_a_repeating_response() -> None:
    tracker = LoopTracker(TrackerConfig())
    sentence = "I will now call the search tool to find the answer. "
    verdict = None
    for _ in range(10):
        verdict = verdict or tracker.content_chunk(sentence)
    assert verdict and verdict.kind is LoopKind.TEXT_REPETITION

    calm = LoopTracker(TrackerConfig())
    chunks = ["```python\n"] + ["print('hello world, again and again')\n"] * 20 + ["```\n"]
    assert all(calm.content_chunk(c) is None for c in chunks)


# -- combining, presets, modes, ttl -------------------------------------------------------------


def _f(name: str, score: float) -> Finding:
    return Finding(name, LoopKind.EXACT_REPEAT, score, (1,), "s", name)


def test_combination_rules() -> None:
    weights = {"a": 0.2, "b": 0.2, "c": 0.2, "d": 0.2, "e": 0.2, "x": 0.8}
    assert combine([_f("a", 0.95)], weights).loop is not None
    assert combine([_f("a", 0.75), _f("b", 0.72)], weights).loop is not None
    weak = combine([_f(n, 0.5) for n in "abcde"], weights)
    assert weak.loop is None and weak.suspicion == 0.5
    assert combine([_f("x", 0.8)], weights).loop is not None  # weighted sum 0.64
    assert combine([], weights) == Combined(None, 0.0, ())


def test_presets_and_overrides() -> None:
    agent = Agent()
    for _ in range(3):
        agent.call("write_file", {"path": "a"}, "File written.")
    assert first_flag(replay(agent, preset="conservative")) is None
    assert first_flag(replay(agent, preset="aggressive")) == 2
    assert first_flag(replay(agent, preset="conservative", modify_repeat_limit=2)) == 3


@pytest.mark.parametrize(
    ("mode", "actions"),
    [
        # the default ladder: warn, warn (stronger text), ask the user, stop
        (ResponseMode.GRADUATED, [Action.WARN, Action.WARN, Action.ASK_USER, Action.STOP]),
        (ResponseMode.WARN, [Action.WARN] * 4),
        (ResponseMode.BLOCK, [Action.STOP] * 4),
        (ResponseMode.CHANCE_THEN_BLOCK, [Action.WARN, Action.STOP, Action.STOP, Action.STOP]),
    ],
)
def test_response_modes(mode: ResponseMode, actions: list[Action]) -> None:
    agent = Agent()
    for _ in range(6):
        agent.call("write_file", {"path": "a"}, "File written.")
    flagged = [v.action for v in replay(agent, response_mode=mode) if v]
    assert flagged == actions


def test_ttl_expires_old_calls() -> None:
    from judge.detectors.suite import DetectorSuite
    from judge.history import normalize_history

    now = [0.0]
    config = TrackerConfig(ttl_seconds=60)
    suite = DetectorSuite(config, clock=lambda: now[0])
    agent = Agent()
    for _ in range(3):
        agent.call("write_file", {"path": "a"}, "File written.")
    for msg in normalize_history(agent.history):
        if msg.role == "tool":
            now[0] += 120  # two minutes between calls: each starts afresh
        suite.feed(msg)
    assert combine(suite.findings(), config.detector_weights).loop is None


# -- properties ------------------------------------------------------------------------------

_names = st.sampled_from(["ls", "read_file", "bash", "write_file", "search", "get_x"])
_results = st.sampled_from(
    [
        "ok",
        "",
        "Error: nope",
        "No results",
        "42",
        "data A",
        "data B",
        "Traceback (most recent call last):\nValueError: x",
    ]
)
_args = st.dictionaries(
    st.sampled_from(["path", "q", "n"]),
    st.one_of(st.integers(0, 3), st.text(max_size=6)),
    max_size=2,
)
_step = st.one_of(
    st.tuples(st.just("call"), _names, _args, _results),
    st.tuples(st.just("say"), st.text(max_size=80), st.none(), st.none()),
    st.tuples(st.just("user"), st.text(max_size=20), st.none(), st.none()),
)


def _build(steps: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    agent = Agent()
    for kind, a, b, c in steps:
        if kind == "call":
            agent.call(a, b, c)
        elif kind == "say":
            agent.say(a)
        else:
            agent.user(a)
    return agent.history


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_step, max_size=25))
def test_incremental_equals_batch_and_never_raises(steps: list[tuple[Any, ...]]) -> None:
    """Reading a history message by message or all at once leaves the detectors in the
    same state. Verdicts may differ on purpose: the incremental tracker flags a loop when
    it happens, and a loop already flagged is not flagged again at the end."""
    history = _build(steps)

    async def one_at_a_time() -> tuple[LoopTracker, list[Verdict]]:
        tracker = LoopTracker(TrackerConfig())
        verdicts = [await tracker.turn_started(history[:end]) for end in range(1, len(history) + 1)]
        return tracker, verdicts

    async def batch() -> tuple[LoopTracker, Verdict]:
        tracker = LoopTracker(TrackerConfig())
        return tracker, await tracker.turn_started(history)

    (a, verdicts), (b, verdict) = anyio.run(one_at_a_time), anyio.run(batch)
    assert a._suite.findings() == b._suite.findings()
    if verdict.looping:  # whatever the batch sees, the live tracker saw as it happened
        assert any(v.looping for v in verdicts)
