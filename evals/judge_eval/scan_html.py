"""``loop-judge scan --html``: one self-contained page with a timeline per run.

Each turn of a run is one mark on its timeline; the turns the tracker flagged, the turns
their evidence cites, the onset and the turns after it (the wasted ones) are each drawn
apart, so a person sees at a glance where a run started going round in circles. Hovering
a mark shows its turn and tools (and a flag's summary); clicking a flagged mark opens its
evidence below the timeline. The page loads nothing from the network: the style and the
few lines of script are inline, so it can be mailed or attached to a ticket as it is.

Only what `judge_eval.scan.RunReport` holds is written, that is the tracker's redacted
verdict texts and redacted tool names, never a message of the run.
"""

from __future__ import annotations

from html import escape

from judge_eval.scan import RunReport, ScanReport, TurnMark

__all__ = ["render_html"]

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem;color:#1d2330;background:#fff}
h1{font-size:1.4rem}h2{font-size:1.05rem;margin:0 0 .3rem}small{color:#667;font-weight:400}
.run{border:1px solid #d8dce4;border-radius:6px;padding:1rem;margin:1rem 0}
.stats{margin:.2rem 0 .6rem;color:#334}
.timeline{display:flex;flex-wrap:wrap;gap:3px;list-style:none;padding:0;margin:.4rem 0}
.turn{width:22px;height:22px;border-radius:3px;background:#cfe8d4;font-size:10px;
 display:flex;align-items:center;justify-content:center;color:#334}
.turn a{color:inherit;text-decoration:none;width:100%;text-align:center}
.turn.wasted{background:#f6dfb8}.turn.evidence{outline:2px solid #c77d00}
.turn.onset{box-shadow:inset 0 -4px 0 #c77d00}
.turn.flagged{background:#d9534f;color:#fff;font-weight:700}
.legend span{display:inline-block;margin-right:1rem}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;
 vertical-align:middle}
details{margin:.3rem 0;padding:.3rem .6rem;background:#fbf3f2;border-left:3px solid #d9534f}
details p{margin:.3rem 0;white-space:pre-wrap}
.problems li{color:#a33}
table{border-collapse:collapse}td,th{padding:.2rem .6rem;border-bottom:1px solid #e3e6ec;
 text-align:right}td:first-child,th:first-child{text-align:left}
"""

# Clicking a flagged mark opens its evidence (a <details> cannot open on :target alone).
_SCRIPT = """
document.addEventListener('click', function (event) {
  var link = event.target.closest('a[data-evidence]');
  if (!link) return;
  var panel = document.getElementById(link.getAttribute('data-evidence'));
  if (panel) { panel.open = true; }
});
"""


def _mark_title(mark: TurnMark) -> str:
    tools = ", ".join(mark.tools) if mark.tools else "no tool call"
    title = f"turn {mark.turn} (message {mark.message_index}): {tools}"
    if mark.flagged:
        title += f"\nLOOP: {mark.kind or '?'} ({mark.source}): {mark.summary or ''}"
    return title


def _timeline(run: RunReport, anchor: str) -> str:
    cited = {t for mark in run.timeline if mark.flagged for t in mark.evidence_turns}
    items = []
    for mark in run.timeline:
        classes = ["turn"]
        if mark.flagged:
            classes.append("flagged")
        if mark.turn in cited:
            classes.append("evidence")
        if run.onset_turn is not None and mark.turn == run.onset_turn:
            classes.append("onset")
        if run.onset_turn is not None and mark.turn > run.onset_turn:
            classes.append("wasted")
        label = str(mark.turn)
        if mark.flagged:
            target = f"{anchor}-turn-{mark.turn}"
            inner = f'<a href="#{target}" data-evidence="{target}">{label}</a>'
        else:
            inner = label
        items.append(
            f'<li class="{" ".join(classes)}" data-turn="{mark.turn}" '
            f'data-message-index="{mark.message_index}" '
            f'title="{escape(_mark_title(mark))}">{inner}</li>'
        )
    return f'<ol class="timeline" aria-label="turns">{"".join(items)}</ol>'


def _evidence(run: RunReport, anchor: str) -> str:
    panels = []
    for mark in run.timeline:
        if not mark.flagged:
            continue
        head = (
            f"turn {mark.turn}: {mark.kind or 'loop'} ({mark.source}, {mark.action}): "
            f"{mark.summary or ''}"
        )
        body = [f'<p class="explanation">{escape(mark.explanation or "")}</p>']
        if mark.analysis:
            body.append(f'<p class="analysis">judge: {escape(mark.analysis)}</p>')
        if mark.evidence:
            indices = ", ".join(map(str, mark.evidence))
            turns = ", ".join(map(str, mark.evidence_turns))
            body.append(f'<p class="cited">evidence: messages {indices} (turns {turns})</p>')
        panels.append(
            f'<details class="flag" id="{anchor}-turn-{mark.turn}" data-turn="{mark.turn}">'
            f"<summary>{escape(head)}</summary>{''.join(body)}</details>"
        )
    return "".join(panels)


def _run(run: RunReport, position: int) -> str:
    anchor = f"run-{position}"
    if run.crash:
        verdict = f"replay failed: {run.crash}"
    elif run.looped:
        verdict = (
            f"looped: {run.kind or 'loop'} from turn {run.onset_turn} (flagged at turn "
            f"{run.flagged_turn}); {run.wasted_turns} turns and {run.wasted_tokens} tokens "
            f"({run.tokens_source}) after the onset"
        )
    else:
        verdict = "no loop found"
    return (
        f'<section class="run" id="{anchor}" data-run="{escape(run.id)}" '
        f'data-looped="{str(run.looped).lower()}">'
        f"<h2>{escape(run.id)} <small>{escape(run.file)} · {escape(run.format)} · "
        f"{run.messages} messages, {run.turns} turns</small></h2>"
        f'<p class="stats">{escape(verdict)}</p>'
        f"{_timeline(run, anchor)}{_evidence(run, anchor)}</section>"
    )


def render_html(report: ScanReport) -> str:
    """The whole report as one HTML document."""
    problems = ""
    if report.problems:
        items = "".join(f"<li>{escape(p.file)}: {escape(p.reason)}</li>" for p in report.problems)
        problems = f'<h2>Files not read</h2><ul class="problems">{items}</ul>'
    legend = (
        '<p class="legend"><span><i style="background:#cfe8d4"></i>turn</span>'
        '<span><i style="background:#d9534f"></i>flagged (click for evidence)</span>'
        '<span><i style="outline:2px solid #c77d00"></i>cited as evidence</span>'
        '<span><i style="background:#f6dfb8"></i>after the onset (wasted)</span></p>'
    )
    mode = "heuristics and the judge" if report.judge else "heuristics only"
    summary = (
        f'<p class="summary">{len(report.runs)} runs, {report.looped} looped '
        f"({mode}); {len(report.problems)} files not read.</p>"
    )
    runs = "".join(_run(run, n) for n, run in enumerate(report.runs))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>loop-judge scan</title><style>{_STYLE}</style></head><body>"
        f"<h1>loop-judge scan</h1>{summary}{legend}{problems}{runs}"
        f"<script>{_SCRIPT}</script></body></html>\n"
    )
