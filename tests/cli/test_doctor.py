"""`loop-judge doctor`: what the installation and the environment will do."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import judge.config as config_module
import judge.llm._litellm as litellm_client
from judge.cli import main
from judge.cli.doctor import EXTRAS
from tests.fault_server import FaultServer, completion

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test sees its own first warnings (unknown variables, missing keys)."""
    monkeypatch.setattr(config_module, "_reported_unknown", set())
    monkeypatch.setattr(litellm_client, "_keys_checked", set())
    monkeypatch.setenv("LOOP_JUDGE_SEMANTIC", "off")  # no model load: the doctor says so


def lines(out: str) -> dict[str, str]:
    """``{label: "ok|FIX value"}`` of the doctor's report."""
    found = {}
    for line in out.splitlines():
        if line[:3] in ("ok ", "FIX"):
            label, value = line[4:22].strip(), line[23:]
            found[label] = f"{line[:3].strip()} {value}"
    return found


def test_heuristics_only_needs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    report = lines(out)
    assert report["judge"].startswith("ok none: heuristics only")
    assert report["semantic model"] == "ok off (LOOP_JUDGE_SEMANTIC=off)"
    assert report["LOOP_JUDGE_*"] == "ok LOOP_JUDGE_SEMANTIC"
    assert "loop-judge 0.1.0" in report["versions"] and "litellm " in report["versions"]
    assert "eval" in report["extras installed"]  # the test venv has every extra
    assert out.rstrip().endswith("nothing to fix")


def test_missing_semantic_packages_are_marked_to_fix_under_the_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """They are default dependencies: without them "auto" quietly runs the
    weaker literal comparison, so a partial install is something to fix, and the empty
    `semantic` extra is listed neither as installed nor as missing."""
    from judge.detectors import embeddings

    monkeypatch.delenv("LOOP_JUDGE_SEMANTIC")
    monkeypatch.setattr(embeddings, "available", lambda: False)
    assert main(["doctor"]) == 1
    report = lines(capsys.readouterr().out)
    assert report["semantic model"].startswith("FIX packages missing: needs numpy, onnxruntime")
    assert "pip install -e ." in report["semantic model"]
    assert "semantic" not in report["extras installed"] + report["extras missing"]


def test_missing_key_and_typo_are_marked_to_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOOP_JUDGE_FAST_MODEL", "gemini/gemini-2.5-flash")
    monkeypatch.setenv("LOOP_JUDGE_CONFIRMMODEL", "gemini/gemini-2.5-pro")
    assert main(["doctor"]) == 1
    captured = capsys.readouterr()
    report = lines(captured.out)
    assert report["fast model"].startswith("FIX gemini/gemini-2.5-flash: no API key")
    assert "GEMINI_API_KEY" in report["fast model"]
    assert report["unknown variable"] == (
        "FIX LOOP_JUDGE_CONFIRMMODEL is set but nothing reads it; "
        "did you mean LOOP_JUDGE_CONFIRM_MODEL?"
    )
    assert report["dry call"].startswith("ok not made")
    assert "2 thing(s) to fix" in captured.out
    assert "LOOP_JUDGE_CONFIRMMODEL" not in captured.err  # said once, in the report


def test_invalid_setting_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOOP_JUDGE_LADDER", "[warn")
    assert main(["doctor"]) == 1
    report = lines(capsys.readouterr().out)
    assert report["settings"].startswith("FIX LOOP_JUDGE_LADDER='[warn' is not valid JSON")


@pytest.mark.slow
@pytest.mark.model_requests
def test_call_sends_one_small_request_per_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with FaultServer([completion('{"ok": true}')]) as server:
        monkeypatch.setenv("LOOP_JUDGE_FAST_MODEL", "openai/judge-fast")
        monkeypatch.setenv("LOOP_JUDGE_API_BASE", server.api_base)
        assert main(["doctor", "--call"]) == 0
        requests = list(server.requests)
    report = lines(capsys.readouterr().out)
    assert report["fast model"].startswith("ok openai/judge-fast at http://127.0.0.1:")
    assert report["dry call"].startswith("ok answered in") and "150 tokens" in report["dry call"]
    assert len(requests) == 1 and requests[0].model == "judge-fast"


@pytest.mark.model_requests
def test_a_failing_call_is_marked_to_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with FaultServer([completion(None, status=401)]) as server:
        monkeypatch.setenv("LOOP_JUDGE_FAST_MODEL", "openai/judge-fast")
        monkeypatch.setenv("LOOP_JUDGE_API_BASE", server.api_base)
        monkeypatch.setenv("LOOP_JUDGE_MAX_RETRIES", "0")
        assert main(["doctor", "--call"]) == 1
    report = lines(capsys.readouterr().out)
    assert report["dry call"].startswith("FIX JudgeHTTPError: HTTP 401")


def test_extras_match_pyproject() -> None:
    """Every extra users can install is one the doctor can report, and no other."""
    if sys.version_info < (3, 11):
        pytest.skip("tomllib is 3.11+")
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    declared = set(project["optional-dependencies"]) - {"integrations"}  # all of the others
    assert set(EXTRAS) == declared


def test_an_extra_under_a_missing_namespace_reads_as_missing() -> None:
    # find_spec("google.adk") raises instead of answering None when no "google" is installed.
    from judge.cli.doctor import _found

    assert not _found("no_such_namespace_here.adk")
    assert _found("json")
