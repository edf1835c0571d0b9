"""Restore-and-reapply and refused-edit loops (judge.detectors.reapply), and the productive
habits next to them: restoring once to try something else, editing and re-running a test.

The histories are shaped like mini-swe-agent runs (a shell tool, ``<returncode>`` results)
and Moatless Tools runs (``str_replace_editor`` with ``<observation>`` results).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from judge import LoopKind, LoopTracker, TrackerConfig
from judge.detectors import reapply
from judge.detectors.reapply import ReapplyDetector, restored_files
from judge.detectors.steps import StepBuilder
from judge.history import normalize_history
from tests.fakes import Agent, live_agent

pytestmark = pytest.mark.anyio

CONFIG = TrackerConfig(semantic="off")
TARGET = "./src/shop/cart.py"
TEST = {"command": "cd /testbed && python check_cart.py"}
# The fix the agent keeps making: three lines of a method of cart.py.
FIX = (
    "        discount = self.coupon.rate if self.coupon else 0",
    "        subtotal = sum(item.price for item in self.items)",
    "        return round(subtotal * (1 - discount), 2)",
)


def shell(rc: int, output: str = "") -> str:
    return f"<returncode>{rc}</returncode>\n<output>\n{output}\n</output>"


def observation(text: str) -> str:
    return f"<observation>\n{text}\n</observation>"


def script(name: str, lines: tuple[str, ...]) -> dict[str, str]:
    """A fix script written with a heredoc: it names the file and holds the new lines."""
    body = "\n".join(lines)
    return {
        "command": f"cat > {name} << 'EOF'\nwith open('{TARGET}') as f:\n    text = f.read()\n"
        f'new = """\n{body}\n"""\nEOF\npython {name}'
    }


def sed(lines: tuple[str, ...]) -> dict[str, str]:
    joined = "\\n".join(lines)
    return {"command": f"sed -i '40,42c\\{joined}' {TARGET}"}


def patch(lines: tuple[str, ...]) -> dict[str, str]:
    added = "\n".join(f"+{line}" for line in lines)
    return {
        "command": f"cat > fix.patch << 'EOF'\n--- a/src/shop/cart.py\n+++ b/src/shop/cart.py\n"
        f"@@ -40,3 +40,3 @@\n-        return 0\n{added}\nEOF\npatch -p1 < fix.patch"
    }


RESTORE = {"command": f"git checkout {TARGET}"}
RESTORE_BACKUP = {"command": "cp src/shop/cart.py.bak src/shop/cart.py"}
INDENT = shell(1, "  File 'src/shop/cart.py', line 41\nIndentationError: unexpected indent")


async def turn(agent: Agent) -> Any:
    return await agent.tracker.turn_started(agent.history)


def agent() -> Agent:
    return live_agent(LoopTracker(CONFIG), task="Fix the cart total.")


async def apply(agent: Agent, edit: dict[str, str]) -> Any:
    """Apply an edit, run the check (it fails the same way), return the verdicts."""
    agent.call("bash", edit, shell(0))
    first = await turn(agent)
    agent.call("bash", TEST, INDENT)
    return first or await turn(agent)


# -- restore and re-apply -------------------------------------------------------------------


async def test_the_same_fix_reapplied_after_each_restore_is_a_loop() -> None:
    a = agent()
    verdicts = [await apply(a, script("fix.py", FIX))]
    # Each restore undoes the fix; each new mechanism writes the same lines again.
    for edit, restore in (
        (script("fix_v2.py", FIX), RESTORE),
        (sed(FIX), RESTORE),
        (patch(FIX), RESTORE),
    ):
        a.call("bash", restore, shell(0, "Updated 1 path from the index"))
        verdicts.append(await turn(a))
        verdicts.append(await apply(a, edit))
    assert not any(verdicts[:-1])
    last = verdicts[-1]
    assert last and last.source == "heuristic:reapply"
    assert last.kind is LoopKind.SIMILAR_RETRY


async def test_backup_copies_count_as_restores() -> None:
    a = agent()
    verdicts = [await apply(a, script("fix.py", FIX))]
    for n in range(3):
        a.call("bash", RESTORE_BACKUP, shell(0))
        verdicts.append(await turn(a))
        verdicts.append(await apply(a, script(f"fix_{n}.py", FIX)))
    assert not any(verdicts[:-1]) and verdicts[-1]


async def test_two_restore_rounds_are_a_bounded_retry() -> None:
    # The labels call three attempts at one fix with two restores between a bounded retry.
    a = agent()
    verdicts = [await apply(a, script("fix.py", FIX))]
    for edit in (sed(FIX), patch(FIX)):
        a.call("bash", RESTORE, shell(0))
        verdicts.append(await turn(a))
        verdicts.append(await apply(a, edit))
    assert not any(verdicts)


async def test_restores_followed_by_different_fixes_are_progress() -> None:
    a = agent()
    verdicts = [await apply(a, script("fix.py", FIX))]
    for n in range(4):
        other = (
            f"        total_{n} = self.compute_total(strategy={n}, rounding=True)",
            f"        self.audit.record('total', total_{n}, attempt={n})",
            f"        return self.currency.normalise(total_{n}, places={n + 2})",
        )
        a.call("bash", RESTORE, shell(0))
        verdicts.append(await turn(a))
        verdicts.append(await apply(a, script(f"fix_{n}.py", other)))
    assert not any(verdicts)


async def test_restoring_another_file_does_not_link_the_fixes() -> None:
    a = agent()
    verdicts = [await apply(a, script("fix.py", FIX))]
    for _ in range(4):
        a.call("bash", {"command": "git checkout src/shop/orders.py"}, shell(0))
        verdicts.append(await turn(a))
        verdicts.append(await apply(a, sed(FIX)))
    assert not any(v for v in verdicts if v and v.source == "heuristic:reapply")


async def test_edit_rerun_edit_rerun_is_progress() -> None:
    a = agent()
    verdicts = []
    for n in range(8):
        lines = (
            f"        discount_{n} = self.coupon.rate_{n} if self.coupon else 0",
            f"        return round(self.subtotal() * (1 - discount_{n}), {n})",
        )
        a.call("bash", sed(lines), shell(0))
        verdicts.append(await turn(a))
        # Each edit moves the failure on: the agent learns something every round.
        word = ("coupon", "rounding", "currency", "tax", "shipping", "bundle", "refund", "gift")[n]
        a.call("bash", TEST, shell(1, f"AssertionError: {word} case wrong"))
        verdicts.append(await turn(a))
    assert not any(verdicts)


async def test_the_cycle_survives_a_saved_state() -> None:
    a = agent()
    await apply(a, script("fix.py", FIX))
    for edit in (sed(FIX), patch(FIX)):
        a.call("bash", RESTORE, shell(0))
        await apply(a, edit)
    a.tracker = LoopTracker.from_state(CONFIG, a.tracker.state.model_dump_json())
    a.call("bash", RESTORE, shell(0))
    assert not await turn(a)
    verdict = await apply(a, script("fix_v4.py", FIX))
    assert verdict and verdict.source == "heuristic:reapply"


# -- a refused editor call re-sent ----------------------------------------------------------


def str_replace(old: str, new: str) -> dict[str, str]:
    return {"command": "str_replace", "path": "tests/test_cart.py", "old_str": old, "new_str": new}


STALE = "from .models import Cart, Coupon\n\nfrom .helpers import make_cart"
NOT_FOUND = observation(f"String '{STALE}' not found in tests/test_cart.py")


async def test_the_same_stale_old_str_refused_three_times_is_a_loop() -> None:
    a = agent()
    verdicts = []
    for n in range(3):
        a.call("str_replace_editor", str_replace(STALE, f"from .models import Cart{n}"), NOT_FOUND)
        verdicts.append(await turn(a))
        # A successful edit elsewhere in between: a new edit epoch, the same stale target.
        a.call(
            "str_replace_editor",
            str_replace(f"def test_total_{n}(self):", f"def test_total_{n}_rounds(self):"),
            observation(f"The file tests/test_cart.py has been edited. (edit {n})"),
        )
        verdicts.append(await turn(a))
    assert not any(verdicts[:4])
    assert verdicts[4] and verdicts[4].source == "heuristic:reapply"


async def test_refusals_of_different_targets_are_exploration() -> None:
    a = agent()
    verdicts = []
    for n in range(5):
        old = f"from .models import Cart{n}, Coupon"
        a.call(
            "str_replace_editor",
            str_replace(old, "from .models import Cart"),
            observation(f"String '{old}' not found in tests/test_cart.py"),
        )
        verdicts.append(await turn(a))
        a.call(
            "str_replace_editor",
            {"command": "view", "path": "tests/test_cart.py", "view_range": [1, 10 + n]},
            observation(f"Here's the result of running `cat -n`: line {n}"),
        )
        verdicts.append(await turn(a))
    assert not any(v for v in verdicts if v and v.source == "heuristic:reapply")


# -- the same broken inline script ----------------------------------------------------------


def inline(n: int) -> dict[str, str]:
    """python -c with a triple-quoted string inside double quotes: bash ends the string."""
    return {
        "command": f"cd /testbed && python -c \"\nold = '''    def total_{n}(self):\n"
        f'        """Sum the cart."""\n\'\'\'\n"'
    }


UNTERMINATED = shell(
    2,
    "  File \"<string>\", line 2\n    old = '''    def total(self):\n          ^\n"
    "SyntaxError: unterminated triple-quoted string literal (detected at line 3)\n"
    "bash: line 4: Sum: command not found",
)


async def test_the_same_parse_error_in_inline_code_three_times_is_a_loop() -> None:
    a = agent()
    verdicts = []
    for n in range(3):
        a.call("bash", inline(n), UNTERMINATED)
        verdicts.append(await turn(a))
        # Something else in between: a new fix script, run.
        a.call("bash", script(f"fix_{n}.py", (f"        total_{n} = self.compute()",)), shell(0))
        verdicts.append(await turn(a))
    assert not any(verdicts[:4])
    assert verdicts[4] and verdicts[4].source == "heuristic:reapply"


async def test_a_repository_syntax_error_seen_through_python_c_is_edit_and_rerun() -> None:
    # The traceback passes through <string> into the repository: the repository is broken,
    # the agent edits it and re-checks; the same error after different edits is debugging.
    broken = shell(
        1,
        'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
        '  File "/testbed/src/shop/cart.py", line 41\n    "unterminated\n    ^\n'
        "SyntaxError: unterminated string literal (detected at line 41)",
    )
    a = agent()
    verdicts = []
    for n in range(5):
        a.call("bash", sed((f"        label_{n} = 'Total for cart number {n}'",)), shell(0))
        verdicts.append(await turn(a))
        a.call("bash", {"command": 'python -c "import shop.cart"'}, broken)
        verdicts.append(await turn(a))
    assert not any(v for v in verdicts if v and v.source == "heuristic:reapply")


# -- reading commands -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "files"),
    [
        ("git checkout -- django/forms.py", ("django/forms.py",)),
        ("cd /testbed && git checkout ./a/b.py 2>&1", ("a/b.py",)),
        ("git restore --staged src/x.py src/y.py", ("src/x.py", "src/y.py")),
        ("git checkout -b feature", ()),
        ("git checkout main", ()),
        ("cp grid.py.backup grid.py", ("grid.py",)),
        ("cd /testbed && mv -f pkg/m.py.orig pkg/m.py", ("pkg/m.py",)),
        ("cp pkg/m.py pkg/m.py.bak", ()),  # making a backup restores nothing
        ("cp a.txt b.txt", ()),
    ],
)
def test_which_commands_restore_files(command: str, files: tuple[str, ...]) -> None:
    assert restored_files(command) == files


@pytest.mark.parametrize(
    "command",
    [
        "a" * 1_000_000,
        "cp " * 300_000,
        "cp " + "-a " * 300_000,
        "git checkout " * 100_000,
        ("x/" * 50_000) + ".py",
        "\\n".join(["  discount = self.coupon.rate if x else 0"] * 50_000),
    ],
)
def test_hostile_commands_take_linear_time(command: str) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(4):
        history += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": {"command": command}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{n}", "content": shell(0)},
        ]
    builder, detector = StepBuilder(), ReapplyDetector()
    # CPU time: other work on a shared machine stretches the wall clock, not this.
    started = time.process_time()
    for msg in normalize_history(history):
        for step in builder.feed(msg):
            detector.observe(step)
    assert time.process_time() - started < 2.0


@pytest.mark.slow
def test_memory_stays_bounded_over_a_long_run() -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    commands = []
    for n in range(300):
        lines = tuple(f"    value_{n}_{j} = compute_total(part={j}, run={n})" for j in range(80))
        commands += [script(f"fix_{n}.py", lines)["command"], f"git checkout pkg/f{n % 40}.py"]
        commands[-2] = commands[-2].replace(TARGET, f"pkg/f{n % 40}.py")
    for n, command in enumerate(commands):
        history += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": {"command": command}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{n}", "content": shell(0)},
        ]
        history += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"e{n}",
                        "type": "function",
                        "function": {
                            "name": "str_replace_editor",
                            "arguments": str_replace(f"stale {n}", "x"),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"e{n}", "content": observation("not found")},
        ]
    builder, detector = StepBuilder(), ReapplyDetector()
    for msg in normalize_history(history):
        for step in builder.feed(msg):
            detector.observe(step)
    assert len(detector._files) == reapply.TRACKED_FILES
    assert all(len(undone) <= reapply.UNDONE_LINES for undone, *_ in detector._files.values())
    assert len(detector._recent) == reapply.RECENT_EDITS
    assert all(len(lines) <= reapply.LINES_PER_EDIT for _, lines, _ in detector._recent)
    assert len(detector._refused) == reapply.TRACKED_TARGETS
