"""`.ci/check-newest.py`, the CI step that resolves ``.[integrations]`` against the newest
release of every integrated framework: it names the conflicting pair from pip's own words.

pip's output here is captured from real resolutions (tests/data/pip/); the end-to-end tests
hand the script a stand-in for ``python -m pip`` so that no index is needed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "check-newest.py"
CAPTURED = REPO / "tests" / "data" / "pip"


@pytest.fixture(scope="module")
def check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_newest", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_a_captured_conflict_names_the_pair(check: ModuleType) -> None:
    """pip 23, litellm 1.106 beside openai-agents 0.24: both ask for openai, no release fits."""
    text = (CAPTURED / "conflict-litellm-openai-agents.txt").read_text("utf-8")
    [conflict] = check.conflicts(text)
    assert conflict.package == "openai"
    assert conflict.demands == [
        ("litellm 1.106.2", "openai<3.0.0,>=2.20.0"),
        ("openai-agents 0.24.0", "openai<4,>=3.0.0"),
    ]
    status, message = check.diagnose(text)
    assert status == 1
    assert message == (
        "conflict over openai: litellm 1.106.2 needs openai<3.0.0,>=2.20.0; "
        "openai-agents 0.24.0 needs openai<4,>=3.0.0"
    )


def test_our_own_bound_against_the_newest_release(check: ModuleType) -> None:
    """The drift the step is for: a framework's new release outside the range we admit.
    pip names the user's request and our extra; each requirer once, however many versions
    pip tried."""
    text = (CAPTURED / "conflict-extra-bound.txt").read_text("utf-8")
    conflicts = check.conflicts(text)
    assert [c.package for c in conflicts] == ["openai-agents"]
    [(user, wanted), (ours, bound)] = conflicts[0].demands
    assert user == "the user" and wanted == "openai-agents==0.24.0"
    assert ours == "loop-judge[integrations] 0.1.0" and bound == "openai-agents<0.21,>=0.20"
    assert check.diagnose(text)[0] == 1


def test_an_unreachable_index_is_said_so(check: ModuleType) -> None:
    text = (
        "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None))"
        " after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection."
        "HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno 101] "
        "Network is unreachable')': /simple/litellm/\n"
        "ERROR: Could not find a version that satisfies the requirement litellm "
        "(from versions: none)\nERROR: No matching distribution found for litellm\n"
    )
    status, message = check.diagnose(text)
    assert status == 2 and "could not be reached" in message


def fake_python(
    tmp_path: Path, *, newest: dict[str, str], conflict: str | None, upstream: bool = False
) -> Path:
    """An executable that answers ``-m pip install --dry-run ... --report FILE`` the way pip
    does: the report in FILE, or, when the project is resolved (with ``upstream``, also when
    the releases are resolved without it), the conflict and status 1."""
    report = {"install": [{"metadata": {"name": n, "version": v}} for n, v in newest.items()]}
    script = tmp_path / "python"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"report, conflict = {report!r}, {conflict!r}\n"
        "args = sys.argv[1:]\n"
        "with open(sys.argv[0] + '.log', 'a') as log:\n"
        "    log.write(' '.join(args) + '\\n')\n"
        f"upstream = {upstream!r}\n"
        "project = any('[integrations]' in arg for arg in args)\n"
        "if conflict and '--no-deps' not in args and (project or upstream):\n"
        "    sys.stdout.write(conflict)\n"
        "    sys.exit(1)\n"
        "with open(args[args.index('--report') + 1], 'w') as out:\n"
        "    json.dump(report, out)\n",
        "utf-8",
    )
    script.chmod(0o755)
    return script


def test_the_step_resolves_the_extra_with_each_newest_release(
    check: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = fake_python(
        tmp_path, newest={"openai-agents": "0.24.0", "pydantic-ai-slim": "2.68.0"}, conflict=None
    )
    argv = [
        "--python",
        str(python),
        "--project",
        "/src",
        "openai-agents",
        "pydantic-ai-slim[openai]",
    ]
    assert check.main(argv) == 0
    asked = (tmp_path / "python.log").read_text("utf-8").splitlines()
    assert asked[0].startswith("-m pip install --dry-run --ignore-installed")
    assert "--no-deps" in asked[0] and "-c" not in asked[0].split()
    wanted = "/src[integrations] openai-agents==0.24.0 pydantic-ai-slim[openai]==2.68.0"
    assert wanted in asked[1]
    assert "--no-deps" not in asked[1]
    assert "it installs" in capsys.readouterr().out


def test_pydantic_ai_and_its_slim_release_are_resolved_apart(
    check: ModuleType, tmp_path: Path
) -> None:
    """pydantic-ai pins one exact pydantic-ai-slim, and the newest of the two can differ on
    the index: by default each goes in a resolution of its own, beside everything else."""
    runs = [*check.RESOLUTIONS, *check.APART.values()]
    newest = {check.canonical(check._spec(p)[0]): "1.0" for run in runs for p in run}
    python = fake_python(tmp_path, newest=newest, conflict=None)
    assert check.main(["--python", str(python), "--project", "/src"]) == 0
    asked = (tmp_path / "python.log").read_text("utf-8").splitlines()
    assert len(asked) == 1 + len(runs)
    slim, full = asked[1], asked[2]
    assert "pydantic-ai-slim[openai]==1.0" in slim and " pydantic-ai==" not in slim
    assert " pydantic-ai==1.0" in full and "pydantic-ai-slim" not in full
    for run in (slim, full):
        assert "litellm==1.0" in run and "openai-agents==1.0" in run


def test_the_step_fails_naming_the_pair(
    check: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conflict = (CAPTURED / "conflict-litellm-openai-agents.txt").read_text("utf-8")
    python = fake_python(
        tmp_path, newest={"litellm": "1.106.2", "openai-agents": "0.24.0"}, conflict=conflict
    )
    assert check.main(["--python", str(python), "litellm", "openai-agents"]) == 1
    err = capsys.readouterr().err
    assert "cannot be installed with these newest releases" in err
    assert "conflict over openai: litellm 1.106.2 needs" in err
    assert "openai-agents 0.24.0 needs openai<4,>=3.0.0" in err


def test_ci_runs_the_step() -> None:
    run = (REPO / ".ci" / "run").read_text("utf-8")
    assert ".venv/bin/python .ci/check-newest.py" in run


def test_a_conflict_without_the_project_is_not_ours(
    check: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When the newest releases do not install together even without loop-judge (a conflict
    among them, a release the index lacks), no bound of ours is the cause: a warning."""
    conflict = (CAPTURED / "conflict-litellm-openai-agents.txt").read_text("utf-8")
    python = fake_python(
        tmp_path,
        newest={"litellm": "1.106.2", "openai-agents": "0.24.0"},
        conflict=conflict,
        upstream=True,
    )
    assert check.main(["--python", str(python), "litellm", "openai-agents"]) == 0
    asked = (tmp_path / "python.log").read_text("utf-8").splitlines()
    assert "[integrations]" not in asked[-1] and "litellm==1.106.2" in asked[-1]
    err = capsys.readouterr().err
    assert "WARNING" in err and "even without loop-judge" in err
    assert "conflict over openai: litellm 1.106.2 needs" in err


def test_a_framework_apart_is_resolved_with_its_own_extra_alone(
    check: ModuleType, tmp_path: Path
) -> None:
    """crewai cannot share an environment with the integrations extra (openai 2 against
    openai-agents' openai 3): by default it is resolved with the crewai extra and litellm,
    and none of the integrations extra's frameworks."""
    runs = [*check.RESOLUTIONS, *check.APART.values()]
    newest = {check.canonical(check._spec(p)[0]): "1.0" for run in runs for p in run}
    python = fake_python(tmp_path, newest=newest, conflict=None)
    assert check.main(["--python", str(python), "--project", "/src"]) == 0
    asked = (tmp_path / "python.log").read_text("utf-8").splitlines()
    [apart] = [run for run in asked if "/src[crewai]" in run]
    assert "crewai==1.0" in apart and "litellm==1.0" in apart
    assert "[integrations]" not in apart and "openai-agents" not in apart
    assert not any("crewai==" in run for run in asked if "[integrations]" in run)
