"""Tracker configuration, from keyword arguments or ``LOOP_JUDGE_*`` environment variables.

Environment is read when a `TrackerConfig` is built, never at import. Every bound check
names both the field and its variable, because the person fixing it is usually editing a
deployment file, not our code.

The environment is read here, not by pydantic-settings (issue 14): that package cost
125 ms of ``import judge``, its errors named the field instead of the variable, and it
turned invalid JSON into a vague ``SettingsError``. Here a bad value is a `ConfigError` of
one line per problem: the variable, the value as set, and what is allowed. A keyword
argument that breaks a rule is still pydantic's ``ValidationError`` (a bug in the caller's
code, named by field). An unknown ``LOOP_JUDGE_*`` variable (a typo: ``FASTMODEL`` for
``FAST_MODEL``) is logged once with the closest known name.
"""

from __future__ import annotations

import json
import logging
import os
import typing
from contextvars import ContextVar
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from judge.detectors.tool_classes import DEFAULT_EXPLORE_PATTERNS, DEFAULT_MODIFY_PATTERNS
from judge.errors import ConfigError
from judge.llm.breaker import DEFAULT_BREAKER_COOLDOWN_S, DEFAULT_BREAKER_FAILURES
from judge.response.ladder import (
    DEFAULT_LADDER,
    DEFAULT_OVERALL_EVERY,
    DEFAULT_RECOVERY_TURNS,
    DEFAULT_SILENCE_TURNS,
    ResponseMode,
)
from judge.verdict import Action

logger = logging.getLogger("judge.config")

ENV_PREFIX = "LOOP_JUDGE_"
# LOOP_JUDGE_* variables read by other parts of loop-judge (the sidecar's ServerSettings,
# the Claude Code hook): known, so never reported as typos of a TrackerConfig field.
# tests/test_config.py checks that every LOOP_JUDGE_ name in judge/ is known.
OTHER_VARIABLES = frozenset(
    ENV_PREFIX + name.upper()
    for name in (
        "server_token",
        "server_tokens",
        "server_tokens_file",
        "insecure_no_token",
        "allowed_hosts",
        "redis_url",
        "host",
        "port",
        "max_body_bytes",
        "session_ttl_s",
        "max_sessions",
        "max_store_bytes",
        "lock_lease_s",
        "lock_wait_s",
        "key_prefix",
        "turn_cpu_budget_s",
        "worker_threads",
        "request_timeout_s",
        "keep_alive_s",
        "max_connections",
        "hook_state_dir",
        "access_log",
    )
)
# A suggestion is offered only for names this alike (difflib's ratio, prefix left out):
# FASTMODEL -> FAST_MODEL scores 0.95, while unrelated names stay under 0.6.
_SUGGESTION_CUTOFF = 0.6
# Unknown variables already reported in this process: each is logged once, not per tracker.
_reported_unknown: set[str] = set()
# Set while a model_overrides block is being applied: the nested config must not check
# the blocks again (pydantic-settings merges the environment's blocks back in).
_APPLYING_BLOCK: ContextVar[bool] = ContextVar("loop_judge_applying_block", default=False)
# The recovery message is injected into the agent's context on every loop verdict; a
# paragraph or two (~1,500 chars, ~400 tokens) steers without crowding out the task.
DEFAULT_RECOVERY_MAX_CHARS = 1500

# Defaults from gemini-cli's loopDetectionService (the design notes we started from):
# LLM checks start at turn 30, interval 3 until the first answer, then 5..15 turns
# adapted from the confidence; 0.9 confidence means a loop; the judge sees 20 messages.
DEFAULT_CHECK_AFTER_TURNS = 30
DEFAULT_INITIAL_INTERVAL = 3
DEFAULT_MIN_INTERVAL = 5
DEFAULT_MAX_INTERVAL = 15
DEFAULT_CONFIDENCE_THRESHOLD = 0.9
DEFAULT_HISTORY_MESSAGES = 20
# A judge answer takes 1-10 s on hosted flash models; 30 s leaves room for a slow one
# without stalling the agent for minutes.
DEFAULT_TIMEOUT_S = 30.0
# Two retries after the first attempt: enough to ride out a 429 or a 503 blip.
DEFAULT_MAX_RETRIES = 2
# A server asking us to wait longer than this is treated as down for this check.
DEFAULT_MAX_RETRY_AFTER_S = 60.0
# Tokens a judge reply may use (max_tokens of each request). The answer is 2-4 sentences
# and one number; 600 leaves room for verbose models while bounding a runaway reply. A
# reasoning model thinks first and can spend this before it answers: raise it for one.
DEFAULT_MAX_REPLY_TOKENS = 600
# Bounds of max_reply_tokens: under 64 even the JSON envelope may not fit; 32,768 tokens
# (~130 kB) stays far below the 1 MiB a reply may have (judge/llm/_http.py).
MAX_REPLY_TOKENS_BOUNDS = (64, 32_768)
# Per-message clip in the judge's transcript: 20 messages x 2,000 chars keeps a check
# under ~12k tokens, cheap on a flash model.
DEFAULT_MAX_MESSAGE_CHARS = 2000
DEFAULT_MAX_TASK_CHARS = 2000
# Whole-prompt cap: the 2.6k-char system prompt, a clipped task and 20 messages at the
# per-message clip (~45k chars with tool-call arguments) fit; 60k chars is ~15k tokens,
# inside every current flash model's context and a bounded cost per check.
DEFAULT_MAX_PROMPT_CHARS = 60_000

# Detector thresholds per preset. "balanced" is the design notes' default: an exploration
# tool may repeat 10 times (the 11th identical call is a loop), a modifying tool 2, others
# 3; three identical failures in a row are a loop whatever the tool.
PRESETS: dict[str, dict[str, Any]] = {
    "conservative": {
        "explore_repeat_limit": 15,
        "modify_repeat_limit": 3,
        "other_repeat_limit": 5,
        "failure_repeat_limit": 3,
        "recur_min": 5,
        "cycle_repeats_period2": 4,
        "cycle_repeats": 3,
        "retry_min_variants": 5,
        "retry_similarity": 0.92,
        "result_cycle_min": 5,
        "text_similarity": 0.97,
        "text_min_repeats": 3,
    },
    "balanced": {
        "explore_repeat_limit": 10,
        "modify_repeat_limit": 2,
        "other_repeat_limit": 3,
        "failure_repeat_limit": 2,
        "cycle_repeats_period2": 3,
        "cycle_repeats": 2,
        "retry_min_variants": 4,
        "retry_similarity": 0.9,
        "result_cycle_min": 4,
        "text_similarity": 0.95,
        "text_min_repeats": 2,
    },
    "aggressive": {
        "explore_repeat_limit": 6,
        "modify_repeat_limit": 1,
        "other_repeat_limit": 2,
        "failure_repeat_limit": 2,
        "recur_min": 3,
        "cycle_repeats_period2": 2,
        "cycle_repeats": 2,
        "retry_min_variants": 3,
        "retry_similarity": 0.85,
        "result_cycle_min": 3,
        "text_similarity": 0.9,
        "text_min_repeats": 1,
    },
}
# Default weights of the weighted-sum rule: five detectors at the 0.5 sub-threshold cap
# sum to 0.5, under the 0.6 bar, so weak signals alone never make a loop.
DEFAULT_WEIGHTS: dict[str, float] = {
    "exact_repeat": 0.2,
    "cycle": 0.2,
    "similar_retry": 0.2,
    "result_cycle": 0.2,
    "text_repetition": 0.2,
    "repeated_request": 0.0,  # suspicion only: it brings the judge's check forward
    # re-reads flag on their own at their limits; below them they only ask the judge early
    "revisit": 0.0,
    "semantic_repeat": 0.2,
}

# (lower, upper) inclusive bounds per numeric field; None means unbounded.
_BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "check_after_turns": (0, None),
    "initial_interval": (1, None),
    "min_interval": (1, None),
    "max_interval": (1, None),
    "confidence_threshold": (0.0, 1.0),
    "history_messages": (1, None),
    "timeout_s": (0.001, None),
    "max_retries": (0, None),
    "max_retry_after_s": (0.0, None),
    "max_reply_tokens": MAX_REPLY_TOKENS_BOUNDS,
    "max_message_chars": (64, None),
    "max_task_chars": (64, None),
    # room for the system prompt (~2.6k chars), the template and a clipped task
    "max_prompt_chars": (4096, None),
    "max_judge_calls": (0, None),
    "max_judge_tokens": (0, None),
    # room for an empty state (~3 kB) and a few messages
    "max_state_bytes": (16_384, None),
    "breaker_failures": (1, None),
    "breaker_cooldown_s": (0.0, None),
    "explore_repeat_limit": (1, None),
    "modify_repeat_limit": (1, None),
    "other_repeat_limit": (1, None),
    "failure_repeat_limit": (1, None),
    "recur_min": (2, None),
    "recur_window": (2, None),
    "cycle_repeats_period2": (2, None),
    "cycle_repeats": (2, None),
    "retry_min_variants": (2, None),
    "retry_similarity": (0.0, 1.0),
    "retry_window": (2, None),
    "result_cycle_min": (2, None),
    "text_similarity": (0.0, 1.0),
    "text_min_repeats": (1, None),
    "ladder_overall_every": (1, None),
    "recovery_turns": (1, None),
    "override_silence_turns": (1, None),
    # room for the fence, the pattern's name and one constraint
    "recovery_max_chars": (200, None),
}


def env_name(field: str) -> str:
    """The environment variable that sets ``field``."""
    return ENV_PREFIX + field.upper()


def environment_values() -> dict[str, str]:
    """``{field: raw value}`` of the TrackerConfig fields set in the environment.

    Names match case-insensitively, as they did under pydantic-settings.
    """
    by_name = {env_name(field): field for field in TrackerConfig.model_fields}
    return {
        by_name[name.upper()]: value
        for name, value in os.environ.items()
        if name.upper() in by_name
    }


def known_variables() -> frozenset[str]:
    """Every LOOP_JUDGE_* variable loop-judge reads."""
    return frozenset(env_name(field) for field in TrackerConfig.model_fields) | OTHER_VARIABLES


def unknown_variables() -> list[str]:
    """The LOOP_JUDGE_* variables set in the environment that nothing in loop-judge reads."""
    known = known_variables()
    return sorted(
        name
        for name in os.environ
        if name.upper().startswith(ENV_PREFIX) and name.upper() not in known
    )


def closest_variable(name: str) -> str | None:
    """The known LOOP_JUDGE_* variable ``name`` is most likely a typo of, if any is close."""
    import difflib  # only when a variable is unknown: not on every process's path

    # Compared without the shared prefix, which would make every name look alike.
    suffixes = [known.removeprefix(ENV_PREFIX) for known in known_variables()]
    wanted = name.upper().removeprefix(ENV_PREFIX)
    matches = difflib.get_close_matches(wanted, suffixes, n=1, cutoff=_SUGGESTION_CUTOFF)
    return ENV_PREFIX + matches[0] if matches else None


def report_unknown_variables() -> None:
    """Log each unknown LOOP_JUDGE_* variable once per process, with a did-you-mean: a typo
    would otherwise be ignored without a word and the default used instead."""
    for name in unknown_variables():
        if name in _reported_unknown:
            continue
        _reported_unknown.add(name)
        suggestion = closest_variable(name)
        hint = f"; did you mean {suggestion}?" if suggestion else ""
        logger.warning("%s is set but loop-judge reads no such variable%s", name, hint)


def _is_json_field(field: str) -> bool:
    """Whether the field's type is a list or mapping (given as JSON in the environment)."""
    annotation = TrackerConfig.model_fields[field].annotation
    kinds = {typing.get_origin(arg) or arg for arg in typing.get_args(annotation)}
    kinds.add(typing.get_origin(annotation) or annotation)
    return bool(kinds & {dict, list, tuple, set, frozenset})


def _decode(field: str, value: str) -> Any:
    """A variable's text as the field's input: JSON for lists and mappings, else as is."""
    if not _is_json_field(field):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        default = TrackerConfig.model_fields[field].get_default(call_default_factory=True)
        shape = "object" if isinstance(default, dict) else "list"
        example = json.dumps(default or ({"name": 1} if shape == "object" else ["..."]))
        raise ConfigError(
            f"{env_name(field)}={value!r} is not valid JSON ({exc.msg} at character "
            f"{exc.pos}); it takes a JSON {shape}, e.g. {example}"
        ) from None


def _message(error: Any) -> str:
    return str(error["msg"]).removeprefix("Value error, ")


def _env_problem(error: Any, raw: dict[str, str]) -> str | None:
    """One line for a validation error caused by a variable: the variable, its value and
    the rule; None when the value came from a keyword argument."""
    loc = tuple(error["loc"])
    message = _message(error)
    if loc and loc[0] in raw:
        field = str(loc[0])
        variable = env_name(field)
        where = "".join(f"[{part!r}]" if isinstance(part, str) else f"[{part}]" for part in loc[1:])
        rule = message.replace(f" (set by {variable})", "")
        label = "" if rule.startswith(field) else f"{field}{where}: "
        return f"{variable}={raw[field]!r}: {label}{rule}"
    if not loc and any(env_name(field) in message for field in raw):
        return message  # a rule across fields (min/max interval) names the variables
    return None


def _keyword_problem(error: Any) -> str:
    loc = ".".join(map(str, error["loc"]))
    return f"{loc}: {_message(error)}" if loc else _message(error)


class TrackerConfig(BaseModel):
    """Everything a `LoopTracker` can be told, by keyword or by ``LOOP_JUDGE_<FIELD>``.

    Models default to None so that nothing is ever sent anywhere unless the user chose a
    model: with no fast model the tracker runs heuristics only. A keyword argument wins
    over its variable; list and mapping fields take JSON in the environment.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=True)

    def __init__(self, **data: Any) -> None:
        report_unknown_variables()
        raw = {field: value for field, value in environment_values().items() if field not in data}
        from_env = {field: _decode(field, value) for field, value in raw.items()}
        try:
            super().__init__(**{**from_env, **data})
        except ValidationError as exc:
            errors = exc.errors()
            problems = [_env_problem(error, raw) for error in errors]
            if any(problem is not None for problem in problems):
                lines = [
                    problem if problem is not None else _keyword_problem(error)
                    for problem, error in zip(problems, errors, strict=True)
                ]
                raise ConfigError("; ".join(lines)) from None
            raise

    fast_model: str | None = None
    confirm_model: str | None = None
    api_base: str | None = None
    api_key: SecretStr | None = None
    check_after_turns: int = DEFAULT_CHECK_AFTER_TURNS
    initial_interval: int = DEFAULT_INITIAL_INTERVAL
    min_interval: int = DEFAULT_MIN_INTERVAL
    max_interval: int = DEFAULT_MAX_INTERVAL
    confidence_threshold: float = DEFAULT_CONFIDENCE_THRESHOLD
    history_messages: int = DEFAULT_HISTORY_MESSAGES
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_retries: int = DEFAULT_MAX_RETRIES
    max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S
    max_reply_tokens: int = DEFAULT_MAX_REPLY_TOKENS
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS
    max_task_chars: int = DEFAULT_MAX_TASK_CHARS
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
    # Spending limits per tracker (None = unlimited); once reached, heuristics only.
    max_judge_calls: int | None = None
    max_judge_tokens: int | None = None
    # Bytes a saved tracker state is held under (None = judge.state.MAX_STATE_BYTES, 2 MiB).
    max_state_bytes: int | None = None
    # Failed checks in a row that open the circuit breaker, and its cool-down.
    breaker_failures: int = DEFAULT_BREAKER_FAILURES
    breaker_cooldown_s: float = DEFAULT_BREAKER_COOLDOWN_S
    count_scope: Literal["prompt", "session"] = "prompt"
    # Let a heuristic suspicion (score >= 0.5) bring the judge's check forward, even before
    # check_after_turns: loops in our recorded data start a median of 4 turns in.
    early_checks: bool = True
    # Redact API keys, tokens, private keys and passwords before a judge model sees them.
    redact_secrets: bool = True
    # Extra regular expressions for secrets of your own (a named group "secret" hides only
    # that part).
    redact_patterns: tuple[str, ...] = ()
    response_mode: ResponseMode = ResponseMode.GRADUATED
    ladder: tuple[Action, ...] = Field(default=DEFAULT_LADDER, min_length=1)
    # After a loop is found (judge/response/ladder.py): different loops climb the ladder at
    # 1/ladder_overall_every the speed of a relapse into the same one; recovery_turns turns
    # without a relapse count as an escape; a person's first override silences a loop for
    # override_silence_turns turns (the second for twice that, the third for the session).
    ladder_overall_every: int = DEFAULT_OVERALL_EVERY
    recovery_turns: int = DEFAULT_RECOVERY_TURNS
    override_silence_turns: int = DEFAULT_SILENCE_TURNS
    # Character budget of verdict.recovery_message, the fenced block for the model.
    recovery_max_chars: int = DEFAULT_RECOVERY_MAX_CHARS
    # Known-loop memory (judge/response/memory.py): a SQLite file of loop fingerprints, never raw
    # content; None = off. A remembered pattern brings the judge's check forward; with
    # memory_lowers_threshold it also flags one repeat earlier.
    memory_path: Path | None = None
    memory_lowers_threshold: bool = False
    # Glob of the agent's model name -> field overrides, picked by
    # LoopTracker(agent_model=...): some models loop more than others.
    model_overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)

    # -- heuristic detectors (defaults come from the preset unless set explicitly) -----
    preset: Literal["conservative", "balanced", "aggressive"] = "balanced"
    explore_repeat_limit: int = 10
    modify_repeat_limit: int = 2
    other_repeat_limit: int = 3
    failure_repeat_limit: int = 2
    # The same call and result this many times within recur_window calls, other calls in
    # between, is a loop (hand-made cases: order status re-checked between lookups).
    recur_min: int = 4
    recur_window: int = 12
    cycle_repeats_period2: int = 3
    cycle_repeats: int = 2
    retry_min_variants: int = 4
    retry_similarity: float = 0.9
    # "within the last 10 calls" (design notes)
    retry_window: int = 10
    result_cycle_min: int = 4
    text_similarity: float = 0.95
    text_min_repeats: int = 2
    explore_tools: tuple[str, ...] = DEFAULT_EXPLORE_PATTERNS
    modify_tools: tuple[str, ...] = DEFAULT_MODIFY_PATTERNS
    # exact tool name -> identical successful calls allowed in a row. 0 means unlimited,
    # as rate and retry limits usually read it: that tool's successful repeats are never
    # flagged, while identical failures in a row still meet failure_repeat_limit.
    # Negative values are rejected.
    tool_limits: dict[str, int] = Field(default_factory=dict)
    detector_weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    # Compare delegated requests by meaning with a small embedding model (its packages are
    # default dependencies, issue 15): "auto" uses it wherever they are installed, so in every
    # default install; "on" requires them (EmbeddingsUnavailable otherwise); "off" never
    # imports onnxruntime or numpy and falls back to literal request similarity.
    semantic: Literal["auto", "on", "off"] = "auto"
    # Forget calls older than this many seconds (None: keep the window whatever its age).
    ttl_seconds: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        preset = data.get("preset", "balanced")
        values = PRESETS.get(str(preset))
        if values is None:
            return data  # the Literal check reports the bad name
        return {**values, **data}

    @field_validator("fast_model", "confirm_model", "api_base", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        # An exported-but-empty variable (LOOP_JUDGE_FAST_MODEL=) means "not set".
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator(*_BOUNDS, mode="after")
    @classmethod
    def _in_bounds(cls, value: float | None, info: ValidationInfo) -> float | None:
        field = info.field_name or ""
        low, high = _BOUNDS[field]
        if value is None:  # optional limits: None means unlimited
            return value
        if value != value:  # NaN slips through every comparison
            raise ValueError(f"{field} must be a number, got NaN (set by {env_name(field)})")
        if (low is not None and value < low) or (high is not None and value > high):
            rule = f"at least {low}" if high is None else f"between {low} and {high}"
            raise ValueError(f"{field} must be {rule}, got {value} (set by {env_name(field)})")
        return value

    @field_validator("tool_limits", mode="after")
    @classmethod
    def _tool_limits_valid(cls, value: dict[str, int]) -> dict[str, int]:
        for tool, limit in value.items():
            if limit < 0:
                raise ValueError(
                    f"tool_limits[{tool!r}] must be at least 0 (0 = unlimited), got {limit} "
                    f"(set by {env_name('tool_limits')})"
                )
        return value

    @model_validator(mode="after")
    def _interval_order(self) -> TrackerConfig:
        if self.min_interval > self.max_interval:
            raise ValueError(
                f"min_interval ({env_name('min_interval')}) = {self.min_interval} exceeds "
                f"max_interval ({env_name('max_interval')}) = {self.max_interval}"
            )
        return self

    @model_validator(mode="after")
    def _model_overrides_valid(self) -> TrackerConfig:
        # Check every block now, so a typo fails at construction, not when a tracker for
        # that model happens to be built.
        if _APPLYING_BLOCK.get():
            return self
        for glob, block in self.model_overrides.items():
            self._apply_block(glob, block, {})
        return self

    def _apply_block(self, glob: str, block: dict[str, Any], data: dict[str, Any]) -> TrackerConfig:
        where = f"model_overrides[{glob!r}] (set by {env_name('model_overrides')})"
        unknown = sorted(k for k in block if k not in type(self).model_fields)
        if unknown or "model_overrides" in block:
            bad = ", ".join(unknown) or "model_overrides"
            raise ConfigError(f"{where}: not a TrackerConfig field: {bad}")
        data = {**data, **block}
        base = self.model_dump(exclude_unset=True)
        if "preset" in data:  # a block's preset replaces the base preset's thresholds
            # ... including those the new preset leaves at the field default (recur_min
            # is not in "balanced"): a value equal to the base preset's came from it.
            old = PRESETS.get(self.preset, {})
            new = PRESETS.get(data["preset"], {})
            base = {
                k: v for k, v in base.items() if k not in new and not (k in old and old[k] == v)
            }
        token = _APPLYING_BLOCK.set(True)
        try:
            resolved = type(self)(**{**base, **data})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'config'}: "
                + str(e["msg"]).removeprefix("Value error, ")
                for e in exc.errors()
            )
            raise ConfigError(f"{where}: {problems}") from None
        finally:
            _APPLYING_BLOCK.reset(token)
        return resolved.model_copy(update={"model_overrides": {}})

    def for_model(self, model: str | None) -> TrackerConfig:
        """This config with each `model_overrides` block whose glob matches ``model``
        applied in order (later blocks win), validated like any config.

        Raises `ConfigError` naming the block when an override is invalid. The result
        carries no blocks of its own, so applying it twice changes nothing.
        """
        if not model:
            return self
        resolved, data = self, cast(dict[str, Any], {})
        for glob, block in self.model_overrides.items():
            if fnmatchcase(model, glob):
                resolved = self._apply_block(glob, block, data)
                data = {**data, **block}
        return resolved

    @property
    def judge_enabled(self) -> bool:
        return self.fast_model is not None
