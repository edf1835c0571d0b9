"""Classify a tool result and reduce it to a key for "same result again" comparisons.

Errors are compared after masking what changes between otherwise identical failures
(numbers, hex ids, timestamps, durations, temp paths). Data results are masked far less:
only tokens that differ between two runs of the same command by nature (timestamps, uuids,
object addresses, measured durations, pids, request ids, attempt counters, random temp
names), because two listings that differ by one real number are different data.
"""

from __future__ import annotations

import re
from enum import Enum
from hashlib import blake2b


class Outcome(str, Enum):
    OK = "ok"  # a data result
    ACK = "ack"  # "ok", "File written", or no output at all: says nothing about progress
    NUMBER = "number"  # a bare number: no evidence either way
    EMPTY = "empty"  # nothing, or "no results"
    ERROR = "error"
    MISSING = "missing"  # the call never got a result

    @property
    def failed(self) -> bool:
        return self in (Outcome.ERROR, Outcome.EMPTY)


# Only the start of a result decides whether it is an error: tool wrappers put the verdict
# first, and scanning 10 MB outputs for "error" would flag every log dump.
_HEAD_CHARS = 400
# Acknowledgements are short; anything longer carries data.
_ACK_MAX_CHARS = 80
# Trailers a tool wrapper appends to the output of a failed action: OpenHands renders a
# failed action's observation as its output followed by this line. Only the end of the
# result is looked at, so the cost is bounded whatever the output's size.
_ERROR_TRAILERS = ("[Error occurred in processing last action]",)
# The tail searched for a trailer: the longest trailer plus room for trailing whitespace.
_TAIL_CHARS = max(map(len, _ERROR_TRAILERS)) + 64

_ERROR_START = re.compile(
    # editor tools that refused to change anything (str_replace_editor and kin)
    r"^\s*(?:string\b.{0,80}?\bnot found|the old_str and new_str are the same|"
    r"no replacement was performed|no changes (?:were|have been) made|"
    r"\[?error\]?|err\b|exception|traceback|fatal|failed|failure|invalid|"
    r"cannot|can't|could not|couldn't|unable to|not found|no such|permission denied|"
    r"access denied|forbidden|unauthorized|denied|unknown (?:command|tool|action)|"
    r"command not found|timed? ?out|observation: error|"
    # a harness reporting that the call itself failed
    r"(?:tool|function|command|action)(?: call| execution)? (?:failed|error)\b|"
    r"\w*(?:error|exception)\b[:!]?|\d{3} (?:client|server) error|http (?:error|4\d\d|5\d\d))",
    re.IGNORECASE,
)
_ERROR_ANYWHERE = re.compile(  # strong markers, searched in the head of the result
    r"Traceback \(most recent call last\)|No such file|cannot access|command not found|"
    r"^[\w./-]+: (?:cannot|can't|error|fatal|failed)\b|"
    r"Permission denied|is not recognized as|exit code:? [1-9]|returned non-zero exit status|"
    r"Invalid action|SyntaxError:|TypeError:|NameError:|ModuleNotFoundError:|"
    r"does not exist|syntax error|No exact match found|^\W{0,3}error\b|"
    r"\"error\"\s*:\s*\"|\"status(?:_code)?\"\s*:\s*[45]\d\d\b",
)
_EMPTY = re.compile(
    r"^\s*(?:\[\]|\{\}|null|none|nil|n/a|no (?:more )?(?:results?|matches|items|data|"
    r"output|files?|entries)(?: found)?|0 results?|nothing found|not found)\s*[.!]?\s*$",
    re.IGNORECASE,
)
_ACK = re.compile(
    r"^\s*(?:(?:ok(?:ay)?|done|success(?:ful(?:ly)?)?)\b(?:[\s:,.!-].*)?|"
    r"true|yes|saved|written|updated|"
    r"created|deleted|applied|accepted|completed?|the file .{0,60} has been (?:edited|"
    r"updated|created|written)|(?:file|changes?|edit|update|transfer|operation|command|"
    r"message|email|task)s? (?:\w+ )?(?:written|saved|applied|successful(?:ly)?|"
    r"completed?|created|updated|sent|executed|ran)(?: successfully)?(?: to .{0,60})?)"
    r"\s*[.!]?\s*$",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"^\s*[-+]?\d[\d,_]*(?:\.\d+)?(?:e[-+]?\d+)?\s*%?\s*$", re.IGNORECASE)

# Masks for error texts, most specific first.
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    (
        re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"),
        "<time>",
    ),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"), "<time>"),
    (
        re.compile(
            r"(?:/tmp|/var/folders|/private/var|C:\\Users\\[^\\]+\\AppData\\Local\\Temp)"
            r"[^\s'\":]*"
        ),
        "<tmp>",
    ),
    (re.compile(r"\b0x[0-9a-f]+\b|\b[0-9a-f]{7,}\b", re.I), "<hex>"),
    (
        re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|secs|seconds|m|min|minutes|h|µs|us|ns)\b"),
        "<dur>",
    ),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)


# Error families whose wording varies by tool ("sed: couldn't open ...: Permission
# denied", "PermissionError: [Errno 13] Permission denied") but mean the same obstacle.
_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("permission", r"permission denied|access denied|forbidden|\b403\b|EACCES|EPERM"),
        ("auth", r"unauthori[sz]ed|\b401\b|invalid api key|expired token|not authenticated"),
        ("missing-file", r"no such file or directory|ENOENT|FileNotFoundError"),
        ("command-not-found", r"command not found|is not recognized as an internal"),
        ("rate-limit", r"rate limit|too many requests|\b429\b"),
        ("timeout", r"timed out|timeout"),
    )
)


def error_family(text: str) -> str | None:
    head = text[:_HEAD_CHARS]
    for name, pattern in _FAMILIES:
        if pattern.search(head):
            return name
    return None


def _trailer(text: str) -> str | None:
    """The error trailer ``text`` ends with, if any (a bounded tail is looked at)."""
    tail = text[-_TAIL_CHARS:].rstrip()
    return next((t for t in _ERROR_TRAILERS if tail.endswith(t)), None)


# Shell tools of coding agents wrap a command's output with its exit status, which says
# whether the *tool* failed far better than the output does: mini-swe-agent writes
# ``<returncode>N</returncode>`` and ``<output>...</output>``, OpenHands ends with
# ``[Command finished with exit code N]``. Only the head (or tail) is read: O(1) per result.
_ENVELOPE_HEAD = re.compile(
    r"\s{0,8}<returncode>\s{0,8}(-?\d{1,6})\s{0,8}</returncode>\s{0,8}(?:<output>)?"
)
_ENVELOPE_TAIL = re.compile(r"\[Command finished with exit code (-?\d{1,6})\]\s{0,8}$")
_OUTPUT_CLOSE = "</output>"
# Moatless Tools wraps every observation in this tag, which carries no status.
_OBSERVATION_OPEN = re.compile(r"\s{0,8}<observation>")
_OBSERVATION_CLOSE = "</observation>"


# A line some agent frameworks put before every tool result, naming the call it answers
# ("Call id: call_3"): it says nothing about the result and would hide an "Error:" line
# under it from the verdict, which reads the start of the result.
_CALL_ID_HEADER = re.compile(r"\s{0,8}call[ _-]?id\s{0,4}[:=][^\n]{0,80}\n", re.IGNORECASE)


def unwrap(text: str) -> tuple[str, int | None]:
    """``(output, exit code)`` of a shell tool's result; ``(text, None)`` when the result
    carries no exit status. A leading call-id line is dropped."""
    head = _ENVELOPE_HEAD.match(text[:_HEAD_CHARS])
    if head is not None:
        body = text[head.end() :]
        stripped = body.rstrip()
        if stripped.endswith(_OUTPUT_CLOSE):
            body = stripped[: -len(_OUTPUT_CLOSE)]
        return body, int(head.group(1))
    tail = _ENVELOPE_TAIL.search(text[-_TAIL_CHARS:])
    if tail is not None:
        return text[: len(text) - len(text[-_TAIL_CHARS:]) + tail.start()], int(tail.group(1))
    opened = _OBSERVATION_OPEN.match(text[:_HEAD_CHARS])
    if opened is not None:
        body = text[opened.end() :]
        stripped = body.rstrip()
        if stripped.endswith(_OBSERVATION_CLOSE):
            body = stripped[: -len(_OBSERVATION_CLOSE)]
        return body, None
    header = _CALL_ID_HEADER.match(text[:_HEAD_CHARS])
    if header is not None:
        return text[header.end() :], None
    return text, None


def classify(text: str | None) -> Outcome:
    """What a tool result says about progress.

    With an exit status (see `unwrap`), the status decides whether the tool failed: a
    non-zero status is an error (or "nothing found" when the command printed nothing, as
    ``grep`` does), and a zero status is never one, because a traceback or "Error:" that a
    program under test prints is data the agent asked for.
    """
    if text is None:
        return Outcome.MISSING
    body, status = unwrap(text)
    if status is not None:
        if status != 0:
            return Outcome.ERROR if body.strip() else Outcome.EMPTY
        return _data(body)
    text = body
    if not text.strip():
        return Outcome.ACK  # a tool with nothing to say (think, sleep) did its job
    head = text[:_HEAD_CHARS]
    if _EMPTY.match(head) and len(text) < _ACK_MAX_CHARS:
        return Outcome.EMPTY
    if _ERROR_START.match(head) or _ERROR_ANYWHERE.search(head) or _trailer(text):
        return Outcome.ERROR
    return _data(text)


def _data(text: str) -> Outcome:
    """A result that is not an error: data, or one of the kinds that carry none."""
    if not text.strip():
        return Outcome.ACK
    if len(text) <= _ACK_MAX_CHARS:
        if _NUMBER.match(text):
            return Outcome.NUMBER
        if _ACK.match(text):
            return Outcome.ACK
    return Outcome.OK


def mask(text: str) -> str:
    """The error text with run-to-run noise replaced by placeholders."""
    out = " ".join(text[: _HEAD_CHARS * 4].split())
    for pattern, placeholder in _MASKS:
        out = pattern.sub(placeholder, out)
    return out.lower()


# Tokens of a data result that change on every run of the same command and carry nothing
# about the data: a re-read whose output differs only in these is the same result. Bare
# numbers, percentages and hex digests are left alone: a count, a progress figure or a
# commit hash that moves is progress. Every pattern is anchored on a literal or
# a bounded run of characters, so one pass is linear in the text.
# Each entry: (gate, pattern, placeholder). The pattern is tried only when the gate passes:
# literals one of which the lower-cased text holds, or a regex led by a literal (both are
# C-speed scans, while a pattern is tried at every position): most results hold no
# volatile token, and the gates halve the cost of masking them.


class _SuffixGate:
    """Passes when the lower-cased text holds ``prefix + anchor`` for one of the prefixes.

    Found by visiting only the places the anchor occurs: "id" occurs a handful of times in
    a typical result, while testing each of the request-id gate's 32 literals ("request_id",
    "run-id", ...) with ``in`` scans the whole text 32 times.
    """

    __slots__ = ("_reach", "anchor", "prefixes")

    def __init__(self, anchor: str, prefixes: tuple[str, ...]) -> None:
        self.anchor = anchor
        self.prefixes = prefixes
        self._reach = max(map(len, prefixes))

    def passes(self, lowered: str) -> bool:
        anchor, prefixes, reach = self.anchor, self.prefixes, self._reach
        at = lowered.find(anchor)
        while at != -1:
            if lowered[max(0, at - reach) : at].endswith(prefixes):
                return True
            at = lowered.find(anchor, at + 1)
        return False


_ID_GATE = _SuffixGate(
    "id",
    tuple(
        f"{name}{sep}"
        for name in ("request", "req", "trace", "span", "correlation", "session", "run", "job")
        for sep in ("", " ", "_", "-")
    ),
)


class _ConfirmedGate:
    """Literals one of which the lower-cased text must hold, then a regex that every
    match of the pattern implies, searched in the lower-cased text only when one does.

    For the attempt counter: "try" is in "entry", "registry" and "retry", so the literals
    alone let about a tenth of results through to a costly pass that masks nothing in them;
    a "try" followed by a number is rarer still.
    """

    __slots__ = ("confirm", "literals")

    def __init__(self, literals: tuple[str, ...], confirm: re.Pattern[str]) -> None:
        self.literals = literals
        self.confirm = confirm

    def passes(self, lowered: str) -> bool:
        if not any(literal in lowered for literal in self.literals):
            return False
        return self.confirm.search(lowered) is not None


_Gate = tuple[str, ...] | re.Pattern[str] | _SuffixGate | _ConfirmedGate
_VOLATILE: tuple[tuple[_Gate, re.Pattern[str], str], ...] = (
    (
        re.compile(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"),
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    # a date with a time of day (log lines, "generated at"), a clock time; a bare date is data
    (
        re.compile(r":\d\d:\d\d"),
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?|"
            r"\b\d{1,2}:\d{2}:\d{2}(?:\.\d{1,9})?\b"
        ),
        "<time>",
    ),
    # CPython reprs and C pointers: "<Foo object at 0x7f3a1c2b9d30>"
    (("0x",), re.compile(r"\b0x[0-9a-f]{6,16}\b", re.I), "<addr>"),
    # measured durations: a fraction of a second ("passed in 0.31s"), sub-second units, a
    # progress bar's rate; a whole number of seconds ("timeout 30s") is often a setting
    (
        re.compile(r"\d ?(?:s|ms|us|µs|ns|sec|secs|seconds|it/s|s/it)\b"),
        re.compile(
            r"\b\d{1,9}\.\d{1,9}\s?(?:s|sec|secs|seconds|ms|us|µs|ns)\b|"
            r"\b\d{1,9}\s?(?:ms|us|µs|ns)\b|\b\d{1,9}(?:\.\d{1,9})?\s?(?:it/s|s/it)\b"
        ),
        "<dur>",
    ),
    (
        ("elapsed", "took", "uptime"),
        re.compile(r"\b(?:elapsed|took|uptime)\b[\s:=]{0,3}\d[\d.:hms ]{0,23}", re.I),
        "<dur>",
    ),
    (
        ("pid", "process id"),
        re.compile(r"\b(?:pid|process id)\b[\s:=#]{0,3}\d{1,10}", re.I),
        "<pid>",
    ),
    (
        _ID_GATE,
        re.compile(
            r"\b(?:request|req|trace|span|correlation|session|run|job)[ _-]?id\b"
            r"[\s:=#\"']{0,4}[\w-]{1,64}",
            re.I,
        ),
        "<id>",
    ),
    (
        # Its letters have no case folding beyond ASCII, so the lower-cased text holds
        # "try 3" wherever the pattern's IGNORECASE match finds "TRY 3".
        _ConfirmedGate(("attempt", "try"), re.compile(r"(?:attempt|try)\s{0,2}#?\d")),
        re.compile(
            r"\b(?:attempt|retry|try)\s{0,2}#?\d{1,6}(?:\s{0,2}(?:/|of)\s{0,2}\d{1,6})?", re.I
        ),
        "<try>",
    ),
    # random names of tempfile, mktemp and pytest's tmp_path
    (
        ("tmp", "pytest-of-", "/var/folders/"),
        re.compile(
            r"\btmp[a-z0-9_]{8}\b|/tmp/tmp\.[A-Za-z0-9]{6,12}\b|"
            r"\bpytest-of-[\w.-]{1,64}/pytest-\d{1,9}\b|/var/folders/[^\s'\":]{1,200}"
        ),
        "<tmp>",
    ),
)


# Longer data results are keyed unmasked: a pass whose gate lets it through costs ~1 us a
# character on a busy 2-core machine (100x the digest), and the re-runs this is for (a test
# summary, a status page, an API reply, one screen of a file: all under 4k characters in
# both labelled sets) are short. Unmasked keys only ever miss a repeat, never invent one.
VOLATILE_MAX_CHARS = 8000


def volatile_masked(text: str) -> str:
    """A data result with its run-to-run noise replaced by placeholders (whitespace kept);
    longer than VOLATILE_MAX_CHARS, the text as it is."""
    if len(text) > VOLATILE_MAX_CHARS:
        return text
    lowered = text.lower()
    for gate, pattern, placeholder in _VOLATILE:
        if isinstance(gate, re.Pattern):
            if gate.search(text) is None:
                continue
        elif isinstance(gate, (_SuffixGate, _ConfirmedGate)):
            if not gate.passes(lowered):
                continue
        elif not any(literal in lowered for literal in gate):
            continue
        text = pattern.sub(placeholder, text)
    return text


def _digest(text: str) -> str:
    return blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()


# An exception named in an error line: "ValueError: ...", "InterpreterError: ...".
_EXCEPTION = re.compile(r"\b[A-Z][A-Za-z0-9_]{0,60}(?:Error|Exception)\b:")
# Where an error's exception line is looked for: its last lines. A traceback ends with it;
# a framework's error puts it on one line between its own header and a fixed footer
# ("Now let's retry: ..."), which would make every error of that framework look alike.
_SUBSTANCE_TAIL_CHARS = 2000
_SUBSTANCE_LINES = 8
# Quoted text this long in an error is an echo of the input (the source line that failed,
# the command run), not the kind of error: "failed at line 'x = search(...)' due to: ...".
_LONG_QUOTE = re.compile(r"'[^'\n]{40,400}'|\"[^\"\n]{40,400}\"")


def _exception_line(text: str) -> str | None:
    """The error's last line naming an exception, from the exception on, among its last
    few lines (a bounded tail is read)."""
    lines = text[-_SUBSTANCE_TAIL_CHARS:].splitlines()[-_SUBSTANCE_LINES:]
    for line in reversed(lines):
        found = _EXCEPTION.search(line)
        if found is not None:
            return line[found.start() :]
    return None


# An error of fewer words than this that names no exception or known obstacle is a bare
# rejection ("Invalid action!", "Error."): it does not say what is wrong, so trying other
# things after it is how an agent finds out. The labelled WebShop runs recover after three
# such rejections of different clicks.
BARE_ERROR_WORDS = 4


# A missing file or directory in the words of tools that do not say "No such file or
# directory" (an editor's "The path /x does not exist", "Directory not found: /x"): the same
# obstacle as the missing-file family, so one missing directory reached through ls, an
# editor and a script is one failure. The word, at most a path (or the "<arg>" that stands
# for the call's own argument), then the verdict: "file a.py: function f not found" is about
# something in the file, not the file.
_MISSING_PATH = re.compile(
    r"\b(?:file|directory|folder|path)\b\s{0,3}(?:[:'\"`]?\s{0,3}[\w./~<>\\-]{1,200}['\"`]?\s{0,3})?"
    r"(?:does(?: not|n't) exist|not found|is missing)\b",
    re.IGNORECASE,
)


# What an environment refusing the agent says, whatever the call: spent credits or quota,
# payment, an unreachable service. No change of the call's own input fixes these, so the
# same one again through reworded calls is the agent not taking the answer in; an error
# about the input ("order not found", an assertion) is what trying other inputs is for.
_ENVIRONMENT = re.compile(
    r"not enough credits|out of credits|insufficient (?:credits?|quota|funds|balance)|"
    r"quota (?:exceeded|exhausted)|exceeded (?:your|the) (?:current )?quota|"
    r"payment required|\b402\b|service unavailable|\b503\b|connection refused|"
    r"could not connect|failed to connect|network is unreachable|name or service not known",
    re.IGNORECASE,
)
# Families that are such refusals (the others name the input: a file, a command).
_ENVIRONMENT_FAMILIES = frozenset({"permission", "auth", "rate-limit"})
# A path as error messages print it ("/repo/src", "./a/b", "~/x"), bounded per component.
_PATH = re.compile(r"(?:~|\.{1,2})?/[\w.@+-]{1,100}(?:/[\w.@+-]{1,100}){0,30}")


def missing_paths(text: str) -> tuple[str, ...]:
    """The paths an error names (bounded: its head), without trailing separators."""
    head = unwrap(text)[0][:_HEAD_CHARS]
    return tuple(sorted({p.rstrip("/.") for p in _PATH.findall(head)} - {""}))


def related_paths(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether two sets of paths touch: one path equal to, inside or above another. One
    missing directory reached as ``/work/data``, ``/work/data/train.csv`` and
    ``/work/data/*.csv`` is related throughout; ``/repo/src`` and ``/repo/lib`` are two
    guesses."""
    return any(p == q or p.startswith(q + "/") or q.startswith(p + "/") for p in a for q in b)


def obstacle(text: str, substance: str) -> str:
    """The substance of an error that the same-failure rule may group across calls, or "".

    Only failures that no change of the call's input can fix qualify: an environment's
    refusal (``F:`` families of permission, auth and rate limits; an exception or message
    naming spent credits, quota, payment, an unreachable service), and a missing path (the
    rule compares the paths named, `related_paths`, so that one missing directory reached
    through ``ls``, an editor and a script is one obstacle while three different guessed
    directories are three guesses). Bounded: the head and a tail of the text are read."""
    if not substance or substance.startswith("B:"):
        return ""
    family = substance[2:] if substance.startswith("F:") else None
    if family in _ENVIRONMENT_FAMILIES:
        return substance
    body, _ = unwrap(text)
    head = body[:_HEAD_CHARS]
    if family == "missing-file":
        return substance  # which paths: `missing_paths`, compared by the rule
    tail = body[-_SUBSTANCE_TAIL_CHARS:]
    if _ENVIRONMENT.search(head) or _ENVIRONMENT.search(tail):
        return "O" + substance
    return ""


def error_substance(text: str) -> str:
    """What failed, whichever tool or wording reported it: the error family (``F:``, a
    missing file, a denied permission...), else the exception and its message (``X:``),
    else the first and last lines (``L:``, or ``B:`` for a bare rejection that names
    nothing, see BARE_ERROR_WORDS); masked (numbers, ids, temp names, long quoted echoes of
    the input). Bounded: the head and a tail of the text are read."""
    body, _ = unwrap(text)
    family = error_family(body)
    if family is not None:
        return "F:" + family
    head = body[:_HEAD_CHARS]
    if _MISSING_PATH.search(head):
        return "F:missing-file"
    exception = _exception_line(body)
    if exception is not None:
        return "X:" + _digest(mask(_LONG_QUOTE.sub("<q>", exception[:300])))
    lines = [ln for ln in head.strip().splitlines() if ln.strip()] or [""]
    tail = body[-200:].strip().splitlines() or [""]
    first, last = (_LONG_QUOTE.sub("<q>", ln) for ln in (lines[0][:200], tail[-1]))
    bare = len(head.split(maxsplit=BARE_ERROR_WORDS)) < BARE_ERROR_WORDS
    return ("B:" if bare else "L:") + _digest(mask(first) + "|" + mask(last))


def result_key(text: str | None, outcome: Outcome) -> str:
    """A short key equal for results that count as "the same".

    Errors and empties are masked; data is compared whitespace-normalized with only its
    volatile tokens masked (`volatile_masked`).
    """
    if text is None:
        return "missing"
    body, status = unwrap(text)
    # The envelope is the same for every command: key what the command printed.
    text = f"exit {status}\n{body}" if status is not None and outcome.failed else body
    if outcome.failed:
        # First and last lines: the kind of error and its final message. The middle of a
        # long error (a traceback, the rejected edit echoed back) varies with each attempt.
        family = error_family(text) if outcome is Outcome.ERROR else None
        if family is not None:
            return "E:" + family
        trailer = _trailer(text)
        if trailer is not None:  # the same for every failure: key the message before it
            text = text.rstrip()[: -len(trailer)]
        lines = [ln for ln in text.strip().splitlines() if ln.strip()] or [""]
        last = _exception_line(text) or lines[-1]
        return "E:" + _digest(mask(lines[0][:200]) + "|" + mask(last[-200:]))
    return "D:" + _digest(" ".join(volatile_masked(text).split()))
