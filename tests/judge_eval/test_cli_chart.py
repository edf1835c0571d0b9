"""The eval's report.png: every panel drawn has content, and a panel with nothing
to show (judge calls in a heuristics-only run) is left out."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest

from judge_eval.chart import CHART_DPI, CHART_SIZE_IN
from judge_eval.cli import main

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="the eval extra is not installed"
)


def png_width(path: Path) -> int:
    """Pixels across, from the PNG's IHDR chunk (bytes 16-20)."""
    width: int = struct.unpack(">I", path.read_bytes()[16:20])[0]
    return width


def panels_drawn(path: Path) -> int:
    return round(png_width(path) / (CHART_SIZE_IN[0] * CHART_DPI))


@pytest.mark.slow
def test_heuristics_only_draws_no_empty_judge_panel(tmp_path: Path) -> None:
    assert main(["eval", "--subset", "smoke", "--out", str(tmp_path)]) == 0
    # Detection delay and loops caught by kind; no judge-calls panel, as no judge ran.
    assert panels_drawn(tmp_path / "report.png") == 2
    assert "report.png" in (tmp_path / "report.md").read_text()


@pytest.mark.slow  # two replays of the smoke set with the simulated judge
def test_a_run_with_judge_calls_adds_their_panel(tmp_path: Path) -> None:
    assert main(["eval", "--subset", "smoke", "--judge", "oracle", "--out", str(tmp_path)]) == 0
    runs = json.loads((tmp_path / "report.json").read_text())["runs"]
    assert any(run["metrics"]["judge_calls"] for run in runs.values())
    assert panels_drawn(tmp_path / "report.png") == 3
