#!/usr/bin/env python3
"""Does ``.[integrations]`` install beside the newest release of every framework it serves?

CI installs one frozen set (.ci/constraints.txt), so it cannot see the day a framework's new
release stops sharing an environment with our pins: a user finds out, at ``pip install``. This
check asks the package index for the newest release of each package in ``RESOLUTIONS`` (the
integrated frameworks and the libraries they and litellm share), then asks pip, with no
constraints and nothing installed, to resolve the project's ``integrations`` extra together
with exactly those releases. When pip cannot, it prints the conflicting pair, as in

    conflict over openai: litellm 1.106.2 needs openai<3.0.0,>=2.20.0;
    openai-agents 0.24.0 needs openai<4,>=3.0.0

and exits 1. When the same releases do not install together even without the project (a
conflict among them, or a release one needs missing from the index), no bound of ours is the
cause: it says so and exits 0. A framework that cannot share an environment with the
``integrations`` extra (``APART``: crewai) is resolved the same way with its own extra
alone. It exits 2 when the index cannot be asked (this check needs
it) or pip fails in another way, with pip's own last lines.

    python .ci/check-newest.py [--project DIR] [--extra integrations] [PACKAGE ...]

Standard library only: it runs beside pip, in whichever Python runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The frameworks judge/integrations/ serves, litellm (our own dependency) and the libraries
# two of them share, where the last conflicts were: openai (litellm, openai-agents,
# pydantic-ai) and huggingface-hub (litellm's tokenizers, smolagents).
COMMON = (
    "litellm",
    "openai",
    "openai-agents",
    "smolagents",
    "huggingface-hub",
    "langchain",
    "langgraph",
    "claude-agent-sdk",
    "google-adk",
    "strands-agents",
)
# pydantic-ai is two distributions: pydantic-ai-slim (what our extra names; [openai] for its
# OpenAI models) and pydantic-ai, which pins one exact slim release and can lag the newest
# slim on the index. Pinning both newest in one run would be a conflict of their own, so
# each is resolved in a run of its own.
RESOLUTIONS = (
    (*COMMON, "pydantic-ai-slim[openai]"),
    (*COMMON, "pydantic-ai"),
)
# Frameworks that cannot share an environment with the integrations extra, by the extra of
# their own: each is resolved in a run of its own, that extra beside our core (litellm) and
# the framework's newest release. crewai needs openai 2 and openai-agents openai 3; openai
# is left for pip to choose, as its newest release is one crewai never accepts.
APART = {"crewai": ("litellm", "crewai")}

# pip's lines under "The conflict is caused by:" (pip 23 to 25 write them alike).
_DEPENDS = re.compile(r"^\s*(?P<who>\S+) (?P<version>\S+) depends on (?P<spec>.+?)\s*$")
_REQUESTED = re.compile(r"^\s*The user requested (?:\(constraint\) )?(?P<spec>.+?)\s*$")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_NOT_FOUND = re.compile(
    r"(?:Could not find a version that satisfies the requirement|"
    r"No matching distribution found for) (?P<spec>\S+)"
)
# What pip (urllib3, requests) says when it cannot reach the index at all.
_UNREACHABLE = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "ProxyError",
    "ConnectTimeoutError",
    "Max retries exceeded",
)


def canonical(name: str) -> str:
    """A distribution name as the index compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Conflict:
    """Two or more demands on one package that no release meets at once."""

    package: str
    # (who asks, what it asks for): "litellm 1.106.2" / "the user", "openai<3.0.0,>=2.20.0"
    demands: list[tuple[str, str]] = field(default_factory=list)

    def describe(self) -> str:
        asks = "; ".join(f"{who} needs {spec}" for who, spec in self.demands)
        return f"conflict over {self.package}: {asks}"


def _spec(text: str) -> tuple[str, str]:
    """("openai", "openai<3.0.0,>=2.20.0") from pip's "openai<3.0.0 and >=2.20.0", and from
    an extra's 'openai-agents<0.21 and >=0.20; extra == "integrations"' the requirement
    without its marker."""
    text = text.split(";", 1)[0].strip()
    match = _NAME.match(text)
    name = canonical(match.group(1)) if match else text
    return name, re.sub(r"\s+and\s+", ",", text)


def conflicts(pip_output: str) -> list[Conflict]:
    """The conflicts pip names after "The conflict is caused by:", one per package that
    several requirers ask of incompatibly, each requirer once (pip lists every version it
    tried; the first is the newest)."""
    lines = pip_output.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if "conflict is caused by" in line)
    except StopIteration:
        return []
    found: dict[str, Conflict] = {}
    seen: set[tuple[str, str]] = set()
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        depends = _DEPENDS.match(line)
        requested = _REQUESTED.match(line)
        if depends:
            who_name = canonical(_NAME.match(depends["who"]).group(1))  # type: ignore[union-attr]
            who = f"{depends['who']} {depends['version']}"
            package, spec = _spec(depends["spec"])
        elif requested:
            who_name = who = "the user"
            package, spec = _spec(requested["spec"])
        else:
            continue
        if (who_name, package) in seen:
            continue
        seen.add((who_name, package))
        found.setdefault(package, Conflict(package)).demands.append((who, spec))
    # A package only one requirer asks of is not where the conflict lies; keep it only when
    # pip named nothing else.
    several = [c for c in found.values() if len(c.demands) > 1]
    return several or list(found.values())


def diagnose(pip_output: str) -> tuple[int, str]:
    """The exit status and the message for a failed resolution."""
    named = conflicts(pip_output)
    if named:
        return 1, "\n".join(c.describe() for c in named)
    if any(sign in pip_output for sign in _UNREACHABLE):
        return 2, (
            "the package index could not be reached: this check resolves against the newest "
            "releases on it, so it needs the network (pip's last lines below)"
        )
    missing = _NOT_FOUND.search(pip_output)
    if missing:
        return 1, f"no release on the index satisfies {missing['spec']}"
    return 2, "pip failed without naming a conflict (its last lines below)"


def _pip(
    args: Sequence[str], python: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """pip's run (stdout and stderr together, in pip's order) and {name: version} of what
    its --report says it would install. Not --quiet: pip then leaves out the lines that say
    what the conflict is."""
    env = dict(os.environ)
    # The check is about what users get: no constraints file or pinned requirements of CI's.
    for name in ("PIP_CONSTRAINT", "PIP_REQUIREMENT", "PIP_NO_INDEX", "PIP_QUIET"):
        env.pop(name, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    with tempfile.TemporaryDirectory(prefix="check-newest-") as scratch:
        report_path = Path(scratch) / "report.json"
        done = subprocess.run(
            [python, "-m", "pip", *args, "--report", str(report_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            check=False,
        )
        report = json.loads(report_path.read_text("utf-8")) if report_path.exists() else {}
    installs = {
        canonical(item["metadata"]["name"]): item["metadata"]["version"]
        for item in report.get("install", [])
    }
    return done, installs


def _tail(text: str, lines: int = 25) -> str:
    """pip's last lines, less its notes about index locations it skips, each cut short (a
    "from versions: ..." line lists every release there is)."""
    kept = [line for line in text.strip().splitlines() if "is ignored: it is neither" not in line]
    return "\n".join(line if len(line) <= 300 else line[:300] + " ..." for line in kept[-lines:])


def _dry_run(requirements: Sequence[str], *, deps: bool = True) -> list[str]:
    args = ["install", "--dry-run", "--ignore-installed", "--progress-bar", "off"]
    return [*args, *([] if deps else ["--no-deps"]), *requirements]


class CheckFailed(Exception):
    """The check could not be made (the index, pip); the message says why."""


def newest(packages: Sequence[str], python: str) -> dict[str, str]:
    """The newest release on the index of each package (for this Python), asked of pip with
    --no-deps so that nothing else constrains the answer."""
    done, latest = _pip(_dry_run(packages, deps=False), python)
    if done.returncode != 0:
        _, message = diagnose(done.stdout)
        raise CheckFailed(f"{message}\n--- pip ---\n{_tail(done.stdout)}")
    return latest


def pinned_newest(packages: Sequence[str], python: str) -> list[str]:
    """``name[extras]==newest`` for each package."""
    latest = newest(packages, python)
    pinned = []
    for package in packages:
        name = _spec(package)[0]
        if name not in latest:
            raise CheckFailed(f"no release of {name} found on the index")
        pinned.append(f"{package}=={latest[name]}")
    return pinned


def resolve(target: str, pinned: Sequence[str], python: str) -> int:
    """Resolve ``target`` with the ``pinned`` releases; 0, or the status of `diagnose`."""
    print("check-newest: resolving", target, "with", " ".join(pinned), flush=True)
    done, resolved = _pip(_dry_run([target, *pinned]), python)
    if done.returncode == 0:
        print(f"check-newest: it installs ({len(resolved)} packages resolved)", flush=True)
        return 0
    status, message = diagnose(done.stdout)
    if status == 1:
        # Ours to fix only if the same releases install together without the project.
        alone, _ = _pip(_dry_run(pinned), python)
        if alone.returncode != 0:
            _, upstream = diagnose(alone.stdout)
            print(
                "check-newest: WARNING: these newest releases do not install together even "
                "without loop-judge (a conflict among them, or the index lacks a release one "
                f"needs), so no bound of ours is the cause:\n{upstream}\n"
                f"--- pip ---\n{_tail(alone.stdout, 12)}",
                file=sys.stderr,
                flush=True,
            )
            return 0
    print(
        f"check-newest: {target} cannot be installed with these newest releases\n"
        f"{message}\n--- pip ---\n{_tail(done.stdout)}",
        file=sys.stderr,
        flush=True,
    )
    return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "packages", nargs="*", help="resolve with just these (default: each of RESOLUTIONS)"
    )
    parser.add_argument("--project", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--extra", default="integrations")
    parser.add_argument("--python", default=sys.executable, help="whose pip resolves")
    options = parser.parse_args(argv)
    runs: list[tuple[str, tuple[str, ...]]] = (
        [(options.extra, tuple(options.packages))]
        if options.packages
        else [(options.extra, run) for run in RESOLUTIONS] + list(APART.items())
    )
    everything = list(dict.fromkeys(p for _, run in runs for p in run))

    try:
        pinned = dict(zip(everything, pinned_newest(everything, options.python), strict=True))
    except CheckFailed as failed:
        print(f"check-newest: {failed}", file=sys.stderr)
        return 2
    return max(
        resolve(f"{options.project}[{extra}]", [pinned[p] for p in run], options.python)
        for extra, run in runs
    )


if __name__ == "__main__":
    sys.exit(main())
