"""A simulated judge that answers from the labels, to measure the check schedule offline.

No model is reachable from the machines this project is built on, yet the schedule's cost
(judge calls per 100 turns, tokens, dollars) and its detection delay only depend on *when*
the judge is asked and *what it roughly says*. The oracle answers like a good judge would:
confident once the transcript it is shown reaches the labelled onset of a loop, not
confident before it or on a productive run, with seeded noise and an optional failure rate
so that the threshold and the retry path are exercised too.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from judge.errors import JudgeOutputError, JudgeTimeout
from judge.llm._litellm import ModelReply
from judge.llm.assessment import ANALYSIS_KEY, CONFIDENCE_KEY
from judge_eval.dataset import Labels

__all__ = [
    "ORACLE_CONFIRM_MODEL",
    "ORACLE_FAST_MODEL",
    "OracleClient",
    "OracleSettings",
    "max_message_index",
]

# Model names the oracle answers to; "oracle/" makes them impossible to confuse with a real
# litellm model string in a report or a cassette.
ORACLE_FAST_MODEL = "oracle/fast"
ORACLE_CONFIRM_MODEL = "oracle/confirm"
# What a good judge says about a window that shows the loop, and one that does not: on
# either side of the tracker's 0.9 threshold, far enough that the default noise rarely
# flips a productive window into a loop.
LOOPING_CONFIDENCE = 0.95
PRODUCTIVE_CONFIDENCE = 0.1
# Standard deviation of the gaussian noise added to each answer (clamped to 0..1); at 0.05
# about one loop answer in six falls below 0.9, like a judge that hesitates.
DEFAULT_NOISE = 0.05
# Share of calls that time out, to exercise the failed-check schedule; off by default.
DEFAULT_ERROR_RATE = 0.0
DEFAULT_SEED = 0
# Token estimates: about 4 characters per token for English and JSON (OpenAI's rule of
# thumb), and a reply of 2-4 sentences plus one number is about 60 tokens.
CHARS_PER_TOKEN = 4
COMPLETION_TOKENS = 60
# US$ per million tokens of a flash-class judge: Google's list price for Gemini 2.5 Flash
# (ai.google.dev/gemini-api/docs/pricing, paid tier, text input / output, mid-2025).
PRICE_IN_PER_MTOK = 0.30
PRICE_OUT_PER_MTOK = 2.50
_PER_MILLION = 1_000_000

_TRANSCRIPT_OPEN = "<transcript>"
_TRANSCRIPT_CLOSE = "</transcript>"


@dataclass(frozen=True, slots=True)
class OracleSettings:
    """How the oracle behaves; one value for the whole eval so runs are comparable."""

    noise: float = DEFAULT_NOISE
    error_rate: float = DEFAULT_ERROR_RATE
    seed: int = DEFAULT_SEED
    price_in_per_mtok: float = PRICE_IN_PER_MTOK
    price_out_per_mtok: float = PRICE_OUT_PER_MTOK

    def __post_init__(self) -> None:
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"oracle error rate must be between 0 and 1, got {self.error_rate}")
        if self.noise < 0:
            raise ValueError(f"oracle noise must be at least 0, got {self.noise}")


def max_message_index(messages: list[dict[str, str]]) -> int | None:
    """The newest message index (``"n"``) in the judge prompt's transcript.

    The transcript is one JSON object per line between the ``<transcript>`` fences (see
    judge.llm.transcript); reading it back, not peeking at the tracker, keeps the oracle honest:
    it knows only what a real judge would be shown.
    """
    text = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "user")
    start = text.find(_TRANSCRIPT_OPEN)
    end = text.find(_TRANSCRIPT_CLOSE, start + 1)
    if start < 0 or end < 0:
        return None
    newest: int | None = None
    for line in text[start + len(_TRANSCRIPT_OPEN) : end].splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        n = record.get("n")
        if isinstance(n, int) and (newest is None or n > newest):
            newest = n
    return newest


class OracleClient:
    """An `LLMClient` for one trajectory that answers from that trajectory's labels.

    Create one per trajectory: the labels are the oracle's knowledge, and a per-trajectory
    random stream keeps answers the same whatever order trajectories run in.
    """

    def __init__(
        self, labels: Labels | None, *, trajectory_id: str, settings: OracleSettings | None = None
    ) -> None:
        self.labels = labels
        self.settings = settings or OracleSettings()
        # A string seed is hashed with SHA-512 by `random`, so it does not depend on
        # PYTHONHASHSEED and the same trajectory gets the same answers in every run.
        self._rng = random.Random(f"{self.settings.seed}:{trajectory_id}")
        self.calls = 0

    def _confidence(self, newest: int | None) -> float:
        labels = self.labels
        onset = labels.onset_message_index if labels is not None and labels.looping else None
        shows_loop = onset is not None and newest is not None and newest >= onset
        base = LOOPING_CONFIDENCE if shows_loop else PRODUCTIVE_CONFIDENCE
        noisy = base + self._rng.gauss(0.0, self.settings.noise) if self.settings.noise else base
        return min(1.0, max(0.0, noisy))

    async def complete(
        self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
    ) -> ModelReply:
        self.calls += 1
        # Draw the failure first and always, so the answers do not shift with the rate.
        fails = self._rng.random() < self.settings.error_rate
        if fails:
            raise JudgeTimeout("simulated timeout (oracle error rate)", model=model)
        try:
            newest = max_message_index(messages)
        except json.JSONDecodeError as exc:
            raise JudgeOutputError(
                f"oracle cannot read the transcript: {exc}", model=model
            ) from exc
        confidence = self._confidence(newest)
        analysis = (
            f"oracle: window ends at message {newest}, labelled onset "
            f"{self.labels.onset_message_index if self.labels else None}"
        )
        prompt_chars = sum(len(m.get("content") or "") for m in messages)
        prompt_tokens = prompt_chars // CHARS_PER_TOKEN
        cost = (
            prompt_tokens * self.settings.price_in_per_mtok
            + COMPLETION_TOKENS * self.settings.price_out_per_mtok
        ) / _PER_MILLION
        return ModelReply(
            content=json.dumps({ANALYSIS_KEY: analysis, CONFIDENCE_KEY: round(confidence, 4)}),
            finish_reason="stop",
            prompt_tokens=prompt_tokens,
            completion_tokens=COMPLETION_TOKENS,
            cost_usd=cost,
            attempts=1,
        )
