"""load_dataset behaviour and the committed evaluation set in evals/data."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from judge_eval.dataset import (
    KINDS,
    ImportProblem,
    Labels,
    Trajectory,
    iter_trajectory_files,
    load_dataset,
)

REPO = Path(__file__).resolve().parents[2]
EVAL_DATA = REPO / "evals" / "data"
RECORDED = REPO.parent / "shared" / "recorded"


def _good(path: Path, ident: str) -> None:
    path.write_text(json.dumps({"id": ident, "messages": [{"role": "user", "content": "hi"}]}))


def test_load_dataset_keeps_going_past_bad_files(tmp_path: Path) -> None:
    _good(tmp_path / "a.json", "a")
    (tmp_path / "sub").mkdir()
    _good(tmp_path / "sub" / "c.json", "c")
    (tmp_path / "b.json").write_text("{not json")
    (tmp_path / "d.json").write_text(json.dumps({"id": "d"}))
    (tmp_path / "notes.txt").write_text("ignored")
    trajectories, problems = load_dataset(tmp_path)
    assert sorted(t.id for t in trajectories) == ["a", "c"]
    assert [Path(p.path).name for p in problems] == ["b.json", "d.json"]
    assert "invalid JSON" in problems[0].reason
    assert "'messages' missing" in problems[1].reason
    assert str(problems[1]).startswith(str(tmp_path / "d.json"))


def test_load_dataset_missing_path(tmp_path: Path) -> None:
    trajectories, problems = load_dataset([tmp_path / "nope.json"])
    assert trajectories == []
    assert problems == [ImportProblem(str(tmp_path / "nope.json"), "no such file or directory")]


def test_labels_model_rules() -> None:
    Labels(looping=False, kind="none")
    with pytest.raises(ValueError):
        Labels(looping=True, onset_message_index=None, kind="alternation")
    traj = Trajectory(id="x", messages=[{"role": "assistant", "content": ""}])
    assert traj.to_json_dict() == {"id": "x", "messages": traj.messages, "source": {}, "meta": {}}


def _eval_set() -> list[Trajectory]:
    trajectories, problems = load_dataset(EVAL_DATA)
    assert problems == []
    return trajectories


def test_eval_set_loads_and_is_labelled() -> None:
    trajectories = _eval_set()
    assert len(trajectories) >= 130
    assert all(t.labels is not None for t in trajectories)
    assert sum(t.labels.looping for t in trajectories if t.labels) >= 50
    assert len({t.id for t in trajectories}) == len(trajectories)
    kinds = Counter(t.labels.kind for t in trajectories if t.labels)
    assert set(kinds) == set(KINDS)
    for t in trajectories:
        assert t.source.get("license"), t.id


def test_handmade_set_shape() -> None:
    handmade, problems = load_dataset(EVAL_DATA / "handmade")
    assert problems == []
    looping = [t for t in handmade if t.labels and t.labels.looping]
    assert len(handmade) >= 50 and len(looping) >= 25 and len(handmade) - len(looping) >= 25
    assert {t.labels.kind for t in looping if t.labels} == set(KINDS) - {"none"}
    for t in handmade:
        assert t.source["path"] == "evals/make_handmade.py"
        call_ids = [c["id"] for m in t.messages for c in m.get("tool_calls", [])]
        assert len(call_ids) == len(set(call_ids)), t.id


def test_smoke_list_ids_exist() -> None:
    ids = {t.id for t in _eval_set()}
    smoke = [
        line.strip()
        for line in (EVAL_DATA / "smoke.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert 8 <= len(smoke) <= 20
    assert set(smoke) <= ids


def test_recorded_copies_match_shared_folder() -> None:
    """evals/data/recorded holds exactly the labelled runs, messages unchanged."""
    if not RECORDED.is_dir():
        pytest.skip("shared/recorded not present")
    labels = [json.loads(line) for line in (RECORDED / "labels-dev.jsonl").read_text().splitlines()]
    copies, problems = load_dataset(EVAL_DATA / "recorded")
    assert problems == []
    by_id = {t.id: t for t in copies}
    assert set(by_id) == {label["id"] for label in labels}
    for label in labels:
        original = json.loads((RECORDED / label["path"]).read_text())
        copy = by_id[label["id"]]
        assert copy.messages == original["messages"]
        assert copy.source == original["source"]
        assert copy.labels is not None and copy.labels.kind == label["kind"]


def test_all_shared_recorded_files_load() -> None:
    if not RECORDED.is_dir():
        pytest.skip("shared/recorded not present")
    files = sorted(p for p in RECORDED.rglob("*.json"))
    trajectories, problems = load_dataset(files)
    assert problems == []
    assert len(trajectories) == 200


# -- one directory walker for trajectory files -------------------------------------------


def test_trajectory_files_are_walked_sorted(tmp_path: Any) -> None:
    (tmp_path / "b").mkdir()
    for name in ("b/2.json", "1.jsonl", "x.txt", "b/0.traj"):
        (tmp_path / name).write_text("{}")
    found = [p.relative_to(tmp_path).as_posix() for p in iter_trajectory_files([tmp_path])]
    assert found == ["1.jsonl", "b/0.traj", "b/2.json"]
