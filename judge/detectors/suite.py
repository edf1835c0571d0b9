"""Build the detector set from a config and feed it events; what it finds is judged by
`judge.decision.decide`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from judge._codec import StepPool, decode, dump_attrs, encode, load_attrs
from judge.config import TrackerConfig
from judge.detectors.base import Detector, Event, Finding, Preflight, Refusal
from judge.detectors.cycle import CycleDetector
from judge.detectors.exact_repeat import ExactRepeatDetector
from judge.detectors.no_effect import NoEffectDetector
from judge.detectors.reapply import ReapplyDetector
from judge.detectors.repeated_feedback import RepeatedFeedbackDetector
from judge.detectors.repeated_request import RepeatedRequestDetector
from judge.detectors.result_cycle import ResultCycleDetector
from judge.detectors.revisit import RevisitDetector
from judge.detectors.semantic_repeat import SemanticRepeatDetector
from judge.detectors.similar_retry import SimilarRetryDetector
from judge.detectors.steps import Step, StepBuilder
from judge.detectors.text_repetition import TextRepetitionDetector
from judge.detectors.tool_classes import UNLIMITED, ToolClass, repeat_limit
from judge.errors import EmbeddingsUnavailable, StateError
from judge.history import Message, ToolCall

# Tool names whose repeat limit is remembered; agents use a few dozen tools at most.
LIMITS_CACHED = 1024


def default_detectors(config: TrackerConfig) -> list[Detector]:
    limits = {
        ToolClass.EXPLORE: config.explore_repeat_limit,
        ToolClass.MODIFY: config.modify_repeat_limit,
        ToolClass.OTHER: config.other_repeat_limit,
    }

    # The config is frozen, so a tool's limit never changes: looked up once per name (the
    # exact-repeat detector asks on every step).
    @lru_cache(maxsize=LIMITS_CACHED)
    def limit_for(name: str) -> int:
        return repeat_limit(
            name,
            limits=limits,
            overrides=config.tool_limits,
            explore=config.explore_tools,
            modify=config.modify_tools,
        )

    return [
        ExactRepeatDetector(
            limit_for, config.failure_repeat_limit, config.recur_min, config.recur_window
        ),
        CycleDetector(config.cycle_repeats_period2, config.cycle_repeats),
        SimilarRetryDetector(
            config.retry_min_variants, config.retry_similarity, config.retry_window
        ),
        ResultCycleDetector(config.result_cycle_min),
        TextRepetitionDetector(config.text_similarity, config.text_min_repeats),
        RepeatedFeedbackDetector(),
        NoEffectDetector(),
        ReapplyDetector(),
        RevisitDetector(
            unlimited=lambda name: limit_for(name) >= UNLIMITED, tool_limits=config.tool_limits
        ),
        *_semantic_detectors(config),
    ]


def _semantic_detectors(config: TrackerConfig) -> list[Detector]:
    """The embedding-based detector, when enabled and its packages are installed."""
    from judge.detectors import embeddings

    mode = config.semantic
    installed = embeddings.available()
    if mode == "off" or (mode == "auto" and not installed):
        # Without embeddings, literal request similarity can still raise suspicion.
        return [RepeatedRequestDetector()]
    if not installed:
        raise EmbeddingsUnavailable(f"semantic detection needs {embeddings.INSTALL_HINT}")
    # The model loads in the background; the tracker is ready at once.
    embeddings.preload()
    return [SemanticRepeatDetector(embeddings.cached_embedder())]


class DetectorSuite:
    """Runs every detector on each new message and on each completed call step."""

    def __init__(
        self,
        config: TrackerConfig,
        detectors: Sequence[Detector] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.detectors: list[Detector] = (
            list(detectors) if detectors is not None else default_detectors(config)
        )
        self._message_detectors = [d for d in self.detectors if getattr(d, "reads_messages", True)]
        self._clock = clock
        self._steps = StepBuilder()
        self._findings: dict[str, Finding] = {}
        self._last_step_at: float | None = None
        # Signatures of the calls refused since the history was last read, one entry per
        # refusal: their echoes in the history (each call with our refusal, or a
        # framework's, as its result) are not new steps. An echo comes in the next reading
        # or never (a hook that never records a denied call), so the list is emptied then.
        self._echoes: list[str] = []

    def reset(self) -> None:
        self._steps.reset()
        self._findings.clear()
        self._last_step_at = None
        self._echoes = []
        for detector in self.detectors:
            detector.reset()

    def _expire(self) -> None:
        """With ttl_seconds, calls older than the window are forgotten: a pause that long
        means the earlier calls are not part of a loop still running."""
        ttl = self.config.ttl_seconds
        now = self._clock()
        if ttl is not None and self._last_step_at is not None and now - self._last_step_at > ttl:
            for detector in self.detectors:
                detector.reset()
            self._findings.clear()
        self._last_step_at = now

    def _observe(self, event: Event, detectors: Sequence[Detector]) -> None:
        findings = self._findings
        for detector in detectors:
            found = detector.observe(event)
            if found is not None:
                findings[detector.name] = found
            elif findings:  # usually empty: no lookup to make
                findings.pop(detector.name, None)

    def feed(self, msg: Message) -> None:
        # Steps that waited for this message (after an empty result) come before it.
        self._observe_steps(self._steps.answer(msg))
        # Most detectors look at call steps only; sparing them every message halves the
        # calls per turn.
        if self._message_detectors:
            self._observe(msg, self._message_detectors)
        self._observe_steps(self._steps.feed(msg))

    def _observe_steps(self, steps: list[Step]) -> None:
        if steps:
            for step in steps:
                if step.signature in self._echoes:
                    # A refused attempt as the history records it: the detectors counted
                    # it when it was refused, and its "result" is the refusal, not
                    # something the tool said.
                    self._echoes.remove(step.signature)
                    continue
                self._expire()
                self._observe(step, self.detectors)

    def read(self) -> None:
        """The history has been read up to now: an echo of a refusal not in it never
        comes (a hook that does not record a denied call), so none is awaited any more,
        and a later run of the same call is read as the run it is. Steps still waiting
        for a message after an empty result are complete now."""
        self._observe_steps(self._steps.drain())
        self._echoes.clear()

    def preflight(self, call: ToolCall) -> list[Finding]:
        """What each detector that can tell (`Preflight`) says ``call`` would bring. With
        ``ttl_seconds``, nothing once the window has expired: the next step forgets it."""
        ttl = self.config.ttl_seconds
        last = self._last_step_at
        if ttl is not None and last is not None and self._clock() - last > ttl:
            return []
        found = (d.preflight(call) for d in self.detectors if isinstance(d, Preflight))
        return [f for f in found if f is not None]

    def refuse(self, call: ToolCall) -> None:
        """``call`` was refused on a loop finding (``check_call``): it counts as an attempt
        (`Refusal` detectors), and its echo, a step with its signature in the next reading
        of the history, is skipped."""
        self._echoes.append(call.signature)
        for detector in self.detectors:
            if isinstance(detector, Refusal):
                found = detector.refused(call)
                if found is not None:
                    self._findings[detector.name] = found
                else:
                    self._findings.pop(detector.name, None)

    def allowed(self, call: ToolCall) -> None:
        """``call`` was allowed (a person spoke since it was refused, or overrode the
        loop): when it runs, its result is the tool's own and must be read."""
        while call.signature in self._echoes:
            self._echoes.remove(call.signature)

    def findings(self) -> list[Finding]:
        """What each detector currently suspects (at most one finding per detector). Whether
        that is a loop is decided in one place: `judge.decision.decide`."""
        return list(self._findings.values())

    def snapshot(self) -> dict[str, Any]:
        """Everything the detectors remember, as JSON-able data (see judge._codec)."""
        pool = StepPool()
        detectors = {d.name: dump_attrs(d, _state_names(d), pool) for d in self.detectors}
        data = {
            "steps": dump_attrs(self._steps, StepBuilder.STATE),
            "findings": encode(self._findings),
            "last_step_at": self._last_step_at,
            "pool": pool.table,
            "detectors": detectors,
        }
        if self._echoes:  # only while refusals wait for their echoes
            data["refused"] = list(self._echoes)
        return data

    def restore(self, data: dict[str, Any]) -> None:
        try:
            load_attrs(self._steps, StepBuilder.STATE, data["steps"])
            self._findings = decode(data["findings"])
            self._last_step_at = data["last_step_at"]
            self._echoes = list(data.get("refused", ()))
            pool = StepPool(data["pool"])
            saved = data["detectors"]
        except KeyError as exc:
            raise StateError(f"detector state lacks {exc}") from exc
        for detector in self.detectors:
            if detector.name not in saved:
                raise StateError(
                    f"no saved state for detector {detector.name!r}; was the "
                    "tracker saved with another configuration?"
                )
            optional = frozenset(getattr(detector, "STATE_OPTIONAL", ()))
            load_attrs(detector, _state_names(detector), saved[detector.name], pool, optional)

    def detector(self, name: str) -> Detector | None:
        return next((d for d in self.detectors if d.name == name), None)


def _state_names(detector: Detector) -> tuple[str, ...]:
    names = getattr(detector, "STATE", None)
    if names is None:
        raise StateError(f"detector {detector.name!r} declares no STATE; it cannot be saved")
    return tuple(names)
