from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

import judge.config as config_module
from judge import ConfigError, TrackerConfig
from judge.config import ResponseMode
from judge.verdict import Action


def test_defaults_send_nothing_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LOOP_JUDGE_FAST_MODEL", "LOOP_JUDGE_CONFIRM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    cfg = TrackerConfig()
    assert cfg.fast_model is None and cfg.confirm_model is None and not cfg.judge_enabled
    assert (cfg.check_after_turns, cfg.initial_interval, cfg.min_interval, cfg.max_interval) == (
        30,
        3,
        5,
        15,
    )
    assert (cfg.confidence_threshold, cfg.history_messages, cfg.max_retries) == (0.9, 20, 2)
    assert cfg.timeout_s == 30


def test_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_JUDGE_FAST_MODEL", "gemini/gemini-2.5-flash")
    monkeypatch.setenv("LOOP_JUDGE_CONFIRM_MODEL", "gemini/gemini-2.5-pro")
    monkeypatch.setenv("LOOP_JUDGE_CONFIDENCE_THRESHOLD", "0.8")
    monkeypatch.setenv("LOOP_JUDGE_API_KEY", "sk-secret")
    monkeypatch.setenv("LOOP_JUDGE_RESPONSE_MODE", "block")
    cfg = TrackerConfig()
    assert cfg.fast_model == "gemini/gemini-2.5-flash"
    assert cfg.confirm_model == "gemini/gemini-2.5-pro"
    assert cfg.confidence_threshold == 0.8
    assert cfg.response_mode is ResponseMode.BLOCK
    assert cfg.api_key is not None and "sk-secret" not in repr(cfg)


def test_keyword_arguments_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_JUDGE_MAX_INTERVAL", "40")
    assert TrackerConfig(max_interval=20).max_interval == 20


def test_blank_model_variable_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_JUDGE_FAST_MODEL", "  ")
    assert TrackerConfig().fast_model is None


@pytest.mark.parametrize(
    ("field", "value", "env"),
    [
        ("confidence_threshold", 1.5, "LOOP_JUDGE_CONFIDENCE_THRESHOLD"),
        ("confidence_threshold", -0.1, "LOOP_JUDGE_CONFIDENCE_THRESHOLD"),
        ("check_after_turns", -1, "LOOP_JUDGE_CHECK_AFTER_TURNS"),
        ("min_interval", 0, "LOOP_JUDGE_MIN_INTERVAL"),
        ("history_messages", 0, "LOOP_JUDGE_HISTORY_MESSAGES"),
        ("max_retries", -2, "LOOP_JUDGE_MAX_RETRIES"),
        ("timeout_s", 0, "LOOP_JUDGE_TIMEOUT_S"),
    ],
)
def test_invalid_values_name_field_and_variable(field: str, value: float, env: str) -> None:
    with pytest.raises(ValidationError) as info:
        TrackerConfig(**{field: value})
    text = str(info.value)
    assert field in text and env in text


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "LOOP_JUDGE_CONFIDENCE_THRESHOLD",
            "2",
            "LOOP_JUDGE_CONFIDENCE_THRESHOLD='2': confidence_threshold must be between 0.0 "
            "and 1.0, got 2.0",
        ),
        (
            "LOOP_JUDGE_MAX_RETRIES",
            "two",
            "LOOP_JUDGE_MAX_RETRIES='two': max_retries: Input should be a valid integer",
        ),
        (
            "LOOP_JUDGE_COUNT_SCOPE",
            "forever",
            "LOOP_JUDGE_COUNT_SCOPE='forever': count_scope: Input should be 'prompt' or 'session'",
        ),
        (
            "LOOP_JUDGE_LADDER",
            "[warn, stop]",
            "LOOP_JUDGE_LADDER='[warn, stop]' is not valid JSON (Expecting value at character "
            '1); it takes a JSON list, e.g. ["warn", "warn", "ask_user", "stop"]',
        ),
        (
            "LOOP_JUDGE_LADDER",
            '["warn", "jump"]',
            """LOOP_JUDGE_LADDER='["warn", "jump"]': ladder[1]: Input should be""",
        ),
        (
            "LOOP_JUDGE_TOOL_LIMITS",
            "get_weather=5",
            "LOOP_JUDGE_TOOL_LIMITS='get_weather=5' is not valid JSON",
        ),
    ],
)
def test_invalid_environment_value_is_one_line_naming_variable_value_and_rule(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    """The variable, the value as set and what is allowed, on one line: fixable at a glance."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as info:
        TrackerConfig()
    text = str(info.value)
    assert text.startswith(expected) and "\n" not in text


def test_a_keyword_argument_wins_over_a_broken_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_JUDGE_LADDER", "[not json")
    assert TrackerConfig(ladder=("stop",)).ladder == (Action.STOP,)


def test_json_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_JUDGE_LADDER", '["warn", "stop"]')
    monkeypatch.setenv("LOOP_JUDGE_TOOL_LIMITS", '{"get_weather": 5}')
    monkeypatch.setenv("loop_judge_max_retries", "4")  # names match case-insensitively
    config = TrackerConfig()
    assert config.ladder == (Action.WARN, Action.STOP)
    assert config.tool_limits == {"get_weather": 5} and config.max_retries == 4


def test_unknown_variable_is_reported_once_with_the_closest_name(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(config_module, "_reported_unknown", set())
    monkeypatch.setenv("LOOP_JUDGE_FASTMODEL", "gemini/gemini-2.5-flash")
    monkeypatch.setenv("LOOP_JUDGE_ZZZ", "1")
    with caplog.at_level(logging.WARNING, logger="judge.config"):
        assert TrackerConfig().fast_model is None  # the typo is not read...
        TrackerConfig()
    lines = [r.getMessage() for r in caplog.records]
    # ... but said, once per variable, with a did-you-mean where one is close.
    assert lines == [
        "LOOP_JUDGE_FASTMODEL is set but loop-judge reads no such variable; "
        "did you mean LOOP_JUDGE_FAST_MODEL?",
        "LOOP_JUDGE_ZZZ is set but loop-judge reads no such variable",
    ]


def test_every_loop_judge_variable_in_the_package_is_known() -> None:
    """A variable read anywhere in judge/ (the sidecar's settings, the hooks) must not be
    reported as unknown; a new one is a field of a settings class in judge.config, or
    one of its HOOK_VARIABLES."""
    package = Path(config_module.__file__).parent
    named = {
        match
        for path in package.rglob("*.py")
        for match in re.findall(r"LOOP_JUDGE_[A-Z][A-Z_]*[A-Z]", path.read_text("utf-8"))
    }
    known = config_module.known_variables()
    assert named - known == set()
    server = pytest.importorskip("judge.service.settings")
    assert {config_module.env_name(f) for f in server.ServerSettings.model_fields} <= known


def test_min_above_max_names_both() -> None:
    with pytest.raises(ValidationError) as info:
        TrackerConfig(min_interval=20, max_interval=10)
    text = str(info.value)
    for name in (
        "min_interval",
        "max_interval",
        "LOOP_JUDGE_MIN_INTERVAL",
        "LOOP_JUDGE_MAX_INTERVAL",
    ):
        assert name in text


def test_unknown_keyword_is_rejected() -> None:
    with pytest.raises(ValidationError, match="confidence_treshold"):
        TrackerConfig(confidence_treshold=0.5)  # type: ignore[call-arg]


# -- a model_overrides block that switches preset ----------------------------------------


def test_block_preset_replaces_every_value_of_the_base_preset() -> None:
    config = TrackerConfig(preset="conservative", model_overrides={"x*": {"preset": "balanced"}})
    assert config.for_model("x1").recur_min == TrackerConfig(preset="balanced").recur_min
    explicit = TrackerConfig(
        preset="conservative", recur_min=7, model_overrides={"x*": {"preset": "balanced"}}
    )
    assert explicit.for_model("x1").recur_min == 7


@pytest.mark.slow
def test_configuration_is_a_leaf_of_the_import_graph() -> None:
    """Any part may import the settings: they import no other part of loop-judge."""
    code = "import sys, judge.config; print(sorted(m for m in sys.modules if m[:5] == 'judge'))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == str(["judge", "judge.config", "judge.errors", "judge.verdict"])


def test_the_sidecar_reads_its_variables_like_the_tracker(monkeypatch: pytest.MonkeyPatch) -> None:
    """One reader: a bad sidecar variable is the same one-line ConfigError."""
    from judge.config import ServerVariables

    monkeypatch.setenv("LOOP_JUDGE_PORT", "eighty")
    with pytest.raises(ConfigError) as info:
        ServerVariables()
    assert str(info.value).startswith("LOOP_JUDGE_PORT='eighty': port: Input should be")
    monkeypatch.setenv("loop_judge_port", "8080")
    monkeypatch.delenv("LOOP_JUDGE_PORT")
    assert ServerVariables(host="::1").port == 8080
