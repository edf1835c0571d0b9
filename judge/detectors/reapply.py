"""The same fix made again: after restoring the file, or after the editor refused it.

Re-running a test between edits is progress while the edits differ (`judge.detectors.edits`
counts only new ones). Two shapes of real coding runs are not: the agent restores a file
(``git checkout f``, ``cp f.bak f``) and re-applies the change it just undid, by a new
mechanism each time (a script, then ``sed``, then a patch), failing the same way; or it
re-sends an editor call whose target text the editor has already said is not there,
changing only the replacement. Edit counting cannot see either: a script that writes the
same lines differently is a new edit, and a refused edit is no edit at all.

- Restore-and-reapply: each restore of a file closes an interval; an interval in which the
  agent writes again lines it wrote before a restore of that file (at least
  `SHARED_LINES` of them) re-applies the undone fix. `RESTORE_CYCLES` such intervals are
  a loop: the fourth application of one fix.
- Refused edit: an editor call with the same file and the same target text (``old_str``)
  failing with the same error `SAME_EDIT_FAILURES` times, whatever happened between.
- Broken script: the agent's own inline code (``python -c``) failing to parse with the
  same error `SAME_SCRIPT_ERRORS` times: the quoting mistake made again.

Only recent evidence adds up. Long productive coding runs restore a file and re-apply a
fix now and then as they try one idea after another: two such rounds at turn 60 and a
third at turn 200 are three separate decisions, not one loop. So re-applying intervals
count only while consecutive (a restore followed by a different fix, or by none, starts
the count again) and within `SPAN_STEPS` steps of one another, and a refused
edit or a broken script counts only its repeats within `SPAN_STEPS` steps.

Commands are read up to a bounded head, with string operations and patterns that each
start at a literal word and cannot backtrack across it, and remembered as short digests:
time is linear in the new text and state stays bounded on any input.
"""

from __future__ import annotations

import re
from collections import deque
from hashlib import blake2b
from typing import Any

from judge.detectors.base import LOOP_SCORE, Event, Finding, near_miss, short
from judge.detectors.edits import edited_file, modifies_files
from judge.detectors.steps import Step
from judge.verdict import LoopKind

# Restore intervals that re-apply an undone fix before it is a loop. Measured on
# evals/coding_dev (this module's counts): productive runs restore one file up to 4 times
# (sphinx-9258) and re-apply undone lines after at most 2 of the restores (8 runs at 2:
# django-11564, -12113, -12908, pydicom-1413, sympy-13091, astroid-1196, -1268,
# marshmallow-1359; the labels' "bounded 3-attempt retry"); the labelled restore/re-apply
# loops reach 3 (django-12589, django-14855) and 4 (pyvista-4315). evals/data: 0 anywhere.
RESTORE_CYCLES = 3
# Steps (completed calls) within which the evidence of one loop must fall: a re-applying
# interval, refused edit or script error counted longer ago than this is forgotten.
# Measured on evals/coding_dev, from the first counted event to the one that flags: the
# re-apply loops take 6 (django-14855), 17 (pyvista-4315) and 18 steps (django-12589), the
# refused edits 4 to 8, the broken script 7. Twice the longest leaves room for an agent
# that reads and tests more between its rounds, and is a sixth of the 200-plus steps over
# which long productive runs restore and re-apply a fix now and then.
SPAN_STEPS = 36
# Lines an edit must share with undone edits of the file to re-apply them. One shared line
# is often a signature or a call site any fix of that function repeats; the loops share 2
# to 17 (django-14855's sed re-inserts 2 lines of its scripts' 4-line fix).
SHARED_LINES = 2
# Lines shorter than this (after collapsing whitespace) are syntax, not a fix: "else:",
# "return None", "try:".
MIN_LINE_CHARS = 16
# Lines kept per edit: a fix is a few dozen lines; a 300-line script repeats boilerplate.
LINES_PER_EDIT = 32
# Undone lines remembered per file (digests): several whole attempts.
UNDONE_LINES = 128
# Commands are read up to here: fix scripts written with a heredoc run to a few thousand
# characters (django-11564's are 2.5k to 4k).
PAYLOAD_HEAD_CHARS = 8000
# Recent edits remembered to learn, at a restore, what it undid.
RECENT_EDITS = 16
# Files followed at once; a fix touches a few.
TRACKED_FILES = 8
# Files taken from one command: a script names the file it edits in its first lines.
NAMES_PER_EDIT = 16
# Extensions of the files followed (``self.items`` and ``f.read`` name no file).
_FILE_EXTENSIONS = frozenset(
    {"py", "pyi", "pyx", "js", "jsx", "ts", "tsx", "go", "rs", "java", "kt", "c", "h", "cc",
     "cpp", "hpp", "cs", "rb", "php", "swift", "scala", "sh", "toml", "cfg", "ini", "txt",
     "rst", "md", "json", "yaml", "yml", "html", "css", "xml", "sql"}
)  # fmt: skip
MAX_PATH_CHARS = 200
# The same refused editor call (same file, same target text, same error) this many times
# is a loop. Measured on evals/coding_dev: no productive run sends one refused target text
# twice (retries change it); the labelled Moatless loops send theirs 3 times (django-15814,
# django-15819). evals/data: 0 anywhere.
SAME_EDIT_FAILURES = 3
# Refused targets followed at once.
TRACKED_TARGETS = 16
# The agent's own inline code (``python -c "..."``) failing to parse with the same error
# this many times is the same mistake made again, whatever changed between. Measured on
# evals/coding_dev and evals/data: no productive run repeats one such parse error; the
# labelled loop django-14667 repeats its unterminated-triple-quote error 3 times (118,
# 120, 132).
SAME_SCRIPT_ERRORS = 3
# Where a parse error of the command's own code shows: Python names the code "<string>"
# (python -c) or "<stdin>" (a heredoc piped to python) in the frame it cannot parse.
_INLINE_FRAMES = ('File "<string>"', 'File "<stdin>"')
_PARSE_ERRORS = ("SyntaxError", "IndentationError", "TabError")

# Lines that read or write the file, print, import: plumbing every fix script shares.
_PLUMBING = re.compile(
    r"open\(|\.read|\.write|print\(|sys\.path|^(?:import |from \S+ import|#|EOF|cat |python|with )"
)
# Where a command's words end: whitespace, quotes, brackets, shell operators.
_WORD_SPLIT = re.compile(r"[\s'\"`(),;=<>|&:\[\]{}]+")
_GIT_RESTORE = re.compile(r"\bgit\s+(?:checkout|restore)\b([^;&|\n]*)")
_COPY = re.compile(r"(?:^|[\s;&|(])(?:cp|mv)\s+((?:-[a-zA-Z]+\s+)*)(\S+)\s+(\S+)")
_BACKUP_SUFFIXES = (".bak", ".orig", ".backup", ".save", ".old")
# One is taken off a path: the working directory's, or a diff header's a/ and b/.
_PATH_PREFIXES = ("./", "/testbed/", "/repo/", "/workspace/", "a/", "b/")
# Argument names that say where an editor edits (the rest is the new text).
_TARGET_KEYS = ("command", "old_str", "old_string", "old_text", "search", "insert_line")
# Argument names that hold the text an editor writes.
_CONTENT_KEYS = ("new_str", "new_string", "new_text", "file_text", "content", "text", "code")


def _digest(text: str) -> str:
    return blake2b(text.encode("utf-8", "replace"), digest_size=6).hexdigest()


def _path(word: str) -> str:
    word = word.strip()
    for prefix in _PATH_PREFIXES:
        if word.startswith(prefix):
            return word[len(prefix) :]
    return word


def _command(step: Step) -> str | None:
    parsed = step.call.parsed
    if isinstance(parsed, dict):
        value = parsed.get("command")
        return value if isinstance(value, str) else None
    return step.call.canonical if parsed is None else None


def restored_files(command: str) -> tuple[str, ...]:
    """The files a shell command puts back as they were: ``git checkout [--] f``, ``git
    restore f``, ``cp f.bak f`` / ``mv f.orig f``."""
    head = command[:PAYLOAD_HEAD_CHARS]
    found: list[str] = []
    for match in _GIT_RESTORE.finditer(head):
        for word in match.group(1).split():
            # Options and refs are no files; a file has a directory or an extension.
            if not word.startswith("-") and ("/" in word or "." in word) and word != ".":
                found.append(_path(word))
    for match in _COPY.finditer(head):
        source, target = match.group(2), _path(match.group(3))
        _, dot, suffix = source.rpartition(".")
        if dot and any(f".{suffix}".startswith(s) for s in _BACKUP_SUFFIXES) and target:
            found.append(target)
    return tuple(dict.fromkeys(p for p in found if p and len(p) <= MAX_PATH_CHARS))


def _sed_text(line: str) -> str:
    """The first and last lines of a sed script without the script around them, so
    ``sed -i '40,42c\\    x = 1\\n    y = 2' f.py`` writes the lines a script writes: the
    command and address before (``40,42c``, ``212s/old/``), the file after."""
    if line.startswith("sed "):
        quote = line.find("'")
        if quote >= 0:
            body = line[quote + 1 :].lstrip("0123456789,$ ")
            if body.startswith("s/"):
                cut = body.find("/", 2)
                body = body[cut + 1 :] if cut >= 0 else body
            elif body[:1] in ("a", "c", "i"):
                body = body[1:]
            line = body.strip()
    quote = line.rfind("'")
    rest = line[quote + 1 :].strip()
    if quote >= 0 and rest and " " not in rest and ("/" in rest or "." in rest):
        line = line[:quote].rstrip().removesuffix("/g").removesuffix("/").rstrip()
    return line


def _lines(text: str) -> tuple[str, ...]:
    """Digests of the lines an edit writes that look like code of a fix."""
    kept: dict[str, None] = {}
    for raw in text[:PAYLOAD_HEAD_CHARS].replace("\\n", "\n").split("\n"):
        line = _sed_text(" ".join(raw.replace("\\", "").split()))
        if line[:2] in ("+ ", "- "):  # a patch's added (or removed) line
            line = line[2:]
        if len(line) < MIN_LINE_CHARS or _PLUMBING.search(line):
            continue
        kept.setdefault(_digest(line))
        if len(kept) >= LINES_PER_EDIT:
            break
    return tuple(kept)


def _name(path: str) -> str:
    """A file as commands name it: the digest of its base name (``helpers.py`` is how a
    command names ``django/contrib/admin/helpers.py`` after ``cd django/contrib/admin``)."""
    return _digest(path.rsplit("/", 1)[-1])


def _names(text: str) -> tuple[str, ...]:
    """The files a command names: words ending in a source, config or docs extension."""
    found: dict[str, None] = {}
    for word in _WORD_SPLIT.split(text[:PAYLOAD_HEAD_CHARS]):
        base = word.rsplit("/", 1)[-1]
        _, dot, extension = base.rpartition(".")
        if dot and extension.lower() in _FILE_EXTENSIONS and len(word) <= MAX_PATH_CHARS:
            found.setdefault(_digest(base))
            if len(found) >= NAMES_PER_EDIT:
                break
    return tuple(found)


class ReapplyDetector:
    """Counts fixes made again after a restore, and editor calls refused the same way."""

    name = "reapply"
    reads_messages = False  # it reasons about call steps only
    STATE = ("_recent", "_files", "_refused", "_current", "_steps", "_when")
    # Attributes a state saved before they existed may lack (their reset value is kept).
    STATE_OPTIONAL = frozenset({"_steps", "_when"})

    def __init__(self, cycles: int = RESTORE_CYCLES, refusals: int = SAME_EDIT_FAILURES) -> None:
        self._cycles = cycles
        self._refusals = refusals
        self.reset()

    def reset(self) -> None:
        # (files the edit names (`_name`), digests of its lines, call index)
        self._recent: deque[tuple[tuple[str, ...], tuple[str, ...], int]] = deque(
            maxlen=RECENT_EDITS
        )
        # file -> (undone line digests, restores, re-applying intervals, this interval
        # already counted, call index of the last restore, evidence)
        self._files: dict[str, tuple[tuple[str, ...], int, int, bool, int, tuple[int, ...]]] = {}
        # refused target -> (times, evidence)
        self._refused: dict[str, tuple[int, tuple[int, ...]]] = {}
        self._current: Finding | None = None
        self._steps = 0  # completed calls seen: the clock of SPAN_STEPS
        # key ("file:" + file, or a refused target) -> the steps at which it was counted
        self._when: dict[str, tuple[int, ...]] = {}

    def _recent_count(self, key: str, limit: int, add: bool = True) -> int:
        """How many times ``key`` was counted within the last SPAN_STEPS steps, this step
        included when ``add``; older ones are forgotten (at most ``limit`` kept)."""
        times = tuple(t for t in self._when.pop(key, ()) if self._steps - t < SPAN_STEPS)
        if add:
            times = (*times, self._steps)[-limit:]
        self._when[key] = times
        while len(self._when) > TRACKED_FILES + TRACKED_TARGETS:
            del self._when[next(iter(self._when))]
        return len(times)

    def observe(self, event: Event) -> Finding | None:
        if not isinstance(event, Step):
            return self._current
        self._current = None  # each finding speaks on the step that completes it
        self._steps += 1
        if event.outcome.failed:
            self._current = self._refusal(event) or self._broken_script(event)
            return self._current
        if not modifies_files(event.call):
            return None
        path = edited_file(event.call)
        if path is not None:
            parsed = event.call.parsed
            text = ""
            if isinstance(parsed, dict):
                text = "\n".join(
                    v for k, v in parsed.items() if isinstance(v, str) and k in _CONTENT_KEYS
                )
            self._edit(event, (_name(_path(path)),), _lines(text))
            return self._current
        command = _command(event)
        if command is None:
            return None
        restored = restored_files(command)
        if restored:
            for file in restored:
                self._restore(file, event.call_index)
            return None
        self._edit(event, _names(command), _lines(command))
        return self._current

    def _restore(self, file: str, index: int) -> None:
        undone, restores, cycles, counted, last, evidence = self._files.pop(
            file, ((), 0, 0, False, -1, ())
        )
        if restores and not counted:
            # The interval this restore closes made a different fix (or none): the cycle
            # is broken, and the count starts again from here.
            cycles, evidence = 0, ()
            self._when.pop(f"file:{file}", None)
        gathered = dict.fromkeys(undone)
        for names, lines, at in self._recent:
            if at > last and _name(file) in names:
                gathered.update(dict.fromkeys(lines))
        kept = tuple(gathered)[-UNDONE_LINES:]
        self._files[file] = (kept, restores + 1, cycles, False, index, evidence)
        while len(self._files) > TRACKED_FILES:
            del self._files[next(iter(self._files))]

    def _edit(self, step: Step, names: tuple[str, ...], lines: tuple[str, ...]) -> None:
        self._recent.append((names, lines, step.call_index))
        if not lines:
            return
        for file, (undone, restores, cycles, counted, last, evidence) in list(self._files.items()):
            if counted or not undone or _name(file) not in names:
                continue
            shared = len(set(lines).intersection(undone))
            if shared < SHARED_LINES:
                continue
            # Consecutive intervals, each within SPAN_STEPS of the newest: older rounds
            # are separate decisions of a long run, not this loop.
            cycles = self._recent_count(f"file:{file}", self._cycles)
            evidence = (*evidence, last, step.call_index)[-2 * cycles :]
            self._files[file] = (undone, restores, cycles, True, last, evidence)
            self._current = Finding(
                detector=self.name,
                kind=LoopKind.SIMILAR_RETRY,
                score=LOOP_SCORE if cycles >= self._cycles else near_miss(cycles, self._cycles),
                evidence=evidence,
                summary=f"{short(file, 50)} restored {restores}x and the undone fix re-applied "
                f"after {cycles} of the restores ({shared} lines written again)",
                pattern=f"reapply:{file}",
                details={"file": short(file, 200), "restores": restores, "count": cycles,
                         "limit": self._cycles - 1},
            )  # fmt: skip

    def _broken_script(self, step: Step) -> Finding | None:
        """The same parse error in the agent's own inline code again.

        Only a parse error whose last frame is the inline code counts: a traceback that
        passes through ``<string>`` into the repository is a test of the repository, and
        re-running it after edits is the edit-and-rerun loop of every coding agent.
        """
        text = step.result or ""
        frame = text.rfind('  File "')
        if frame < 0 or not text.startswith(_INLINE_FRAMES, frame + 2):
            return None
        if not any(error in text[frame:] for error in _PARSE_ERRORS):
            return None
        key = f"script:{step.call.name}:{step.key}"
        times, evidence = self._count(key, step.call_index, SAME_SCRIPT_ERRORS)
        if times < 2:
            return None
        return Finding(
            detector=self.name,
            kind=LoopKind.SIMILAR_RETRY,
            score=LOOP_SCORE
            if times >= SAME_SCRIPT_ERRORS
            else near_miss(times, SAME_SCRIPT_ERRORS),
            evidence=evidence,
            summary=f"the same parse error in the agent's own {step.call.name} code {times}x: "
            f"{short(text[frame:], 80)}",
            pattern=key,
            details=_details(step, times, SAME_SCRIPT_ERRORS),
        )

    def _count(self, key: str, index: int, limit: int) -> tuple[int, tuple[int, ...]]:
        """One more occurrence of ``key``: how many so far, and the newest indices."""
        _, evidence = self._refused.pop(key, (0, ()))
        # Only the repeats within SPAN_STEPS count: the same stale edit sent again much
        # later is a new attempt after other work, not the same mistake in a row.
        times = self._recent_count(key, limit)
        evidence = (*evidence, index)[-times:]
        self._refused[key] = (times, evidence)
        while len(self._refused) > TRACKED_TARGETS:
            del self._refused[next(iter(self._refused))]
        return times, evidence

    def _refusal(self, step: Step) -> Finding | None:
        """The same refused editor call again (only the replacement text changed)."""
        path = edited_file(step.call)
        parsed = step.call.parsed
        if path is None or not isinstance(parsed, dict):
            return None
        target = {k: parsed[k] for k in _TARGET_KEYS if parsed.get(k) not in (None, "null")}
        if not any(k != "command" for k in target):
            return None  # no target text: nothing stale to re-send
        key = _digest(f"{step.call.name}\x00{_path(path)}\x00{sorted(target.items())!r}")
        key = f"{key}:{step.key}"
        times, evidence = self._count(key, step.call_index, self._refusals)
        if times < 2:
            return None
        return Finding(
            detector=self.name,
            kind=LoopKind.SIMILAR_RETRY,
            score=LOOP_SCORE if times >= self._refusals else near_miss(times, self._refusals),
            evidence=evidence,
            summary=f"{step.call.name} sent {times}x with the same target in {short(path, 50)}, "
            f"refused the same way each time: {short(step.result or '', 80)}",
            pattern=f"refused:{key}",
            details=_details(step, times, self._refusals),
        )


def _details(step: Step, times: int, limit: int) -> dict[str, Any]:
    return {
        "tool": step.call.name,
        "count": times,
        "limit": limit - 1,
        "result": short(step.result or "", 200),
        "failing": True,
    }
