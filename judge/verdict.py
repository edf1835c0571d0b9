"""What the tracker tells the agent after each turn.

A `Verdict` is falsy when all is well, so the agent's loop reads ``if verdict: ...``; when
it is truthy it carries everything needed to explain and escape the loop.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Action(str, Enum):
    """What the agent should do about the verdict, from the escalation ladder."""

    CONTINUE = "continue"
    WARN = "warn"
    ASK_USER = "ask_user"
    STOP = "stop"


class LoopKind(str, Enum):
    """The loop taxonomy shared with the labelled eval data (shared/recorded/LABELING.md)."""

    EXACT_REPEAT = "exact_repeat"
    ALTERNATION = "alternation"
    SIMILAR_RETRY = "similar_retry"
    ERROR_CYCLE = "error_cycle"
    TEXT_REPETITION = "text_repetition"
    COGNITIVE = "cognitive"


class JudgeStage(str, Enum):
    FAST = "fast"
    CONFIRM = "confirm"


class JudgeFailureKind(str, Enum):
    """Which way a judge call failed (`JudgeFailure.kind`); one per `judge.errors` class."""

    TIMEOUT = "timeout"  # JudgeTimeout
    CONNECTION = "connection"  # JudgeConnectionError
    RATE_LIMITED = "rate_limited"  # JudgeRateLimited
    CONTEXT = "context"  # JudgeContextError: the prompt does not fit
    HTTP = "http"  # any other JudgeHTTPError
    OUTPUT = "output"  # JudgeOutputError: an answer, but not a valid assessment
    OTHER = "other"  # a JudgeError of a client's own


class JudgeFailure(BaseModel):
    """Why one judge call gave no answer, as values a program can branch on.

    ``status`` is the HTTP status where the endpoint answered with one (429 for a rate
    limit), ``retry_after`` the seconds a rate-limited server asked for. The text stays in
    `JudgeCall.error` (redacted with the verdict's other texts).
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    kind: JudgeFailureKind
    status: int | None = None
    retry_after: float | None = None


class JudgeCall(BaseModel):
    """One model consulted during one check, successful or not.

    The confidence is the model's own number, never a constant: users tune the threshold
    from these.
    """

    # defer_build: the schema is built on the first validation, not at import: a turn
    # without a judge check never validates one.
    model_config = ConfigDict(frozen=True, defer_build=True)

    model: str
    stage: JudgeStage
    confidence: float | None = None
    analysis: str | None = None
    attempts: int = 0
    latency_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = Field(default=None, description="None when litellm has no price")
    error: str | None = None
    failure: JudgeFailure | None = Field(
        default=None, description="the typed reason when error is set"
    )

    @property
    def ok(self) -> bool:
        return self.error is None and self.confidence is not None


class Origin(str, Enum):
    """Who found a loop: a heuristic detector or the LLM judge (`Verdict.origin`)."""

    HEURISTIC = "heuristic"
    LLM = "llm"


class Verdict(BaseModel):
    """The outcome of one ``turn_started`` (or ``check_call``) call.

    ``source`` stays a string on the wire (``"llm"`` or ``"heuristic:<detector>"``, checked
    on construction); `origin` and `detector` are its typed parts.
    """

    # defer_build: the schema is built at the first verdict, not when judge is imported.
    model_config = ConfigDict(frozen=True, defer_build=True)

    looping: bool = False
    source: str | None = Field(
        default=None, description='"llm", "heuristic:<detector>", or None when nobody spoke'
    )
    kind: LoopKind | None = None
    confidence: float | None = None
    analysis: str | None = None
    evidence: list[int] = Field(default_factory=list, description="indices into the history")
    action: Action = Action.CONTINUE
    summary: str | None = Field(default=None, description="one line for a status bar")
    explanation: str | None = Field(
        default=None, description="two or three sentences for a person: what, where, what next"
    )
    recovery_message: str | None = Field(
        default=None, description="a fenced block to inject for the model; within a budget"
    )
    pattern: str | None = Field(
        default=None,
        description='identifies the loop (a detector\'s pattern, or "llm"); what '
        "tracker.override() takes",
    )
    judge_calls: list[JudgeCall] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    turn: int = 0
    suspicion: float = Field(default=0.0, description="highest heuristic score this turn")

    @field_validator("source")
    @classmethod
    def _source_shape(cls, value: str | None) -> str | None:
        if value is None or value == Origin.LLM.value:
            return value
        prefix, _, name = value.partition(":")
        if prefix != Origin.HEURISTIC.value or not name:
            raise ValueError(f'source must be "llm" or "heuristic:<detector>", got {value!r}')
        return value

    @property
    def origin(self) -> Origin | None:
        """`Origin.LLM`, `Origin.HEURISTIC`, or None when nobody spoke."""
        if self.source is None:
            return None
        return Origin.LLM if self.source == Origin.LLM.value else Origin.HEURISTIC

    @property
    def detector(self) -> str | None:
        """The heuristic detector's name (``"exact_repeat"``), else None."""
        if self.source is None or self.source == Origin.LLM.value:
            return None
        return self.source.partition(":")[2]

    @property
    def judge_failures(self) -> list[JudgeFailure]:
        """The typed failures of this turn's judge calls (``errors`` holds their text)."""
        return [call.failure for call in self.judge_calls if call.failure is not None]

    def __bool__(self) -> bool:
        return self.looping
