"""The command line: `eval` writes its reports, `import` survives bad files, `demo` runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from judge_eval.cli import main

REPO = Path(__file__).resolve().parents[2]
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the repository root, where `eval` finds evals/data by default."""
    monkeypatch.chdir(REPO)
    for name in ("LOOP_JUDGE_FAST_MODEL", "LOOP_JUDGE_CONFIRM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return REPO


@pytest.mark.slow
def test_eval_smoke_writes_reports(in_repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["eval", "--subset", "smoke", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    run = report["runs"]["heuristics"]
    ids = [line.strip() for line in (in_repo / "evals/data/smoke.txt").read_text().splitlines()]
    wanted = [i for i in ids if i and not i.startswith("#")]
    assert [row["id"] for row in run["trajectories"]] == wanted
    assert run["metrics"]["trajectories"] == len(wanted)
    assert all(row["outcome"] in ("TP", "FP", "FN", "TN") for row in run["trajectories"])
    assert run["metrics"]["judge_calls"] == 0
    markdown = (out / "report.md").read_text()
    assert "### overall" in markdown and "misses and false positives" in markdown
    assert (out / "report.png").is_file() == HAS_MATPLOTLIB


@pytest.mark.slow
def test_eval_oracle_compares_schedules_and_cassette_replays(in_repo: Path, tmp_path: Path) -> None:
    cassette = tmp_path / "judge.jsonl"
    common = ["eval", "--subset", "smoke", "--no-chart", "--cassette", str(cassette)]
    assert main([*common, "--judge", "oracle", "--record", "--out", str(tmp_path / "a")]) == 0
    assert main([*common, "--out", str(tmp_path / "b")]) == 0
    recorded = json.loads((tmp_path / "a" / "report.json").read_text())["runs"]
    replayed = json.loads((tmp_path / "b" / "report.json").read_text())["runs"]
    assert list(recorded) == ["seed", "gated"] == list(replayed)
    for name in recorded:
        a, b = recorded[name]["metrics"], replayed[name]["metrics"]
        for key in ("tp", "fp", "fn", "tn", "judge_calls", "judge_errors", "cost_usd"):
            assert a[key] == b[key], (name, key)


def test_eval_usage_errors_exit_2(
    in_repo: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--sweep", "no_such_field=1,2", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "not a TrackerConfig field" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--mode", "judge", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "LOOP_JUDGE_FAST_MODEL" in capsys.readouterr().err
    monkeypatch.setattr("judge_eval.cli.eval_plan.bundled_data_dir", lambda: None)
    with pytest.raises(SystemExit) as exc:
        main(["eval"])
    assert exc.value.code == 2 and "--data DIR" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_without_paths_replays_the_bundled_set_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loop-judge eval` outside the repository finds the labelled set that ships
    with the package (here the checkout's evals/data; .ci/check-package.sh runs the wheel)."""
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--subset", "smoke", "--no-chart", "--out", "out"]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["settings"]["paths"] == [str(REPO / "evals" / "data")]
    assert report["runs"]["heuristics"]["metrics"]["trajectories"] >= 8
    printed = capsys.readouterr().out
    # The closing lines: a summary table, then where the report is.
    tail = printed[printed.index("summary") :]
    assert "loops caught" in tail and "false alarms" in tail
    assert f"report: {Path('out') / 'report.md'}" in tail
    assert "chart:  none, chart skipped (--no-chart)" in tail


def test_eval_data_selects_another_set(tmp_path: Path) -> None:
    data = _write_unlabelled(tmp_path / "mine")
    assert main(["eval", "--data", str(data), "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["settings"]["paths"] == [str(data)]
    assert report["runs"]["heuristics"]["unlabelled"]["trajectories"] == 1


@pytest.mark.slow
def test_eval_sweep_prints_a_row_per_setting(in_repo: Path, tmp_path: Path) -> None:
    code = main(
        ["eval", "--subset", "smoke", "--out", str(tmp_path), "--sweep", "early_checks=true,false"]
    )
    assert code == 0
    rows = json.loads((tmp_path / "sweep.json").read_text())
    assert [r["setting"] for r in rows] == [{"early_checks": "true"}, {"early_checks": "false"}]


def test_import_writes_good_files_and_fails_on_bad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    chat = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    (src / "a_good.json").write_text(json.dumps({"id": "good one", "messages": chat}))
    (src / "b_bad.json").write_text("{not json")
    (src / "c_good.jsonl").write_text("\n".join(json.dumps(m) for m in chat))
    out = tmp_path / "out"
    assert main(["import", str(src), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "b_bad.json" in printed and "invalid JSON" in printed
    written = sorted(p.name for p in out.iterdir())
    assert len(written) == 2 and "good_one.json" in written
    data = json.loads((out / "good_one.json").read_text())
    assert data["id"] == "good one" and data["messages"] == chat


def test_import_all_good_exits_0(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps([{"role": "user", "content": "q"}]))
    assert main(["import", str(path), "--out", str(tmp_path / "out")]) == 0


def test_demo_still_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    assert "replay of" in capsys.readouterr().out


def _write_unlabelled(folder: Path) -> Path:
    folder.mkdir()
    messages = [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "assistant", "content": "There is a.txt."},
    ]
    (folder / "run.json").write_text(json.dumps({"id": "u1", "messages": messages}))
    return folder


def test_eval_unlabelled_reports_counts_only(tmp_path: Path) -> None:
    data = _write_unlabelled(tmp_path / "data")
    assert main(["eval", str(data), "--out", str(tmp_path / "out")]) == 0
    run = json.loads((tmp_path / "out" / "report.json").read_text())["runs"]["heuristics"]
    assert run["unlabelled"]["trajectories"] == 1 and run["unlabelled"]["crashed"] == 0
    assert run["metrics"]["trajectories"] == 0


def test_eval_exits_1_when_a_trajectory_crashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Exploding:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("tracker bug")

    monkeypatch.setattr("judge_eval.replay.LoopTracker", Exploding)
    data = _write_unlabelled(tmp_path / "data")
    assert main(["eval", str(data), "--out", str(tmp_path / "out")]) == 1
    assert "tracker bug" in capsys.readouterr().out


@pytest.mark.slow  # seven interpreter starts
def test_help_works_with_docstrings_stripped() -> None:
    """``python -OO`` strips docstrings; the CLI must not build its help from them."""
    import subprocess
    import sys

    for args in ([], ["eval"], ["check"], ["import"], ["serve"], ["demo"], ["doctor"]):
        done = subprocess.run(
            [sys.executable, "-OO", "-m", "judge_eval", *args, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "usage: loop-judge" in done.stdout
