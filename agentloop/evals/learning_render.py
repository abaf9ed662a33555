"""How a learning report looks: a plain-text table, a PNG of the two curves, an HTML fragment."""

from __future__ import annotations

import base64
import html
import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentloop.evals.learning import CurvePoint, LearningReport

MEASURES = (
    ("success_rate", "success rate"),
    ("llm_calls", "LLM calls"),
    ("tool_calls", "tool calls"),
    ("tokens", "tokens"),
)
"""The measures each curve plots, one panel each: the CurvePoint field and its label."""


def _cost(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.6f}"


def _row(point: CurvePoint | None) -> list[str]:
    if point is None:
        return ["", "", "", "", "", ""]
    return [
        f"{point.success_rate:.0%}", f"{point.llm_calls:g}", f"{point.tool_calls:g}",
        f"{point.tokens:g}", _cost(point.cost), f"{point.notes_shown:g}",
    ]


HEADERS = ("success", "LLM calls", "tool calls", "tokens", "cost", "notes shown")


def _rows(report: LearningReport) -> list[list[str]]:
    """One row per session index: the index, then each measure with notes, then without."""
    on = {p.index: p for p in report.curve(note_taking=True)}
    off = {p.index: p for p in report.curve(note_taking=False)}
    return [[str(index), *_row(on.get(index)), *_row(off.get(index))] for index in sorted(on.keys() | off.keys())]


def report_table(report: LearningReport) -> str:
    """Both curves side by side as aligned plain text, with a line saying what each half is, then
    the notes each session of the run with note-taking was shown."""
    header = ["session", *HEADERS, *HEADERS]
    rows = [header, *_rows(report)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]
    half = sum(widths[1:7]) + 2 * 6
    title = f"learning curve of {report.dataset}: per session index, mean over the task families"
    halves = " " * (widths[0] + 2) + "with note-taking".ljust(half) + "without note-taking"
    shown = [
        f"  {s.family} {s.index}: " + ("; ".join(s.notes_shown) or "none")
        for s in report.runs(note_taking=True)
    ]
    return "\n".join([title, halves.rstrip(), *lines, "notes each session was shown, with note-taking:", *shown])


def report_png(report: LearningReport) -> bytes:
    """The curves with and without note-taking, one panel per measure, drawn with matplotlib's Agg backend."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as error:
        raise ModuleNotFoundError(
            "the learning curve's plot needs matplotlib: pip install 'agentloop-ecs[evals]'", name="matplotlib"
        ) from error
    figure = Figure(figsize=(9, 6), dpi=100)
    axes = figure.subplots(2, 2).flatten()
    curves = (("with note-taking", report.curve(note_taking=True), "o-"), ("without note-taking", report.curve(note_taking=False), "s--"))
    for panel, (field, label) in zip(axes, MEASURES):
        for name, points, style in curves:
            panel.plot([p.index for p in points], [getattr(p, field) for p in points], style, label=name)
        panel.set_title(label)
        panel.set_xlabel("session")
        panel.set_ylim(bottom=0)
        panel.xaxis.set_major_locator(MaxNLocator(integer=True))
        panel.grid(alpha=0.3)
    axes[0].set_ylim(0, 1.05)
    axes[0].legend(loc="lower right")
    figure.suptitle(f"Learning curve: {report.dataset}")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _cells(tag: str, values: list[str]) -> str:
    return "".join(f"<{tag}>{html.escape(v)}</{tag}>" for v in values)


def report_html(report: LearningReport) -> str:
    """A `<section>` with the plot as a base64 data URL, the curves' table and every session's detail."""
    image = base64.b64encode(report.png()).decode("ascii")
    head = "<tr><th rowspan='2'>session</th><th colspan='6'>with note-taking</th><th colspan='6'>without note-taking</th></tr>"
    head += "<tr>" + _cells("th", [*HEADERS, *HEADERS]) + "</tr>"
    body = "".join("<tr>" + _cells("td", row) + "</tr>" for row in _rows(report))
    detail = "".join(
        "<tr>" + _cells("td", [
            s.family, str(s.index), "on" if s.note_taking else "off", "yes" if s.success else "no",
            str(s.llm_calls), str(s.tool_calls), str(s.tokens), _cost(s.cost),
            ", ".join(s.notes_shown) or "none", ", ".join(s.tools), "; ".join(s.unmet), s.distillation or "",
        ]) + "</tr>"
        for s in report.sessions
    )
    detail_head = _cells("th", [
        "family", "session", "note-taking", "success", "LLM calls", "tool calls", "tokens", "cost",
        "notes shown", "tools called", "unmet", "distillation",
    ])
    return (
        f"<section class='learning-curve'>\n<h2>The learning curve: {html.escape(report.dataset)}</h2>\n"
        f"<img alt='learning curve with and without note-taking' src='data:image/png;base64,{image}'>\n"
        f"<table class='learning-curve-points'>{head}{body}</table>\n"
        f"<details><summary>Every session</summary><table class='learning-sessions'><tr>{detail_head}</tr>{detail}</table></details>\n"
        "</section>"
    )
