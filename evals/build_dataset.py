"""Copy labelled runs into evals/data/, adding their labels.

Reproducible and auditable: for each label line the matching run file is copied with
``id``, ``source``, ``meta`` and ``messages`` unchanged and the label (minus its
``id``/``path`` duplicates) added as ``labels``. Only labelled runs are copied; unlabelled
held-out runs stay out of the evaluation set on purpose. Two sets are built:

- ``recorded``: ``shared/recorded`` with its ``labels-dev.jsonl`` -> ``evals/data/recorded``.
- ``unseen_dev``: the runs of ``evals/unseen_dev`` (agent families no detector was tuned
  on, converted by the scripts in that folder) with the labels in
  ``evals/labels/unseen_dev_*.jsonl``, written into the same files.
- ``coding_dev``: ``shared/coding_runs_dev`` with our own labels in
  ``evals/labels/coding_dev_*.jsonl`` -> ``evals/coding_dev`` (labelled for this project
  under ``shared/recorded/LABELING.md``; outside ``evals/data``, so the default eval is
  unchanged). ``shared/coding_runs`` is never copied: it is for measuring only.

Usage (from the repo root)::

    .venv/bin/python evals/build_dataset.py [recorded|coding_dev|unseen_dev] [--source PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
LABEL_KEYS = ("looping", "onset_message_index", "kind", "confidence", "note")
# name -> (default source folder, label files, output folder)
SETS: dict[str, tuple[Path, list[Path], Path]] = {
    "recorded": (
        SHARED / "recorded",
        [SHARED / "recorded" / "labels-dev.jsonl"],
        REPO_ROOT / "evals" / "data" / "recorded",
    ),
    "coding_dev": (
        SHARED / "coding_runs_dev",
        sorted((REPO_ROOT / "evals" / "labels").glob("coding_dev_*.jsonl")),
        REPO_ROOT / "evals" / "coding_dev",
    ),
    # Converted here from public repositories (evals/unseen_dev/README.md) with "labels": null,
    # then labelled in place: the folder is its own source.
    "unseen_dev": (
        REPO_ROOT / "evals" / "unseen_dev",
        sorted((REPO_ROOT / "evals" / "labels").glob("unseen_dev_*.jsonl")),
        REPO_ROOT / "evals" / "unseen_dev",
    ),
}
DEFAULT_SOURCE, _RECORDED_LABELS, OUTPUT = SETS["recorded"]


def build(source: Path, output: Path = OUTPUT, label_files: list[Path] | None = None) -> list[Path]:
    """Write one labelled JSON file per label line; return the written paths."""
    files = label_files if label_files is not None else [source / "labels-dev.jsonl"]
    labels = [
        json.loads(line)
        for labels_file in files
        for line in labels_file.read_text().splitlines()
        if line.strip()
    ]
    in_place = output.resolve() == source.resolve()
    runs = {label["path"]: json.loads((source / label["path"]).read_text()) for label in labels}
    if output.exists() and not in_place:
        shutil.rmtree(output)
    written: list[Path] = []
    for label in labels:
        run: dict[str, Any] = runs[label["path"]]
        if run["id"] != label["id"]:
            raise SystemExit(f"{label['path']}: id {run['id']!r} != label id {label['id']!r}")
        record = {
            "id": run["id"],
            "source": run["source"],
            "meta": run["meta"],
            "labels": {key: label[key] for key in LABEL_KEYS},
            "messages": run["messages"],
        }
        target = output / Path(label["path"]).parent / f"{run['id']}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    """Build, then re-load everything with the library to prove the files are valid."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("set", nargs="?", choices=sorted(SETS), default="recorded")
    parser.add_argument("--source", type=Path, help="the shared folder the runs come from")
    args = parser.parse_args(argv)
    default_source, label_files, output = SETS[args.set]
    source = args.source or default_source
    if args.set == "recorded":
        label_files = [source / "labels-dev.jsonl"]
    written = build(source, output, label_files)
    sys.path.insert(0, str(REPO_ROOT))
    from judge_eval.dataset import load_dataset

    trajectories, problems = load_dataset(output)
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    looping = sum(1 for t in trajectories if t.labels and t.labels.looping)
    print(f"wrote {len(written)} files ({looping} looping) to {output.relative_to(REPO_ROOT)}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
