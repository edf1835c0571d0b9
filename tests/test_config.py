from __future__ import annotations

import pytest
from pydantic import ValidationError

from judge import TrackerConfig
from judge.response.ladder import ResponseMode


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


def test_invalid_environment_value_names_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_JUDGE_CONFIDENCE_THRESHOLD", "2")
    with pytest.raises(ValidationError, match="LOOP_JUDGE_CONFIDENCE_THRESHOLD"):
        TrackerConfig()


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
