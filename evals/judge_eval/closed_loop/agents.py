"""The scripted agent: plays a scenario and reacts to recovery messages by its policy.

`ScriptedAgent` replays a scenario's scripted turns and its loop, turns a recovery message
into an escape, a question to the user or nothing (as its `Policy` says), and records the
`Phase` of every turn, which is the ground truth the scripted judge answers from and every
figure is scored on.
"""

from __future__ import annotations

import random

from judge.testing import JudgeRequest
from judge_eval.closed_loop.model import (
    DEFAULT_SEED,
    ESCAPE_WORK_TURNS,
    JUDGE_LOOKBACK,
    LOOPING_CONFIDENCE,
    LOOPING_PHASES,
    MAX_TURNS_AFTER_ONSET,
    PRODUCTIVE_CONFIDENCE,
    RECOVERED_PHASES,
    RELAPSE_AFTER_CALLS,
    Phase,
    Policy,
    Turn,
)
from judge_eval.closed_loop.scenarios import Scenario
from judge_eval.closed_loop.work import FreshWork, json_arguments


class ScriptedAgent:
    """Plays one scenario: its scripted turns, then its loop, reacting to recovery
    messages by its policy. Knows its own ground truth (the phase of every turn)."""

    def __init__(self, scenario: Scenario, *, seed: int = DEFAULT_SEED) -> None:
        self.scenario = scenario
        self.work = FreshWork(random.Random(f"{seed}:{scenario.id}"), avoid=scenario.tools)
        self.phase_at: dict[int, Phase] = {}  # history index of an assistant message -> phase
        self.phases: list[Phase] = []  # phase of each turn made so far
        self.onset_turn: int | None = None  # 1-based turn that started the loop
        self.escape_turns: list[int] = []
        self.relapse_turn: int | None = None
        self.recoveries_in_loop = 0
        self._script_pos = 0
        self._loop_pos = 0
        self._queue: list[Phase] = []  # the turns decided by the last reaction
        self._asking = False
        self._escaped_for_good = False
        self._work_left = 0
        self._relapsed = False
        self._plans = 0

    @property
    def turns(self) -> int:
        return len(self.phases)

    @property
    def phase(self) -> Phase | None:
        """The phase of the newest turn (what a verdict right now is about)."""
        return self.phases[-1] if self.phases else None

    def judge_answer(self, request: JudgeRequest) -> float:
        """What a good judge says about the window it is shown: looping only when its last
        `JUDGE_LOOKBACK` assistant turns are all in a loop (ground truth by index)."""
        shown = [r["n"] for r in request.transcript if r.get("role") == "assistant"]
        recent = shown[-JUDGE_LOOKBACK:]
        looping = len(recent) == JUDGE_LOOKBACK and all(
            self.phase_at.get(n) in LOOPING_PHASES for n in recent
        )
        return LOOPING_CONFIDENCE if looping else PRODUCTIVE_CONFIDENCE

    def on_recovery(self) -> None:
        """React to a recovery message that was just appended to the history."""
        if self.phase not in LOOPING_PHASES or self._queue:
            # Not looping (a flag before the onset, or on a recovered agent): the agent
            # has nothing to escape from and goes on with what it was doing.
            return
        self.recoveries_in_loop += 1
        policy = self.scenario.policy
        if policy is Policy.IGNORE_WARNINGS:
            return
        if policy is Policy.ESCAPE_AFTER_SECOND_WARNING and self.recoveries_in_loop < 2:
            return
        if policy is Policy.ASK_USER:
            self._queue = [Phase.ASKED]
            self._escaped_for_good = True
            self._work_left = ESCAPE_WORK_TURNS
            return
        if policy is Policy.ESCAPE_THEN_RELAPSE and not self._relapsed:
            self._queue = [Phase.ESCAPED] * (1 + RELAPSE_AFTER_CALLS) + [Phase.RELAPSE]
            return
        self._queue = [Phase.ESCAPED]
        self._escaped_for_good = True
        self._work_left = ESCAPE_WORK_TURNS

    def next_turn(self, history_length: int) -> Turn | None:
        """The messages of the agent's next turn, or None when it is done."""
        phase = self._next_phase()
        if phase is None:
            return None
        if phase is Phase.PREFIX or phase is Phase.PRODUCTIVE:
            turn = self.scenario.script[self._script_pos]
            self._script_pos += 1
        elif phase in LOOPING_PHASES:
            if self.onset_turn is None:
                self.onset_turn = self.turns + 1
            if phase is Phase.RELAPSE and self.relapse_turn is None:
                self._relapsed = True
                self._loop_pos = 0
                self.relapse_turn = self.turns + 1
            turn = self.scenario.loop[self._loop_pos % len(self.scenario.loop)]
            self._loop_pos += 1
        elif phase is Phase.ASKED:
            self.escape_turns.append(self.turns + 1)
            turn = [
                {"role": "assistant", "content": self.work.question(self.scenario.tools)},
                {"role": "user", "content": self.work.instruction()},
            ]
        else:
            turn = self._escaped_turn()
        turn = self._fresh_ids(turn)
        self.phases.append(phase)
        self.phase_at[history_length] = phase
        return turn

    def _next_phase(self) -> Phase | None:
        if self._queue:
            return self._queue.pop(0)
        script_done = self._script_pos >= len(self.scenario.script)
        if not self.scenario.looping:
            return None if script_done else Phase.PRODUCTIVE
        if not script_done and self.onset_turn is None:
            return Phase.PREFIX
        if self.onset_turn is not None and self.turns - self.onset_turn + 1 >= (
            MAX_TURNS_AFTER_ONSET
        ):
            return None
        if self._escaped_for_good:
            if self._work_left <= 0:
                return None
            self._work_left -= 1
            return Phase.ESCAPED
        if self._relapsed:
            return Phase.RELAPSE
        return Phase.LOOP

    def _escaped_turn(self) -> Turn:
        last = self.phase
        if last not in RECOVERED_PHASES:
            # The first turn out of a loop is the plan, in plain text.
            self._plans += 1
            self.escape_turns.append(self.turns + 1)
            return [
                {"role": "assistant", "content": self.work.plan(self.scenario.tools, self._plans)}
            ]
        tool, args, result, thought = self.work.call()
        return [
            {
                "role": "assistant",
                "content": thought,
                "tool_calls": [
                    {
                        "id": "new",
                        "type": "function",
                        "function": {"name": tool, "arguments": json_arguments(args)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "new", "content": result},
        ]

    def _fresh_ids(self, turn: Turn) -> Turn:
        """A copy of the turn whose tool call ids are unique in this run: a replayed loop
        repeats its recorded ids, which a history must not (results would be ambiguous)."""
        number = self.turns + 1
        ids: dict[str, str] = {}
        out: Turn = []
        for msg in turn:
            msg = dict(msg)
            calls = msg.get("tool_calls")
            if calls:
                renamed = []
                for k, call in enumerate(calls):
                    call = dict(call)
                    new = f"call_{number}_{k}"
                    if isinstance(call.get("id"), str):
                        ids[call["id"]] = new
                    call["id"] = new
                    renamed.append(call)
                msg["tool_calls"] = renamed
            elif msg.get("role") == "tool" and msg.get("tool_call_id") in ids:
                msg["tool_call_id"] = ids[msg["tool_call_id"]]
            out.append(msg)
        return out
