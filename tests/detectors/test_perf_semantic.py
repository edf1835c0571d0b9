"""The semantic detector's model: loaded once per process, in the background, and each text
embedded at most once (functional checks; timings live in evals/bench_peers.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from judge import LoopTracker, TrackerConfig

embeddings = pytest.importorskip("judge.detectors.embeddings")
pytestmark = pytest.mark.skipif(
    not embeddings.available(), reason="the semantic packages are missing (a partial install)"
)


class CountingModel:
    """Stands in for the loaded model: counts the texts it is asked to embed."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._real = embeddings.shared_embedder()

    def embed(self, texts: list[str]) -> Any:
        self.texts.extend(texts)
        return self._real.embed(texts)


def test_each_text_is_embedded_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    model = CountingModel()
    monkeypatch.setattr(embeddings, "shared_embedder", lambda: model)
    cache = embeddings.CachedEmbedder(capacity=3)
    first = cache.embed(["check the salad prices", "check the salad prices", "open the page"])
    again = cache.embed(["open the page", "check the salad prices"])
    assert model.texts == ["check the salad prices", "open the page"]
    assert (again[1] == first[0]).all() and (again[0] == first[2]).all()
    cache.embed(["a", "b", "c"])  # capacity 3: the oldest texts are dropped
    cache.embed(["check the salad prices"])
    assert model.texts.count("check the salad prices") == 2


def test_trackers_share_one_cache_and_one_model() -> None:
    config = TrackerConfig(semantic="on")
    detectors = [LoopTracker(config)._suite.detector("semantic_repeat") for _ in range(2)]
    assert all(d is not None for d in detectors)
    assert detectors[0]._embedder is detectors[1]._embedder  # type: ignore[union-attr]
    assert detectors[0]._embedder is embeddings.cached_embedder()  # type: ignore[union-attr]


def test_building_a_tracker_does_not_wait_for_the_model() -> None:
    """While another thread holds the model's lock (as the loading thread does), trackers
    are still built: neither the detector nor the preload waits for it."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with embeddings._lock:
            holding.set()
            release.wait(timeout=30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(timeout=30)
        started = time.monotonic()
        trackers = [LoopTracker(TrackerConfig(semantic="on")) for _ in range(2)]
        assert time.monotonic() - started < 10  # not blocked until release (30 s)
        assert all(t._suite.detector("semantic_repeat") is not None for t in trackers)
    finally:
        release.set()
        holder.join()
