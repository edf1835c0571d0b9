"""Test doubles for code that uses loop-judge: a judge model that answers from a script, and
a conversation builder that drives the tracker the way an agent does (`AgentHistory`).

Testing an agent's loop handling against a real judge model is slow, costs money and is
not repeatable; testing it with no judge at all leaves the judge path (schedule, confirm
stage, budgets, the ``llm`` verdicts) untested. `ScriptedJudge` sits in between: it is an
`LLMClient` (what ``LoopTracker(config, client=...)`` takes) that answers every judge call
from a Python callable or a list of confidences, in the exact reply shape a real judge must
produce, and records what it was asked so a test can assert on it. It sends nothing over
the network and never imports litellm.

    judge = ScriptedJudge(lambda request: 0.95 if request.newest_index >= 12 else 0.1)
    tracker = LoopTracker(TrackerConfig(fast_model=SCRIPTED_FAST_MODEL), client=judge)

A tracker only asks a judge when ``fast_model`` is set; the model names are passed through
to the script (``request.model``) and never resolved, so any string works.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from judge.errors import JudgeError, JudgeOutputError
from judge.llm.assessment import ANALYSIS_KEY, CONFIDENCE_KEY
from judge.llm.client import ModelReply

__all__ = [
    "SCRIPTED_CONFIRM_MODEL",
    "SCRIPTED_FAST_MODEL",
    "AgentHistory",
    "Answer",
    "JudgeRequest",
    "ScriptedCall",
    "ScriptedJudge",
    "Usage",
    "transcript_records",
]

# Model names for configs that use a scripted judge. The "scripted/" prefix cannot be
# mistaken for a litellm model string in a report, and a tracker built with them but
# without a client would fail on the first call instead of reaching a real provider.
SCRIPTED_FAST_MODEL = "scripted/fast"
SCRIPTED_CONFIRM_MODEL = "scripted/confirm"
# Token estimate for the recorded usage: about 4 characters per token (OpenAI's rule of
# thumb), so token budgets (max_judge_tokens) behave as they would with a real model.
CHARS_PER_TOKEN = 4
# The fences judge_user.md puts around the transcript, one JSON object per line between.
_TRANSCRIPT_OPEN = "<transcript>"
_TRANSCRIPT_CLOSE = "</transcript>"

Answer = float | str | JudgeError
"""What a script gives for one call: a confidence (0..1, sent as a schema-valid reply), a
raw reply text (sent verbatim, to test malformed replies), or a `JudgeError` (raised, as a
failed call: timeout, 429, ...)."""


def transcript_records(messages: Iterable[dict[str, str]]) -> list[dict[str, Any]]:
    """The history records in a judge prompt, oldest first.

    Each record is what judge.llm.transcript renders for one message: ``n`` (its index in the
    agent's history), ``role``, and ``content``, ``calls`` or ``result_of`` when present.
    A script that decides from these knows exactly what a real judge would be shown, and
    nothing more. Returns [] for a prompt without a transcript.
    """
    text = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "user")
    start = text.find(_TRANSCRIPT_OPEN)
    if start < 0:
        return []
    end = text.find(_TRANSCRIPT_CLOSE, start + len(_TRANSCRIPT_OPEN))
    if end < 0:
        return []
    body = text[start + len(_TRANSCRIPT_OPEN) : end]
    records = []
    for line in body.splitlines():
        if line.strip():
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


@dataclass(frozen=True, slots=True)
class JudgeRequest:
    """One judge call as the scripted judge received it: what the script decides from."""

    number: int
    """1-based position among all calls this judge received."""
    model: str
    messages: list[dict[str, str]]

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The history records the judge is shown (see `transcript_records`)."""
        return transcript_records(self.messages)

    @property
    def indices(self) -> list[int]:
        """History indices of the messages in the judge's window, oldest first."""
        return [r["n"] for r in self.transcript if isinstance(r.get("n"), int)]

    @property
    def newest_index(self) -> int:
        """History index of the newest message the judge is shown (-1: none)."""
        return max(self.indices, default=-1)

    @property
    def prompt_chars(self) -> int:
        return sum(len(m.get("content") or "") for m in self.messages)


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """What one call got: the request, and the confidence answered or the error raised."""

    request: JudgeRequest
    confidence: float | None = None
    reply: str | None = None
    error: str | None = None

    @property
    def model(self) -> str:
        return self.request.model


Script = Callable[[JudgeRequest], Answer | Awaitable[Answer]]
"""A script decides each call from its request; it may be async (to hang or to wait)."""
Entry = Answer | Callable[[], Answer | Awaitable[Answer]]
"""One entry of a `ScriptedJudge.per_model` script: an answer, or a callable (sync or async)
called when its turn comes."""
Usage = tuple[int | None, int | None, float | None]
"""What a reply reports spending: prompt tokens, completion tokens, cost in USD."""


@dataclass
class ScriptedJudge:
    """An `LLMClient` whose answers come from ``script``, with every call recorded.

    ``script`` is either a callable taking a `JudgeRequest` and returning an `Answer`, or
    a list of answers used one per call in order (fast and confirm calls alike). When the
    list runs out, ``default`` answers the remaining calls; without a default the call
    fails with a `JudgeOutputError`, which the tracker records on the verdict, so a test
    that asked more than it scripted sees it in ``verdict.errors`` instead of a silently
    repeated answer. A confidence outside 0..1 (or NaN) is a bug in the test and raises
    ``ValueError`` at once.
    """

    script: Script | list[Answer]
    default: Answer | None = None
    analysis: str = "scripted judge"
    usage: Usage | None = None
    """What every reply reports spending; None: tokens estimated from the text
    (`CHARS_PER_TOKEN`), no cost. ``(None, None, None)`` reports no usage at all, as some
    providers do."""
    calls: list[ScriptedCall] = field(default_factory=list)
    _position: int = field(default=0, init=False, repr=False)

    @classmethod
    def per_model(
        cls, scripts: Mapping[str, Sequence[Entry]], *, usage: Usage | None = None
    ) -> ScriptedJudge:
        """A judge with one script per model name (the fast and the confirm model apart).

        Each model's entries answer its calls in order and the last one repeats. An entry
        is an `Answer` or a callable (sync or async) called at its turn, e.g. an async one
        that never returns, to test timeouts. A call to a model without a script raises
        ``LookupError``, which the tracker does not catch, so the test fails where it
        happened.
        """
        queues = {model: list(entries) for model, entries in scripts.items()}

        def script(request: JudgeRequest) -> Answer | Awaitable[Answer]:
            queue = queues.get(request.model)
            if not queue:
                raise LookupError(f"scripted judge: no script for model {request.model!r}")
            entry = queue.pop(0) if len(queue) > 1 else queue[0]
            return entry() if callable(entry) else entry

        return cls(script, usage=usage)

    @property
    def requests(self) -> list[tuple[str, list[dict[str, str]]]]:
        """``(model, messages)`` of every call, in order (failed and unfinished ones too)."""
        return [(c.model, c.request.messages) for c in self.calls]

    def calls_to(self, model: str) -> list[ScriptedCall]:
        """The calls made to one model (e.g. the confirm stage only)."""
        return [c for c in self.calls if c.model == model]

    @property
    def confidences(self) -> list[float | None]:
        """The confidence answered on each call, None where the call failed."""
        return [c.confidence for c in self.calls]

    def _next(self, request: JudgeRequest) -> Answer | Awaitable[Answer]:
        if callable(self.script):
            return self.script(request)
        if self._position < len(self.script):
            answer = self.script[self._position]
            self._position += 1
            return answer
        if self.default is not None:
            return self.default
        raise JudgeOutputError(
            f"scripted judge: script of {len(self.script)} answers exhausted at call "
            f"{request.number}",
            model=request.model,
        )

    async def complete(
        self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
    ) -> ModelReply:
        request = JudgeRequest(number=len(self.calls) + 1, model=model, messages=messages)
        # Recorded before the answer, so a call that hangs and is cancelled still counts.
        index = len(self.calls)
        self.calls.append(ScriptedCall(request))
        try:
            answer = self._next(request)
            if inspect.isawaitable(answer):
                answer = await answer
            if isinstance(answer, JudgeError):
                raise answer
        except JudgeError as exc:
            self.calls[index] = ScriptedCall(request, error=f"{type(exc).__name__}: {exc}")
            raise
        confidence: float | None = None
        if isinstance(answer, str):
            content = answer
        else:
            confidence = float(answer)
            if not math.isfinite(confidence) or not 0.0 <= confidence <= 1.0:
                raise ValueError(f"scripted confidence must be within 0..1, got {answer!r}")
            analysis = f"{self.analysis}: call {request.number}, window ends at message " + str(
                request.newest_index
            )
            content = json.dumps({ANALYSIS_KEY: analysis, CONFIDENCE_KEY: confidence})
        self.calls[index] = ScriptedCall(request, confidence=confidence, reply=content)
        prompt_tokens, completion_tokens, cost_usd = self.usage or (
            request.prompt_chars // CHARS_PER_TOKEN,
            max(1, len(content) // CHARS_PER_TOKEN),
            0.0,
        )
        return ModelReply(
            content=content,
            finish_reason="stop",
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=cost_usd,
            attempts=1,
        )


class AgentHistory:
    """A conversation grown the way an agent grows it, for testing loop handling.

    Each helper appends what an agent's loop would append; `turn` asks the tracker the way
    an agent must (``turn_started`` before the next model call) and, on a loop verdict,
    appends its recovery message as a user message, as the README shows. ``fmt`` picks the
    wire format: ``"openai"`` (``tool_calls`` and ``tool`` messages) or ``"anthropic"``
    (``tool_use`` / ``tool_result`` content blocks).

        history = AgentHistory(tracker, task="Where is my order?")
        for _ in range(4):
            history.call("get_order", {"id": "7"}, "shipped")
            verdict = await history.turn()
    """

    def __init__(
        self,
        tracker: Any,
        *,
        task: str = "Where is my order?",
        system: str = "You are a helpful agent.",
        fmt: str = "openai",
        first_call: int = 1,
    ) -> None:
        """``first_call`` numbers the call ids (``call_1``, ``call_2``, ... by default)."""
        if fmt not in ("openai", "anthropic"):
            raise ValueError(f"fmt must be 'openai' or 'anthropic', got {fmt!r}")
        self.tracker = tracker
        self.fmt = fmt
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": task},
        ]
        self.verdicts: list[Any] = []
        self._calls = first_call - 1

    def _call_id(self) -> str:
        self._calls += 1
        return f"call_{self._calls}"

    def call(
        self, name: str, arguments: dict[str, Any], result: str, *, is_error: bool = False
    ) -> None:
        """One assistant tool call and its result."""
        call_id = self._call_id()
        if self.fmt == "anthropic":
            self.messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
                    ],
                }
            )
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": result,
            }
            if is_error:
                block["is_error"] = True
            self.messages.append({"role": "user", "content": [block]})
            return
        self.messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                ],
            }
        )
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})

    def say(self, text: str) -> None:
        """An assistant message without a call."""
        self.messages.append({"role": "assistant", "content": text})

    def user(self, text: str) -> None:
        """A user (or harness) message."""
        self.messages.append({"role": "user", "content": text})

    async def turn(self) -> Any:
        """``turn_started``, then what an agent does with a loop verdict."""
        verdict = await self.tracker.turn_started(self.messages)
        self.verdicts.append(verdict)
        if verdict:
            self.user(verdict.recovery_message)
        return verdict
