"""Copy the labelled recorded runs into evals/data/recorded/, adding their labels.

Reproducible and auditable: for each line of ``labels-dev.jsonl`` the matching file of
``shared/recorded`` is copied with ``id``, ``source``, ``meta`` and ``messages`` unchanged and
the label (minus its ``id``/``path`` duplicates) added as ``labels``. Only labelled runs are
copied; the unlabelled held-out runs stay out of the evaluation set on purpose.

Usage (from the repo root)::

    .venv/bin/python evals/build_dataset.py [PATH_TO_SHARED_RECORDED]

The default source folder is ``../shared/recorded`` relative to the repo root.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = REPO_ROOT.parent / "shared" / "recorded"
OUTPUT = REPO_ROOT / "evals" / "data" / "recorded"
LABEL_KEYS = ("looping", "onset_message_index", "kind", "confidence", "note")


def build(source: Path, output: Path = OUTPUT) -> list[Path]:
    """Write one labelled JSON file per label line; return the written paths."""
    labels_file = source / "labels-dev.jsonl"
    labels = [json.loads(line) for line in labels_file.read_text().splitlines() if line.strip()]
    if output.exists():
        shutil.rmtree(output)
    written: list[Path] = []
    for label in labels:
        run: dict[str, Any] = json.loads((source / label["path"]).read_text())
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
    parser.add_argument("source", nargs="?", type=Path, default=DEFAULT_SOURCE)
    args = parser.parse_args(argv)
    written = build(args.source)
    sys.path.insert(0, str(REPO_ROOT))
    from judge.dataset import load_dataset

    trajectories, problems = load_dataset(OUTPUT)
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    looping = sum(1 for t in trajectories if t.labels and t.labels.looping)
    print(f"wrote {len(written)} files ({looping} looping) to {OUTPUT.relative_to(REPO_ROOT)}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
