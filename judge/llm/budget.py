"""Per-tracker spending limits on the judge: model calls and tokens.

An agent that runs for days must not run up an unbounded bill because a judge is due every
few turns. Once a limit is reached the tracker runs the heuristics only and says so on the
verdict. Pure bookkeeping, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from judge.verdict import JudgeCall

# Characters per token when a provider reports no usage: the usual rule of thumb for
# English and code with BPE tokenizers (the eval suite's oracle uses the same estimate).
CHARS_PER_TOKEN = 4


def token_count(value: object) -> int | None:
    """A token count as an endpoint reported it, or None when it is not one (negative,
    fractional, a bool, text): a usage block is the endpoint's word, not a number we trust
    (a negative count would give tokens back and keep max_judge_tokens from ever being
    reached)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def call_tokens(call: JudgeCall, prompt_chars: int) -> int:
    """Tokens one call cost: the provider's usage, else an estimate of the prompt.

    A call that reports no usage (a timeout, a refused connection, a local server) is
    charged the prompt's estimated size, so a provider without usage reports cannot spend
    without limit; a budget errs on the side of stopping early. A reported count that is
    not a count (negative: an endpoint would otherwise give tokens back and never reach
    max_judge_tokens) counts as unreported, and the prompt is charged at least
    its estimate.
    """
    estimate = -(-max(prompt_chars, 0) // CHARS_PER_TOKEN)
    if call.prompt_tokens is None and call.completion_tokens is None:
        return estimate
    prompt = token_count(call.prompt_tokens) if call.prompt_tokens is not None else 0
    completion = token_count(call.completion_tokens) if call.completion_tokens is not None else 0
    return (estimate if prompt is None else prompt) + (completion or 0)


@dataclass(slots=True)
class JudgeBudget:
    """Calls and tokens spent so far against optional limits (None = unlimited)."""

    max_calls: int | None = None
    max_tokens: int | None = None
    calls_used: int = 0
    tokens_used: int = 0

    def snapshot(self) -> tuple[int, int]:
        """(calls used, tokens used), for a saved tracker state."""
        return self.calls_used, self.tokens_used

    def restore(self, calls_used: int, tokens_used: int) -> None:
        self.calls_used, self.tokens_used = calls_used, tokens_used

    def spent(self) -> str | None:
        """Why no further check may start, or None while there is budget left."""
        if self.max_calls is not None and self.calls_used >= self.max_calls:
            return f"judge budget spent: {self.calls_used} of {self.max_calls} calls used"
        if self.max_tokens is not None and self.tokens_used >= self.max_tokens:
            return f"judge budget spent: {self.tokens_used} of {self.max_tokens} tokens used"
        return None

    def calls_left(self) -> int | None:
        if self.max_calls is None:
            return None
        return max(self.max_calls - self.calls_used, 0)

    def record(self, calls: Iterable[JudgeCall], prompt_chars: int) -> None:
        for call in calls:
            self.calls_used += 1
            self.tokens_used += call_tokens(call, prompt_chars)

    def reset(self) -> None:
        self.calls_used = 0
        self.tokens_used = 0
