"""Every ``LOOP_JUDGE_*`` variable loop-judge reads, and the one reader that reads them.

`TrackerConfig` (the tracker) and `ServerVariables` (the sidecar; `judge.service.settings`
adds its checks) are `EnvSettings`: keyword arguments, else ``LOOP_JUDGE_<FIELD>``, read
when one is built, never at import. The Claude Code hook's client reads its few
hook variables itself because it must start without pydantic
(`HOOK_VARIABLES` names them). This module imports nothing from loop-judge but its errors
and the verdict's `Action`, so any part may import it.

The reader is ours, not pydantic-settings': importing that package costs more than this
whole module, on every process that builds a tracker; its errors name the field instead of
the variable, and it turns invalid JSON into a vague ``SettingsError``. Here a bad value is a
`ConfigError` of one line per problem: the variable, the value as set, and what is
allowed. A keyword argument that breaks a rule is still pydantic's ``ValidationError`` (a
bug in the caller's code, named by field). An unknown ``LOOP_JUDGE_*`` variable (a typo:
``FASTMODEL`` for ``FAST_MODEL``) is logged once with the closest known name.
"""

from __future__ import annotations

import json
import logging
import os
import typing
from contextvars import ContextVar
from enum import Enum
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

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

from judge.errors import ConfigError
from judge.verdict import Action

logger = logging.getLogger("judge.config")

ENV_PREFIX = "LOOP_JUDGE_"
# Read by the Claude Code hook's client (judge.hooks.client), which reads os.environ itself
# because it starts without pydantic, before any tracker exists; known here so they are
# never reported as typos. tests/tracker/test_config.py checks every LOOP_JUDGE_ name in judge/.
HOOK_VARIABLES = frozenset(
    ENV_PREFIX + name
    for name in ("HOOK_STATE_DIR", "HOOK_SOCKET_DIR", "HOOK_IDLE_S", "HOOK_TRACE", "HOOK_DAEMON")
)
# A suggestion is offered only for names this alike (difflib's ratio, prefix left out):
# FASTMODEL -> FAST_MODEL scores 0.95, while unrelated names stay under 0.6.
_SUGGESTION_CUTOFF = 0.6
# Unknown variables already reported in this process: each is logged once, not per tracker.
_reported_unknown: set[str] = set()
# Set while a model_overrides block is being applied: the nested config must not check
# the blocks again (building it reads LOOP_JUDGE_MODEL_OVERRIDES again).
_APPLYING_BLOCK: ContextVar[bool] = ContextVar("loop_judge_applying_block", default=False)
# The recovery message is injected into the agent's context on every loop verdict; a
# paragraph or two (~1,500 chars, ~400 tokens) steers without crowding out the task.
DEFAULT_RECOVERY_MAX_CHARS = 1500

# Defaults from gemini-cli's loopDetectionService, a tested starting point:
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

# Defaults of settings whose code lives elsewhere: kept here so that this module needs
# nothing from those parts (they import their defaults from here).
# Three failed checks in a row: one failure is a blip that the next scheduled check
# (min_interval turns later) rides out, two may still be a short 5xx burst; a third means
# the endpoint is down or misconfigured, as in tenacity's and most client breakers' defaults.
DEFAULT_BREAKER_FAILURES = 3
# Five minutes: longer than a typical provider 5xx/429 episode (seconds to a few minutes),
# short enough that a recovered judge is back within one or two agent tasks.
DEFAULT_BREAKER_COOLDOWN_S = 300.0


class ResponseMode(str, Enum):
    """How hard the tracker pushes back when it finds a loop."""

    GRADUATED = "graduated"  # follow the ladder: warn, warn harder, ask the user, stop
    WARN = "warn"  # never stop (the message still grows stronger)
    BLOCK = "block"  # stop at the first detection
    CHANCE_THEN_BLOCK = "chance_then_block"  # warn once per loop, then stop


# Design notes: "1st detection warn, 2nd stronger constraints, 3rd ask the user, beyond
# stop". One chance to read the message, one more after a relapse, then a person decides.
DEFAULT_LADDER: tuple[Action, ...] = (Action.WARN, Action.WARN, Action.ASK_USER, Action.STOP)
# Different loops climb the ladder at half the speed of a relapse into the same one: an
# agent that hits three unrelated dead ends is less clearly stuck than one that repeats one.
DEFAULT_OVERALL_EVERY = 2
# Turns without a detection of a pattern after its warning that count as an escape: about
# one read-edit-test round of a coding agent (our recorded loops relapse within 1-3 turns).
DEFAULT_RECOVERY_TURNS = 5
# A person's first "keep going" silences a pattern this many turns; each further one
# doubles it, and the third disables the pattern for the session: a person who keeps
# saying so has judged the pattern, and each answer should buy more quiet than the last.
DEFAULT_SILENCE_TURNS = 10

# Read-only tools: repeating them is cheap and often legitimate (re-listing after a change).
DEFAULT_EXPLORE_PATTERNS: tuple[str, ...] = (
    "ls",
    "list*",
    "glob",
    "grep",
    "rg",
    "read*",
    "view*",
    "search*",
    "find*",
    "cat",
    "head",
    "tail",
    "stat",
    "tree",
    "lookup",
    "look",
    "query",
    "get*",
    "fetch*",
    "browse*",
    "scroll*",
    "open",
    "show*",
    "describe*",
    "inspect*",
    "check*",
    "status",
    "navigate*",
)
# Tools with side effects: the same write or command twice in a row is already suspicious.
DEFAULT_MODIFY_PATTERNS: tuple[str, ...] = (
    "write*",
    "edit*",
    "create*",
    "delete*",
    "remove*",
    "rm",
    "mv",
    "apply*",
    "patch*",
    "bash",
    "sh",
    "shell",
    "exec*",
    "run*",
    "execute*",
    "cmd",
    "terminal",
    "python",
    "ipython",
    "str_replace*",
    "replace*",
    "insert*",
    "update*",
    "move*",
    "rename*",
    "send*",
    "post*",
    "put",
    "book*",
    "cancel*",
    "submit*",
    "commit*",
    "push*",
    "install*",
)

# Detector thresholds per preset. "balanced" is the default: an exploration
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


def environment_values(settings: type[EnvSettings] | None = None) -> dict[str, str]:
    """``{field: raw value}`` of the fields of ``settings`` (default `TrackerConfig`) set in
    the environment. Names match case-insensitively."""
    fields = (settings or TrackerConfig).model_fields
    by_name = {env_name(field): field for field in fields}
    return {
        by_name[name.upper()]: value
        for name, value in os.environ.items()
        if name.upper() in by_name
    }


def known_variables() -> frozenset[str]:
    """Every LOOP_JUDGE_* variable loop-judge reads."""
    fields = {*TrackerConfig.model_fields, *ServerVariables.model_fields}
    return frozenset(env_name(field) for field in fields) | HOOK_VARIABLES


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


def _is_json_field(settings: type[EnvSettings], field: str) -> bool:
    """Whether the field's type is a list or mapping (given as JSON in the environment)."""
    annotation = settings.model_fields[field].annotation
    kinds = {typing.get_origin(arg) or arg for arg in typing.get_args(annotation)}
    kinds.add(typing.get_origin(annotation) or annotation)
    return bool(kinds & {dict, list, tuple, set, frozenset})


def _decode(settings: type[EnvSettings], field: str, value: str) -> Any:
    """A variable's text as the field's input: JSON for lists and mappings, else as is."""
    if not _is_json_field(settings, field):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        default = settings.model_fields[field].get_default(call_default_factory=True)
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


class EnvSettings(BaseModel):
    """Settings from keyword arguments, else ``LOOP_JUDGE_<FIELD>`` variables.

    A keyword argument wins over its variable; list and mapping fields take JSON in the
    environment. A variable's bad value is a `ConfigError` naming the variable, its value
    and the rule; a keyword's is pydantic's ``ValidationError``.
    """

    model_config = ConfigDict(extra="forbid", validate_default=True, frozen=True)

    def __init__(self, **data: Any) -> None:
        report_unknown_variables()
        settings = type(self)
        raw = {
            field: value
            for field, value in environment_values(settings).items()
            if field not in data
        }
        from_env = {field: _decode(settings, field, value) for field, value in raw.items()}
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


class TrackerConfig(EnvSettings):
    """Everything a `LoopTracker` can be told, by keyword or by ``LOOP_JUDGE_<FIELD>``.

    Models default to None so that nothing is ever sent anywhere unless the user chose a
    model: with no fast model the tracker runs heuristics only. A keyword argument wins
    over its variable; list and mapping fields take JSON in the environment.
    """

    if TYPE_CHECKING:
        # What pydantic accepts, as at run time (a str for a SecretStr field, a list for a
        # tuple): the signature mypy would synthesize from the fields rejects those.
        def __init__(self, **data: Any) -> None: ...

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
    # Calls searched for near-identical variants of the newest: retries of one failing call
    # come close together, and a short window keeps unrelated look-alikes apart.
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
    # default dependencies): "auto" uses it wherever they are installed, so in every
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


# -- the sidecar ------------------------------------------------------------------------

DEFAULT_HOST = "127.0.0.1"
# Unassigned by IANA and unused by the usual sidecars (Envoy 15000-15090, Dapr 3500/50001).
DEFAULT_PORT = 8787
# A 200-turn coding session whose tool results average 20 kB is ~4 MB of JSON; 8 MiB fits
# that twice over while still bounding what one request can make a replica hold.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
# A session idle this long is forgotten: agents pause for minutes (a human reviewing, a slow
# build), rarely for hours; matches the default idle timeout of most agent runtimes' sessions.
DEFAULT_SESSION_TTL_S = 3600.0
# In-memory LRU bound (and the Redis store's cache of live trackers): a saved state is 26 kB
# at the median turn of the labelled runs, 110 kB at p95, 125 kB at most, and bounded by
# max_state_bytes (2 MiB) whatever the input (evals/bench_state.py), so 10,000 typical
# sessions stay around 1 GB on a replica.
DEFAULT_MAX_SESSIONS = 10_000
# In-memory byte cap: the sessions' state as a save would write it (JSON), plus the
# history's last entry kept for the append API, which is as large as the agent made it (a
# 7.9 MB tool result pins 7.9 MB). evals/bench_sidecar.py prints both figures per session:
# a 30-turn session counts 30 kB and takes 87 kB of Python memory, one whose last result is
# 7.9 MB counts 8.0 MB and takes 8.1 MB; so with DEFAULT_MAX_SESSIONS the sessions of a
# replica stay near 1 GB in the usual case, and about this plus that when they are huge.
DEFAULT_MAX_STORE_BYTES = 1024 * 1024 * 1024
# Redis lock lease: renewed every third of it while a turn runs, so it only matters when a
# replica dies holding it: the session is usable again at most this long after the crash.
# Turns run off the event loop, so the renewal (every 1.7 s) is late only if the loop
# stalls that long; then the fenced save refuses the turn (409) rather than corrupt it.
DEFAULT_LOCK_LEASE_S = 5.0
# How long a request waits for another request on the same session to finish. A turn with
# a judge check during an outage takes at most (timeout_s + 10 s retry budget + 1 s grace)
# x 2 stages = 82 s at the tracker defaults; waiting 90 s covers that, and longer means
# something is wrong and the caller should hear about it (503) rather than hang.
DEFAULT_LOCK_WAIT_S = 90.0
DEFAULT_KEY_PREFIX = "loop-judge:"
# CPU seconds one turn (or preflight) may spend in the detectors before it is stopped and
# answered 413. A heuristics-only turn costs ~1 ms; re-reading a whole 8 MiB history (the
# body cap) after a rewrite costs ~1-2 s on one core of a 2-core CI machine; 10 s is a
# pathological input, not a slow machine.
DEFAULT_TURN_CPU_BUDGET_S = 10.0
# Threads that run turns off the event loop (40: the size of anyio's default thread
# limiter; the sidecar gives its turns a limiter of their own of this size). A
# turn holds its thread while its judge check waits for the model, so this also bounds
# how many judge checks run at once; CPU work is bounded by the GIL regardless.
DEFAULT_WORKER_THREADS = 40
# A request's head and body must have arrived this long after its first byte (slowloris).
# 8 MiB (the body cap) in 30 s needs 2.3 Mbit/s: any client on the same host or network.
DEFAULT_REQUEST_TIMEOUT_S = 30.0
# Idle keep-alive connections are closed after this (uvicorn's own default).
DEFAULT_KEEP_ALIVE_S = 5.0
# Open connections beyond this are answered 503 (uvicorn's limit_concurrency): below the
# usual 1,024 open-files limit of a process, so a connection flood cannot exhaust it.
DEFAULT_MAX_CONNECTIONS = 900


class ServerVariables(EnvSettings):
    """The sidecar's settings as read: where to bind, who may call, where session state
    lives, how much of it to keep, and how much one request may cost.
    `judge.service.settings.ServerSettings` adds the checks a server runs before it binds."""

    if TYPE_CHECKING:
        # What pydantic accepts, as at run time (a str for a SecretStr field, a list for a
        # tuple): the signature mypy would synthesize from the fields rejects those.
        def __init__(self, **data: Any) -> None: ...

    server_token: SecretStr | None = Field(
        default=None, description="one bearer token; its principal is 'default'"
    )
    server_tokens: SecretStr | None = Field(
        default=None, description="several principals: 'name=token,name=token'"
    )
    server_tokens_file: Path | None = Field(
        default=None, description="a file of 'name=token' lines (# comments)"
    )
    insecure_no_token: bool = Field(
        default=False, description="serve without tokens (loopback binds only)"
    )
    allowed_hosts: str | None = Field(
        default=None,
        description="comma list of Host header names accepted besides the loopback "
        "names and the bind address; '*' accepts any",
    )
    redis_url: str | None = None
    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024)
    session_ttl_s: float = Field(default=DEFAULT_SESSION_TTL_S, gt=0)
    max_sessions: int = Field(default=DEFAULT_MAX_SESSIONS, ge=1)
    max_store_bytes: int = Field(
        default=DEFAULT_MAX_STORE_BYTES,
        ge=1,
        description="in-memory store: bytes of sessions held before new ones are refused (507)",
    )
    lock_lease_s: float = Field(default=DEFAULT_LOCK_LEASE_S, gt=0)
    lock_wait_s: float = Field(default=DEFAULT_LOCK_WAIT_S, ge=0)
    key_prefix: str = DEFAULT_KEY_PREFIX
    turn_cpu_budget_s: float = Field(default=DEFAULT_TURN_CPU_BUDGET_S, gt=0)
    worker_threads: int = Field(default=DEFAULT_WORKER_THREADS, ge=1)
    request_timeout_s: float = Field(default=DEFAULT_REQUEST_TIMEOUT_S, gt=0)
    keep_alive_s: float = Field(default=DEFAULT_KEEP_ALIVE_S, gt=0)
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=1)
    access_log: bool = Field(
        default=True,
        description="one INFO line per request (uvicorn's access log); off, a busy "
        "replica serves 10-15% more requests per second",
    )

    @field_validator(
        "server_token",
        "server_tokens",
        "server_tokens_file",
        "redis_url",
        "allowed_hosts",
        mode="before",
    )
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        # An exported-but-empty variable means "not set", as in TrackerConfig.
        if isinstance(value, str) and not value.strip():
            return None
        return value
