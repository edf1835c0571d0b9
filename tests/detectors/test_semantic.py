"""The embedding-based detector (default install)."""

from __future__ import annotations

import pytest

from judge import LoopKind, TrackerConfig
from judge.detectors.base import SUSPICION_CAP
from judge.detectors.semantic_repeat import request_text, result_place
from judge.detectors.steps import StepBuilder
from judge.detectors.suite import default_detectors
from judge.history import normalize_history
from tests.detectors.test_detectors import first_flag, replay
from tests.fakes import Agent

embeddings = pytest.importorskip("judge.detectors.embeddings")
pytestmark = pytest.mark.skipif(
    not embeddings.available(), reason="the semantic packages are missing (a partial install)"
)

REPHRASED = [
    "Please check the Mariano's website to find the price of their ready-to-eat salads.",
    "Visit marianos.com and look up how much the ready-to-eat salads cost.",
    "Go to the Mariano's site and find the prices of ready made salads.",
    "Check Mariano's website once more for the cost of their ready-to-eat salads.",
]
MARIANOS = "https://www.marianos.com/d/deli"
ARXIV = "http://export.arxiv.org/abs/2103.07786"
PDF = "http://export.arxiv.org/pdf/2103.07786"


def test_similar_meaning_is_similar_vector() -> None:
    vectors = embeddings.shared_embedder().embed(REPHRASED[:2] + ["Fix the YAML indentation."])
    assert float(vectors[0] @ vectors[1]) > 0.8
    assert float(vectors[0] @ vectors[2]) < 0.3


def test_rephrased_delegation_is_a_loop() -> None:
    agent = Agent()
    for i, request in enumerate(REPHRASED):
        agent.call("WebSurfer", {"request": request}, f"I clicked a link. Screenshot {i}.")
    verdicts = replay(agent, semantic="on")
    assert first_flag(verdicts) == 4
    assert verdicts[3].source == "heuristic:semantic_repeat"
    assert verdicts[3].kind is LoopKind.COGNITIVE
    assert first_flag(replay(agent, semantic="off")) is None


def test_one_rephrasing_short_of_the_loop_asks_the_judge() -> None:
    # two earlier requests of the same meaning: the near miss that brings the check forward
    agent = Agent()
    for i, request in enumerate(REPHRASED[:3]):
        agent.call("WebSurfer", {"request": request}, f"I clicked a link. Screenshot {i}.")
    verdicts = replay(agent, semantic="on")
    assert [v.suspicion >= SUSPICION_CAP for v in verdicts] == [False, False, True]
    assert first_flag(verdicts) is None


# One sub-goal walked step by step, the long goal restated each time (ww-magentic-20's
# shape): the four requests embed at cosine >= 0.93 with each other.
PAPER = "the paper titled 'Multiwavelength observations of Fast Radio Bursts'"
WALK = [
    f"Please search for {PAPER} on Arxiv and find the time span of its X-ray time profile.",
    f"Please open the full text of {PAPER} on Arxiv and find the time span of its X-ray "
    "time profile.",
    f"Please open the PDF version of {PAPER} on Arxiv and find the time span of its X-ray "
    "time profile.",
    f"Please search through the PDF of {PAPER} for the X-ray time profile diagram and find "
    "its time span.",
]
SEARCH = "https://www.bing.com/search?q=multiwavelength+fast+radio+bursts&form=QBLH"


def screenshot(action: str, url: str) -> str:
    """A WebSurfer result: what it did, then the page it is on."""
    return f"I {action}.\n\nHere is a screenshot of [page]({url}). The viewport shows 76%."


def test_a_walk_through_one_sub_goal_is_not_a_loop() -> None:
    # search -> abstract -> PDF -> search in the PDF: every ask reached a new page
    agent = Agent()
    agent.call("WebSurfer", {"request": WALK[0]}, screenshot("typed the title", SEARCH))
    agent.call("WebSurfer", {"request": WALK[1]}, screenshot("clicked the title", ARXIV))
    agent.call("WebSurfer", {"request": WALK[2]}, screenshot("clicked 'PDF'", PDF))
    agent.call("WebSurfer", {"request": WALK[3]}, "Nothing to summarize.")
    verdicts = replay(agent, semantic="on")
    assert first_flag(verdicts) is None
    # still the judge's early look: the goal was asked four times
    assert verdicts[3].suspicion >= SUSPICION_CAP


def test_a_rephrased_request_that_reaches_no_new_page_is_still_a_loop() -> None:
    # the sub-agent stays on the page it reached first: the re-asks got nowhere new
    agent = Agent()
    for i, request in enumerate(REPHRASED):
        agent.call("WebSurfer", {"request": request}, screenshot(f"scrolled {i}", MARIANOS))
    assert first_flag(replay(agent, semantic="on")) == 4


def test_a_walk_that_goes_back_to_a_page_it_reached_is_a_loop() -> None:
    # three new pages, then the fourth ask lands on the first again (a new query on the
    # same search page is no new page either)
    agent = Agent()
    agent.call("WebSurfer", {"request": WALK[0]}, screenshot("typed the title", SEARCH))
    agent.call("WebSurfer", {"request": WALK[1]}, screenshot("clicked the title", ARXIV))
    agent.call("WebSurfer", {"request": WALK[2]}, screenshot("clicked 'PDF'", PDF))
    again = SEARCH.replace("multiwavelength", "X-ray+time+profile")
    agent.call("WebSurfer", {"request": WALK[3]}, screenshot("typed the diagram", again))
    verdicts = replay(agent, semantic="on")
    assert first_flag(verdicts) == 4
    assert verdicts[3].source == "heuristic:semantic_repeat"


def test_result_place_is_the_page_reached() -> None:
    # the landed page, not the address typed; without query or fragment
    typed = "I typed 'https://www.traderjoes.com/' into the address bar.\n\n"
    assert result_place(
        typed + screenshot("landed", "https://www.traderjoes.com/home?x=1#top")
    ) == ("https://www.traderjoes.com/home")
    assert result_place("Address: file:///workspace/paper.pdf\nTitle: Error 404") == (
        "file:///workspace/paper.pdf"
    )
    assert result_place("Nothing to summarize.") is None
    assert result_place(None) is None


def test_different_requests_and_enumerations_are_progress() -> None:
    agent = Agent()
    for request in [
        "Search the web for supermarkets within two blocks of Lincoln Park in Chicago.",
        "Open the Whole Foods Market website and find their salad section.",
        "Look up the opening hours of the Trader Joe's store on North Avenue.",
        "Summarize the prices you found so far in a short table for the user.",
    ]:
        agent.call("WebSurfer", {"request": request}, "done: found some information")
    for n in range(1, 6):
        agent.call(
            "WebSurfer",
            {"request": f"Open search result number {n} and read its title."},
            f"title {n}",
        )
    verdicts = replay(agent, semantic="on")
    assert first_flag(verdicts) is None
    assert max(v.suspicion for v in verdicts) < SUSPICION_CAP


def test_identical_requests_with_new_results_are_polling_not_semantic_loops() -> None:
    agent = Agent()
    for i in range(5):
        agent.call(
            "Assistant",
            {
                "request": "Please check whether the nightly build has "
                "finished and report its current status."
            },
            f"build status: running step {i} of 9",
        )
    assert first_flag(replay(agent, semantic="on")) is None


def test_commands_are_not_compared_as_prose() -> None:
    builder = StepBuilder()
    agent = Agent()
    agent.call("bash", {"command": "gh run view --branch fix/retry --json status"}, "x")
    agent.call("WebSurfer", {"request": "Please open the pricing page of the vendor site."}, "y")
    steps = [s for m in normalize_history(agent.history) for s in builder.feed(m)]
    assert request_text(steps[0]) is None
    assert request_text(steps[1]) is not None


def test_modes_choose_the_detector() -> None:
    names_on = {d.name for d in default_detectors(TrackerConfig(semantic="on"))}
    names_off = {d.name for d in default_detectors(TrackerConfig(semantic="off"))}
    assert "semantic_repeat" in names_on and "repeated_request" not in names_on
    assert "semantic_repeat" not in names_off and "repeated_request" in names_off


def test_a_broken_model_install_never_breaks_the_turn(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # onnxruntime present but its native library unloadable: the detector steps aside
    # with one warning, and the other detectors still catch what they catch.
    class BrokenModel:
        def __init__(self) -> None:
            raise OSError("libonnxruntime.so.1: cannot open shared object file")

    monkeypatch.setattr(embeddings, "_model", None)
    monkeypatch.setattr(embeddings, "Embedder", BrokenModel)
    agent = Agent()
    for i, request in enumerate(REPHRASED):
        agent.call("WebSurfer", {"request": request + " (broken)"}, f"Screenshot {i}.")
    for _ in range(3):
        agent.call("write_file", {"path": "a.txt", "content": "x"}, "File written.")
    with caplog.at_level("WARNING", logger="judge"):
        verdicts = replay(agent, semantic="on")
    assert first_flag(verdicts) == 7  # the exact repeat, not the semantic one
    assert verdicts[6].source == "heuristic:exact_repeat"
    disabled = [r for r in caplog.records if "semantic detector disabled" in r.getMessage()]
    assert len(disabled) == 1
    assert "cannot open shared object file" in disabled[0].getMessage()
