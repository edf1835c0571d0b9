"""The package as users install it: bounded dependencies, a constraints file that
pins what CI tests, the labelled set and type marker inside the wheel, release metadata,
and README install commands that work from a checkout.

Building the wheel needs the network (hatchling), so `.ci/check-package.sh` does that in
CI; these tests read the files the build and the installs are made from.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from judge_eval.cli.eval_plan import BUNDLED_DATA_IN_WHEEL, DEFAULT_DATA_DIR, bundled_data_dir

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / ".ci" / "constraints.txt"

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ (CI runs 3.11)")


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
    return data


@pytest.fixture(scope="module")
def project(pyproject: dict[str, Any]) -> dict[str, Any]:
    section: dict[str, Any] = pyproject["project"]
    return section


# Extras CI installs in an environment of their own, each with its own constraints file:
# crewai needs openai 2, the openai-agents extra openai 3, so no one environment holds both.
APART = {"crewai": REPO / ".ci" / "crewai-constraints.txt"}


def pins(path: Path = CONSTRAINTS) -> dict[str, str]:
    found = {}
    for line in path.read_text("utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints pin exact versions, not {line!r}"
            found[canonicalize_name(name)] = version
    return found


def requirements(project: dict[str, Any], apart: str | None = None) -> list[Requirement]:
    """Every dependency users can get: the core and each extra (the self-referencing
    `integrations` extra contributes through the extras it names); with ``apart``, the
    core and that one extra, which CI installs on its own."""
    listed = list(project["dependencies"])
    for name, extra in project["optional-dependencies"].items():
        if (name in APART) == (apart is not None) and name == (apart or name):
            listed += [r for r in extra if not r.startswith(project["name"])]
    return [Requirement(r) for r in listed]


def test_litellm_is_bounded_above_and_below(project: dict[str, Any]) -> None:
    (litellm,) = [r for r in requirements(project) if r.name == "litellm"]
    operators = {spec.operator for spec in litellm.specifier}
    assert {">=", "<"} <= operators, "an open range let pip walk back through 23 releases"


def test_constraints_pin_every_dependency_inside_its_range(project: dict[str, Any]) -> None:
    """CI installs with -c .ci/constraints.txt, so it tests one known set; each pin must lie
    inside the range users get, or CI would test what no user can install."""
    pinned = pins()
    assert canonicalize_name(project["name"]) not in pinned  # the project itself is not pinned
    for requirement in requirements(project):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{name} is not in .ci/constraints.txt: regenerate it"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{name}=={pinned[name]} is outside {requirement}"
        )


@pytest.mark.parametrize("extra", sorted(APART))
def test_an_extra_apart_pins_its_own_environment(project: dict[str, Any], extra: str) -> None:
    pinned = pins(APART[extra])
    for requirement in requirements(project, apart=extra):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{name} is not in {APART[extra].name}: regenerate it"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{name}=={pinned[name]} is outside {requirement}"
        )


def test_ci_installs_with_the_constraints_and_every_extra(project: dict[str, Any]) -> None:
    run = (REPO / ".ci" / "run").read_text("utf-8")
    install = re.search(r"pip install[^\n]*\\\n[^\n]*|pip install -e[^\n]*", run)
    assert install is not None
    command = install.group(0)
    assert "-c .ci/constraints.txt" in command
    extras = set(re.search(r"\.\[([a-z,-]+)\]", command).group(1).split(","))  # type: ignore[union-attr]
    assert {"test", "eval", "semantic", "serve", "integrations"} <= extras
    assert "bash .ci/check-package.sh" in run


def test_the_wheel_carries_the_labelled_set_and_the_type_marker(
    pyproject: dict[str, Any],
) -> None:
    wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    force_include = wheel["force-include"]
    assert force_include[str(DEFAULT_DATA_DIR)] == f"judge_eval/{BUNDLED_DATA_IN_WHEEL.as_posix()}"
    assert "judge" in wheel["packages"] and (REPO / "judge" / "py.typed").is_file()
    # The tooling ships as its own top-level package, named by its folder's last part.
    assert "evals/judge_eval" in wheel["packages"]
    # In a checkout (editable install) the same set is found beside the package.
    assert bundled_data_dir() == (REPO / DEFAULT_DATA_DIR).resolve()
    # The provenance and licenses travel with it.
    assert force_include["evals/README.md"].startswith("judge_eval/data/labelled/")


def test_the_console_script_is_the_tooling_front(
    pyproject: dict[str, Any], project: dict[str, Any]
) -> None:
    """``loop-judge`` enters through judge_eval, which adds eval, import and check to the
    runtime's commands; an entry in judge/ could not reach them without importing the
    tooling."""
    assert project["scripts"]["loop-judge"] == "judge_eval.cli:main"
    sdist = set(pyproject["tool"]["hatch"]["build"]["targets"]["sdist"]["include"])
    assert {"/judge", "/evals/judge_eval", "/evals/data"} <= sdist


def test_release_metadata(project: dict[str, Any]) -> None:
    classifiers = project["classifiers"]
    assert "Typing :: Typed" in classifiers
    assert project["license"] == "MIT" and (REPO / "LICENSE").is_file()
    versions = {c.rsplit(" :: ", 1)[1] for c in classifiers if "Python :: 3." in c}
    assert min(versions, key=lambda v: tuple(map(int, v.split(".")))) == project[
        "requires-python"
    ].removeprefix(">=")
    changelog = (REPO / "CHANGELOG.md").read_text("utf-8")
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, flags=re.MULTILINE)
    assert released and released[0] == project["version"], "the newest entry is this version"
    assert "## [Unreleased]" in changelog


def test_readme_install_commands_work_from_a_checkout(project: dict[str, Any]) -> None:
    """The package is not on an index: every `pip install` of it is an editable install of
    the checkout, and every extra named exists."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    readme = "\n".join(page.read_text("utf-8") for page in pages)
    assert "pip install 'loop-judge" not in readme and "pip install loop-judge" not in readme
    extras = set(project["optional-dependencies"])
    named = {
        extra
        for group in re.findall(r"pip install[^\n`]*-e '\.\[([a-z,-]+)\]'", readme)
        for extra in group.split(",")
    }
    assert named and named <= extras


def test_the_semantic_detector_is_in_the_default_install(project: dict[str, Any]) -> None:
    """`pip install -e .` gets the detector the README's headline figures
    measure. Every package `judge.detectors.embeddings` needs is a core dependency, and the
    old `semantic` extra is kept, empty, so `-e '.[semantic]'` still installs."""
    from judge.detectors.embeddings import _EXTRA_MODULES

    core = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    needed = {canonicalize_name(module) for module in _EXTRA_MODULES}
    assert needed <= core, f"not default dependencies: {sorted(needed - core)}"
    assert project["optional-dependencies"]["semantic"] == []
