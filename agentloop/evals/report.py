"""The report of an evaluation: per case run, its checks, tokens, cost and latency; pass rates per
case and per check; regressions against a baseline; written as JSON and as one HTML file."""

from __future__ import annotations

import html
import json
import statistics
from collections.abc import Iterable
from pathlib import Path

import attrs

from agentloop.evals.errors import BaselineError
from agentloop.evals.spans import RecordedSpan
from agentloop.outcome import converter
from agentloop.ports.telemetry import AttributeValue

__all__ = ["CaseRun", "Check", "EvalReport", "Regression", "read_report", "regressions", "render_html", "summary_table"]


@attrs.frozen
class Check:
    """One assertion of a case run: its name (the expectation), whether it held, and why."""

    name: str
    passed: bool
    reason: str | None = None


@attrs.frozen
class CaseRun:
    """One run of one case: passed when every check held and the conversation did not raise (`error`)."""

    case: str
    run: int
    checks: tuple[Check, ...]
    tokens: int = 0
    cost: float | None = None
    llm_calls: int = 0
    tool_calls: int = 0
    latency_s: float = 0.0
    finish_reason: str | None = None
    transcript: tuple[tuple[str, str], ...] = ()
    tags: tuple[str, ...] = ()
    error: str | None = None
    spans: tuple[RecordedSpan, ...] = ()

    @property
    def passed(self) -> bool:
        return self.error is None and all(check.passed for check in self.checks)


@attrs.frozen
class Regression:
    """A case or one of its checks that passes less often than in the baseline."""

    case: str
    check: str | None
    before: float
    now: float

    def __str__(self) -> str:
        what = self.case if self.check is None else f"{self.case} / {self.check}"
        return f"{what}: pass rate {self.before:.0%} -> {self.now:.0%}"


_converter = converter.copy()
_converter.register_structure_hook(AttributeValue, lambda value, _: value)  # a span attribute is JSON as it is


def _rate(flags: Iterable[bool]) -> float:
    values = list(flags)
    return sum(values) / len(values) if values else 0.0


@attrs.frozen
class EvalReport:
    """Every case run of one evaluation of a dataset (`repeat` runs of each case)."""

    dataset: str
    runs: tuple[CaseRun, ...]
    repeat: int = 1
    model: str | None = None

    @property
    def pass_rate(self) -> float:
        """The share of case runs that passed."""
        return _rate(run.passed for run in self.runs)

    def case_pass_rates(self) -> dict[str, float]:
        cases: dict[str, list[bool]] = {}
        for run in self.runs:
            cases.setdefault(run.case, []).append(run.passed)
        return {case: _rate(flags) for case, flags in cases.items()}

    def check_pass_rates(self, case: str | None = None) -> dict[str, float]:
        """Each check's pass rate, over every case (or one `case`)."""
        checks: dict[str, list[bool]] = {}
        for run in self.runs:
            if case is None or run.case == case:
                for check in run.checks:
                    checks.setdefault(check.name, []).append(check.passed)
        return {name: _rate(flags) for name, flags in checks.items()}

    def latency_percentiles(self) -> dict[str, float]:
        """p50, p90 and p99 of the case runs' wall time in seconds."""
        latencies = sorted(run.latency_s for run in self.runs)
        if len(latencies) < 2:
            return {name: latencies[0] if latencies else 0.0 for name in ("p50", "p90", "p99")}
        cuts = statistics.quantiles(latencies, n=100, method="inclusive")
        return {"p50": cuts[49], "p90": cuts[89], "p99": cuts[98]}

    @property
    def tokens(self) -> int:
        return sum(run.tokens for run in self.runs)

    @property
    def cost(self) -> float | None:
        """The dollars every run spent; None when any run's cost is unknown."""
        costs = [run.cost for run in self.runs]
        return None if any(cost is None for cost in costs) else sum(cost for cost in costs if cost is not None)

    def to_json(self) -> str:
        return json.dumps({"format": "agentloop-eval-report/1", **_converter.unstructure(self)}, indent=2)

    def write(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")


def read_report(path: str | Path) -> EvalReport:
    """A report `agentloop eval --json` wrote (a baseline)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise BaselineError(f"cannot read the baseline {path}: {error}") from error
    if not isinstance(data, dict) or data.pop("format", None) != "agentloop-eval-report/1":
        raise BaselineError(f"{path} is not a report written by `agentloop eval --json`")
    try:
        return _converter.structure(data, EvalReport)
    except Exception as error:  # cattrs' grouped validation errors
        raise BaselineError(f"{path} is not a report written by `agentloop eval --json`: {error}") from error


def regressions(current: EvalReport, baseline: EvalReport) -> list[Regression]:
    """The cases, and checks of a case, present in both reports that pass less often now."""
    found: list[Regression] = []
    before, now = baseline.case_pass_rates(), current.case_pass_rates()
    for case in now.keys() & before.keys():
        if now[case] < before[case]:
            found.append(Regression(case, None, before[case], now[case]))
        checks_before, checks_now = baseline.check_pass_rates(case), current.check_pass_rates(case)
        for check in checks_now.keys() & checks_before.keys():
            if checks_now[check] < checks_before[check]:
                found.append(Regression(case, check, checks_before[check], checks_now[check]))
    return sorted(found, key=lambda r: (r.case, r.check or ""))


def _cost(cost: float | None) -> str:
    return "unknown" if cost is None else f"${cost:.4f}"


def summary_table(report: EvalReport, found: Iterable[Regression] = ()) -> str:
    """The text summary: pass rate per case and per check, tokens, cost, latency percentiles, regressions."""
    lines = [f"dataset {report.dataset}: {len(report.runs)} runs, pass rate {report.pass_rate:.0%}"]
    rows = [("case", "pass rate")] + [(case, f"{rate:.0%}") for case, rate in report.case_pass_rates().items()]
    rows += [("check", "pass rate")] + [(check, f"{rate:.0%}") for check, rate in report.check_pass_rates().items()]
    width = max(len(name) for name, _ in rows)
    lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
    latency = report.latency_percentiles()
    lines.append(f"tokens {report.tokens}, cost {_cost(report.cost)}, "
                 f"latency p50 {latency['p50']:.2f}s p90 {latency['p90']:.2f}s p99 {latency['p99']:.2f}s")
    lines += [f"REGRESSION {regression}" for regression in found]
    return "\n".join(lines) + "\n"


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:.4rem;text-align:left;vertical-align:top}
.pass{color:#0a7d27}.fail{color:#b3261e;font-weight:600}.regression{background:#fdecea}
details{margin:.3rem 0}pre{white-space:pre-wrap;margin:.2rem 0}.who{font-weight:600}
"""


def _run_row(run: CaseRun, regressed: set[str]) -> str:
    e = html.escape
    status = '<span class="pass">pass</span>' if run.passed else '<span class="fail">fail</span>'
    checks = "".join(
        f'<li class="{"pass" if c.passed else "fail"}">{e(c.name)}: {e(c.reason or "")}</li>' for c in run.checks
    )
    error = f'<p class="fail">error: {e(run.error)}</p>' if run.error else ""
    lines = "".join(f'<pre><span class="who">{e(who)}:</span> {e(text)}</pre>' for who, text in run.transcript)
    spans = "".join(
        f"<li>{e(s.name)} ({s.duration_ms:.1f} ms){' failed: ' + e(s.error) if s.error else ''}</li>" for s in run.spans
    )
    row_class = ' class="regression"' if run.case in regressed else ""
    return (
        f'<tr{row_class} data-case="{e(run.case)}" data-passed="{str(run.passed).lower()}"><td>{e(run.case)}'
        f"{' [' + str(run.run) + ']' if run.run > 1 else ''}</td><td>{status}</td><td>{run.tokens}</td>"
        f"<td>{_cost(run.cost)}</td><td>{run.llm_calls}</td><td>{run.tool_calls}</td><td>{run.latency_s:.2f}s</td>"
        f'<td><details class="transcript"><summary>checks and transcript</summary><ul>{checks}</ul>{error}'
        f'<div class="lines">{lines}</div><details><summary>spans</summary><ul>{spans}</ul></details></details></td></tr>'
    )


def render_html(report: EvalReport, found: Iterable[Regression] = ()) -> str:
    """The report as one HTML file with no external resources: a row per case run that opens to its checks,
    transcript and spans, the summary above it."""
    found = list(found)
    regressed = {r.case for r in found}
    rows = "".join(_run_row(run, regressed) for run in report.runs)
    summary = html.escape(summary_table(report, found))
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>eval {html.escape(report.dataset)}</title>'
        f"<style>{_STYLE}</style></head><body><h1>Evaluation of {html.escape(report.dataset)}</h1>"
        f'<pre id="summary">{summary}</pre><table id="runs"><thead><tr><th>case</th><th>result</th><th>tokens</th>'
        f"<th>cost</th><th>LLM calls</th><th>tool calls</th><th>latency</th><th>details</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></body></html>\n"
    )
