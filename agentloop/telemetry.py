"""The process-wide telemetry switch: where the loop, the systems and note-taking send spans and metrics.

OpenTelemetry's providers are process-wide, and a pipeline is often built by a user's factory
that cannot be handed a tracer, so the switch is process-wide too: `TELEMETRY.enable(...)`
(which `agentloop.adapters.otel` calls) turns it on for every loop, system and note-taking
object of the process. Off by default, where each instrumented place pays one attribute check.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType

from agentloop.ports.metrics import Metrics
from agentloop.ports.telemetry import AttributeValue, Span, Tracer


class _Both:
    """A component's own Metrics and the process-wide one, each told every value."""

    __slots__ = ("own", "shared")

    def __init__(self, own: Metrics, shared: Metrics) -> None:
        self.own = own
        self.shared = shared

    def increment(self, name: str, value: float = 1.0, labels: Mapping[str, str] | None = None) -> None:
        self.own.increment(name, value, labels)
        self.shared.increment(name, value, labels)

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        self.own.observe(name, value, labels)
        self.shared.observe(name, value, labels)


class _SpanScope:
    """A started span, ended when the block leaves, failed when it leaves by an exception."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def __enter__(self) -> Span:
        return self.span

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if error is not None:
            self.span.fail(f"{type(error).__name__}: {error}")
        self.span.end()


_NO_SPAN: nullcontext[None] = nullcontext()


class Telemetry:
    """Which Tracer and Metrics the process reports to: none until `enable` is called."""

    __slots__ = ("metrics", "tracer")

    def __init__(self) -> None:
        self.tracer: Tracer | None = None
        self.metrics: Metrics | None = None

    def enable(self, tracer: Tracer | None, metrics: Metrics | None) -> None:
        """Report the spans of every turn to `tracer` and every metric to `metrics` (None: keep that off)."""
        self.tracer = tracer
        self.metrics = metrics

    def disable(self) -> None:
        """Stop reporting: back to the default, where telemetry costs one attribute check."""
        self.tracer = None
        self.metrics = None

    def metrics_for(self, own: Metrics | None) -> Metrics | None:
        """Where a component with its own `metrics=` (or None) reports: there, to the process's, or both."""
        shared = self.metrics
        if shared is None or shared is own:
            return own
        if own is None:
            return shared
        return _Both(own, shared)

    def span(self, name: str, attributes: Mapping[str, AttributeValue]) -> AbstractContextManager[Span | None]:
        """A block in a child span of the current one (None when tracing is off); an exception fails it."""
        tracer = self.tracer
        if tracer is None:
            return _NO_SPAN
        return _SpanScope(tracer.start_span(name, attributes))


TELEMETRY = Telemetry()
"""The process's switch; `agentloop.adapters.otel.enable_otel` and `setup_from_environment` turn it on."""
