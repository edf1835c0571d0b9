"""Assistant text that repeats: whole messages again, or one message stuck on a phrase.

Two messages repeat when what they *say and do* is alike, not when they start alike. Many
models open nearly every reply the same way (a lone "." line, "Let me check ...", a
restated plan): that opening is the model's house style and says nothing about a loop. So
whole leading sentences the two messages share are set aside and the rest is compared; a
long message is read at both ends (its new content is often at the end, behind a
restated context); and two messages that make different tool calls do different things,
whatever their prose. An agent stuck on one reply repeats all of it, opening, body and
call alike, and is still caught.
"""

from __future__ import annotations

import re
from collections import deque

from rapidfuzz import fuzz, utils

from judge.detectors.base import LOOP_SCORE, SUSPICION_CAP, Event, Finding, short
from judge.detectors.outcome import Outcome
from judge.detectors.steps import Step
from judge.history import Message
from judge.user_turns import digest, is_recovery
from judge.verdict import LoopKind

# Messages shorter than this are routine ("Next speaker WebSurfer", "Let me check.") and
# repeat legitimately.
MIN_CHARS = 40
# Compare the head of long messages only: enough to tell two plans apart, and it bounds
# the cost of a turn whatever the agent writes.
COMPARE_CHARS = 1500
# A message longer than COMPARE_CHARS is read as its first and last half of that: two
# replies that restate the same context before saying something new differ at the end.
HALF_COMPARE = COMPARE_CHARS // 2
# Where a sentence ends in whitespace-collapsed text: a common opening is set aside up to
# the last of these inside it, so only whole shared sentences are dropped.
_OPENING_ENDS = (". ", "! ", "? ", ": ")
# Two messages alike as a whole must also be this alike (0..100) once the opening they
# share is set aside: what follows a house-style opening says what the message is about.
# A word in ten: a reply said again in other words ("THOUGHT: Now run `repro.py` again."
# after "THOUGHT: Run `repro.py` again.", 94 once "thought: " is set aside, in a labelled
# debug loop) still counts; "Let me check the parser" after "Let me check the lexer"
# does not.
REST_SIMILARITY = 90
# Separates a message's compared text from its calls in the saved window (a character no
# collapsed text holds; a state saved before calls were kept has none: no calls).
_CALLS_SEP = "\x00"
# How many earlier assistant messages each new one is compared with.
WINDOW = 6
# One message repeating a sentence this many times is degenerate ...
SENTENCE_REPEATS = 3
# ... when the repeats are the message: back to back (a stuck decoder), or together at
# least this share of its prose (a chant with something between). Reasoning that returns
# to the same clause ("that's fine.") or quotes the same line of output three times while
# explaining it is neither: on our labelled coding runs that rule alone made 9 of the 30
# false flags. Half: a two-sentence chant ("A. B. A. B. A. B.") is still caught.
DEGENERATE_SHARE = 0.5
# Sentences shorter than this ("Done.", "Yes, sure.") repeat legitimately ...
MIN_SENTENCE_CHARS = 12
# ... unless one fills a run of this many in a row, nothing else between: "Done. Done.
# Done. ..." A reply may echo a word or two for effect ("No. No. No."), and checklists
# confirm a handful of items ("OK. OK. OK. OK."); eight in a row is twice the longest
# such run we could think of, still caught within a line or two of degenerate output.
SHORT_SENTENCE_RUN = 8
# The same holds for a group of short sentences repeating as a whole ("Thinking... Done.
# Thinking... Done. ..."): each is too short to count and no single one runs in a row,
# yet the group does. Groups of up to this many sentences are looked for ...
MAX_CYCLE_SENTENCES = 4
# ... and one is degenerate once it repeats this many times back to back: twice a single
# sentence's run, since short answers taking turns ("Yes. No. Yes. No.") fill quizzes and
# tables for a while; sixteen rounds is still caught within a few lines of a stream.
CYCLE_REPEATS = 2 * SHORT_SENTENCE_RUN
# A short message (under MIN_CHARS) said this many times in a row (no other assistant
# message, no tool call and no new tool result between) is a loop. The long-message rule
# flags the 3rd near-identical message (balanced preset); short replies are identical far
# more often by chance ("Done.", "You're welcome!" after each thank-you, two or three
# times in real chats), so they need more: five is the smallest run past that.
SHORT_MESSAGE_REPEATS = 5

# Questions re-asked: the same request for information, at least this alike (0..100,
# token-set ratio: "... reference?" and "... reference so I can look it up?" match).
QUESTION_SIMILARITY = 90
MIN_QUESTION_CHARS = 20
# A question asked a fourth time with no new information in between is a loop; asking
# three times is how tau-bench agents politely insist (one dev-split false positive).
QUESTION_EARLIER = 3
# A user message at least this long that differs from the last one is new information
# (a note, a follow-up); shorter ones ("ok", "go on", "How are you?") are nudges.
USER_NEWS_CHARS = 20
# Result keys remembered to tell new information from old.
SEEN_RESULTS = 64
# Message indices cited for a run of short messages: enough to show it, bounded.
MAX_RUN_EVIDENCE = 12

# Splits after each sentence end; questions are the pieces ending in "?". (A pattern like
# "[^.!?]*\?" rescans from every position: quadratic on text with no punctuation.)
_SENTENCE_END = re.compile(r"(?<=[.!?\n])")
_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
# What ends a sentence for `normalized_sentences`, besides a line end.
_SENTENCE_ENDS = (".", "!", "?")
# A word said three times or more in a row. The word is taken whole (possessive: a word
# followed by whitespace can only be the whole word), so no shorter prefix is retried.
_WORD_STUTTER = re.compile(r"\b(\w{2,}+)(?:\s+\1\b){2,}", re.IGNORECASE)
_STRUCTURED_LINE = re.compile(r"^\s*(?:\||[-*+]\s|\d+[.)]\s|#)")
# A short sentence counts towards a run only if it has a letter: a run of "}", "..." or
# "0" lines is layout or data, not speech.
_WORDY = re.compile(r"[^\W\d_]")  # a letter: a column of "0" lines is data, not speech


def prose(text: str) -> str:
    """Text with code blocks, tables, list items and headings removed: these repeat by
    design and must not trip degenerate-text checks."""
    return "\n".join(
        ln for ln in _FENCE.sub(" ", text).splitlines() if not _STRUCTURED_LINE.match(ln)
    )


def degenerate(text: str, body: str | None = None) -> tuple[str, int] | None:
    """(the repeated unit, count) if one message repeats itself, else None.

    ``body`` is ``prose(text)`` when the caller has it already.
    """
    if body is None:
        body = prose(text)
    stutter = _WORD_STUTTER.search(body)
    if stutter:
        # The word, not the run: the run's length depends on when it was read (a stream),
        # and the pattern must not, or an override of one would miss the other.
        return stutter.group(1).lower(), len(stutter.group(0).split())
    counts: dict[str, int] = {}
    sentences = normalized_sentences(body)
    total = sum(len(s) for s in sentences)
    run_unit, run = "", 0  # the sentence repeating back to back right now, and how often
    # per group size p: how many sentences in a row have equalled the one p before
    cycles = [0] * (MAX_CYCLE_SENTENCES + 1)
    for i, norm in enumerate(sentences):
        run = run + 1 if norm == run_unit else 1
        run_unit = norm
        for p in range(2, min(i, MAX_CYCLE_SENTENCES) + 1):
            cycles[p] = cycles[p] + 1 if sentences[i - p] == norm else 0
            if (cycles[p] + p) // p >= CYCLE_REPEATS:
                group = sentences[i - p + 1 : i + 1]
                if len(set(group)) > 1 and _WORDY.search(norm):
                    return _canonical_group(group), (cycles[p] + p) // p
        if len(norm) < MIN_SENTENCE_CHARS:
            if run >= SHORT_SENTENCE_RUN and _WORDY.search(norm):
                return norm, run
            continue
        counts[norm] = counts.get(norm, 0) + 1
        if run >= SENTENCE_REPEATS:
            return norm, run
        if counts[norm] >= SENTENCE_REPEATS and counts[norm] * len(norm) >= (
            DEGENERATE_SHARE * total
        ):
            return norm, counts[norm]
    return None


def _canonical_group(group: list[str]) -> str:
    """A repeating group as one unit, whichever sentence it was caught at: its smallest
    rotation, so a stream read at another moment names the same pattern."""
    rotations = (group[k:] + group[:k] for k in range(len(group)))
    return " ".join(min(rotations))


def normalized_sentences(body: str) -> list[str]:
    """The non-empty sentences of ``body``, lower-cased with whitespace collapsed.

    A sentence ends at a line end, or at whitespace after ".", "!" or "?". Once each line's
    whitespace is collapsed to single spaces, such a cut is a space right after one of
    them, which `str.replace` finds (a regex's lookbehind would be tried at every position).
    """
    lines = "\n".join(" ".join(line.split()) for line in body.lower().split("\n"))
    for end in _SENTENCE_ENDS:
        lines = lines.replace(end + " ", end + "\n")
    return [piece for piece in lines.split("\n") if piece]


def questions(text: str, body: str | None = None) -> list[str]:
    """The questions of a message (its prose's pieces ending in "?"), normalized.

    ``body`` is ``prose(text)`` when the caller has it already. Most messages ask nothing:
    without a "?" (which `prose` never adds) there is nothing to split.
    """
    if "?" not in text:
        return []
    pieces = _SENTENCE_END.split(prose(text) if body is None else body)
    found = (" ".join(q.lower().split()) for q in pieces if q.rstrip().endswith("?"))
    return [q for q in found if len(q) >= MIN_QUESTION_CHARS]


class TextRepetitionDetector:
    """Near-identical assistant messages, re-asked questions, and degenerate text.

    Repetition only counts while nothing new arrives: a tool result with new data starts
    a new epoch, so "still scrolling, not found yet" after each new page is progress.
    """

    name = "text_repetition"
    # Attributes that make up the detector's state (serialized by LoopTracker.state).
    STATE = ("_recent", "_asked", "_seen", "_epoch", "_current", "_run", "_last_user")

    def __init__(self, similarity: float, min_repeats: int) -> None:
        self._similarity = similarity * 100
        self._min_repeats = min_repeats
        self.reset()

    def reset(self) -> None:
        self._recent: deque[tuple[int, str, int]] = deque(maxlen=WINDOW)
        self._asked: deque[tuple[int, list[str], int]] = deque(maxlen=WINDOW)
        self._seen: deque[str] = deque(maxlen=SEEN_RESULTS)
        self._epoch = 0
        self._current: Finding | None = None
        # (text, epoch, count, indices) of the short message repeating in a row right now
        self._run: tuple[str, int, int, tuple[int, ...]] | None = None
        self._last_user = ""

    def observe(self, event: Event) -> Finding | None:
        if isinstance(event, Step):
            if event.outcome is Outcome.OK and event.key not in self._seen:
                self._epoch += 1
                self._seen.append(event.key)
            return self._current
        if event.role == "user" and not is_recovery(event):
            # Someone said something new: "Got it, noted." to six different notes is six
            # short answers, not one stuck reply. A nudge repeated word for word is nothing new,
            # and neither is "ok" or "go on" (shorter than a note: under USER_NEWS_CHARS).
            said = digest(event.content)
            if said != self._last_user and len(event.content.strip()) >= USER_NEWS_CHARS:
                # Only the short-reply run: long near-identical replies to new messages are
                # the agent not listening ("I apologize ... could you tell me the date?").
                self._last_user = said
                self._run = None
            return self._current
        if event.role != "assistant":
            return self._current
        self._current = None
        text = " ".join(event.content.split())
        if len(text) < MIN_CHARS:
            self._current = self._in_a_row(event, text)
            return self._current
        self._run = None  # a longer message breaks a run of short ones
        # Every check runs (each keeps its own memory); the strongest one speaks.
        body = prose(event.content)  # read once for both checks that need it
        found = [
            f
            for f in (
                self._degenerate(event, body),
                self._repeated(event, text),
                self._reasked(event, body),
            )
            if f is not None
        ]
        self._current = max(found, key=lambda f: f.score) if found else None
        return self._current

    def _in_a_row(self, msg: Message, text: str) -> Finding | None:
        """A short message said again, verbatim, right after itself with nothing new.

        A message with tool calls is an action, judged by the call detectors; it breaks
        the run, as does any other assistant message or a tool result with new data.
        """
        if not text or msg.tool_calls:
            self._run = None
            return None
        run = self._run
        if run is not None and run[0] == text and run[1] == self._epoch:
            count, indices = run[2] + 1, (*run[3], msg.index)[-MAX_RUN_EVIDENCE:]
        else:
            count, indices = 1, (msg.index,)
        self._run = (text, self._epoch, count, indices)
        if count < 2:
            return None
        needed = max(SHORT_MESSAGE_REPEATS, self._min_repeats + 1)
        looping = count >= needed
        score = LOOP_SCORE if looping else SUSPICION_CAP * (count - 1) / (needed - 1)
        return Finding(
            detector=self.name,
            kind=LoopKind.TEXT_REPETITION,
            score=round(score, 3),
            evidence=indices,
            summary=f"assistant said {text!r} {count}x in a row with nothing new between",
            pattern=f"text:{short(text.lower(), 60)}",
            details={"text": text, "count": count},
        )

    def _reasked(self, msg: Message, body: str) -> Finding | None:
        # A question asked of someone ends the turn; one beside a tool call is the agent
        # thinking aloud ("maybe the warning comes from __eq__?"), which a debugging agent
        # rightly asks itself again after each experiment.
        asked = [] if msg.tool_calls else questions(msg.content, body)
        earlier = [
            index
            for index, qs, epoch in self._asked
            if epoch == self._epoch
            and any(
                fuzz.token_set_ratio(
                    q, p, processor=utils.default_process, score_cutoff=QUESTION_SIMILARITY
                )
                for q in asked
                for p in qs
            )
        ]
        if asked:
            self._asked.append((msg.index, asked, self._epoch))
        if not earlier:
            return None
        needed = max(QUESTION_EARLIER, self._min_repeats)
        looping = len(earlier) >= needed
        score = LOOP_SCORE if looping else SUSPICION_CAP * len(earlier) / needed
        return Finding(
            detector=self.name,
            kind=LoopKind.TEXT_REPETITION,
            score=round(score, 3),
            evidence=(*earlier, msg.index),
            summary=f"the same question asked {len(earlier) + 1}x: {short(asked[0], 60)!r}",
            pattern=f"question:{short(asked[0], 60)}",
            details={"text": short(asked[0], 200), "count": len(earlier) + 1},
        )

    def _degenerate(self, msg: Message, body: str) -> Finding | None:
        found = degenerate(msg.content, body)
        if found is None:
            return None
        unit, count = found
        return Finding(
            detector=self.name,
            kind=LoopKind.TEXT_REPETITION,
            score=LOOP_SCORE,
            evidence=(msg.index,),
            summary=f"message {msg.index} repeats itself: {short(unit, 60)!r} x{count}",
            pattern=f"degenerate:{short(unit, 60)}",
            details={"text": short(unit, 200), "count": count},
        )

    def _repeated(self, msg: Message, text: str) -> Finding | None:
        head = sample(text).lower()
        # What the message does: its calls, as signatures (bounded: see judge.history).
        calls = " ".join(call.signature for call in msg.tool_calls)[:COMPARE_CHARS]
        similar = [
            index
            for index, other, epoch in self._recent
            if epoch == self._epoch and self._alike(head, calls, other)
        ]
        self._recent.append((msg.index, head + _CALLS_SEP + calls, self._epoch))
        if not similar:
            return None
        looping = len(similar) >= self._min_repeats
        score = LOOP_SCORE if looping else SUSPICION_CAP * len(similar) / self._min_repeats
        return Finding(
            detector=self.name,
            kind=LoopKind.TEXT_REPETITION,
            score=round(score, 3),
            evidence=(*similar, msg.index),
            summary=f"assistant said nearly the same thing {len(similar) + 1}x: "
            f"{short(text, 60)!r}",
            pattern=f"text:{short(head, 60)}",
            details={"text": short(text, 200), "count": len(similar) + 1},
        )

    def _alike(self, head: str, calls: str, saved: str) -> bool:
        """Whether a message (its sampled text and its calls) repeats a saved one: the
        same calls, and the same text once a shared opening is set aside."""
        # The calls' signatures are canonical JSON (never a raw NUL); the text before them
        # may hold one, so the split is at the last separator.
        other, _, other_calls = saved.rpartition(_CALLS_SEP)
        if calls != other_calls:
            # Different calls (a path, a line number: one character is another file) are a
            # different action, whatever the prose says; calls varied around one target
            # are the call detectors' to judge (similar_retry, result_cycle).
            return False
        if not fuzz.ratio(head, other, score_cutoff=self._similarity):
            return False
        cut = opening(head, other)
        rest, other_rest = head[cut:], other[cut:]
        if not rest and not other_rest:
            return True  # the same text throughout
        cutoff = min(self._similarity, REST_SIMILARITY)
        return bool(fuzz.ratio(rest, other_rest, score_cutoff=cutoff))


def sample(text: str) -> str:
    """The part of a (whitespace-collapsed) message that is compared: all of it up to
    COMPARE_CHARS, else its head and its tail, which bounds the cost of a turn."""
    if len(text) <= COMPARE_CHARS:
        return text
    return text[:HALF_COMPARE] + " ... " + text[-HALF_COMPARE:]


def opening(a: str, b: str) -> int:
    """Length of the whole leading sentences ``a`` and ``b`` share (0 if none): their
    common prefix, cut back to its last sentence end, or all of it when it is all of
    either text."""
    n = min(len(a), len(b))
    # The longest common prefix by bisection: a dozen slice comparisons (in C) rather
    # than a Python loop over every character.
    common, high = 0, n
    while common < high:
        mid = (common + high + 1) // 2
        if a[:mid] == b[:mid]:
            common = mid
        else:
            high = mid - 1
    if common == n and (len(a) == n or a[n] == " ") and (len(b) == n or b[n] == " "):
        return common  # one text is the other's whole opening sentences
    shared = a[:common]
    return max((shared.rfind(end) + len(end) for end in _OPENING_ENDS if end in shared), default=0)
