"""Record judge replies to a file and play them back, so a judge-mode eval runs offline.

A cassette is JSON Lines: one header line (what was recorded: the judge and the runs'
settings), then one line per model call keyed by the trajectory and run it belongs to
(``scope``), the model and the SHA-256 of the exact prompt. Replaying needs no key and no
network, and gives the same verdicts as long as the tracker asks the same questions; when
it asks something else, that call fails with `CassetteMiss` on the verdict, exactly like a
model outage would, so a stale cassette is visible in the report instead of silently wrong.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from judge import errors
from judge.errors import ConfigError, JudgeError
from judge.llm._litellm import LLMClient, ModelReply

__all__ = [
    "CASSETTE_FORMAT",
    "Cassette",
    "CassetteMiss",
    "CassetteRecorder",
    "RecordingClient",
    "ReplayingClient",
    "prompt_sha256",
]

# Written in the header and checked on load, so a future layout change fails loudly.
CASSETTE_FORMAT = "loop-judge-cassette/1"

Key = tuple[str, str, str]  # (scope, model, prompt sha256)


class CassetteMiss(JudgeError):
    """The cassette holds no reply for this request: it was recorded with other data,
    prompts or settings. Re-record it with ``--record``."""


def prompt_sha256(messages: list[dict[str, str]]) -> str:
    """A stable fingerprint of a prompt: key order and layout never change it."""
    text = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _error_entry(exc: JudgeError) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    for attr in ("status", "retry_after"):
        if getattr(exc, attr, None) is not None:
            entry[attr] = getattr(exc, attr)
    return entry


def _rebuild_error(entry: dict[str, Any], model: str) -> JudgeError:
    """The recorded failure as the same `JudgeError` subclass, so replay fails the same way."""
    cls = getattr(errors, str(entry.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, JudgeError)):
        cls = JudgeError
    message = str(entry.get("message", "recorded failure"))
    if cls is errors.JudgeHTTPError:
        return errors.JudgeHTTPError(message, model=model, status=entry.get("status"))
    if cls is errors.JudgeRateLimited:
        return errors.JudgeRateLimited(message, model=model, retry_after=entry.get("retry_after"))
    return cls(message, model=model)


class CassetteRecorder:
    """Collects calls from many `RecordingClient`s and writes them once, sorted.

    Sorting by key makes the file independent of the order concurrent trajectories finished
    in, so re-recording unchanged data gives an identical file and a readable diff.
    """

    def __init__(self, path: str | Path, header: dict[str, Any]) -> None:
        self.path = Path(path)
        self.header = {"format": CASSETTE_FORMAT, **header}
        self._entries: dict[Key, list[dict[str, Any]]] = defaultdict(list)

    def client(self, inner: LLMClient, scope: str) -> RecordingClient:
        return RecordingClient(inner, self, scope)

    def add(self, key: Key, entry: dict[str, Any]) -> None:
        self._entries[key].append(entry)

    @property
    def calls(self) -> int:
        return sum(len(v) for v in self._entries.values())

    def save(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps(self.header, sort_keys=True)]
        for (scope, model, sha), entries in sorted(self._entries.items()):
            for occurrence, entry in enumerate(entries):
                record = {"scope": scope, "model": model, "prompt_sha256": sha, "n": occurrence}
                lines.append(json.dumps({**record, **entry}, sort_keys=True))
        self.path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return self.path


class RecordingClient:
    """Passes each call to the real client and keeps its reply (or its failure)."""

    def __init__(self, inner: LLMClient, recorder: CassetteRecorder, scope: str) -> None:
        self._inner = inner
        self._recorder = recorder
        self.scope = scope

    async def complete(
        self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
    ) -> ModelReply:
        key = (self.scope, model, prompt_sha256(messages))
        try:
            reply = await self._inner.complete(model, messages, schema=schema)
        except JudgeError as exc:
            self._recorder.add(key, {"error": _error_entry(exc)})
            raise
        self._recorder.add(key, {"reply": asdict(reply)})
        return reply


class Cassette:
    """A loaded cassette: the header and the recorded calls, ready to replay."""

    def __init__(self, header: dict[str, Any], entries: dict[Key, list[dict[str, Any]]]) -> None:
        self.header = header
        self.entries = entries

    @classmethod
    def load(cls, path: str | Path) -> Cassette:
        """Read a cassette; a missing or malformed file is a `ConfigError` naming it."""
        path = Path(path)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read cassette {path}: {exc.strerror or exc}") from exc
        try:
            records = [json.loads(line) for line in lines if line.strip()]
        except json.JSONDecodeError as exc:
            raise ConfigError(f"cassette {path} is not JSON Lines: {exc}") from exc
        if not records or records[0].get("format") != CASSETTE_FORMAT:
            raise ConfigError(f"{path} is not a loop-judge cassette (no {CASSETTE_FORMAT} header)")
        entries: dict[Key, list[dict[str, Any]]] = defaultdict(list)
        for number, record in enumerate(records[1:], start=2):
            try:
                key = (record["scope"], record["model"], record["prompt_sha256"])
            except KeyError as exc:
                raise ConfigError(
                    f"cassette {path} line {number}: {exc.args[0]!r} missing"
                ) from exc
            entries[key].append(record)
        for calls in entries.values():
            calls.sort(key=lambda r: r.get("n", 0))
        return cls(records[0], dict(entries))

    def client(self, scope: str) -> ReplayingClient:
        return ReplayingClient(self, scope)


class ReplayingClient:
    """Answers each call with the recorded reply for the same scope, model and prompt.

    The same prompt asked twice gets its recorded answers in order; asked more often than
    recorded, it misses.
    """

    def __init__(self, cassette: Cassette, scope: str) -> None:
        self._cassette = cassette
        self.scope = scope
        self._asked: dict[Key, int] = defaultdict(int)

    async def complete(
        self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
    ) -> ModelReply:
        sha = prompt_sha256(messages)
        key = (self.scope, model, sha)
        recorded = self._cassette.entries.get(key, [])
        occurrence = self._asked[key]
        self._asked[key] += 1
        if occurrence >= len(recorded):
            raise CassetteMiss(
                f"cassette has no reply for {model} in {self.scope} "
                f"(prompt sha256 {sha[:12]}, ask #{occurrence + 1}); re-record with --record",
                model=model,
            )
        entry = recorded[occurrence]
        if "error" in entry:
            raise _rebuild_error(entry["error"], model)
        return ModelReply(**entry["reply"])
