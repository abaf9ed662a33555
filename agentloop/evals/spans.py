"""Each eval case as a span tree (case -> turn -> system -> model call or tool), kept in memory.

While a case runs, a tracer installed on the process's telemetry switch records every span of
the case's task, and hands each one on to the tracer that was there before (OpenTelemetry, with
`--otel`), so a tracing backend sees the same tree with the case span at its root.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from time import perf_counter

import attrs

from agentloop.ports.telemetry import AttributeValue, Span, Tracer
from agentloop.telemetry import TELEMETRY

__all__ = ["RecordedSpan", "case_spans", "recording_spans"]


@attrs.frozen
class RecordedSpan:
    """One finished span of a case: `parent` is the index of its parent among the case's spans
    (None for the case span itself); `error` says why it failed, None when it did not."""

    name: str
    attributes: dict[str, AttributeValue] = attrs.field(hash=False)
    parent: int | None
    duration_ms: float
    error: str | None = None


class _Case:
    """The spans of one running case, in the order they started (None while one is open), and each one's parent."""

    def __init__(self) -> None:
        self.spans: list[RecordedSpan | None] = []
        self.parents: list[int | None] = []

    def finished(self) -> list[RecordedSpan]:
        """The spans that ended, each one's parent its nearest ancestor that ended, at its index among them."""
        kept: dict[int, int] = {}
        for index, span in enumerate(self.spans):
            if span is not None:
                kept[index] = len(kept)
        finished = []
        for index, span in enumerate(self.spans):
            if span is None:
                continue
            parent = span.parent
            while parent is not None and parent not in kept:
                parent = self.parents[parent]
            finished.append(attrs.evolve(span, parent=None if parent is None else kept[parent]))
        return finished


_CASE: ContextVar[_Case | None] = ContextVar("agentloop_eval_case", default=None)
_PARENT: ContextVar[int | None] = ContextVar("agentloop_eval_parent", default=None)


class _RecordingSpan:
    """A span of a case, recorded when it ends and told to the span it wraps, if any."""

    def __init__(self, case: _Case, name: str, attributes: Mapping[str, AttributeValue], inner: Span | None) -> None:
        self.case, self.name, self.inner = case, name, inner
        self.attributes = dict(attributes)
        self.parent = _PARENT.get()
        self.index = len(case.spans)
        case.spans.append(None)
        case.parents.append(self.parent)
        self.error: str | None = None
        self.started = perf_counter()
        self.token = _PARENT.set(self.index)

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        self.attributes[key] = value
        if self.inner is not None:
            self.inner.set_attribute(key, value)

    def fail(self, description: str) -> None:
        self.error = description
        if self.inner is not None:
            self.inner.fail(description)

    def end(self) -> None:
        duration = (perf_counter() - self.started) * 1000.0
        self.case.spans[self.index] = RecordedSpan(self.name, self.attributes, self.parent, duration, self.error)
        try:
            _PARENT.reset(self.token)
        except ValueError:  # ended in another context than it started in: that context keeps its own parent
            pass
        if self.inner is not None:
            self.inner.end()


class _NoSpan:
    def set_attribute(self, key: str, value: AttributeValue) -> None:
        pass

    def fail(self, description: str) -> None:
        pass

    def end(self) -> None:
        pass


class RecordingTracer:
    """The Tracer port that records the spans of the case running in the current task."""

    def __init__(self, inner: Tracer | None) -> None:
        self.inner = inner

    def start_span(self, name: str, attributes: Mapping[str, AttributeValue]) -> Span:
        inner = None if self.inner is None else self.inner.start_span(name, attributes)
        case = _CASE.get()
        if case is None:
            return inner if inner is not None else _NoSpan()
        return _RecordingSpan(case, name, attributes, inner)


_installed = 0


@contextmanager
def recording_spans() -> Iterator[None]:
    """Record the spans of cases (`case_spans`) while the block runs; nested blocks share one tracer."""
    global _installed
    if _installed:
        _installed += 1
        try:
            yield
        finally:
            _installed -= 1
        return
    before = TELEMETRY.tracer
    TELEMETRY.enable(RecordingTracer(before), TELEMETRY.metrics)
    _installed = 1
    try:
        yield
    finally:
        _installed = 0
        TELEMETRY.enable(before, TELEMETRY.metrics)


@contextmanager
def case_spans(name: str, attributes: Mapping[str, AttributeValue]) -> Iterator[list[RecordedSpan]]:
    """Run the block as one case: a root span `name`, and every span its task starts beneath it.
    The list it gives is filled with the finished spans, in start order, when the block ends."""
    case = _Case()
    recorded: list[RecordedSpan] = []
    case_token, parent_token = _CASE.set(case), _PARENT.set(None)
    try:
        with recording_spans(), TELEMETRY.span(name, attributes):
            yield recorded
    finally:
        _CASE.reset(case_token)
        _PARENT.reset(parent_token)
        recorded.extend(case.finished())
