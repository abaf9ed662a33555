"""OpenTelemetry for agentloop (the `otel` extra): the Tracer and Metrics ports on the OTel API.

`setup_from_environment(service_name)` configures the SDK from the standard `OTEL_*`
variables and switches agentloop's telemetry on for the whole process; `enable_otel()`
does only the switching, for a process whose SDK is configured already (by
`opentelemetry-instrument` or the application).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import Token

from opentelemetry import context, metrics, trace
from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Status, StatusCode, TracerProvider

from agentloop.ports.telemetry import AttributeValue
from agentloop.telemetry import TELEMETRY
from agentloop.errors import AgentloopError

INSTRUMENTATION = "agentloop"


class TelemetryConfigError(ValueError, AgentloopError):
    """An `OTEL_*` variable names an exporter or protocol agentloop cannot set up."""


class OtelSpan:
    """An OTel span that is the current one of its task until it ends."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: trace.Span, token: Token[context.Context]) -> None:
        self._span = span
        self._token = token

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        self._span.set_attribute(key, value)

    def fail(self, description: str) -> None:
        self._span.set_status(Status(StatusCode.ERROR, description))

    def end(self) -> None:
        context.detach(self._token)
        self._span.end()


class OtelTracer:
    """The Tracer port on an OTel tracer: a span's parent is the current span of the running task
    (OTel's context lives in contextvars), so concurrent turns never adopt each other's spans."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def start_span(self, name: str, attributes: Mapping[str, AttributeValue]) -> OtelSpan:
        span = self._tracer.start_span(name, attributes=attributes)
        return OtelSpan(span, context.attach(trace.set_span_in_context(span)))


class OtelMetrics:
    """The Metrics port on an OTel meter: `increment` adds to a counter, `observe` records on a
    histogram, each named exactly as agentloop names it, with the labels as attributes."""

    def __init__(self, meter: Meter) -> None:
        self._meter = meter
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}

    def increment(self, name: str, value: float = 1.0, labels: Mapping[str, str] | None = None) -> None:
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters.setdefault(name, self._meter.create_counter(name, unit=_unit(name)))
        counter.add(value, labels)

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        histogram = self._histograms.get(name)
        if histogram is None:
            histogram = self._histograms.setdefault(name, self._meter.create_histogram(name, unit=_unit(name)))
        histogram.record(value, labels)


def _unit(name: str) -> str:
    return "ms" if name.endswith("_ms") else ""


def enable_otel(tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None) -> None:
    """Send agentloop's spans and metrics to these providers (default: OTel's global ones), process-wide.

    Every AgentLoop, ToolLoopSystem and note-taking object reports there, however it was built;
    `agentloop.TELEMETRY.disable()` switches it off again.
    """
    tracer = trace.get_tracer(INSTRUMENTATION, tracer_provider=tracer_provider)
    meter = metrics.get_meter(INSTRUMENTATION, meter_provider=meter_provider)
    TELEMETRY.enable(OtelTracer(tracer), OtelMetrics(meter))


def setup_from_environment(service_name: str) -> Callable[[], None]:
    """Configure the OTel SDK from the standard `OTEL_*` variables, switch agentloop's telemetry on,
    and return the function that flushes the exporters and switches it off (call it on exit).

    `OTEL_TRACES_EXPORTER` and `OTEL_METRICS_EXPORTER` (comma-separated `otlp`, `console`,
    `none`; default `otlp`) choose the exporters; `OTEL_EXPORTER_OTLP_PROTOCOL` is
    `http/protobuf` (default) or `grpc`; the OTLP endpoint, headers, sampler, batch sizes,
    export interval and resource come from their own standard variables. `service_name`
    names the service unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` does.
    `OTEL_SDK_DISABLED=true` leaves telemetry off. Console exporters write to stderr.
    """
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return lambda: None
    span_exporters, metric_exporters = _span_exporters(), _metric_exporters()
    named = OTELResourceDetector().detect().attributes.get(SERVICE_NAME)
    resource = Resource.create({} if named else {SERVICE_NAME: service_name})
    tracer_provider = SdkTracerProvider(resource=resource)
    for span_exporter in span_exporters:
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    readers: list[MetricReader] = [PeriodicExportingMetricReader(exporter) for exporter in metric_exporters]
    meter_provider = SdkMeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    enable_otel(tracer_provider, meter_provider)

    def shutdown() -> None:
        TELEMETRY.disable()
        tracer_provider.shutdown()
        meter_provider.shutdown()

    return shutdown


def _chosen(signal: str) -> list[str]:
    """The exporter names `OTEL_<SIGNAL>_EXPORTER` lists (default `otlp`), `none` removed."""
    variable = f"OTEL_{signal}_EXPORTER"
    names = [name.strip().lower() for name in os.environ.get(variable, "otlp").split(",") if name.strip()]
    unknown = sorted(set(names) - {"otlp", "console", "none"})
    if unknown:
        raise TelemetryConfigError(f"{variable}={os.environ[variable]!r}: agentloop knows otlp, console and none, not {', '.join(unknown)}")
    return [name for name in names if name != "none"]


def _protocol(signal: str) -> str:
    """The OTLP protocol for `signal` (TRACES, METRICS): its own variable, the general one, or http/protobuf."""
    variable = f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL"
    protocol = os.environ.get(variable) or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if protocol not in ("http/protobuf", "grpc"):
        raise TelemetryConfigError(f"OTLP protocol {protocol!r} is not supported: set {variable} (or OTEL_EXPORTER_OTLP_PROTOCOL) to http/protobuf or grpc")
    return protocol


def _span_exporters() -> list[SpanExporter]:
    exporters: list[SpanExporter] = []
    for name in _chosen("TRACES"):
        if name == "console":
            exporters.append(ConsoleSpanExporter(out=sys.stderr))
        elif _protocol("TRACES") == "grpc":
            with _needs_otlp("TRACES"):
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
            exporters.append(GrpcSpanExporter())
        else:
            with _needs_otlp("TRACES"):
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
            exporters.append(HttpSpanExporter())
    return exporters


def _metric_exporters() -> list[MetricExporter]:
    exporters: list[MetricExporter] = []
    for name in _chosen("METRICS"):
        if name == "console":
            exporters.append(ConsoleMetricExporter(out=sys.stderr))
        elif _protocol("METRICS") == "grpc":
            with _needs_otlp("METRICS"):
                from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
            exporters.append(GrpcMetricExporter())
        else:
            with _needs_otlp("METRICS"):
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
            exporters.append(HttpMetricExporter())
    return exporters


@contextmanager
def _needs_otlp(signal: str) -> Iterator[None]:
    """Importing an OTLP exporter: missing, it is a config error naming the extra that brings it."""
    try:
        yield
    except ImportError as error:
        raise TelemetryConfigError(
            f"OTEL_{signal}_EXPORTER=otlp needs the OTLP exporter: pip install 'agentloop-ecs[otel]' ({error})"
        ) from error
