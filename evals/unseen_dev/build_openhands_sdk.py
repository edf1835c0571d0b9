"""Rebuild ``evals/unseen_dev/openhands_sdk/`` from a snapshot of OpenHands/benchmarks.

Several commits of https://github.com/OpenHands/benchmarks (MIT) carry the event logs of
OpenHands agent-SDK conversations under ``workspace/conversations/<id>/event_service/``
(SWE-bench instances solved by the SDK's default agent with Claude Sonnet 4, September 2025).
A conversation appears in several commits with more events as it ran; the commit holding the
most events of each conversation is used. Every conversation with more than
``MIN_EVENTS`` events is converted (no selection by content), so the folder is the whole
population, not a sample picked for looping.

The same history also holds one benchmark-harness dump of the SDK agent with GPT-4o on
OpenAgentSafety (TheAgentCompany-style workplace tasks with a browser, a shell and simulated
colleagues): ``traj_<task>.json`` files, one JSON list of events each, at ``SAFETY_COMMIT``.
Most of those dumps start at the first action (the system prompt and the task text were not
saved; three keep the task as their first user message),
and most runs are a handful of steps; every dump with at least ``MIN_SAFETY_TURNS`` assistant
messages is converted.

Run from the repository root with the git directory of the snapshot:
    .venv/bin/python evals/unseen_dev/build_openhands_sdk.py /path/to/OpenHands+benchmarks/repo
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

from judge.llm.redaction import redact
from judge_eval.openhands_events import events_to_messages

REPO = "OpenHands/benchmarks"
LICENSE = "MIT"
OUT = Path(__file__).parent / "openhands_sdk"
#: Conversations with this many events or fewer never reached a model turn (a system prompt
#: and at most one user message: aborted starts), so they carry no behaviour to judge.
MIN_EVENTS = 2
#: The commit of OpenHands/benchmarks that holds the OpenAgentSafety dumps, and their folder.
SAFETY_COMMIT = "78ea45aed7d0e53199463fd1fbca4123b782eef7"
SAFETY_DIR = (
    "benchmarks/openagentsafety/outputs/mgulavani__openagentsafety_full_updated-train/"
    "litellm_proxy/neulab/gpt-4o-2024-08-06_maxiter_100_N_initial"
)
#: Runs shorter than this many model turns cannot show a repeated pattern of the kinds the
#: labelling rules name (an onset plus at least two further iterations with tool results).
MIN_SAFETY_TURNS = 8
_EVENT_FILE = re.compile(r"^workspace/conversations/([0-9a-f]{32})/event_service/events/")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def best_commits(repo: Path) -> dict[str, tuple[int, str]]:
    """For each conversation id, (event count, commit) of the commit that holds most events."""
    best: dict[str, tuple[int, str]] = {}
    for commit in git(repo, "rev-list", "--all").split():
        counts: dict[str, int] = defaultdict(int)
        for name in git(repo, "ls-tree", "-r", "--name-only", commit).splitlines():
            match = _EVENT_FILE.match(name)
            if match:
                counts[match.group(1)] += 1
        for conversation, count in counts.items():
            if count > best.get(conversation, (0, ""))[0]:
                best[conversation] = (count, commit)
    return best


def convert(repo: Path, conversation: str, commit: str) -> dict[str, Any]:
    folder = f"workspace/conversations/{conversation}/event_service"
    names = sorted(
        n
        for n in git(repo, "ls-tree", "-r", "--name-only", commit, folder).splitlines()
        if "/events/" in n
    )
    events = [json.loads(git(repo, "show", f"{commit}:{name}")) for name in names]
    base = json.loads(git(repo, "show", f"{commit}:{folder}/base_state.json"))
    model = base.get("agent", {}).get("llm", {}).get("model")
    converted = events_to_messages(events)
    return {
        "id": f"openhands-sdk-{conversation[:12]}",
        "source": {
            "repo": REPO,
            "path": f"{folder}/events/",
            "commit": commit,
            "license": LICENSE,
            "record": f"conversation={conversation}; {len(events)} event files",
        },
        "meta": {
            "agent": "OpenHands agent SDK (v1, default agent, function calling)",
            "model": model,
            "task": "SWE-bench instance (benchmark harness run)",
            "skipped_events": converted.skipped,
            "truncated_messages": converted.truncated,
        },
        "labels": None,
        "messages": converted.messages,
    }


def convert_safety(repo: Path) -> list[dict[str, Any]]:
    """The OpenAgentSafety dumps with at least ``MIN_SAFETY_TURNS`` assistant messages."""
    records: list[dict[str, Any]] = []
    names = git(repo, "ls-tree", "-r", "--name-only", SAFETY_COMMIT, SAFETY_DIR).splitlines()
    for name in sorted(n for n in names if Path(n).name.startswith("traj_")):
        events = json.loads(git(repo, "show", f"{SAFETY_COMMIT}:{name}"))
        converted = events_to_messages(events)
        turns = sum(1 for m in converted.messages if m["role"] == "assistant")
        if turns < MIN_SAFETY_TURNS:
            continue
        task = Path(name).stem.removeprefix("traj_")
        # The task text hands the agent the sandbox's service login, and the agent passes it
        # on in calls (``curl -u user:password``); the project redactor masks it (and anything
        # else it recognises) in texts and call arguments, so no credential is stored here.
        redacted = 0
        for message in converted.messages:
            changed = False
            clean = redact(message["content"])
            if clean != message["content"]:
                message["content"] = clean
                changed = True
            for call in message.get("tool_calls", []):
                function = call["function"]
                clean = redact(function["arguments"])
                if clean != function["arguments"]:
                    function["arguments"] = clean
                    changed = True
            redacted += changed
        records.append(
            {
                "id": f"openhands-sdk-oas-{task}",
                "source": {
                    "repo": REPO,
                    "path": name,
                    "commit": SAFETY_COMMIT,
                    "license": LICENSE,
                    "record": f"task={task}; {len(events)} events",
                },
                "meta": {
                    "agent": "OpenHands agent SDK (v1, default agent, function calling, browser)",
                    "model": "litellm_proxy/neulab/gpt-4o-2024-08-06",
                    "task": "OpenAgentSafety task (system prompt and task text not in the dump)",
                    "skipped_events": converted.skipped,
                    "truncated_messages": converted.truncated,
                    "redacted_messages": redacted,
                },
                "labels": None,
                "messages": converted.messages,
            }
        )
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "repo", type=Path, help="git directory of the OpenHands/benchmarks snapshot"
    )
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    written = 0
    records: list[dict[str, Any]] = []
    for conversation, (count, commit) in sorted(best_commits(args.repo).items()):
        if count <= MIN_EVENTS:
            continue
        records.append(convert(args.repo, conversation, commit))
    records.extend(convert_safety(args.repo))
    for record in records:
        path = OUT / f"{record['id']}.json"
        path.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        written += 1
    print(f"wrote {written} runs to {OUT}")


if __name__ == "__main__":
    main()
