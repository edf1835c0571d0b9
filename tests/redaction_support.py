"""What the redaction tests share: the security bench loaded as a module, the check that
its figures show no leak, the check that redaction grows linearly with its input, and how a
corpus case is written out and checked for pieces of its secrets."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from judge.llm.redaction import redact

ROOT = Path(__file__).resolve().parent.parent
# A piece of a secret this long still in the text is a leak (as the bench counts).
PIECE = 10


def case_line(case: dict[str, Any]) -> str:
    """A corpus case's line with its secret (or a look-alike's value) filled in."""
    value = case["secret"] if "secret" in case else case["value"]
    return str(case["line"]).replace("{secret}", value).replace("{value}", value)


def leaks(text: str, secrets: list[str]) -> bool:
    """Whether any PIECE-long piece of a secret is in ``text``, as written or JSON-escaped."""
    for secret in secrets:
        for i in range(max(len(secret) - PIECE + 1, 1)):
            piece = secret[i : i + PIECE]
            if piece in text or json.dumps(piece)[1:-1] in text:
                return True
    return False


def written_forms(line: str) -> dict[str, str]:
    """The line as printed, and as a tool call's arguments (one and two levels escaped)."""
    arguments = json.dumps({"cmd": f"cat out.txt\n{line}\n", "timeout": 60})
    return {"raw": line, "arguments": arguments, "nested": json.dumps({"input": arguments})}


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
    repeated to 25 kB and to 100 kB, best of three runs each.

    The larger input stops at its first run under the bound: the best of three is under it
    exactly when one run is, so the outcome is the same, and a passing unit costs one large
    run instead of three (most of the time these tests took). A quadratic rule still runs
    all three and fails; the smaller input keeps its three runs, since its best sets the
    bound and a lower one is the stricter test."""

    def cost(text: str) -> float:
        # CPU time: other work on a shared machine stretches the wall clock, not this.
        started = time.process_time()
        redact(text)
        return time.process_time() - started

    def text(size: int) -> str:
        return unit * (size // len(unit))

    small_text, large_text = text(25_000), text(100_000)
    small = min(cost(small_text) for _ in range(3))
    bound = max(small * 8, 0.05)
    large: list[float] = []
    for _ in range(3):
        large.append(cost(large_text))
        if large[-1] < bound:
            break
    assert min(large) < bound, (small, large)
