"""How big is a tracker's saved state, and what can a hostile history do to it?

A sidecar keeps each session's `TrackerState` in Redis and rewrites it every turn, so its
size is paid per turn, per session. Three measurements, heuristics only (no judge):

- recorded: every labelled trajectory of evals/data replayed turn by turn; the JSON of
  ``tracker.state`` after each turn (bytes per turn: median, p95, max; max per session);
- adversarial: one call per turn whose arguments (or result) is 10 kB to 7 MB, and
  arguments nested ``"[" * n + "]" * n`` for n of 100 to 5,000; the state's largest size
  and its growth per MB of arguments;
- redaction cost: the recorded set replayed as the sidecar runs it (each turn restored from
  the previous turn's JSON, then saved), with ``redact_secrets`` on (the default: every
  string of the state redacted, each distinct one once, and a restored tracker reading
  what is new redacted) and off, interleaved run by run in one process: time to save the
  state, and the whole turn (restore, read, save), per turn;
- hostile: a seeded fuzzer of hostile histories (deep nesting, multi-MB text, lone
  surrogates, NUL and marker-like keys, hundreds of parallel calls, objects whose
  ``__str__`` raises), each turn restored from the previous turn's JSON as a sidecar does:
  crashes (anything but a `HistoryError`), the longest ``turn_started`` call, the largest
  state.

Run from the repository root:  .venv/bin/python evals/bench_state.py  [--json] [--quick]
[--redaction-only]
It uses only the public API, so ``PYTHONPATH=<older checkout>`` measures an older version.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from judge import HistoryError, LoopTracker, TrackerConfig
from judge.turns import assistant_turn_ends

DATA = Path(__file__).resolve().parent / "data"
# Heuristics only, no embeddings: the state the sidecar's default configuration keeps.
CONFIG = TrackerConfig(semantic="off")
# Argument and result sizes (MB); a 7 MB argument once made a 77 MB state.
SIZES_MB = (0.01, 0.1, 1.0, 7.0)
# Turns per adversarial history: enough for every detector window to hold the big call.
TURNS = 6
# Nesting depths of "[" * n + "]" * n; 200-900 once wedged a session.
DEPTHS = (100, 200, 400, 900, 2000, 5000)
# Hostile histories the fuzzer builds (a fixed seed, so a run is repeatable).
FUZZ_HISTORIES = 120
FUZZ_SEED = 12
# Share of histories with one call whose arguments' __str__ raises: few, since that call
# refuses the whole history (a HistoryError) and the rest of it goes unmeasured.
UNPRINTABLE_SHARE = 0.05


def _state_bytes(tracker: LoopTracker) -> int:
    return len(tracker.state.model_dump_json().encode("utf-8"))


async def _replay(history: list[Any], *, restore: bool) -> tuple[list[int], float]:
    """Sizes of the state after each turn and the longest turn (seconds)."""
    tracker = LoopTracker(CONFIG)
    sizes: list[int] = []
    longest = 0.0
    for end in assistant_turn_ends(history) or [len(history)]:
        started = time.perf_counter()
        await tracker.turn_started(history[:end])
        longest = max(longest, time.perf_counter() - started)
        blob = tracker.state.model_dump_json()
        sizes.append(len(blob.encode("utf-8")))
        if restore:
            tracker = LoopTracker.from_state(CONFIG, blob)
    return sizes, longest


def recorded_figures() -> dict[str, Any]:
    from judge_eval.dataset import load_dataset

    folders = [p for p in DATA.glob("recorded/*") if p.is_dir()] + [DATA / "handmade"]
    trajectories, _ = load_dataset(folders)
    per_turn: list[int] = []
    per_session: list[int] = []
    for trajectory in trajectories:
        sizes, _ = anyio.run(lambda t=trajectory: _replay(t.messages, restore=False))
        per_turn += sizes
        per_session.append(max(sizes))
    ordered = sorted(per_turn)
    return {
        "trajectories": len(trajectories),
        "turns": len(per_turn),
        "median_bytes": int(statistics.median(ordered)),
        "p95_bytes": ordered[int(0.95 * (len(ordered) - 1))],
        "max_bytes": ordered[-1],
        "median_session_max_bytes": int(statistics.median(per_session)),
    }


# The same configuration without redaction: the "before" of the redaction-cost figure.
CONFIG_RAW = TrackerConfig(semantic="off", redact_secrets=False)


async def _sidecar_replay(
    history: list[Any], config: TrackerConfig, *, restore: bool = True
) -> tuple[list[float], ...]:
    """Per turn: seconds to save the state, and for the whole turn as a sidecar runs it
    (``restore``; otherwise one tracker saved every turn and never restored)."""
    if restore:
        tracker = LoopTracker.from_state(config, LoopTracker(config).state.model_dump())
    else:
        tracker = LoopTracker(config)
    saves: list[float] = []
    turns: list[float] = []
    for end in assistant_turn_ends(history) or [len(history)]:
        started = time.perf_counter()
        await tracker.turn_started(history[:end])
        saving = time.perf_counter()
        blob = tracker.state.model_dump_json()
        saved = time.perf_counter()
        if restore:
            tracker = LoopTracker.from_state(config, blob)
        saves.append(saved - saving)
        turns.append(time.perf_counter() - started)
    return saves, turns


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(1000 * statistics.median(ordered), 3),
        "p95_ms": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 3),
    }


def redaction_cost_figures() -> dict[str, Any]:
    """Save and turn time per turn with redaction on and off, side by side (each run is
    replayed once per configuration, alternating, so load on the machine hits both)."""
    from judge_eval.dataset import load_dataset

    folders = [p for p in DATA.glob("recorded/*") if p.is_dir()] + [DATA / "handmade"]
    trajectories, _ = load_dataset(folders)
    times: dict[str, dict[str, list[float]]] = {
        name: {"save": [], "turn": []} for name in ("on", "off", "library_on", "library_off")
    }
    runs = (
        ("on", CONFIG, True),
        ("off", CONFIG_RAW, True),
        ("library_on", CONFIG, False),
        ("library_off", CONFIG_RAW, False),
    )
    for trajectory in trajectories:
        for name, config, restore in runs:
            saves, turns = anyio.run(
                lambda t=trajectory, c=config, r=restore: _sidecar_replay(t.messages, c, restore=r)
            )
            times[name]["save"] += saves
            times[name]["turn"] += turns
    report: dict[str, Any] = {"trajectories": len(trajectories)}
    for name, kinds in times.items():
        report[name] = {kind: _percentiles(values) for kind, values in kinds.items()}
        report[name]["turns"] = len(kinds["save"])
    for prefix in ("", "library_"):
        for kind in ("save", "turn"):
            on = report[f"{prefix}on"][kind]["median_ms"]
            off = report[f"{prefix}off"][kind]["median_ms"]
            report[f"{prefix}{kind}_median_ratio"] = round(on / off, 2) if off else None
    return report


def _print_redaction_cost(c: dict[str, Any]) -> None:
    on, off = c["on"], c["off"]
    print(
        f"redaction cost ({c['trajectories']} runs, {on['turns']} turns, sidecar pattern): "
        f"save median {on['save']['median_ms']} ms / p95 {on['save']['p95_ms']} ms with "
        f"redaction, {off['save']['median_ms']} / {off['save']['p95_ms']} ms without "
        f"(x{c['save_median_ratio']}); whole turn median {on['turn']['median_ms']} ms vs "
        f"{off['turn']['median_ms']} ms (x{c['turn_median_ratio']})"
    )
    lib_on, lib_off = c["library_on"], c["library_off"]
    print(
        f"  a tracker saved every turn, never restored: save median "
        f"{lib_on['save']['median_ms']} ms / p95 {lib_on['save']['p95_ms']} ms with "
        f"redaction, {lib_off['save']['median_ms']} / {lib_off['save']['p95_ms']} ms "
        f"without (x{c['library_save_median_ratio']})"
    )


def _call_turn(i: int, arguments: str, result: str) -> list[dict[str, Any]]:
    call = {
        "id": f"c{i}",
        "type": "function",
        "function": {"name": "write", "arguments": arguments},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": result},
    ]


def _sized(mb: float, kind: str) -> list[dict[str, Any]]:
    blob = "x" * int(mb * 1_000_000)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Write the file."}]
    for i in range(TURNS):
        arguments = {"path": "a.py", "content": blob + str(i % 2)} if kind == "arguments" else {}
        result = f"Error: {blob}{i % 3}" if kind == "result" else "File written."
        history += _call_turn(i, json.dumps(arguments), result)
    return history


def _attempt(history: list[Any]) -> tuple[int | None, float, str | None]:
    try:
        sizes, longest = anyio.run(lambda: _replay(history, restore=True))
    except Exception as exc:  # an older version's failure is a figure, not a crash here
        return None, 0.0, f"{type(exc).__name__}: {str(exc)[:80]}"
    return max(sizes), longest, None


def adversarial_figures(sizes_mb: tuple[float, ...] = SIZES_MB) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("arguments", "result"):
        rows = []
        for mb in sizes_mb:
            size, longest, error = _attempt(_sized(mb, kind))
            rows.append(
                {"mb": mb, "max_state_bytes": size, "max_turn_s": round(longest, 3), "error": error}
            )
        # Growth between the two largest sizes: what one more MB of arguments costs once
        # the smallest (kept whole, under the bounds) are past.
        ok = [r for r in rows if r["max_state_bytes"] is not None]
        growth = None
        if len(ok) >= 2 and ok[-1]["mb"] > ok[-2]["mb"]:
            growth = (ok[-1]["max_state_bytes"] - ok[-2]["max_state_bytes"]) / (
                ok[-1]["mb"] - ok[-2]["mb"]
            )
        out[kind] = {"rows": rows, "growth_bytes_per_mb": None if growth is None else int(growth)}
    nesting = []
    for n in DEPTHS:
        history = [{"role": "user", "content": "Go."}]
        for i in range(TURNS):
            history += _call_turn(i, "[" * n + "]" * n, "ok")
        size, longest, error = _attempt(history)
        nesting.append(
            {"n": n, "max_state_bytes": size, "max_turn_s": round(longest, 3), "error": error}
        )
    out["nesting"] = nesting
    return out


# -- the hostile-history fuzzer ------------------------------------------------------------


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")

    __repr__ = __str__


def _nested(rng: random.Random) -> Any:
    n = rng.choice([50, 150, 250, 600, 1200, 5000])
    if rng.random() < 0.5:
        return "[" * n + "]" * n
    value: Any = rng.choice([[], {}])
    for _ in range(n):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


def _hostile_text(rng: random.Random) -> str:
    return rng.choice(
        [
            "x" * rng.choice([10, 40_000, 2_000_000]),
            "\ud800 lone surrogate \udfff",
            "\x00s \x00# $dict $ref $call \x00\x00",
            json.dumps({"\x00s": 0, "$ref": 1, "\x00#3": "k"}),
            "[" * 300,
            "é" * 50_000,
        ]
    )


def _hostile_arguments(rng: random.Random) -> Any:
    pick = rng.random()
    if pick < 0.3:
        return _nested(rng)
    if pick < 0.6:
        return json.dumps({_hostile_text(rng)[:100]: _hostile_text(rng)})
    if pick < 0.7:
        return "rm -rf   /tmp/x\n" * rng.choice([1, 10_000])
    if pick < 0.8:
        return {"n": rng.choice([10**400, -(2**70), 1.5e308]), "t": (1, 2)}
    return json.dumps({"path": "f.py", "content": _hostile_text(rng)})


def hostile_history(rng: random.Random) -> list[Any]:
    history: list[Any] = [{"role": "user", "content": _hostile_text(rng)}]
    for i in range(rng.randint(2, 8)):
        width = rng.choice([1, 1, 1, 3, 200])
        calls = [
            {
                "id": f"c{i}_{j}",
                "type": "function",
                "function": {
                    "name": rng.choice(["run", "w\x00", "é" * 3]),
                    "arguments": _hostile_arguments(rng),
                },
            }
            for j in range(width)
        ]
        history.append({"role": "assistant", "content": _hostile_text(rng), "tool_calls": calls})
        for j in range(width):
            history.append(
                {"role": "tool", "tool_call_id": f"c{i}_{j}", "content": _hostile_text(rng)}
            )
    if rng.random() < UNPRINTABLE_SHARE:
        history[1]["tool_calls"][0]["function"]["arguments"] = {"a": _Unprintable()}
    return history


def hostile_figures(histories: int = FUZZ_HISTORIES, seed: int = FUZZ_SEED) -> dict[str, Any]:
    """``{"histories", "crashes", "refused", "max_call_s", "max_state_bytes"}``: refused
    is a clear `HistoryError` (an input the tracker does not accept), a crash anything else."""
    rng = random.Random(seed)
    crashes: list[str] = []
    refused = 0
    max_call = 0.0
    max_state = 0
    for _ in range(histories):
        history = hostile_history(rng)
        try:
            sizes, longest = anyio.run(lambda h=history: _replay(h, restore=True))
        except HistoryError:
            refused += 1
            continue
        except Exception as exc:  # what the fuzzer is for: count it, name it
            crashes.append(f"{type(exc).__name__}: {str(exc)[:100]}")
            continue
        max_call = max(max_call, longest)
        max_state = max(max_state, *sizes)
    return {
        "histories": histories,
        "crashes": len(crashes),
        "refused": refused,
        "max_call_s": round(max_call, 3),
        "max_state_bytes": max_state,
        "crash_kinds": sorted(set(crashes))[:10],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="skip the 7 MB sizes, fewer histories")
    parser.add_argument(
        "--redaction-only", action="store_true", help="only the redaction cost figure"
    )
    args = parser.parse_args(argv)
    if args.redaction_only:
        cost = redaction_cost_figures()
        if args.json:
            print(json.dumps(cost, indent=2))
        else:
            _print_redaction_cost(cost)
        return 0
    sizes = SIZES_MB[:-1] if args.quick else SIZES_MB
    report = {
        "recorded": recorded_figures(),
        "redaction_cost": redaction_cost_figures(),
        "adversarial": adversarial_figures(sizes),
        "hostile": hostile_figures(FUZZ_HISTORIES // 4 if args.quick else FUZZ_HISTORIES),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    r = report["recorded"]
    print(
        f"recorded ({r['trajectories']} runs, {r['turns']} turns): state bytes per turn "
        f"median {r['median_bytes']}, p95 {r['p95_bytes']}, max {r['max_bytes']}; "
        f"median of each session's largest {r['median_session_max_bytes']}"
    )
    _print_redaction_cost(report["redaction_cost"])
    for kind in ("arguments", "result"):
        a = report["adversarial"][kind]
        cells = ", ".join(
            f"{row['mb']} MB -> {row['max_state_bytes'] if row['error'] is None else row['error']}"
            for row in a["rows"]
        )
        print(f"{kind}: max state {cells}; growth {a['growth_bytes_per_mb']} bytes per MB")
    cells = ", ".join(
        f"n={row['n']} -> {row['max_state_bytes'] if row['error'] is None else row['error']}"
        for row in report["adversarial"]["nesting"]
    )
    print(f"nesting: {cells}")
    h = report["hostile"]
    print(
        f"hostile histories: {h['crashes']} crashes, {h['refused']} refused (HistoryError) "
        f"in {h['histories']}; max {h['max_call_s']} s per call; "
        f"max state {h['max_state_bytes']} bytes"
    )
    for kind in h["crash_kinds"]:
        print(f"  crash: {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
