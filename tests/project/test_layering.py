"""The runtime an agent imports (judge/) and the tooling (judge_eval: eval, dataset,
importers, their commands) stay apart: the tooling depends on the runtime, never the
reverse, so importing `judge` or running the hook loads none of it."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import judge
from judge.hooks.client import DAEMON_ENV

TOOLING = "judge_eval"
RUNTIME = Path(judge.__file__).resolve().parent


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an ``import`` or ``from ... import`` names, with its line; a relative
    import inside judge/ cannot reach a sibling top-level package, so only absolute ones
    count."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _names_tooling(module: str) -> bool:
    return module == TOOLING or module.startswith(f"{TOOLING}.")


@pytest.mark.slow
def test_no_runtime_module_imports_the_tooling() -> None:
    """Not at the top, not inside a function, not under TYPE_CHECKING."""
    files = sorted(RUNTIME.rglob("*.py"))
    assert len(files) > 50, RUNTIME
    offenders = [
        f"{path.relative_to(RUNTIME.parent)}:{line}: {module}"
        for path in files
        for line, module in _imported_modules(ast.parse(path.read_text("utf-8"), str(path)))
        if _names_tooling(module)
    ]
    assert not offenders, offenders


@pytest.mark.slow
def test_no_runtime_module_loads_the_tooling_by_name() -> None:
    """``importlib.import_module("judge_eval...")`` would slip past the import check."""
    offenders = [
        str(path.relative_to(RUNTIME.parent))
        for path in sorted(RUNTIME.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path)))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _names_tooling(node.value)
    ]
    assert not offenders, offenders


def _loaded_by(*args: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules a fresh interpreter imports for ``args``, from ``-X importtime``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        timeout=120,
        input="",
        env=env,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


@pytest.mark.slow  # two interpreter starts
def test_importing_the_runtime_loads_no_tooling() -> None:
    loaded = _loaded_by("-c", "import judge, judge.cli, judge.cli.app, judge.turns")
    assert "judge.cli.app" in loaded  # the check sees the imports at all
    assert not {m for m in loaded if _names_tooling(m)}


@pytest.mark.slow  # one interpreter start
def test_the_console_script_hook_path_loads_no_tooling_module(tmp_path: Path) -> None:
    """``loop-judge hook`` enters through judge_eval.cli but goes straight to the runtime."""
    # In process: the same modules load, and no warm daemon is left behind in the user's
    # own socket directory.
    env = {**os.environ, DAEMON_ENV: "off"}
    loaded = _loaded_by("-m", TOOLING, "hook", "claude-code", "--state-dir", str(tmp_path), env=env)
    assert "judge.cli.hook" in loaded
    entry = {TOOLING, f"{TOOLING}.__main__", f"{TOOLING}.cli"}
    assert {m for m in loaded if _names_tooling(m)} <= entry
    assert "rich" not in loaded
