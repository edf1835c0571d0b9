"""Looping scenarios seeded from the labelled looping runs of the data set.

A labelled run is cut at its onset into a `LoopSeed` (the recorded work before the loop and
the loop itself), and each seed becomes one `Scenario` per policy. The hand-scripted
productive scenarios are in `judge_eval.closed_loop.productive`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from judge_eval.closed_loop.model import LOOP_POLICIES, Message, Policy, Turn
from judge_eval.dataset import Trajectory
from judge_eval.replay import origin_of


def split_turns(messages: Sequence[Message]) -> tuple[list[Message], list[tuple[int, Turn]]]:
    """A conversation as ``(opening, turns)``: the messages before the first assistant
    message, then each assistant message with everything up to the next one (its tool
    results, and user messages such as a simulated customer's replies), with the index of
    the assistant message. That is what the agent adds to its history in one turn."""
    starts = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    opening = [dict(m) for m in messages[: starts[0]]] if starts else [dict(m) for m in messages]
    turns = []
    for pos, start in enumerate(starts):
        end = starts[pos + 1] if pos + 1 < len(starts) else len(messages)
        turns.append((start, [dict(m) for m in messages[start:end]]))
    return opening, turns


def _tool_names(turns: Iterable[Turn]) -> frozenset[str]:
    names = set()
    for turn in turns:
        for msg in turn:
            for call in msg.get("tool_calls") or ():
                name = (call.get("function") or {}).get("name")
                if isinstance(name, str):
                    names.add(name)
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class LoopSeed:
    """A labelled looping run cut at its onset: the recorded work before the loop, and the
    loop itself (the recorded turns from the onset on), which the agent replays in a cycle
    for as long as it loops."""

    id: str
    origin: str
    kind: str
    opening: list[Message]
    prefix: list[Turn]
    loop: list[Turn]
    tools: frozenset[str]


def seed_from_trajectory(traj: Trajectory) -> LoopSeed | None:
    """The seed of one labelled looping trajectory; None for a productive or unlabelled one
    or one whose loop has no assistant turn to replay."""
    labels = traj.labels
    if labels is None or not labels.looping or labels.onset_message_index is None:
        return None
    onset = labels.onset_message_index
    opening, turns = split_turns(traj.messages)
    prefix = [turn for start, turn in turns if start < onset]
    loop = [turn for start, turn in turns if start >= onset]
    if not loop:
        return None
    return LoopSeed(
        id=traj.id,
        origin=origin_of(traj),
        kind=labels.kind,
        opening=opening,
        prefix=prefix,
        loop=loop,
        tools=_tool_names(loop),
    )


def seeds_from_trajectories(trajectories: Iterable[Trajectory]) -> list[LoopSeed]:
    """Seeds of every labelled looping trajectory, in the given order."""
    return [s for s in map(seed_from_trajectory, trajectories) if s is not None]


@dataclass(frozen=True, slots=True)
class Scenario:
    """One scripted agent run: the opening messages, the scripted turns before any loop
    (a loop's prefix, or a productive agent's whole script), the loop (empty for a
    productive agent) and the policy that decides how the agent reacts to recovery."""

    id: str
    family: str
    origin: str
    kind: str
    policy: Policy
    opening: list[Message]
    script: list[Turn]
    loop: list[Turn] = field(default_factory=list)
    tools: frozenset[str] = frozenset()

    @property
    def looping(self) -> bool:
        return bool(self.loop)


def loop_scenarios(
    seeds: Iterable[LoopSeed], policies: Sequence[Policy] = LOOP_POLICIES
) -> list[Scenario]:
    """Every seed under every policy (seed-major order)."""
    return [
        Scenario(
            id=f"{seed.id}/{policy.value}",
            family=seed.id,
            origin=seed.origin,
            kind=seed.kind,
            policy=policy,
            opening=seed.opening,
            script=seed.prefix,
            loop=seed.loop,
            tools=seed.tools,
        )
        for seed in seeds
        for policy in policies
    ]
