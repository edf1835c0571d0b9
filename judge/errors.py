"""The exception tree of loop-judge.

Usage errors propagate to the caller because they are bugs in the caller's code; judge
failures are caught by the tracker and reported on the verdict because a flaky model must
never crash the agent that embeds us::

    LoopJudgeError
    +-- ConfigError            bad configuration (names the environment variable)
    |   +-- EmbeddingsUnavailable  semantic="on" without the semantic packages installed
    |   +-- UsageError             a command line that cannot be run (cli.shared; exit 2)
    +-- HistoryError           malformed conversation (names the message index and field)
    +-- StateError             a saved tracker state that cannot be read back
    |   +-- StateFormatError       stored session bytes that are no state (service.session_codec)
    +-- TrajectoryFormatError  a recorded trajectory file that cannot be read
    +-- LoopDetected           a framework integration stopped the agent's run (carries the verdict)
    |   +-- AgentsLoopDetected     the same, an OpenAI Agents error (integrations.openai_agents)
    |   +-- CrewLoopDetected       the same, and CrewAI's HookAborted (integrations.crewai)
    +-- HookInputError         a hook event Claude Code does not send (integrations.claude_code)
    +-- StoreError             the session store could not serve a session (service.store)
    |   +-- StoreUnavailable       the backing store (Redis) did not answer
    |   +-- SessionBusy            another turn held the session's lock past lock_wait_s
    |   +-- SessionLockLost        the lock expired or the session was deleted while a turn ran
    |   +-- StoreFull              the in-memory store is full; a new session is refused
    +-- TurnOverBudget         a sidecar turn ran past turn_cpu_budget_s (service.worker)
    +-- AppendConflict         appended messages do not continue the session (service.turns)
    +-- BadIdempotencyKey      a malformed or reused Idempotency-Key (service.app)
    +-- JudgeError             the judge model failed; caught by the tracker
        +-- JudgeTimeout           no answer within timeout_s
        +-- JudgeConnectionError   the endpoint could not be reached
        +-- JudgeRateLimited       429; carries retry_after when the server said
        +-- JudgeHTTPError         any other HTTP status (5xx retried, 4xx not)
        |   +-- JudgeContextError  the prompt does not fit the server's context window
        +-- JudgeOutputError       an answer arrived but is not a valid assessment
        +-- CassetteMiss           no recorded reply for a replayed request (evals' judge_eval)

Errors with a module named are defined in that module (under ``judge.``), the rest here.
Every field an error carries is declared on its class, so a type checker sees it and
``except`` code reads it directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from judge.verdict import Verdict


class LoopJudgeError(Exception):
    """Base of every error loop-judge raises on purpose."""


class ConfigError(LoopJudgeError, ValueError):
    """The configuration is unusable; the message names the setting and its env variable."""


class HistoryError(LoopJudgeError, ValueError):
    """The history handed to the tracker is not a valid conversation.

    ``index`` is the position of the offending message (None when the container itself is
    wrong) and ``field`` the key that is missing or wrong, so the caller can fix its adapter
    without reading our code.
    """

    index: int | None
    field: str | None
    reason: str

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None):
        where = "history" if index is None else f"message {index}"
        if field:
            where += f", field {field!r}"
        super().__init__(f"{where}: {message}")
        self.index = index
        self.field = field
        self.reason = message


class EmbeddingsUnavailable(ConfigError, RuntimeError):
    """The semantic detector was asked for, but its packages are missing; the message
    says how to install it. (Also a RuntimeError, as it was before it joined the tree.)"""


class StateError(LoopJudgeError, ValueError):
    """A saved state that cannot be read back: another version, tampered or truncated, or
    saved with another configuration. A server starts that session over."""


class TrajectoryFormatError(LoopJudgeError, ValueError):
    """A trajectory file could not be read; ``str()`` is ``"<path>: <reason>"``.

    ``path`` and ``reason`` stay available separately for reports such as the dataset's
    import problems; callers that only know the stdlib still catch it as ValueError.
    """

    path: str
    reason: str

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class LoopDetected(LoopJudgeError):
    """A framework integration ended the agent's run because the verdict said ``stop``.

    Raised through the framework's own run (``agent.run(...)``, ``agent.invoke(...)``) so the
    application decides what a stopped agent means: tell the user, retry with another
    model, hand over to a person. ``verdict`` is the `Verdict` that decided it (its
    ``summary``, ``explanation``, ``kind``, ``evidence``); ``session`` names the
    conversation the integration tracked, when it knows one.
    """

    verdict: Verdict
    session: str | None

    def __init__(self, verdict: Verdict, *, session: str | None = None) -> None:
        self.verdict = verdict
        self.session = session
        what = verdict.summary or (verdict.kind.value if verdict.kind else "a loop")
        super().__init__(f"agent stopped in a loop: {what}")


class JudgeError(LoopJudgeError):
    """The judge model did not produce a usable assessment.

    ``retryable`` decides whether tenacity tries again; the tracker never lets these escape.
    ``model`` is the model asked; ``attempts`` how many requests the client made before
    giving up (None until a client says); ``format_rejected`` that the endpoint refused the
    structured-output format asked for, so the next attempt asks with a simpler one.
    """

    # Whether the same request may succeed later (a class's default; see `retryable`).
    transient: ClassVar[bool] = False
    model: str | None
    attempts: int | None
    format_rejected: bool

    def __init__(self, message: str, *, model: str | None = None):
        super().__init__(message)
        self.model = model
        self.attempts = None
        self.format_rejected = False

    @property
    def retryable(self) -> bool:
        """Whether tenacity should send the request again."""
        return self.transient


class JudgeTimeout(JudgeError):
    """The model did not answer within ``timeout_s``."""

    transient = True


class JudgeConnectionError(JudgeError):
    """The endpoint refused or dropped the connection."""

    transient = True


class JudgeRateLimited(JudgeError):
    """HTTP 429; ``retry_after`` (seconds) is the server's own hint when it sent one."""

    transient = True
    retry_after: float | None

    def __init__(self, message: str, *, model: str | None = None, retry_after: float | None = None):
        super().__init__(message, model=model)
        self.retry_after = retry_after


class JudgeHTTPError(JudgeError):
    """Any other HTTP failure; 5xx are transient, 4xx (bad request, auth) are not."""

    status: int | None

    def __init__(self, message: str, *, model: str | None = None, status: int | None = None):
        super().__init__(message, model=model)
        self.status = status

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status >= 500


class JudgeOutputError(JudgeError):
    """The model answered, but not with JSON matching the assessment schema.

    Never turned into a verdict: a confidence we cannot trust is no confidence at all.
    """


class JudgeContextError(JudgeHTTPError):
    """The judge prompt (plus the reply cap) does not fit the model's context window.

    Not retryable: the same prompt will not fit on the next try. ``prompt_tokens`` is the
    prompt's size (as the server counted it, else our estimate) and ``context_tokens`` the
    server's limit, None where the server did not say.
    """

    prompt_tokens: int | None
    context_tokens: int | None

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        status: int | None = 400,
        prompt_tokens: int | None = None,
        context_tokens: int | None = None,
    ) -> None:
        super().__init__(message, model=model, status=status)
        self.prompt_tokens = prompt_tokens
        self.context_tokens = context_tokens

    @property
    def retryable(self) -> bool:
        return False
