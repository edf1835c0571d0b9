#!/usr/bin/env bash
# The package as users would get it: build the sdist and the wheel, check their metadata
# with twine, and run `loop-judge eval` from the built wheel's own code outside the
# repository (the labelled set must ship inside the wheel, beside the judge_eval package). build and twine go into a
# throwaway venv so the test venv holds only what the project asks for; the eval runs on
# the test venv's dependencies, so this costs one build (~20 s), not a second install.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
# Pinned like everything CI installs: a new build or twine release cannot fail CI.
TOOLS=(build==1.6.1 twine==7.0.0)

work=$(mktemp -d -t loop-judge-package.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/tools"
"$work/tools/bin/python" -m pip install --quiet --disable-pip-version-check "${TOOLS[@]}"
"$work/tools/bin/python" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 \
    || { cat "$work/build.log"; exit 1; }
"$work/tools/bin/twine" check --strict "$work/dist"/*

wheel=$(ls "$work/dist"/*.whl)
"$repo/.venv/bin/python" -m zipfile -e "$wheel" "$work/wheel"
cd "$work"  # nowhere near the repository's evals/data
PYTHONPATH="$work/wheel" "$repo/.venv/bin/python" - "$work/wheel" <<'PY'
import sys
from pathlib import Path

import judge
import judge_eval
from judge_eval.cli.eval_plan import bundled_data_dir

wheel = Path(sys.argv[1]).resolve()
for package in (judge, judge_eval):
    assert Path(package.__file__).resolve().is_relative_to(wheel), package.__file__
data = bundled_data_dir()
assert data is not None and data.resolve().is_relative_to(wheel), data
assert (data / "smoke.txt").is_file() and (data / "README.md").is_file(), data
assert (Path(judge.__file__).parent / "py.typed").is_file()
print(f"check-package: the wheel's judge_eval reads its bundled set at {data}")
PY
# `loop-judge eval` through the console script the wheel declares (its entry_points.txt),
# as an installed `loop-judge` would run it.
PYTHONPATH="$work/wheel" "$repo/.venv/bin/python" - eval --subset smoke \
    --no-chart --out "$work/out" >"$work/eval.log" 2>&1 <<'PY' || { cat "$work/eval.log"; exit 1; }
import glob
import sys
from importlib.metadata import PathDistribution
from pathlib import Path

(info,) = glob.glob("wheel/*.dist-info")
(script,) = [e for e in PathDistribution(Path(info)).entry_points if e.name == "loop-judge"]
sys.argv[0] = "loop-judge"
sys.exit(script.load()())
PY
tail -n 4 "$work/eval.log"
echo "check-package: sdist and wheel built, twine check passed, eval ran from the wheel"
