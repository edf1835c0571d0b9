"""`loop-judge check FILE`: exit 0 (no loop), 10 (warn), 20 (stop or ask_user)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judge.cli import EXIT_USAGE
from judge_eval.cli import main
from judge_eval.cli.check import EXIT_NO_LOOP, EXIT_STOP, EXIT_WARN
from tests.fakes import Agent

RECORDED = Path(__file__).resolve().parents[2] / "evals/data/recorded/react_webshop"


@pytest.fixture(autouse=True)
def heuristics_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LOOP_JUDGE_FAST_MODEL", "LOOP_JUDGE_CONFIRM_MODEL"):
        monkeypatch.delenv(name, raising=False)


def write(tmp_path: Path, agent: Agent) -> str:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"id": "run", "messages": agent.history}))
    return str(path)


def calls(tmp_path: Path, repeats: int, then_reads: int = 0) -> str:
    agent = Agent()
    for i in range(3):
        agent.call("read_file", {"path": f"src/{i}.py"}, f"code {i}")
    for _ in range(repeats):
        agent.call("write_file", {"path": "a.txt"}, "File written.")
    for i in range(then_reads):
        agent.call("read_file", {"path": f"docs/{i}.md"}, f"doc {i}")
    return write(tmp_path, agent)


def test_no_loop_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert EXIT_NO_LOOP == 0
    assert main(["check", calls(tmp_path, 1)]) == 0
    assert "no loop" in capsys.readouterr().out


def test_a_warning_exits_10(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", calls(tmp_path, 3, then_reads=4)]) == EXIT_WARN == 10
    out = capsys.readouterr().out
    assert "write_file" in out and "repeated-call loop" in out  # summary and explanation


def test_a_stop_or_ask_user_exits_20(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", calls(tmp_path, 8)]) == EXIT_STOP == 20
    out = capsys.readouterr().out
    assert "ask_user" in out


def test_json_prints_the_deciding_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--json", calls(tmp_path, 8)]) == 20
    verdict: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert verdict["looping"] is True and verdict["action"] == "ask_user"
    assert verdict["explanation"] and verdict["recovery_message"].startswith("```loop-judge")
    assert main(["check", "--json", calls(tmp_path, 1)]) == 0
    assert json.loads(capsys.readouterr().out)["looping"] is False


def test_real_recorded_trajectory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(RECORDED / "react-webshop-031.json")]) == 20
    out = capsys.readouterr().out
    assert "click" in out and "loop at turn 4" in out


def test_unreadable_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["check", str(tmp_path / "missing.json")])
    assert exit_info.value.code == EXIT_USAGE


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("LOOP_JUDGE_MIN_INTERVAL", "0", "LOOP_JUDGE_MIN_INTERVAL='0': min_interval must be"),
        ("LOOP_JUDGE_LADDER", "[warn", "LOOP_JUDGE_LADDER='[warn' is not valid JSON"),
        ("LOOP_JUDGE_PRESET", "wild", "LOOP_JUDGE_PRESET='wild': preset: Input should be"),
    ],
)
def test_a_bad_variable_is_one_line_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    expected: str,
) -> None:
    """No traceback, and the variable, its value and the field all named."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exit_info:
        main(["check", calls(tmp_path, repeats=1)])
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"loop-judge check: error: {expected}")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_bad_override_keeps_the_field_name() -> None:
    from judge.cli.shared import UsageError, tracker_config

    with pytest.raises(UsageError) as info:
        tracker_config({"max_retries": "many", "history_messages": 0})
    text = str(info.value)
    assert "max_retries: Input should be a valid integer" in text
    assert "history_messages must be at least 1" in text
