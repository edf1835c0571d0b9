from __future__ import annotations

import pytest

from judge.schedule import Schedule, adapted_interval


@pytest.mark.parametrize(
    ("confidence", "interval"),
    [
        (0.0, 15),
        (1.0, 5),
        (0.5, 10),
        (0.25, 13),
        (0.75, 8),
        (0.85, 7),
        (0.95, 6),
        (0.15, 14),
        (0.05, 15),
        (0.45, 11),
    ],
)
def test_interval_rounds_half_up(confidence: float, interval: int) -> None:
    assert adapted_interval(confidence, 5, 15) == interval


def test_first_check_at_turn_30_then_initial_interval_until_answered() -> None:
    s = Schedule(check_after_turns=30, initial_interval=3, min_interval=5, max_interval=15)
    due = []
    for _ in range(40):
        s.tick()
        if s.due():
            due.append(s.turn)
            if s.turn == 30:
                s.failed()  # no answer: retry after min_interval
            else:
                s.checked(0.0)
    assert due == [30, 35]


def test_early_check_waits_the_shortest_interval() -> None:
    s = Schedule(check_after_turns=30, initial_interval=3, min_interval=5, max_interval=15)
    s.tick()
    assert s.due(early=True)
    s.checked(0.1)  # a confident "no": interval 14 for scheduled checks
    for _ in range(4):
        s.tick()
        assert not s.due(early=True)
    s.tick()
    assert s.due(early=True)  # suspicion: min_interval (5) after the last check
    assert not s.due()  # without it, the adapted interval holds
    for _ in range(30):
        s.tick()
    assert s.due()
