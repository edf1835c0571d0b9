"""``loop-judge serve`` tunes its process's garbage collector for many live sessions
(`judge.service.collector`); importing the package or building an app does not."""

from __future__ import annotations

import argparse
import gc
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

pytest.importorskip("uvicorn")

from judge.service import tune_collector
from judge.service.collector import YOUNG_THRESHOLD


@pytest.fixture
def collector() -> Iterator[None]:
    """Whatever a test does to the collector is undone after it."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.slow
def test_tuning_raises_the_young_threshold_and_freezes_what_is_alive(collector: None) -> None:
    _, middle, old = gc.get_threshold()
    alive = {"kept": [1, 2, 3]}
    tune_collector()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)
    assert gc.get_freeze_count() > 0
    assert alive["kept"] == [1, 2, 3]  # frozen objects stay usable
    cycle: list[Any] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1  # an explicit collection still frees new garbage


@pytest.mark.slow
def test_serve_tunes_the_collector_before_it_runs(
    collector: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    from judge.cli import serve

    seen: list[tuple[int, int, int]] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: seen.append(gc.get_threshold()))
    for name in ("LOOP_JUDGE_SERVER_TOKEN", "LOOP_JUDGE_REDIS_URL", "LOOP_JUDGE_HOST"):
        monkeypatch.delenv(name, raising=False)
    args = argparse.Namespace(
        host="127.0.0.1",
        port=0,
        redis_url=None,
        tokens_file=None,
        insecure_no_token=True,
        dump_openapi=None,
    )
    assert serve.run(args, Console(quiet=True)) == 0
    assert seen and seen[0][0] == YOUNG_THRESHOLD


def test_building_the_app_leaves_the_collector_alone(collector: None) -> None:
    from judge.service.app import create_app
    from judge.service.settings import ServerSettings

    before = gc.get_threshold()
    create_app(ServerSettings(insecure_no_token=True, host="127.0.0.1"))
    assert gc.get_threshold() == before
