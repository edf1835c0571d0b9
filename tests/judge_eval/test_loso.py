"""Leave-one-family-out: each agent family is scored by a setting chosen without it, and pooled."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path

import pytest

from judge.config import TrackerConfig
from judge.errors import ConfigError
from judge_eval.cli import main
from judge_eval.dataset import Labels
from judge_eval.loso import (
    LOSO_GRID,
    build_loso_configs,
    choose_setting,
    family_of,
    leave_one_source_out,
    loso_settings,
)
from judge_eval.metrics import Metrics, compute_metrics
from judge_eval.replay import TrajectoryResult
from judge_eval.sweep import GridReplay, parse_axis

REPO = Path(__file__).resolve().parents[2]
# Assistant messages at 2, 4, ... 20; loops start at 4 and a flag lands on 8 (a TP).
ASSISTANTS = tuple(range(2, 22, 2))
ONSET = 4
FLAG = 8
DEFAULTS: dict[str, str] = {}
LOOSE = {"other_repeat_limit": "2"}


def _trajectory(
    tid: str, source: str, *, looping: bool, flagged: bool, kind: str = "exact_repeat"
) -> TrajectoryResult:
    labels = Labels(
        looping=looping,
        onset_message_index=ONSET if looping else None,
        kind=kind if looping else "none",
    )
    return TrajectoryResult(
        id=tid,
        labels=labels,
        origin=source,
        assistant_indices=ASSISTANTS,
        turns=len(ASSISTANTS),
        first_flag_index=FLAG if flagged else None,
    )


Spec = list[tuple[str, str, bool]]  # (id, source, looping)


def _replay(setting: dict[str, str], spec: Spec, flagged: Iterable[str]) -> GridReplay:
    hits = set(flagged)
    results = [
        _trajectory(tid, source, looping=looping, flagged=tid in hits)
        for tid, source, looping in spec
    ]
    return GridReplay(setting, results, 0.0)


def _counts(m: Metrics) -> tuple[int, int, int, int]:
    return (m.tp, m.fp, m.fn, m.tn)


def test_each_fold_chooses_without_its_own_source() -> None:
    """The loose setting is the in-sample best (it catches every loop in A and B) but
    raises four false alarms on C. Chosen without C, it is what C gets; chosen without A
    (or B), C's false alarms make the defaults win. Had a source leaked into its own
    fold, every fold would pick the loose setting and LOSO would equal in-sample."""
    spec: Spec = [(f"a{i}", "A", True) for i in range(4)]
    spec += [(f"b{i}", "B", True) for i in range(4)]
    spec += [("c0", "C", True), ("c1", "C", True)] + [(f"cp{i}", "C", False) for i in range(4)]
    defaults = _replay(DEFAULTS, spec, ["a0", "a1", "b0", "b1", "c0", "c1"])
    loose = _replay(LOOSE, spec, [tid for tid, _, _ in spec])

    result = leave_one_source_out([defaults, loose])

    assert result.best == 1  # in-sample: loose F1 20/24 beats the defaults' 12/16
    assert result.in_sample[1].f1 == pytest.approx(20 / 24)
    assert result.default.f1 == pytest.approx(12 / 16)
    assert [(f.source, f.chosen) for f in result.folds] == [("A", 0), ("B", 0), ("C", 1)]
    assert [f.setting for f in result.folds] == [DEFAULTS, DEFAULTS, LOOSE]
    assert _counts(result.folds[2].held_out) == (2, 4, 0, 0)
    # A fold's training score leaves its source out: without C, loose is perfect.
    assert result.folds[2].train.f1 == pytest.approx(1.0)
    # Pooled: A (2,0,2) + B (2,0,2) + C (2,4,0) -> F1 12/20, under both in-sample figures.
    assert _counts(result.pooled) == (6, 4, 4, 0)
    assert result.pooled.f1 == pytest.approx(12 / 20)
    figures = (result.pooled.f1, result.default.f1, result.in_sample[result.best].f1)
    assert figures == tuple(sorted(f or 0.0 for f in figures))


def test_a_source_without_loops_is_a_fold_and_its_false_alarms_count() -> None:
    spec: Spec = [("p0", "P", True), ("p1", "P", True), ("q0", "Q", False), ("q1", "Q", False)]
    defaults = _replay(DEFAULTS, spec, ["p0"])
    loose = _replay(LOOSE, spec, ["p0", "p1", "q0"])

    result = leave_one_source_out([defaults, loose])

    folds = {f.source: f for f in result.folds}
    assert set(folds) == {"P", "Q"}
    # Q is scored with the setting that is best on P: it flags q0.
    assert folds["Q"].setting == LOOSE and _counts(folds["Q"].held_out) == (0, 1, 0, 1)
    # P is chosen on Q alone, where no setting catches anything: silence beats a false
    # alarm (both F1 0, precision of no flags ranks as perfect).
    assert folds["P"].setting == DEFAULTS and _counts(folds["P"].held_out) == (1, 0, 1, 0)
    assert _counts(result.pooled) == (1, 1, 1, 1)
    kinds = result.by_kind()
    assert list(kinds) == ["exact_repeat", "none"]
    assert kinds["none"].fp == 1 and kinds["exact_repeat"].tp == 1


def test_variants_of_one_agent_family_are_held_out_together() -> None:
    """Two variants of one project ("fam A", "fam B") are one fold: the loose setting,
    perfect on "fam A" and ruinous on "fam B", may not be chosen on A and scored on B.
    Folded by source, "fam B" would get the loose setting (best on the other sources);
    folded by family, "fam" is chosen on "other" alone, where the defaults do as well."""
    spec: Spec = [(f"a{i}", "fam A", True) for i in range(4)]
    spec += [(f"b{i}", "fam B", False) for i in range(4)]
    spec += [("o0", "other", True), ("o1", "other", False)]
    defaults = _replay(DEFAULTS, spec, ["a0", "o0"])
    loose = _replay(LOOSE, spec, [tid for tid, _, _ in spec if tid != "o1"])

    result = leave_one_source_out([defaults, loose])

    assert [f.source for f in result.folds] == ["fam", "other"]
    folds = {f.source: f for f in result.folds}
    assert folds["fam"].setting == DEFAULTS
    assert _counts(folds["fam"].held_out) == (1, 0, 3, 4)
    assert [family_of(o) for o in ("smolagents CodeAgent", "ReAct (FEVER)", "handmade")] == [
        "smolagents",
        "ReAct",
        "handmade",
    ]


def test_ties_go_to_precision_then_to_the_defaults() -> None:
    spec: Spec = [(f"l{i}", "S", True) for i in range(4)] + [
        (f"n{i}", "S", False) for i in range(4)
    ]

    def metrics(flagged: list[str]) -> Metrics:
        return compute_metrics(_replay(DEFAULTS, spec, flagged).results)

    precise = metrics(["l0", "l1"])  # TP 2, FP 0, FN 2: F1 4/6, precision 1
    noisy = metrics(["l0", "l1", "l2", "n0", "n1"])  # TP 3, FP 2, FN 1: F1 6/9, precision 3/5
    assert precise.f1 is not None and precise.f1 == pytest.approx(noisy.f1)
    assert choose_setting([noisy, precise]) == 1
    assert choose_setting([precise, noisy]) == 0
    assert choose_setting([precise, metrics(["l2", "l3"])]) == 0  # a full tie: index 0 wins
    with pytest.raises(ValueError, match="no candidate"):
        choose_setting([])


def test_replays_of_different_trajectories_are_refused() -> None:
    spec: Spec = [("x", "S", True), ("y", "S", False)]
    other: Spec = [("y", "S", False), ("x", "S", True)]
    with pytest.raises(ValueError, match="other_repeat_limit=2"):
        leave_one_source_out([_replay(DEFAULTS, spec, []), _replay(LOOSE, other, [])])


def test_default_grid_is_small_valid_and_around_the_defaults() -> None:
    settings = loso_settings()
    assert settings[0] == {}
    configs = build_loso_configs({}, settings)
    # One full replay per setting: the grid must stay cheap.
    assert 8 <= len(configs) <= 16
    assert len(configs) == len(settings)  # no setting restates the defaults
    defaults = TrackerConfig()
    for axis in LOSO_GRID:
        default = getattr(defaults, axis.field)
        parsed = [type(default)(v) for v in axis.values]
        assert default not in parsed, axis.field
        assert min(parsed) < default < max(parsed), axis.field  # one step either side


def test_sweep_axes_replace_the_grid_and_restated_defaults_are_dropped() -> None:
    default = TrackerConfig().result_cycle_min
    axes = [parse_axis(f"result_cycle_min={default},{default + 1}")]
    settings = loso_settings(axes)
    assert settings == [
        {},
        {"result_cycle_min": str(default)},
        {"result_cycle_min": str(default + 1)},
    ]
    kept = build_loso_configs({"fast_model": None}, settings)
    assert [s for s, _ in kept] == [{}, {"result_cycle_min": str(default + 1)}]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("result_cycle_min=3,abc", "result_cycle_min"),
        ("retry_similarity=0.9,1.5", "retry_similarity"),
    ],
)
def test_bad_grid_values_name_the_field(spec: str, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        build_loso_configs({}, loso_settings([parse_axis(spec)]))


# -- the command -----------------------------------------------------------------------------

# Small files from three sources; ReAct (WebShop) has no loop here, so its fold is scored on
# false alarms alone.
SMALL_FILES = (
    "handmade/handmade-exact-repeat-http-401-3x.json",
    "handmade/handmade-negative-chat-qa.json",
    "recorded/react_fever/react-fever-1114.json",
    "recorded/react_fever/react-fever-3687.json",
    "recorded/react_webshop/react-webshop-001.json",
)


@pytest.fixture
def small_set(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for name in SMALL_FILES:
        shutil.copy(REPO / "evals" / "data" / name, data / Path(name).name)
    return data


def test_eval_loso_reports_folds_pooled_and_in_sample(
    small_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["eval", str(small_set), "--loso", "--no-chart", "--out", str(out)]
    assert main([*argv, "--sweep", "result_cycle_min=5"]) == 0
    report = json.loads((out / "report.json").read_text())
    loso = report["loso"]["heuristics"]
    by_origin = report["runs"]["heuristics"]["by_origin"]
    assert sorted(by_origin) == ["ReAct (FEVER)", "ReAct (WebShop)", "handmade"]
    # The two ReAct tasks are one agent family, so one fold.
    assert [f["source"] for f in loso["folds"]] == ["ReAct", "handmade"]
    assert [g["name"] for g in loso["grid"]] == ["defaults", "result_cycle_min=5"]
    # The usual report is the defaults' replay, and it is the grid's first row.
    assert loso["in_sample_default"] == report["runs"]["heuristics"]["metrics"]
    for key in ("tp", "fp", "fn", "tn"):
        assert loso["pooled"][key] == sum(f["held_out"][key] for f in loso["folds"]), key
        rows = loso["pooled_trajectories"]
        assert loso["pooled"][key] == sum(r["outcome"] == key.upper() for r in rows), key
    assert {r["id"] for r in loso["pooled_trajectories"]} == {
        t["id"] for t in report["runs"]["heuristics"]["trajectories"]
    }
    assert sum(f["held_out"]["trajectories"] for f in loso["folds"]) == len(SMALL_FILES)
    markdown = (out / "report.md").read_text()
    assert "### heuristics: LOSO folds" in markdown and "### heuristics: LOSO by kind" in markdown
    assert "Leave-one-family-out (LOSO)" in markdown
    printed = capsys.readouterr().out
    tail = printed[printed.index("summary") :]  # the LOSO figures close the output
    assert "LOSO, pooled" in tail and "in-sample, best of grid" in tail


def test_eval_loso_with_the_oracle_covers_both_schedules(small_set: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["eval", str(small_set), "--loso", "--judge", "oracle", "--no-chart", "--out", str(out)]
    assert main([*argv, "--sweep", "result_cycle_min=5"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert list(report["loso"]) == ["seed", "gated"] == list(report["runs"])


def test_eval_loso_refuses_what_it_cannot_replay(
    small_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["eval", str(small_set), "--loso", "--no-chart", "--out", str(tmp_path / "out")]
    cases = [
        (["--judge", "oracle", "--cassette", str(tmp_path / "c.jsonl")], "cassette"),
        (["--mode", "judge"], "--judge oracle"),
        (["--closed-loop"], "--closed-loop"),
        (["--sweep", "retry_similarity=1.5"], "retry_similarity"),
        (["--sweep", "no_such_threshold=1"], "not a TrackerConfig field"),
    ]
    for extra, message in cases:
        with pytest.raises(SystemExit) as exc:
            main([*base, *extra])
        assert exc.value.code == 2, extra
        assert message in capsys.readouterr().err, extra
    assert not (tmp_path / "out").exists()  # refused before anything ran
