"""Rebuild ``evals/unseen_dev/smolagents/`` from a snapshot of huggingface/smolagents.

https://github.com/huggingface/smolagents (Apache-2.0) committed the output of its own
benchmark script (``examples/smolagents_benchmark/output/*.jsonl``, July 2025): GPT-4o driving
smolagents' ``CodeAgent`` and ``ToolCallingAgent`` on GAIA, MATH and SimpleQA questions, one
JSON line per question with the agent's memory in ``intermediate_steps``. The agents ran with a
step budget of 10, so no run reaches 20 turns; every run with at least ``MIN_TURNS`` assistant
messages is converted (no selection by content).

Run from the repository root with the git directory of the snapshot:
    .venv/bin/python evals/unseen_dev/build_smolagents.py /path/to/huggingface+smolagents/repo
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

from judge.llm.redaction import redact
from judge_eval.smolagents_memory import memory_to_messages

REPO = "huggingface/smolagents"
LICENSE = "Apache-2.0"
#: A commit of huggingface/smolagents that holds the 2025-07-24 benchmark outputs.
COMMIT = "3b8174e7670f5c7ca0a66d9610ee5517040effcd"
FILES = [
    f"examples/smolagents_benchmark/output/gpt-4o__{agent}__{task}__2025-07-24.jsonl"
    for agent in ("code", "tool-calling")
    for task in ("gaia", "math", "simpleqa")
]
#: Half the agents' step budget of 10: shorter runs cannot hold an onset plus two repeats of
#: a multi-step pattern, which is what the labelling rules look for.
MIN_TURNS = 5
OUT = Path(__file__).parent / "smolagents"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def convert_file(repo: Path, path: str) -> list[dict[str, Any]]:
    """The runs of one output file with at least ``MIN_TURNS`` assistant messages."""
    records: list[dict[str, Any]] = []
    lines = git(repo, "show", f"{COMMIT}:{path}").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        converted = memory_to_messages(row["intermediate_steps"])
        turns = sum(1 for m in converted.messages if m["role"] == "assistant")
        if turns < MIN_TURNS:
            continue
        redacted = 0
        for message in converted.messages:
            clean = redact(message["content"])
            if clean != message["content"]:
                message["content"] = clean
                redacted += 1
        agent = row["agent_action_type"]
        task = str(row["source"]).lower()
        records.append(
            {
                "id": f"smolagents-{agent}-{task}-{number:02d}",
                "source": {
                    "repo": REPO,
                    "path": path,
                    "commit": COMMIT,
                    "license": LICENSE,
                    "record": f"line {number} (intermediate_steps)",
                },
                "meta": {
                    "agent": f"smolagents {'CodeAgent' if agent == 'code' else 'ToolCallingAgent'}",
                    "model": row["model_id"],
                    "task": f"{row['source']} question",
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
        "repo", type=Path, help="git directory of the huggingface/smolagents snapshot"
    )
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    written = 0
    for path in FILES:
        for record in convert_file(args.repo, path):
            target = OUT / f"{record['id']}.json"
            target.write_text(
                json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
            )
            written += 1
    print(f"wrote {written} runs to {OUT}")


if __name__ == "__main__":
    main()
