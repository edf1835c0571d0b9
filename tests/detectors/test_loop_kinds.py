"""Loops that hide from identical-call counting, and the productive
look-alikes each rule must leave alone."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio

from judge import LoopKind, LoopTracker, TrackerConfig, Verdict
from judge.detectors.base import SUSPICION_CAP
from judge.detectors.cycle import CycleDetector
from judge.detectors.outcome import (
    VOLATILE_MAX_CHARS,
    Outcome,
    classify,
    result_key,
    volatile_masked,
)
from judge.detectors.revisit import (
    READ_RUN_LIMIT,
    REVISIT_LOOP,
    REVISIT_SUSPECT,
    REVISIT_WINDOW,
    RevisitDetector,
    read_target,
)
from judge.detectors.steps import Step
from judge.history import ToolCall, canonical_arguments
from tests.fakes import Agent, replay_turns


def replay(agent: Agent, **config: Any) -> list[Verdict]:
    tracker = LoopTracker(TrackerConfig(**config))
    return anyio.run(replay_turns, tracker, agent.history)


def first_flag(verdicts: list[Verdict]) -> int | None:
    return next((i + 1 for i, v in enumerate(verdicts) if v), None)


def step(name: str, arguments: dict[str, Any], result: str, index: int, edits: int = 0) -> Step:
    canonical, parsed = canonical_arguments(json.dumps(arguments))
    call = ToolCall(id=None, name=name, arguments=canonical, canonical=canonical, parsed=parsed)
    outcome = classify(result)
    return Step(call, index, index + 1, result, outcome, result_key(result, outcome), edits=edits)


TREE = "repo/\n  src/\n    app.py\n    util.py\n  tests/\n    test_app.py\n  README.md"


# -- volatile tokens in data results --------------------------------------------------------


def test_results_differing_only_in_volatile_tokens_are_the_same_result() -> None:
    pairs = [
        ("==== 3 failed, 12 passed in 0.31s ====", "==== 3 failed, 12 passed in 0.29s ===="),
        (
            "deploy started 2024-05-01T10:00:03Z, pid 4312",
            "deploy started 2024-05-01T10:04:41Z, pid 977",
        ),
        ("<app.Cache object at 0x7f3a1c2b9d30>", "<app.Cache object at 0x7f88e0a1c410>"),
        ("request_id=ab12cd34 status=queued", "request_id=ff09e211 status=queued"),
        ("Retrying (attempt 2/5): pending", "Retrying (attempt 3/5): pending"),
        ("wrote /tmp/tmpk3j2_a8x/out.csv", "wrote /tmp/tmp9zq_01bd/out.csv"),
        (
            "job 6f1c2a8e-3b7d-4c1e-9a2f-0d4b5c6e7f80 done",
            "job 0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d done",
        ),
        ("100%|####| 50/50 [00:01<00:00, 45.2it/s]", "100%|####| 50/50 [00:01<00:00, 47.9it/s]"),
    ]
    for a, b in pairs:
        assert classify(a) is Outcome.OK, a
        assert result_key(a, Outcome.OK) == result_key(b, Outcome.OK), (a, b)


def test_real_numbers_in_data_stay_different() -> None:
    # a count, a version, a progress figure, a configured timeout, a commit hash: data
    pairs = [
        ("total: 41 items in the queue", "total: 42 items in the queue"),
        ("released version 1.2.3 of the app", "released version 1.2.4 of the app"),
        ("build progress: 45% of the steps", "build progress: 60% of the steps"),
        ("worker timeout is 30s for each job", "worker timeout is 60s for each job"),
        ("HEAD is now at 3f2a9c81 fix parser", "HEAD is now at 9bd01e77 fix parser"),
        ("3 failed, 12 passed in 0.31s", "2 failed, 13 passed in 0.31s"),
        ("export on 2024-05-01 of the ledger", "export on 2024-05-02 of the ledger"),
    ]
    for a, b in pairs:
        assert result_key(a, classify(a)) != result_key(b, classify(b)), (a, b)


def test_volatile_masking_is_bounded_and_linear() -> None:
    long = "took 0.31s " * (VOLATILE_MAX_CHARS // 10)
    assert volatile_masked(long) == long  # past the cap, keyed as it is
    # adversarial shapes: one huge line without punctuation, digits and colons throughout
    for text in ("a" * 2_000_000, "1:2:" * 500_000, "attempt 1 of " * 150_000):
        # CPU time: other work on a shared machine stretches the wall clock, not this.
        started = time.process_time()
        result_key(text, Outcome.OK)
        assert time.process_time() - started < 1.0
    worst = "12:34:56 0x7f3a1c2b pid 12 attempt 3 tmpabcdefgh " * (VOLATILE_MAX_CHARS // 50)
    started = time.process_time()
    for _ in range(10):
        volatile_masked(worst[:VOLATILE_MAX_CHARS])
    assert time.process_time() - started < 1.0


def test_a_rerun_differing_only_in_its_timing_counts_as_a_repeat() -> None:
    agent = Agent()
    for i in range(3):
        agent.call(
            "bash",
            {"command": "make test"},
            f"FAILED test_io.py::test_read\n1 failed in 0.{i + 3}1s",
        )
    assert first_flag(replay(agent)) == 3


def test_polling_whose_real_output_moves_is_still_progress() -> None:
    agent = Agent()
    for i in range(12):
        stamp = f"2024-05-01T10:{i:02d}:00Z"
        agent.call(
            "bash",
            {"command": "kubectl rollout status deploy/web"},
            f"{stamp} {i} of 12 pods updated",
        )
    assert first_flag(replay(agent)) is None


# -- same target re-read, unchanged, in a row -----------------------------------------------


def test_read_targets_normalize_cosmetic_path_and_query_variants() -> None:
    def target(name: str, arguments: dict[str, Any]) -> str | None:
        return read_target(step(name, arguments, TREE, 1))

    variants = [target("list_dir", {"path": p}) for p in ("./src", "src/", "src", "/repo/src")]
    assert len(set(variants)) == 1 and variants[0] is not None
    assert target("list_dir", {"path": "src"}) != target("list_dir", {"path": "tests"})
    assert target("grep", {"pattern": "load_config("}) == target("grep", {"pattern": "Load_Config"})
    assert target("bash", {"command": "sed -n '10,40p' src/app.py"}) == target(
        "bash", {"command": "cd /repo && sed -n '12,40p' ./src/app.py"}
    )
    # commands with effects are no reads; neither is a lookup by id
    assert target("bash", {"command": "python src/app.py"}) is None
    assert target("get_order_status", {"order_id": "#W4821"}) is None


def test_url_targets_ignore_the_fragment_and_query_order_but_not_the_query() -> None:
    def target(url: str) -> str | None:
        return read_target(step("visit_webpage", {"url": url}, "<h1>Olympics</h1>", 1))

    page = target("https://en.wikipedia.org/wiki/1928_Summer_Olympics")
    assert page is not None
    # a fragment only scrolls the page the server sends; a trailing slash names it too
    assert target("https://en.wikipedia.org/wiki/1928_Summer_Olympics#Nations") == page
    assert target("http://en.wikipedia.org/wiki/1928_Summer_Olympics/") == page
    # the order of query parameters names the same resource, their values do not
    assert target("https://x.org/t?date=1&dir=0") == target("https://x.org/t?dir=0&date=1")
    assert target("https://x.org/t?date=1&dir=0") != target("https://x.org/t?date=2&dir=0")
    assert target("https://x.org/t?date=1") != target("https://x.org/t")


def test_a_tool_naming_only_a_url_reads_it_whatever_its_name() -> None:
    assert read_target(step("visit_webpage", {"url": "https://a.org/p"}, "A", 1)) is not None
    assert read_target(step("download", {"urls": ["https://a.org/p.pdf"]}, "ok", 1)) is not None
    # a URL beside other arguments, or a tool named for its effect, is no read
    comment = {"url": "https://a.org/p", "text": "Nice"}
    assert read_target(step("comment_on", comment, "posted", 1)) is None
    assert read_target(step("post_webhook", {"url": "https://a.org/hook"}, "200", 1)) is None


def test_the_same_page_fetched_three_times_unchanged_loops() -> None:
    page = "1928 Summer Olympics - Wikipedia\n" + "Participating nations ...\n" * 20
    agent = Agent()
    agent.call("web_search", {"query": "1928 olympics least athletes"}, "1. Wikipedia")
    for url in (
        "https://en.wikipedia.org/wiki/1928_Summer_Olympics",
        "https://en.wikipedia.org/wiki/1928_Summer_Olympics",
        "https://en.wikipedia.org/wiki/1928_Summer_Olympics#Number_of_athletes",
    ):
        agent.call("visit_webpage", {"url": url}, page)
    verdicts = replay(agent)
    assert first_flag(verdicts) == 4
    assert verdicts[3].source == "heuristic:revisit"


def test_a_page_fetched_again_that_changed_is_no_loop() -> None:
    agent = Agent()
    for n in range(4):  # a live page: each fetch says something new
        agent.call("visit_webpage", {"url": "https://news.example/live"}, f"update {n}: ...")
    for section in ("#intro", "#history", "#results"):  # new pages, one each
        agent.call("visit_webpage", {"url": f"https://x.org/{section[1:]}"}, section * 10)
    assert first_flag(replay(agent)) is None


def test_path_variants_returning_the_same_listing_loop_past_the_limit() -> None:
    agent = Agent()
    # an exact repeat among the variants: fewer than four distinct calls for result_cycle
    for path in ("./src", "src/", "./src", "/repo/src", "src//"):
        agent.call("list_directory", {"path": path}, TREE)
    verdicts = replay(agent)
    assert first_flag(verdicts) == READ_RUN_LIMIT + 1
    flagged = verdicts[READ_RUN_LIMIT]
    assert flagged.source == "heuristic:revisit" and flagged.kind is LoopKind.EXACT_REPEAT
    # one short of the limit, the judge is asked early
    assert verdicts[READ_RUN_LIMIT - 1].suspicion >= SUSPICION_CAP


def test_creeping_depth_that_adds_nothing_loops() -> None:
    agent = Agent()
    for depth in (2, 3, 4, 5):
        agent.call("directory_tree", {"path": "/repo", "max_depth": depth}, TREE)
    assert first_flag(replay(agent)) == 3


def test_creeping_parameter_that_finds_something_is_progress() -> None:
    agent = Agent()
    for depth in (2, 3):
        agent.call("directory_tree", {"path": "/repo", "max_depth": depth}, TREE)
    agent.call("directory_tree", {"path": "/repo", "max_depth": 4}, TREE + "\n      deep/conf.yaml")
    agent.call("read_file", {"path": "src/deep/conf.yaml"}, "retries: 3\ntimeout: 10")
    assert first_flag(replay(agent)) is None


def test_rereading_after_an_edit_starts_over() -> None:
    agent = Agent()
    for i in range(4):
        agent.call("read_file", {"path": "src/app.py"}, f"def main():\n    return {i}\n" * 5)
        agent.call("read_file", {"path": "src/app.py"}, f"def main():\n    return {i}\n" * 5)
        agent.call("edit_file", {"path": "src/app.py", "old": str(i), "new": str(i + 1)}, "ok")
    assert first_flag(replay(agent)) is None


def test_status_polls_keep_the_explore_class_limit() -> None:
    # no file, URL or query to re-read: a status poll repeats up to the class limit of 10
    agent = Agent()
    for _ in range(10):
        agent.call("get_build_status", {"build": 42}, '{"state": "running", "queue": "ci"}')
    assert first_flag(replay(agent)) is None


def test_paging_forward_is_progress() -> None:
    agent = Agent()
    for page in range(8):
        lines = "\n".join(f"{page * 20 + n}: row" for n in range(20))
        agent.call("read_file", {"path": "data.csv", "offset": page * 20, "limit": 20}, lines)
    assert first_flag(replay(agent)) is None


# -- returning to content already read ------------------------------------------------------


def _returns(steps: list[Step]) -> list[float]:
    detector = RevisitDetector()
    scores = []
    for s in steps:
        found = detector.observe(s)
        scores.append(
            found.score if found is not None and found.pattern.startswith("revisit-return") else 0.0
        )
    return scores


def test_returning_to_windows_already_read_raises_suspicion_then_loops() -> None:
    windows = [f"window {w}\n" + "line\n" * 30 for w in range(3)]
    # scrolling wraps around: 0, 1, 2, 0, 1, 2, 0 ...
    steps = [step("scroll_down", {}, windows[i % 3], 2 * i) for i in range(3 + REVISIT_LOOP)]
    scores = _returns(steps)
    assert scores[: 3 + REVISIT_SUSPECT - 1] == [0.0] * (3 + REVISIT_SUSPECT - 1)
    assert scores[3 + REVISIT_SUSPECT - 1] == SUSPICION_CAP
    assert scores[-1] == 1.0


def test_reading_many_files_once_and_walking_a_list_are_no_returns() -> None:
    steps = [
        step("read_file", {"path": f"src/m{i}.py"}, f"# module {i}\n" * 9, 2 * i) for i in range(10)
    ]
    steps += [
        step("get_order", {"id": i}, json.dumps({"id": i, "items": [i]}), 40 + 2 * i)
        for i in range(10)
    ]
    assert max(_returns(steps)) == 0.0


def test_an_edit_between_returns_resets_them() -> None:
    a, b = "alpha\n" * 20, "beta\n" * 20
    steps = []
    for i in range(REVISIT_LOOP + 2):
        steps.append(
            step("view", {"path": "a.py" if i % 2 else "b.py"}, a if i % 2 else b, 2 * i, edits=i)
        )
    assert max(_returns(steps)) == 0.0


def test_revisit_state_round_trips() -> None:
    from judge.turns import assistant_turn_ends

    agent = Agent()
    for i in range(5):
        agent.call("view", {"path": f"m{i % 2}.py"}, f"module {i % 2}\n" * 9)
    for path in ("./src", "src/", "./src", "/repo/src"):
        agent.call("list_directory", {"path": path}, TREE)
    config = TrackerConfig(semantic="off")

    async def run() -> tuple[list[Verdict], list[Verdict]]:
        live, restarted = LoopTracker(config), LoopTracker(config)
        a, b = [], []
        for end in assistant_turn_ends(agent.history):
            a.append(await live.turn_started(agent.history[:end]))
            b.append(await restarted.turn_started(agent.history[:end]))
            restarted = LoopTracker.from_state(config, restarted.state.model_dump_json())
        return a, b

    live, restarted = anyio.run(run)
    assert [v.model_dump() for v in live] == [v.model_dump() for v in restarted]
    assert live[4].suspicion == SUSPICION_CAP  # two returns to a module already read
    assert live[-1].source == "heuristic:revisit"


# -- alternation one repetition short -------------------------------------------------------


def test_two_rounds_of_a_two_step_cycle_ask_the_judge() -> None:
    detector = CycleDetector(repeats_period2=3, repeats=2)
    item, page = "item page\n" * 5, "results page\n" * 5
    found = None
    for i in range(4):
        found = detector.observe(
            step(
                "click",
                {"element": "B09X" if i % 2 == 0 else "< Prev"},
                item if i % 2 == 0 else page,
                2 * i,
            )
        )
    assert found is not None and found.score == SUSPICION_CAP
    # a third round is the loop
    for i in range(4, 6):
        found = detector.observe(
            step(
                "click",
                {"element": "B09X" if i % 2 == 0 else "< Prev"},
                item if i % 2 == 0 else page,
                2 * i,
            )
        )
    assert found is not None and found.score == 1.0


# -- a sweep for something that does not exist ----------------------------------------------


def test_a_grep_sweep_for_something_absent_is_a_loop() -> None:
    # different globs and folders, the same "nothing": the result-cycle rule already names it
    agent = Agent()
    for where in ("src", "lib", "app", "packages", "services"):
        agent.call("grep", {"pattern": "FEATURE_FLAGS_V2", "path": where}, "No matches found")
    verdicts = replay(agent)
    assert first_flag(verdicts) == 4
    assert verdicts[3].source == "heuristic:result_cycle"


def test_a_sweep_that_finds_it_on_the_third_try_is_progress() -> None:
    agent = Agent()
    for where in ("src", "lib"):
        agent.call("grep", {"pattern": "FEATURE_FLAGS_V2", "path": where}, "No matches found")
    agent.call(
        "grep",
        {"pattern": "FEATURE_FLAGS_V2", "path": "app"},
        "app/flags.py:12:FEATURE_FLAGS_V2 = {",
    )
    agent.call("read_file", {"path": "app/flags.py"}, "FEATURE_FLAGS_V2 = {\n    'beta': True,\n}")
    assert first_flag(replay(agent)) is None


def test_polling_forward_raises_no_return_suspicion() -> None:
    # results only move forward (and stay put between moves): nothing is returned to
    states = ["queued", "queued", "running 10%", "running 10%", "running 55%", "done"]
    steps = [
        step("get_job", {"job": 7}, json.dumps({"job": 7, "state": s}), 2 * i)
        for i, s in enumerate(states)
    ]
    assert max(_returns(steps)) == 0.0


def test_revisit_is_bounded_on_adversarial_calls() -> None:
    # one huge line without punctuation as path, nested list and shell command
    huge = "a" * 1_000_000
    read = step("read_file", {"path": huge, "blob": [huge] * 3}, huge, 0)
    cat = step("bash", {"command": "cat " + huge}, huge, 1)
    detector = RevisitDetector()
    started = time.process_time()
    for _ in range(50):
        detector.observe(read)
        detector.observe(cat)
    assert time.process_time() - started < 1.0
    assert len(detector._window) <= REVISIT_WINDOW


def test_user_requested_rereads_are_not_a_loop() -> None:
    agent = Agent()
    for i in range(6):
        agent.call("read_file", {"path": "status/report.md"}, "# Nightly report\nall 14 jobs green")
        agent.user(f"Thanks. Read it out again in a minute, please ({i}).")
    assert first_flag(replay(agent)) is None


def test_a_new_question_from_the_user_starts_returns_over() -> None:
    # The same pages read again for the user's next question are a new stretch of work;
    # read again with no one asking, they are returns to content already read.
    def pages_twice(question: str | None) -> Agent:
        agent = Agent()
        for page in range(1, 6):
            agent.call("read_page", {"page": page}, f"page {page}: entry {page * 17}")
        if question is not None:
            agent.messages.append({"role": "user", "content": question})
        for page in (3, 1, 4, 2, 5):  # another order: no cycle, only returns
            agent.call("read_page", {"page": page}, f"page {page}: entry {page * 17}")
        return agent

    assert first_flag(replay(pages_twice("And what about order 9, please?"))) is None
    assert first_flag(replay(pages_twice(None))) is not None
