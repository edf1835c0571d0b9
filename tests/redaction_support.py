"""What the redaction tests share: the security bench loaded as a module, the check that
its figures show no leak, and the check that redaction grows linearly with its input."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from judge.llm.redaction import redact

ROOT = Path(__file__).resolve().parent.parent


def security_bench() -> Any:
    """``evals/bench_security.py`` as a module (evals/ is not a package)."""
    sys.path.insert(0, str(ROOT / "evals"))
    try:
        import bench_security
    finally:
        sys.path.pop(0)
    return bench_security


def assert_no_leaks(figures: dict[str, Any]) -> None:
    """A corpus run of the bench (`measure_independent`) leaked nothing, in any placement
    and sink, the hook's state file and stderr included, and hid no look-alike."""
    leaks = {
        f"{placement}/{sink}": ids
        for placement, sinks in figures["leaks"].items()
        for sink, ids in sinks.items()
        if ids
    }
    assert leaks == {}
    assert {p: ids for p, ids in figures["false_redactions"].items() if ids} == {}
    assert figures["hook_leaks"] == {"hook_state": [], "hook_stderr": []}
    assert figures["hook_false_redactions"] == []


def assert_redaction_grows_linearly(unit: str) -> None:
    """Twice the input costs about twice the time, never four times (quadratic): ``unit``
    repeated to 25 kB and to 100 kB, best of two runs each."""

    def cost(size: int) -> float:
        text = unit * (size // len(unit))
        best = float("inf")
        for _ in range(2):
            started = time.perf_counter()
            redact(text)
            best = min(best, time.perf_counter() - started)
        return best

    small, large = cost(25_000), cost(100_000)
    assert large < max(small * 8, 0.05), (small, large)
