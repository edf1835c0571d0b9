"""One failure seen through many calls, and errors a harness reports outside the tool
result: each shape that must be caught next to the nearest productive one."""

from __future__ import annotations

from typing import Any

import anyio

from judge import LoopKind, LoopTracker, TrackerConfig, Verdict
from judge.detectors.outcome import Outcome, classify, error_substance, obstacle, result_key
from judge.detectors.steps import Step, StepBuilder
from judge.history import normalize_message
from tests.fakes import Agent, replay_turns

# A code agent's error for a web search that fails on spent credits: the harness names the
# call, quotes the line that failed and appends the same advice to every error.
CREDITS = (
    "Call id: call_{n}\nError:\nCode execution failed at line '{line}' due to: "
    "ValueError: {{'message': 'Not enough credits', 'statusCode': 400}}\n"
    "Now let's retry: take care not to repeat previous errors! If you have retried several "
    "times, try a completely different approach.\n"
)
UNDEFINED = (
    "Call id: call_{n}\nError:\nCode execution failed at line '{line}' due to: "
    "InterpreterError: Forbidden function evaluation: 'wiki_search' is not among the "
    "explicitly allowed tools or defined/imported in the preceding code\n"
    "Now let's retry: take care not to repeat previous errors! If you have retried several "
    "times, try a completely different approach.\n"
)
QUERIES = [
    "founding year of San Miguel de Sema",
    "San Miguel de Sema history",
    "San Miguel de Sema municipality Wikipedia",
    "when was San Miguel de Sema founded",
]


def replay(agent: Agent, **config: Any) -> list[Verdict]:
    tracker = LoopTracker(TrackerConfig(**config))
    return anyio.run(replay_turns, tracker, agent.history)


def first_flag(verdicts: list[Verdict]) -> int | None:
    return next((i + 1 for i, v in enumerate(verdicts) if v), None)


def search(agent: Agent, n: int, template: str = CREDITS) -> None:
    line = f'results = web_search(query="{QUERIES[n % len(QUERIES)]}")'
    agent.call("python", {"code": f"{line}\nprint(results)"}, template.format(n=n, line=line))


# -- the substance of an error ----------------------------------------------------------


def test_a_call_id_header_does_not_hide_the_error_under_it() -> None:
    text = CREDITS.format(n=3, line="x = web_search(query='a')")
    assert classify(text) is Outcome.ERROR
    assert classify("Call id: call_3\nObservation:\nExecution logs:\n42 rows") is Outcome.OK


def test_the_same_error_through_different_code_has_one_substance_and_key() -> None:
    texts = [
        CREDITS.format(n=n, line=f'r = web_search(query="{q}")') for n, q in enumerate(QUERIES)
    ]
    assert len({error_substance(t) for t in texts}) == 1
    assert len({result_key(t, Outcome.ERROR) for t in texts}) == 1


def test_a_framework_footer_does_not_make_different_errors_alike() -> None:
    # Both errors end with the same advice; the exception line tells them apart.
    credits = CREDITS.format(n=1, line="r = web_search(query='a')")
    undefined = UNDEFINED.format(n=2, line="r = wiki_search(query='a')")
    assert error_substance(credits) != error_substance(undefined)
    assert result_key(credits, Outcome.ERROR) != result_key(undefined, Outcome.ERROR)


def test_a_missing_path_is_one_substance_whichever_tool_reports_it() -> None:
    texts = [
        "ls: cannot access '/work/data': No such file or directory",
        "cat: /work/data/train.csv: No such file or directory",
        "FileNotFoundError: [Errno 2] No such file or directory: '/work/data/train.csv'",
    ]
    assert {error_substance(t) for t in texts} == {"F:missing-file"}


def test_a_missing_path_in_other_words_is_the_same_substance() -> None:
    for text in (
        "Invalid `path` parameter: /work/data. The path /work/data does not exist.",
        "Directory not found: /work/data",
        "Error: file /work/data/train.csv not found",
    ):
        assert error_substance(text) == "F:missing-file", text
    # Something missing inside a file is not a missing file.
    assert error_substance("file a.py: function load not found") != "F:missing-file"


def test_a_bare_rejection_is_marked_as_naming_nothing() -> None:
    assert error_substance("Invalid action!").startswith("B:")
    assert error_substance("Error: flight HAT030 not available on date 2024-05-13").startswith("L:")


# -- the same failure through different calls --------------------------------------------


def test_reworded_searches_failing_on_spent_credits_are_a_loop_at_the_third() -> None:
    agent = Agent()
    for n in range(4):
        search(agent, n)
    verdicts = replay(agent)
    assert first_flag(verdicts) == 3
    assert verdicts[2].kind is LoopKind.SIMILAR_RETRY
    assert verdicts[2].source == "heuristic:result_cycle"
    assert verdicts[2].evidence == [2, 4, 6]


def test_one_other_failure_between_does_not_hide_the_obstacle() -> None:
    agent = Agent()
    search(agent, 0)
    search(agent, 1, UNDEFINED)  # a helper that does not exist, tried instead
    search(agent, 2)
    assert first_flag(replay(agent)) is None  # twice only
    search(agent, 3)
    assert first_flag(replay(agent)) == 4


def test_one_missing_directory_through_different_tools_is_a_loop() -> None:
    agent = Agent()
    agent.call(
        "ls", {"path": "/work/data"}, "ls: cannot access '/work/data': No such file or directory"
    )
    agent.call(
        "read_file", {"path": "/work/data/train.csv"}, "Error: [Errno 2] No such file or directory"
    )
    agent.call(
        "python",
        {"code": "import pandas as pd\npd.read_csv('/work/data/train.csv')"},
        'Traceback (most recent call last):\n  File "<string>", line 2, in <module>\n'
        "FileNotFoundError: [Errno 2] No such file or directory: '/work/data/train.csv'",
    )
    verdicts = replay(agent)
    assert first_flag(verdicts) == 3
    assert "ls" in (verdicts[2].summary or "") and "python" in (verdicts[2].summary or "")


def test_one_missing_directory_through_an_editor_and_the_shell_is_a_loop() -> None:
    agent = Agent()
    agent.call(
        "str_replace_editor",
        {"command": "view", "path": "/work/data"},
        "Invalid `path` parameter: /work/data. The path /work/data does not exist.",
    )
    agent.call("glob", {"pattern": "/work/data/*.csv"}, "Error: directory /work/data not found")
    agent.call(
        "bash",
        {"command": "wc -l /work/data/*.csv"},
        "wc: /work/data/*.csv: No such file or directory",
    )
    assert first_flag(replay(agent)) == 3


def test_a_success_between_failures_is_progress() -> None:
    agent = Agent()
    search(agent, 0)
    search(agent, 1)
    agent.call("python", {"code": "print(2 + 2)"}, "Observation:\nExecution logs:\n4")
    search(agent, 2)
    assert first_flag(replay(agent)) is None


def test_the_same_test_failure_after_each_new_edit_is_debugging() -> None:
    agent = Agent()
    failure = "FAILED tests/test_a.py::test_sum - AssertionError: assert 3 == 4"
    for n in range(4):
        agent.call(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": "src/a.py",
                "old_str": f"v{n}",
                "new_str": f"v{n + 1}",
            },
            "The file src/a.py has been edited.",
        )
        agent.call("bash", {"command": f"pytest tests/test_a.py -k sum -x -q --seed {n}"}, failure)
    assert first_flag(replay(agent)) is None


def test_a_failing_command_that_also_writes_files_is_a_new_attempt() -> None:
    agent = Agent()
    for n in range(3):
        agent.call(
            "bash",
            {"command": f"echo 'opt = {n}' > conf.py && make docs"},
            "<returncode>2</returncode>\n<output>\nValueError: unsupported option\n</output>",
        )
    assert first_flag(replay(agent)) is None


def test_three_bare_rejections_of_different_actions_are_exploring() -> None:
    agent = Agent()
    for item in ("Eye Contour Care", "UpLift Eye Cream", "Firming Eye Cream"):
        agent.call("click", {"element": item}, "Invalid action!")
    agent.call("click", {"element": "B0742LVGX7"}, "[Back to Search] item page")
    assert first_flag(replay(agent)) is None


def test_a_fourth_bare_rejection_in_a_row_is_a_loop() -> None:
    agent = Agent()
    for item in ("Eye Contour Care", "UpLift Eye Cream", "Firming Eye Cream", "Eye Gel"):
        agent.call("click", {"element": item}, "Invalid action!")
    assert first_flag(replay(agent)) == 4


def test_the_failure_run_survives_saving_the_tracker() -> None:
    agent = Agent()
    for n in range(3):
        search(agent, n)
    history = agent.history

    async def run() -> Verdict:
        tracker = LoopTracker(TrackerConfig())
        await tracker.turn_started(history[:5])  # two failures seen
        restored = LoopTracker.from_state(TrackerConfig(), tracker.state)
        return await restored.turn_started(history)

    assert anyio.run(run).looping


# -- errors reported in the next user message --------------------------------------------


def steps_of(messages: list[dict[str, Any]], *, drain: bool = True) -> list[Step]:
    builder = StepBuilder()
    steps: list[Step] = []
    for i, raw in enumerate(messages):
        steps += builder.feed(normalize_message(raw, i))
    return steps + (builder.drain() if drain else [])


def empty_result_then(agent: Agent, n: int, user: str | None, placeholder: str = "") -> None:
    """A call whose result the harness records as ``placeholder``, then ``user``."""
    agent.call("fetch_page", {"url": f"https://example.org/report?page={n}"}, placeholder)
    if user is not None:
        agent.user(user)


def test_an_error_in_the_user_message_after_an_empty_result_is_the_outcome() -> None:
    agent = Agent()
    error = "Error: tool fetch_page failed: ConnectionError: [Errno 111] Connection refused"
    empty_result_then(agent, 1, error)
    agent.say("Done.")
    (step,) = steps_of(agent.history)
    assert step.outcome is Outcome.ERROR
    assert step.result == error and step.result_index == 4
    assert step.substance == obstacle(error, error_substance(error)) != ""


def test_a_placeholder_result_is_read_like_an_empty_one() -> None:
    agent = Agent()
    empty_result_then(
        agent, 1, "Tool execution failed: fetch_page timed out after 30s", "(no output)"
    )
    (step,) = steps_of(agent.history)
    assert step.outcome is Outcome.ERROR


def test_an_empty_result_followed_by_a_request_stays_an_acknowledgement() -> None:
    agent = Agent()
    empty_result_then(agent, 1, "Thanks. Now please also fetch the second page.")
    (step,) = steps_of(agent.history)
    assert step.outcome is Outcome.ACK and step.result_index == 3


def test_a_data_result_is_never_replaced_by_the_user_message() -> None:
    agent = Agent()
    empty_result_then(agent, 1, "Error: that page is not the one I meant", "<html>Report</html>")
    (step,) = steps_of(agent.history)
    assert step.outcome is Outcome.OK


def test_our_recovery_message_is_not_read_as_an_error() -> None:
    agent = Agent()
    empty_result_then(agent, 1, "```loop-judge\nError: you are repeating fetch_page.\n```")
    (step,) = steps_of(agent.history)
    assert step.outcome is Outcome.ACK


def test_a_step_waits_for_the_next_message_only_until_the_history_is_read() -> None:
    agent = Agent()
    empty_result_then(agent, 1, None)
    assert steps_of(agent.history, drain=False) == []
    (step,) = steps_of(agent.history)
    assert step.outcome is Outcome.ACK


def test_the_same_error_reported_after_empty_results_is_a_loop() -> None:
    agent = Agent()
    for n in range(4):
        empty_result_then(
            agent, n, f"Error: fetch_page failed (attempt {n}): HTTP 503 Service Unavailable"
        )
    verdicts = replay(agent)
    assert first_flag(verdicts) == 3
    assert verdicts[2].evidence == [2, 5, 8]  # each call; its error is in the message after


def test_empty_results_with_varied_user_replies_are_not_a_loop() -> None:
    agent = Agent()
    for n in range(4):
        empty_result_then(agent, n, f"Page {n} saved. What should I look at next, item {n}?")
    assert first_flag(replay(agent)) is None


# -- what is not one obstacle -----------------------------------------------------------------


def test_other_inputs_each_refused_are_options_tried_not_one_obstacle() -> None:
    """An error about the input ("order not found") is what trying other inputs is for:
    three order ids, each unknown, are a search; as are three guessed directories."""
    orders = Agent()
    for order in ("W2378156", "W2378157", "W9911002"):
        orders.call("get_order_details", {"order_id": order}, "Error: order not found")
    assert first_flag(replay(orders)) is None
    guesses = Agent()
    for folder in ("/repo/src", "/repo/lib", "/repo/source"):
        guesses.call(
            "bash",
            {"command": f"ls {folder}"},
            f"ls: cannot access '{folder}': No such file or directory",
        )
    assert first_flag(replay(guesses)) is None


def test_a_person_s_new_words_between_failures_make_a_new_attempt() -> None:
    """The same refusal after the user gave new details each time is the agent using them,
    not the agent ignoring the obstacle."""
    agent = Agent()
    for n, reply in enumerate(("Try my work address then.", "Use name and zip: Ana 94107.", "")):
        search(agent, n, template="Error: 503 Service Unavailable")
        if reply:
            agent.user(reply)
    assert first_flag(replay(agent)) is None
    without_words = Agent()
    for n in range(3):
        search(without_words, n, template="Error: 503 Service Unavailable")
    assert first_flag(replay(without_words)) == 3
