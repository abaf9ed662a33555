"""OpenTelemetry: the span tree of a turn, concurrent turns, the metrics, and setup from the OTEL_* variables."""

from __future__ import annotations

import asyncio
import http.server
import io
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agentloop import TELEMETRY, AgentContext, AgentLoop, IncomingMessage, LlmReply, LlmRequest, Session, Usage, tool
from agentloop.adapters.otel import OtelMetrics, OtelTracer, TelemetryConfigError, enable_otel, setup_from_environment
from agentloop.bots import open_bot
from agentloop.cli import main
from agentloop.demo import run_demo
from agentloop.ports import Metrics, Tracer
from agentloop.testing import PromptWriter, RecordingChannel, ScriptedLLM, make_system
from agentloop.testing.http import ScriptedServer, completion, free_port
from agentloop.workers import open_inbox
from serve_kit import AGENTLOOP, HELLO, TOKENS, say_hi, serve_command
from systems import InputSanitizationSystem, ToolLoopSettings, ToolLoopSystem, TurnOutcomeFinalizationSystem, standard_pipeline

ROOT = Path(__file__).resolve().parents[3]


@attrs.frozen
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self) -> dict[str, list[Any]]:
        """Every data point exported, by metric name."""
        data = self.metrics.get_metrics_data()
        if data is None:
            return {}
        return {
            metric.name: list(metric.data.data_points)
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    enable_otel(tracer_provider, MeterProvider(metric_readers=[reader]))
    yield Telemetry(spans, reader)
    TELEMETRY.disable()


@tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@tool
def broken() -> str:
    """Always fails."""
    raise ValueError("the tool broke")


def test_the_adapters_implement_the_ports(otel: Telemetry) -> None:
    assert isinstance(TELEMETRY.tracer, OtelTracer) and isinstance(TELEMETRY.tracer, Tracer)
    assert isinstance(TELEMETRY.metrics, OtelMetrics) and isinstance(TELEMETRY.metrics, Metrics)


def test_a_tool_using_turn_is_one_trace_turn_systems_model_and_tool_calls(otel: Telemetry, tmp_path: Path) -> None:
    llm = ScriptedLLM([
        attrs.evolve(ScriptedLLM.tool_call("add", {"a": 1, "b": 2}), usage=Usage(100, 10, 60, 30), model="m-1"),
        LlmReply("3", usage=Usage(120, 2), model="m-1"),
    ])
    with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path, tools=[add]) as pipeline:
        ctx = pipeline.build().run_turn_sync(Session("s-1"), IncomingMessage("what is 1+2?"))
    spans = otel.finished()
    by_id = {span.context.span_id: span for span in spans}
    [turn] = [span for span in spans if span.name == "turn"]
    assert turn.parent is None
    assert dict(turn.attributes or {}) == {
        "agentloop.session.id": "s-1", "agentloop.turn.id": ctx.turn_id,
        "agentloop.finish_reason": "success", "agentloop.failures": 0,
    }
    systems = [span for span in spans if span.parent is not None and span.parent.span_id == turn.context.span_id]
    assert [span.name for span in sorted(systems, key=lambda s: s.start_time or 0)] == [
        f"system {row.name}" for row in pipeline.describe().rows
    ]
    assert all((span.attributes or {})["agentloop.outcome"] == "ok" for span in systems)
    [tool_loop] = [span for span in systems if span.name == "system ToolLoopSystem"]
    inner = sorted((s for s in spans if s.parent is not None and s.parent.span_id == tool_loop.context.span_id),
                   key=lambda s: s.start_time or 0)
    assert [span.name for span in inner] == ["chat scripted", "execute_tool add", "chat scripted"]
    first_call = inner[0].attributes or {}
    assert (first_call["gen_ai.request.model"], first_call["gen_ai.response.model"], first_call["gen_ai.usage.input_tokens"],
            first_call["gen_ai.usage.output_tokens"]) == ("scripted", "m-1", 100, 10)
    assert (first_call["gen_ai.usage.cache_read.input_tokens"], first_call["gen_ai.usage.cache_creation.input_tokens"]) == (60, 30)
    assert float(first_call["agentloop.llm.latency_ms"]) >= 0  # type: ignore[arg-type]
    assert (inner[1].attributes or {})["gen_ai.tool.name"] == "add"
    assert (inner[1].attributes or {})["agentloop.outcome"] == "ok"
    assert {span.context.trace_id for span in spans} == {turn.context.trace_id}
    assert all(span.parent is None or span.parent.span_id in by_id for span in spans)


def boom(ctx: AgentContext) -> None:
    raise RuntimeError("kaput")


def test_a_failing_system_and_a_failing_tool_mark_their_spans(otel: Telemetry) -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("broken"), "sorry"])
    loop = AgentLoop([
        InputSanitizationSystem(), PromptWriter(), ToolLoopSystem(llm, [broken]), make_system("Breaker", 40, boom),
        TurnOutcomeFinalizationSystem(),
    ])
    loop.run_turn_sync(Session("s-1"), IncomingMessage("hi"))
    spans = {span.name: span for span in otel.finished()}
    breaker = spans["system Breaker"]
    assert (breaker.attributes or {})["agentloop.outcome"] == "error"
    assert breaker.status.status_code is StatusCode.ERROR and breaker.status.description == "RuntimeError: kaput"
    failed_tool = spans["execute_tool broken"]
    assert (failed_tool.attributes or {})["agentloop.outcome"] == "error"
    assert failed_tool.status.status_code is StatusCode.ERROR and "the tool broke" in (failed_tool.status.description or "")
    assert (spans["turn"].attributes or {})["agentloop.failures"] == 2
    assert (spans["system ToolLoopSystem"].attributes or {})["agentloop.outcome"] == "ok"


def test_a_failing_model_call_fails_its_span(otel: Telemetry) -> None:
    llm = ScriptedLLM([])  # out of script: the call raises
    loop = AgentLoop([InputSanitizationSystem(), PromptWriter(), ToolLoopSystem(llm, settings=ToolLoopSettings(model="m-2")), TurnOutcomeFinalizationSystem()])
    loop.run_turn_sync(Session("s-1"), IncomingMessage("hi"))
    spans = {span.name: span for span in otel.finished()}
    assert spans["chat m-2"].status.status_code is StatusCode.ERROR
    assert (spans["turn"].attributes or {})["agentloop.finish_reason"] == "error"
    assert spans["turn"].status.status_code is StatusCode.ERROR


def test_concurrent_turns_never_adopt_each_others_spans(otel: Telemetry) -> None:
    sessions = 12

    def tool_for(n: int) -> Any:
        async def probe() -> str:
            await asyncio.sleep(0.001 * (sessions - n))  # later sessions finish first
            return "done"

        probe.__name__ = probe.__qualname__ = f"probe{n}"
        probe.__doc__ = "A probe."
        return tool(probe)

    def script(request: LlmRequest) -> LlmReply | str:
        if any(message.role.value == "tool" for message in request.messages):
            return "finished"
        return ScriptedLLM.tool_call(f"probe{request.messages[-1].content}")

    loop = AgentLoop([
        InputSanitizationSystem(), PromptWriter(),
        ToolLoopSystem(ScriptedLLM(script), [tool_for(n) for n in range(sessions)]), TurnOutcomeFinalizationSystem(),
    ])

    async def all_at_once() -> None:
        await asyncio.gather(*(loop.run_turn(Session(f"s{n}"), IncomingMessage(str(n))) for n in range(sessions)))

    asyncio.run(all_at_once())
    spans = otel.finished()
    by_id = {span.context.span_id: span for span in spans}

    def root(span: ReadableSpan) -> ReadableSpan:
        while span.parent is not None:
            span = by_id[span.parent.span_id]
        return span

    probes = [span for span in spans if span.name.startswith("execute_tool probe")]
    assert len(probes) == sessions
    for span in probes:
        owner = root(span)
        assert owner.name == "turn"
        assert (owner.attributes or {})["agentloop.session.id"] == "s" + span.name.removeprefix("execute_tool probe")
    turns = [span for span in spans if span.name == "turn"]
    assert len({span.context.trace_id for span in turns}) == sessions


def test_the_loop_and_model_metrics_reach_the_meter_by_their_names(otel: Telemetry) -> None:
    llm = ScriptedLLM([LlmReply("hi", usage=Usage(7, 3), model="m-1"), LlmReply("again", usage=Usage(5, 1), model="m-1")])
    loop = AgentLoop([
        InputSanitizationSystem(), PromptWriter(), ToolLoopSystem(llm), make_system("Breaker", 40, boom),
        TurnOutcomeFinalizationSystem(),
    ])
    for _ in range(2):
        loop.run_turn_sync(Session("s-1"), IncomingMessage("hi"))
    points = otel.points()
    [duration] = points["agentloop.turn.duration_ms"]
    assert duration.count == 2
    [failures] = points["agentloop.system.failures"]
    assert (failures.value, dict(failures.attributes)) == (2, {"system": "Breaker"})
    [tokens_in] = points["agentloop.llm.input_tokens"]
    [tokens_out] = points["agentloop.llm.output_tokens"]
    assert (tokens_in.value, tokens_out.value, dict(tokens_in.attributes)) == (12, 4, {"model": "m-1"})
    by_type = {dict(point.attributes)["gen_ai.token.type"]: point for point in points["gen_ai.client.token.usage"]}
    assert (by_type["input"].sum, by_type["output"].sum, by_type["input"].count) == (12, 4, 2)
    assert dict(by_type["input"].attributes) == {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "scripted", "gen_ai.response.model": "m-1", "gen_ai.token.type": "input",
    }


def test_a_bot_built_without_metrics_reports_the_note_taking_metrics_by_their_names(otel: Telemetry, tmp_path: Path) -> None:
    """The CLI's bot is built with no `metrics=`: the process-wide switch still gets every metric."""
    asyncio.run(run_demo(open_bot, tmp_path / "demo", out=io.StringIO(), progress=io.StringIO()))
    points = otel.points()
    assert {
        "note_taking.capture.batch_size", "note_taking.distillation.duration_ms", "note_taking.distillation.total",
        "note_taking.retrieval.results_count", "note_taking.retrieval.latency_ms",
        "agentloop.turn.duration_ms",
    } <= set(points)
    statuses = {point.attributes["status"]: point.value for point in points["note_taking.distillation.total"]}
    assert statuses.get("success", 0) >= 1 and set(statuses) <= {"success", "skip", "error"}


def test_disabled_telemetry_reports_nothing(otel: Telemetry) -> None:
    TELEMETRY.disable()
    AgentLoop([make_system("Breaker", 40, boom)]).run_turn_sync(Session("s-1"), IncomingMessage("hi"))
    assert otel.finished() == []
    assert otel.points() == {}


def run_env() -> dict[str, str]:
    """This process's environment for a child: no OTEL_* or API key of the caller's, this checkout first on the path."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k not in ("AGENTLOOP_API_KEY", "OPENAI_API_KEY")}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
    return environment


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**run_env(), **env})


ONE_TURN = """
from agentloop import AgentLoop, IncomingMessage, Session
from agentloop.adapters.otel import setup_from_environment
from agentloop.testing import make_system

shutdown = setup_from_environment("probe-bot")
AgentLoop([make_system("Hello", 10, lambda ctx: None)]).run_turn_sync(Session("s-42"), IncomingMessage("hi"))
shutdown()
"""


def test_setup_from_environment_with_the_console_exporter_writes_spans_and_metrics_to_stderr() -> None:
    result = run_python(ONE_TURN, OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="console")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    objects = json_objects(result.stderr)
    spans = [item for item in objects if "name" in item and "context" in item]
    [turn] = [span for span in spans if span["name"] == "turn"]
    assert turn["attributes"]["agentloop.session.id"] == "s-42"
    assert turn["resource"]["attributes"]["service.name"] == "probe-bot"
    assert [span["parent_id"] for span in spans if span["name"] == "system Hello"] == [turn["context"]["span_id"]]
    [metrics] = [item for item in objects if "resource_metrics" in item]
    assert "agentloop.turn.duration_ms" in json.dumps(metrics)


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that keeps what it is sent: (path, body)."""

    received: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:
        self.received.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_setup_from_environment_exports_over_otlp_to_the_endpoint_the_variable_names() -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = run_python(ONE_TURN, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr
    received = dict(Collector.received)
    assert set(received) == {"/v1/traces", "/v1/metrics"}
    assert b"s-42" in received["/v1/traces"] and b"probe-bot" in received["/v1/traces"]
    assert b"agentloop.turn.duration_ms" in received["/v1/metrics"]


def test_setup_from_environment_honours_the_service_name_variable_and_none_exporters() -> None:
    result = run_python(ONE_TURN, OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_SERVICE_NAME="x")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    named = run_python(
        ONE_TURN.replace("shutdown()\n", "shutdown()\nfrom opentelemetry import trace\nprint(trace.get_tracer_provider().resource.attributes['service.name'])\n"),
        OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_SERVICE_NAME="from-env",
    )
    assert named.stdout == "from-env\n", named.stderr


def test_the_sdk_disabled_variable_leaves_telemetry_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    shutdown = setup_from_environment("probe")
    assert TELEMETRY.tracer is None and TELEMETRY.metrics is None
    shutdown()


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER='zipkin': agentloop knows otlp, console and none, not zipkin"),
    ("OTEL_METRICS_EXPORTER", "console,prometheus", "not prometheus"),
    ("OTEL_TRACES_EXPORTER", "console,none,bogus", "not bogus"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "OTLP protocol 'http/json' is not supported"),
])
def test_an_exporter_agentloop_cannot_set_up_is_an_error_that_says_what_it_knows(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(TelemetryConfigError, match=message.replace("(", r"\(")):
        setup_from_environment("probe")
    assert TELEMETRY.tracer is None


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects the console exporters wrote one after another."""
    decoder, objects, rest = json.JSONDecoder(), [], text.strip()
    while rest:
        start = rest.index("{")
        item, end = decoder.raw_decode(rest[start:])
        objects.append(item)
        rest = rest[start + end:].strip()
    return objects


def test_chat_with_otel_reports_its_turns_and_keeps_stdout_for_the_conversation(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        server.reply(body=completion("Hello, Ada."))
        result = subprocess.run(
            [*AGENTLOOP, "chat", "--otel", "--base-url", server.url, "--model", "tiny",
             "--data-dir", "data", "--session", "s-7"],
            input="I am Ada\n", capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**run_env(), "OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"},
        )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "bot> Hello, Ada.\n"
    spans = [item for item in json_objects(result.stderr) if "context" in item]
    [turn] = [span for span in spans if span["name"] == "turn"]
    assert turn["attributes"]["agentloop.session.id"] == "s-7"
    assert turn["resource"]["attributes"]["service.name"] == "agentloop-chat"
    [call] = [span for span in spans if span["name"] == "chat tiny"]
    assert call["attributes"]["gen_ai.request.model"] == "tiny"
    assert call["parent_id"] == next(s["context"]["span_id"] for s in spans if s["name"] == "system ToolLoopSystem")
    assert call["attributes"]["gen_ai.response.model"] == "served-model"


def test_worker_with_otel_reports_the_turns_it_takes_from_the_inbox(postgres_url: str, tmp_path: Path) -> None:
    env = {**run_env(), "OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none",
           "AGENTLOOP_TEST_RECORDS": str(tmp_path), "AGENTLOOP_TEST_LATENCY": "0"}
    worker = subprocess.Popen(
        [*AGENTLOOP, "worker", "--otel", "--stores", postgres_url, "--bot", "helper",
         "--pipeline", "tests.unit.worker_bot:factory"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert worker.stdout is not None
        assert "agentloop worker" in worker.stdout.readline()

        async def one_turn() -> None:
            async with open_inbox(postgres_url, bot="helper") as inbox:
                message_id = await inbox.submit(Session("s-9"), IncomingMessage("hello"))
                await inbox.wait(message_id, timeout=30)

        asyncio.run(one_turn())
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    spans = [item for item in json_objects(stderr) if "context" in item]
    [turn] = [span for span in spans if span["name"] == "turn"]
    assert (turn["attributes"]["agentloop.session.id"], turn["resource"]["attributes"]["service.name"]) == (
        "s-9", "agentloop-worker")


def test_worker_otel_with_an_unknown_exporter_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    argv = ["worker", "--otel", "--data-dir", str(tmp_path), "--inbox", "postgresql://me@/db?host=/nowhere",
            "--pipeline", "tests.unit.worker_bot:factory"]
    assert main(argv, io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err == "agentloop: OTEL_TRACES_EXPORTER='zipkin': agentloop knows otlp, console and none, not zipkin\n"
    assert TELEMETRY.tracer is None



def test_serve_with_otel_reports_each_served_turn(tmp_path: Path) -> None:
    env = {**run_env(), "OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"}
    with serve_command(tmp_path, "--otel", env=env) as run:
        assert run.first_line.startswith("agentloop serve: ")
        session, text = say_hi(run.url)
        assert text == HELLO
    spans = [item for item in json_objects(run.stderr) if "context" in item]
    [turn] = [span for span in spans if span["name"] == "turn"]
    assert turn["attributes"]["agentloop.session.id"] == session
    assert turn["attributes"]["agentloop.finish_reason"] == "success"
    assert turn["resource"]["attributes"]["service.name"] == "agentloop-serve"


def test_serve_otel_with_an_unknown_exporter_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "tokens.toml").write_text(TOKENS)
    with ScriptedServer() as model:
        result = subprocess.run(
            [*AGENTLOOP, "serve", "--otel", "--tokens", "tokens.toml", "--data-dir", "data", "--base-url", model.url,
             "--model", "tiny", "--port", str(free_port())],
            cwd=tmp_path, env={**run_env(), "OTEL_METRICS_EXPORTER": "prometheus"}, capture_output=True, text=True, timeout=60,
        )
    assert (result.returncode, result.stderr) == (
        1, "agentloop: OTEL_METRICS_EXPORTER='prometheus': agentloop knows otlp, console and none, not prometheus\n")
