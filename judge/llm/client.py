"""The judge seam: what the judge needs from a model endpoint.

`LLMClient` is the protocol every judge client satisfies and `ModelReply` the raw reply it
returns. The default client (`judge.llm._litellm.LiteLLMClient`, built from a
`TrackerConfig`) talks to litellm; bring your own to call a model another way, or use
`judge.testing.ScriptedJudge` in tests. Importing this module imports no model library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class ModelReply:
    """A raw reply: the text still needs parsing into an assessment."""

    content: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None
    attempts: int
    # The reply cap the request was sent with, so a reply cut off at it can name it.
    max_tokens: int | None = None


@runtime_checkable
class LLMClient(Protocol):
    """What the judge needs from a model endpoint: one structured completion.

    ``schema`` is the JSON schema the reply's content must match. Raise a
    `judge.errors.JudgeError` subclass on failure (the tracker reports it on the verdict and
    never lets it escape); any other exception is a bug and propagates.
    """

    async def complete(
        self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
    ) -> ModelReply: ...
