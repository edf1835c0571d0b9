"""A process that uses loop-judge exits cleanly whenever it exits.

The semantic model loads in a background thread; a process that ended while that thread
was inside onnxruntime used to abort (exit 134) or crash (139). This runs the bounded
version of evals/bench_exit.py: fresh interpreters that build a tracker, or run one turn,
and exit at delays spread over the load, with the other core kept busy.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from collections.abc import Iterator
from multiprocessing.synchronize import Event

import pytest

from judge.detectors import embeddings

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not embeddings.available(), reason="semantic packages not installed"),
]

_BUILD = "from judge import LoopTracker\nLoopTracker()\n"
_TURN = (
    "import anyio\nfrom judge import LoopTracker\ntracker = LoopTracker()\n"
    "anyio.run(tracker.turn_started, "
    '[{"role": "user", "content": "list the files"}, '
    '{"role": "assistant", "content": "Looking at the files now."}])\n'
)
# Exits before, during and after the load (about 0.5 s idle, longer under load), where the
# old daemon thread aborted 3 of 10 runs at 0.3-0.5 s and 8 of 10 on a loaded machine.
_DELAYS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)


def _spin(stop: Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


@pytest.fixture
def busy_core() -> Iterator[None]:
    """Another process keeping one core busy, as on a loaded machine."""
    stop = multiprocessing.Event()
    spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
    spinner.start()
    try:
        yield
    finally:
        stop.set()
        spinner.join(5)


@pytest.mark.parametrize("script", [_BUILD, _TURN], ids=["build", "one-turn"])
@pytest.mark.usefixtures("busy_core")
def test_exits_cleanly_whenever_the_process_ends(script: str) -> None:
    failures = []
    for delay in _DELAYS:
        done = subprocess.run(
            [sys.executable, "-c", f"{script}import time\ntime.sleep({delay})\n"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            failures.append((delay, done.returncode, done.stderr[-300:]))
    assert failures == []


def test_the_load_does_not_keep_a_finished_process_alive_after_it_ends() -> None:
    """The join at exit waits only for a load in progress: once loaded, the process ends
    at once, and the first embedding in it returns real vectors."""
    code = (
        "import time\nfrom judge import LoopTracker\nfrom judge.detectors import embeddings\n"
        "LoopTracker()\nvec = embeddings.cached_embedder().embed(['hello'])\n"
        "assert vec.shape == (1, 384)\nstart = time.perf_counter()\n"
        "import atexit\natexit.register(lambda: print(round(time.perf_counter() - start, 3)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert float(done.stdout.strip().splitlines()[-1]) < 1.0
