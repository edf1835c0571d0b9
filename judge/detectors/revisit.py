"""Reading again what was already read, with nothing changed since.

Two shapes of one loop that identical-call counting misses:

- the same target re-read in a row with an unchanged result, the call identical or worded a
  little differently: ``ls ./src``, ``ls src/``, ``ls /repo/src``; a creeping ``max_depth``
  or ``limit`` (numbers are not part of the target) returning the same tree each time;
- an exploration that keeps coming back to content it has already seen: a file region
  viewed, another file, the same region again, the same search again; paging that wraps
  around to windows it showed before.

A read is a step of a read-only tool (`ToolClass.EXPLORE`, an editor's ``view`` command, a
read-only shell command, or a tool given nothing but URLs, which fetches them) that returned
data. Its target is the path, URL or query it
names; a read-only tool that names none of them (``get_weather(city="Paris")``) is read by
its other arguments, so the rule is the same whatever the tool is called. Only a status
poll (a tool named for a status, job or wait) keeps the explore class's longer limit.
A new file change starts everything over: reading a file again after editing it is how an
agent checks its work. A person's message ends a run in a row: "read it again" from the
user is not the agent looping. A tool whose ``tool_limits`` is 0 is never counted.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Mapping
from hashlib import blake2b
from typing import Any

from judge.detectors.base import LOOP_SCORE, SUSPICION_CAP, Event, Finding, near_miss, short
from judge.detectors.outcome import Outcome
from judge.detectors.steps import Step
from judge.detectors.tool_classes import ToolClass, classify_tool
from judge.history import Message, ToolCall
from judge.user_turns import is_observation, is_recovery
from judge.verdict import LoopKind

# Same target, unchanged result, nothing in between: reads allowed in a row before the next
# is a loop. Measured on evals/data, evals/coding_dev and evals/unseen_dev (longest such run
# per trajectory, before the onset for loops), URLs read by any tool that names nothing else:
#   productive  data 87: 0 or 1 | coding_dev 81: 1 (76), 2 (5) | unseen_dev 68: 0 or 1
#   looping     data 68, coding_dev 19, unseen_dev 15: 0 or 1 before the onset
# The five runs of 2 are all shell commands (grep, then sed, of one file). A read named by a
# tool's own arguments (a path, URL, query) asks for the same thing each time, so a third
# identical answer in a row is a loop; no labelled productive run reads one twice unchanged.
READ_RUN_LIMIT = 2
# A shell read's target is only the files its command names (`_command_target`): different
# commands over one file (grep for a pattern, then sed of a range) may print the same lines,
# so they keep a read of margin over the longest productive run above (2).
SHELL_READ_RUN_LIMIT = 3
# Recent steps searched for content read before (the exact-repeat detector's recur_window).
REVISIT_WINDOW = 12
# Reads within the window, since the last file change, that return to a result already seen
# after a different one. Measured with the window above: 2 productive runs (of 168) and 3
# loops (of 87) reach 2 returns, none of the productive runs more; so 2 asks the judge early
# (moatless sympy-23262 is then caught six turns after onset by the oracle judge, where the
# gated schedule never asked) and 4 is a loop on its own.
REVISIT_SUSPECT = 2
REVISIT_LOOP = 4

# Argument names whose value is what a call reads: a path, a URL, a query.
_PATH_KEYS = frozenset(
    {"path", "file", "file_path", "filepath", "filename", "dir", "directory", "cwd", "root"}
)
_QUERY_KEYS = frozenset({"query", "q", "pattern", "regex", "search", "search_term", "glob"})
# Arguments walked per call, and characters kept per value: real calls name a few targets.
_MAX_LEAVES = 32
_MAX_VALUE_CHARS = 300
# Tools whose latest read is remembered: agents use a few dozen tools at most.
_MAX_TOOLS = 64
# A read-only shell command: what it prints is the whole effect (its first word decides;
# ``cd DIR &&`` in front is skipped). Only the head of the command is looked at.
_COMMAND_HEAD_CHARS = 200
_READ_ONLY_COMMAND = re.compile(
    r"\s{0,8}(?:cd\s{1,8}[^\s;&|]{1,200}\s{0,8}&&\s{0,8})?"
    r"(?P<command>cat|nl|head|tail|less|more|wc|ls|tree|find|grep|egrep|rg|ag|stat|file|"
    r"sed\s{1,8}-n|awk|git\s{1,8}(?:show|log|diff|status|grep|blame))\b"
)
_URL = re.compile(r"[a-z][a-z0-9+.-]{0,16}://", re.IGNORECASE)
# Name parts of tools that watch something run over time (a status, a job, a build or a
# deployment): the same answer again is the wait going on, which the explore class limit
# (10 in a row) bounds. A read of anything else answers the same until something changes.
_POLL_PARTS = frozenset(
    {
        "status", "state", "poll", "wait", "await", "watch", "progress", "health", "ping",
        "job", "jobs", "task", "tasks", "queue", "build", "builds", "ci", "pipeline",
        "workflow", "run", "runs", "deploy", "deployment", "deployments", "rollout",
        "operation", "export", "import", "migration", "log", "logs", "tail", "result",
        "results",
    }
)  # fmt: skip
# The target of a shell command that reads files: the files it names follow.
_SHELL_TARGET = "sh:"
# The target of a read named by its arguments alone: a digest of them follows.
_ARGUMENTS_TARGET = "arg:"
# Canonical arguments of a call that names nothing (judge.history.canonical_arguments).
_NO_ARGUMENTS = frozenset({"", "{}", "[]", "null"})
_NAME_SPLIT = re.compile(r"[_\-.:/\s]+|(?<=[a-z])(?=[A-Z])")
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
_NON_WORD = re.compile(r"[^0-9a-z]+")
_SHELL_WORD = re.compile(r"[^\s'\"]{1,300}")


def _leaves(value: Any, key: str, out: list[tuple[str, str]]) -> None:
    """String arguments with the name they were given under (bounded walk)."""
    if len(out) >= _MAX_LEAVES:
        return
    if isinstance(value, str):
        out.append((key, value[:_MAX_VALUE_CHARS]))
    elif isinstance(value, dict):
        for k, v in value.items():
            _leaves(v, str(k).lower(), out)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, key, out)


def _pathlike(text: str) -> bool:
    """``src/app``, ``settings.py``: a value that names a file or folder."""
    if not text or text.startswith("-") or any(c.isspace() for c in text):
        return False
    return "/" in text or _EXTENSION.search(text) is not None


def _path(text: str) -> str:
    """``./src``, ``src/``, ``/repo/src`` all name ``src``: the last component. Read results
    are compared too, so two files with one name never pass for one read."""
    parts = [p for p in text.strip().strip("'\"").split("/") if p and p != "."]
    return parts[-1] if parts else "/"


def _url(text: str) -> str:
    """The page a URL names. The fragment (``#section``) only scrolls the page the server
    sends, so it never changes what a fetch reads; query parameters are sorted, since
    their order does not change the resource either."""
    text = text.strip()
    scheme = _URL.match(text)
    text = (text[scheme.end() :] if scheme else text).split("#", 1)[0]
    base, _, query = text.partition("?")
    base = base.rstrip("/").lower()
    if not query:
        return base
    return base + "?" + "&".join(sorted(query.lower().split("&")))


def _query(text: str) -> str:
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


def _command_target(command: str) -> str | None:
    head = command[:_COMMAND_HEAD_CHARS]
    matched = _READ_ONLY_COMMAND.match(head)
    if matched is None:
        return None
    words = _SHELL_WORD.findall(head, matched.start("command"))
    names = sorted({_path(w) for w in words if _pathlike(w) and not _URL.match(w)})
    return _SHELL_TARGET + ",".join(names) if names else None


def _polls(name: str) -> bool:
    return any(part.lower() in _POLL_PARTS for part in _NAME_SPLIT.split(name) if part)


def read_target(step: Step) -> str | None:
    """What a read-only step reads, normalized (None: not a read of a named target)."""
    return call_target(step.call)


def call_target(call: ToolCall) -> str | None:
    """What a read-only call reads, normalized (None: not a read of a named target)."""
    leaves: list[tuple[str, str]] = []
    _leaves(call.parsed, "", leaves)
    commands = [v for k, v in leaves if k in ("command", "cmd")]
    tool_class = classify_tool(call.name)
    explore = tool_class is ToolClass.EXPLORE or "view" in commands
    if not explore and tool_class is ToolClass.OTHER and leaves:
        # A call that names nothing but URLs (``visit_webpage(url)``, ``download(url)``)
        # fetches them, whatever the tool is called; a side effect has a name that says
        # so (`ToolClass.MODIFY`: post, send, submit) or arguments besides the address.
        explore = all(_URL.match(value) for _, value in leaves)
    if not explore:
        shell = next((v for v in commands if v != "view"), None)
        return _command_target(shell) if shell is not None else None
    targets = []
    for key, value in leaves:
        if _URL.match(value):
            targets.append("url:" + _url(value))
        elif key in _PATH_KEYS or (key not in _QUERY_KEYS and _pathlike(value)):
            targets.append("path:" + _path(value))
        elif key in _QUERY_KEYS:
            targets.append("q:" + _query(value))
    if not targets and call.canonical not in _NO_ARGUMENTS and not _polls(call.name):
        # No path, URL or query: the arguments themselves (numbers too) name what is read.
        # A digest: they may hold anything, a secret included, and only equality matters.
        digest = blake2b(call.canonical.encode("utf-8", "replace"), digest_size=8).hexdigest()
        targets = [_ARGUMENTS_TARGET + digest]
    return "|".join(sorted(set(targets))) if targets else None


class RevisitDetector:
    """Counts unchanged re-reads of one target in a row, and returns to content already
    read within the recent window, both since the last new file change."""

    name = "revisit"
    # call steps, and user messages: a person's words between two reads break the run
    # Attributes that make up the detector's state (serialized by LoopTracker.state).
    STATE = ("_run", "_window", "_latest", "_current", "_refused", "_run_result", "_run_call")
    # Attributes a state saved before they existed may lack (their reset value is kept).
    STATE_OPTIONAL = frozenset({"_refused", "_run_result", "_run_call"})

    def __init__(
        self,
        unlimited: Callable[[str], bool] | None = None,
        tool_limits: Mapping[str, int] | None = None,
    ) -> None:
        # Tools whose successful repeats are never a loop (``tool_limits`` of 0): their
        # re-reads in a row are not counted either.
        self._unlimited = unlimited
        # A person's own limit for a tool (``tool_limits``) also bounds its re-reads in a
        # row: they know how often that tool may answer the same.
        self._tool_limits = dict(tool_limits or {})
        self.reset()

    def reset(self) -> None:
        # the current run: (tool, target, result key, edit count, recent call indices, length)
        self._run: tuple[str, str, str, int, tuple[int, ...], int] | None = None
        # recent steps: (tool, result key or "" if not a read, edit count, returned, index)
        self._window: deque[tuple[str, str, int, bool, int]] = deque(maxlen=REVISIT_WINDOW)
        # tool -> the result key of its latest read, for the _MAX_TOOLS tools read last
        self._latest: dict[str, str] = {}
        self._current: Finding | None = None
        # Reads of the current run refused before they ran (`refused`): attempts too.
        self._refused = 0
        # The current run's result as its finding quotes it, and its last call's signature:
        # a preflight can only tell that the identical call would read the same again.
        self._run_result = ""
        self._run_call = ""

    def observe(self, event: Event) -> Finding | None:
        if isinstance(event, Message):
            if event.role == "user" and not (is_observation(event) or is_recovery(event)):
                # A person's words start a new stretch: reading the same pages again for a
                # new question is not a return to content this stretch already read.
                self._run, self._refused = None, 0
                self._window.clear()
                self._latest.clear()
            return self._current
        ok = event.outcome is Outcome.OK
        target = read_target(event) if ok else None
        read = ok and (target is not None or classify_tool(event.call.name) is ToolClass.EXPLORE)
        found = [f for f in (self._track_run(event, target), self._track_returns(event, read)) if f]
        self._current = max(found, key=lambda f: f.score) if found else None
        if read:
            # re-inserted so the oldest tool is the first to go once the map is full
            self._latest.pop(event.call.name, None)
            self._latest[event.call.name] = event.key
            if len(self._latest) > _MAX_TOOLS:
                del self._latest[next(iter(self._latest))]
        return self._current

    def _track_run(self, step: Step, target: str | None) -> Finding | None:
        if target is not None and self._unlimited is not None and self._unlimited(step.call.name):
            target = None
        if target is None:
            self._run, self._refused = None, 0
            return None
        tool, key, edits = step.call.name, step.key, step.edits
        run = self._run
        if run is not None and run[:4] == (tool, target, key, edits):
            indices = (*run[4], step.call_index)[-REVISIT_WINDOW:]
            count = run[5] + 1
        else:
            indices, count = (step.call_index,), 1
            self._refused = 0
        self._run = (tool, target, key, edits, indices, count)
        self._run_result = short(step.result or "", 200)
        self._run_call = step.signature
        return self._run_finding(self._run_result)

    def _run_finding(self, result: str, *, proposed: bool = False) -> Finding | None:
        """The current run's finding, counting refused reads and, for a preflight, the
        read being checked; the count shown is of the reads that ran (the evidence)."""
        if self._run is None:
            return None
        tool, target, _, _, indices, count = self._run
        attempts = count + self._refused + int(proposed)
        limit = self._tool_limits.get(tool) or (
            SHELL_READ_RUN_LIMIT if target.startswith(_SHELL_TARGET) else READ_RUN_LIMIT
        )
        if attempts < limit:
            return None
        looping = attempts > limit
        what = (
            "with the same arguments"
            if target.startswith(_ARGUMENTS_TARGET)
            else repr(short(target.split(":", 1)[-1], 40))
        )
        summary = (
            f"{tool} read {what} {count}x in a row "
            "and got the same result each time, with nothing changed in between"
        )
        if proposed:
            summary += f"; attempt {attempts} refused"
        elif self._refused:
            summary += f"; {self._refused} more attempt(s) refused"
        details: dict[str, object] = {
            "tool": tool,
            "target": short(target, 120),
            "count": count,
            "limit": limit,
            "result": short(result, 200),
        }
        if attempts != count:
            details["attempts"] = attempts
        return Finding(
            detector=self.name,
            kind=LoopKind.EXACT_REPEAT,
            score=LOOP_SCORE if looping else near_miss(attempts, limit),
            evidence=indices,
            summary=summary,
            pattern=f"revisit:{tool}:{short(target, 60)}",
            details=details,
        )

    def _extends_run(self, call: ToolCall) -> bool:
        """Whether ``call`` is the run's own call again. Only the identical call: a read
        of the same target worded differently (another offset, page or range) may well
        return something new, which only its result can tell, at the next turn."""
        if self._run is None or call.signature != self._run_call:
            return False
        return self._unlimited is None or not self._unlimited(call.name)

    def preflight(self, call: ToolCall) -> Finding | None:
        """What ``call``, made next, would bring (`judge.detectors.base.Preflight`): a read
        of the current run's target extends it as if its result repeats."""
        if not self._extends_run(call):
            return None
        finding = self._run_finding(self._run_result, proposed=True)
        if finding is None or finding.score >= LOOP_SCORE:
            return finding
        return finding if finding.score >= SUSPICION_CAP else None

    def refused(self, call: ToolCall) -> Finding | None:
        """``call`` was refused before it ran (`judge.detectors.base.Refusal`): a read of
        the current run's target counts as one more attempt."""
        if self._extends_run(call):
            self._refused += 1
            self._current = self._run_finding(self._run_result)
        return self._current

    def _track_returns(self, step: Step, read: bool) -> Finding | None:
        tool, key, edits = step.call.name, step.key, step.edits
        returned = (
            read
            and self._latest.get(tool, key) != key
            and any(t == tool and k == key and e == edits for t, k, e, _, _ in self._window)
        )
        self._window.append((tool, key if read else "", edits, returned, step.call_index))
        returns = [i for t, _, e, r, i in self._window if r and e == edits]
        if len(returns) < REVISIT_SUSPECT:
            return None
        looping = len(returns) >= REVISIT_LOOP
        return Finding(
            detector=self.name,
            kind=LoopKind.ALTERNATION,
            score=LOOP_SCORE if looping else SUSPICION_CAP,
            evidence=tuple(returns),
            summary=f"{len(returns)} of the last {len(self._window)} calls read again what "
            "an earlier call already showed, with no file changed since",
            pattern=f"revisit-return:{tool}",
            details={"tool": tool, "count": len(returns), "limit": REVISIT_LOOP - 1},
        )
