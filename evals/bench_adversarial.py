"""Does any input make one ``turn_started`` cost more than linear in its new text?

Each shape below is one message (or one call) of hostile but plausible content, grown 10x
at a time. The script builds a short, ordinary history, then times the one
``turn_started`` that reads the hostile message, and prints microseconds per KB of new
text. A detector that is linear in what it reads keeps that figure flat (or falling, where
a message is clipped to a bound) as the size grows; a backtracking regex or a rescan of
the text from every position shows as a figure that grows with the size.

Shapes: long text without sentence punctuation, one huge JSON line (as content and as
call arguments), thousands of short sentences, one phrase repeated over and over, a 1 MB
tool output, deep nesting (in arguments and in content), a question-mark-free run of
"?"-less clauses, and a single word without spaces.

Run from the repository root:  .venv/bin/python evals/bench_adversarial.py
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio

from judge import LoopTracker, TrackerConfig

# New text per shape, in characters: grown 10x each step up to 1 MB, a very large tool output.
SIZES = (1_000, 10_000, 100_000, 1_000_000)
# Timed turns per shape and size (each on a fresh tracker); the median is reported.
REPEATS = 3
# A cost per KB that grows more than this from the smallest to the largest size is a
# cliff: linear work keeps the ratio near 1, allowing for timer noise on a shared machine.
CLIFF_RATIO = 3.0
# Words the long texts are made of (a number is appended to each, so few repeat).
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa")  # fmt: skip

Message = dict[str, Any]


def _words(size: int, seed: int) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS) + str(rng.randrange(1000))
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def _assistant(content: str) -> Message:
    return {"role": "assistant", "content": content}


def _call(arguments: str, content: str = "Running it.") -> list[Message]:
    call = {"id": "c9", "type": "function", "function": {"name": "run", "arguments": arguments}}
    return [
        {"role": "assistant", "content": content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c9", "content": "done: 3 files"},
    ]


def _tool_output(content: str) -> list[Message]:
    call = {"id": "c9", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c9", "content": content},
    ]


def _json_line(size: int) -> str:
    rows, length = [], 2
    i = 0
    while length < size:
        row = {"id": i, "name": f"item{i}", "tags": ["a", "b"], "ok": i % 3 == 0}
        rows.append(row)
        length += len(json.dumps(row)) + 1
        i += 1
    return json.dumps(rows)


def _nested(size: int) -> str:
    depth = size // 2
    return "[" * depth + "]" * depth


SHAPES: dict[str, Callable[[int], list[Message]]] = {
    "unpunctuated text": lambda n: [_assistant(_words(n, 1))],
    "one word, no spaces": lambda n: [_assistant("x" * n)],
    "JSON line as content": lambda n: [_assistant(_json_line(n))],
    "JSON line as arguments": lambda n: _call(_json_line(n)),
    "short sentences": lambda n: [_assistant("Item done. Next one now. " * (n // 25))],
    "repeated phrase": lambda n: [_assistant("the quick brown fox jumps " * (n // 26))],
    "questions, no '?'": lambda n: [_assistant("could you check whether " * (n // 24))],
    "1 MB-style tool output": lambda n: _tool_output(_words(n, 2)),
    "error tool output": lambda n: _tool_output("Error: " + "x" * n),
    "nested arguments": lambda n: _call(_nested(n)),
    "nested content": lambda n: [_assistant(_nested(n))],
    "shell command args": lambda n: _call(json.dumps({"command": "echo " + "a>b " * (n // 4)})),
}


def _prefix() -> list[Message]:
    history: list[Message] = [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": "Please tidy the repository and report back."},
    ]
    for i in range(6):
        history.extend(_call(json.dumps({"path": f"f{i}.py"}), f"Step {i}: reading f{i}.py."))
        history[-1]["content"] = f"contents {i}"
        history[-2]["tool_calls"][0]["id"] = f"p{i}"
        history[-1]["tool_call_id"] = f"p{i}"
    return history


async def time_turn(new: list[Message], config: TrackerConfig) -> float:
    """Seconds of the one ``turn_started`` that reads ``new`` after an ordinary prefix."""
    tracker = LoopTracker(config)
    history = _prefix()
    await tracker.turn_started(history)
    history = [*history, *new]
    started = time.perf_counter()
    await tracker.turn_started(history)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--max-size", type=int, default=SIZES[-1])
    args = parser.parse_args()
    config = TrackerConfig(fast_model=None, confirm_model=None, semantic="off")
    sizes = [s for s in SIZES if s <= args.max_size]
    print("one turn_started reading the shape; us per KB of new text (median of runs)")
    print(f"{'shape':>24} " + " ".join(f"{s // 1000:>8} KB" for s in sizes) + "   growth")
    cliffs = []
    for name, build in SHAPES.items():
        per_kb = []
        for size in sizes:
            new = build(size)
            chars = sum(len(json.dumps(m)) for m in new)
            runs = [anyio.run(time_turn, new, config) for _ in range(args.repeats)]
            per_kb.append(statistics.median(runs) * 1e6 / (chars / 1000))
        growth = per_kb[-1] / per_kb[0]
        flag = "  CLIFF" if growth > CLIFF_RATIO else ""
        print(f"{name:>24} " + " ".join(f"{v:>11.1f}" for v in per_kb) + f"   {growth:5.2f}{flag}")
        if flag:
            cliffs.append(name)
    print("cliffs: " + (", ".join(cliffs) if cliffs else "none"))


if __name__ == "__main__":
    main()
