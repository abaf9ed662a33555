"""MCP tools: a real MCP server (stdio subprocess or HTTP on loopback) behind agentloop tools in a standard turn."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from mcp_servers import weather
from structlog.testing import capture_logs

from agentloop import FailureKind, FailureSource, FinishReason, IncomingMessage, Role, Session, Tool, ToolExecutions
from agentloop.adapters import open_stores
from agentloop.adapters.mcp import McpServerError, McpToolError, mcp_tools, mcp_tools_sync
from agentloop.context import AgentContext
from agentloop.notes import TrajectoryRecorder
from agentloop.testing import FakeClock, RecordingChannel, ScriptedLLM
from systems import StandardOptions, standard_pipeline

SERVERS = Path(__file__).with_name("mcp_servers.py")
WEATHER_STDIO = [sys.executable, str(SERVERS), "weather"]


@contextlib.contextmanager
def serving_weather(token: str | None = None) -> Iterator[tuple[str, Callable[[], None]]]:
    """The weather server over streamable HTTP, served by uvicorn on a loopback port, and what stops it;
    with a `token`, a request without `Authorization: Bearer <token>` gets HTTP 401."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = weather.streamable_http_app()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and token is not None and (b"authorization", f"Bearer {token}".encode()) not in scope["headers"]:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"who are you?"})
            return
        await app(scope, receive, send)

    server = uvicorn.Server(uvicorn.Config(guarded, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(10)

    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", stop
    finally:
        stop()
        sock.close()


@pytest.fixture(scope="module")
def weather_url() -> Iterator[str]:
    with serving_weather() as (url, _):
        yield url


@pytest.fixture(params=["stdio", "http"])
def weather_server(request: pytest.FixtureRequest) -> dict[str, Any]:
    """How to reach the weather server: as a subprocess over stdio, or over HTTP."""
    if request.param == "stdio":
        return {"stdio": WEATHER_STDIO}
    return {"url": request.getfixturevalue("weather_url")}


def told(llm: ScriptedLLM) -> list[str]:
    """What the model was told about each tool call, in order."""
    return [m.content or "" for m in llm.requests[-1].messages if m.role is Role.TOOL]


def turn(tools: Iterable[Tool], tmp_path: Path, *steps: Any, options: StandardOptions | None = None) -> tuple[AgentContext, ScriptedLLM]:
    """One standard-pipeline turn whose model follows `steps`."""
    llm = ScriptedLLM(steps)
    with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path, tools=tools, options=options) as pipeline:
        return pipeline.build().run_turn_sync(Session("s1"), IncomingMessage("what is the weather?")), llm


def test_the_model_gets_the_servers_schemas_and_its_tool_calls_run_turn_after_turn_and_are_captured(
    weather_server: dict[str, Any], tmp_path: Path
) -> None:
    """Each `run_turn_sync` runs on a fresh event loop; the MCP session opened before them serves both."""
    stores = open_stores(tmp_path)
    recorder = TrajectoryRecorder(stores.trajectories, clock=FakeClock())
    llm = ScriptedLLM([ScriptedLLM.tool_call("forecast", {"city": "Oslo", "days": 2}), "Sunny in Oslo.",
                       ScriptedLLM.tool_call("forecast", {"city": "Bergen"}), "Sunny in Bergen too."])
    options = StandardOptions(on_tool_execution=recorder.enqueue)
    with mcp_tools_sync(**weather_server) as tools, standard_pipeline(
        llm, RecordingChannel(), stores=stores, tools=tools, options=options
    ) as pipeline:
        loop = pipeline.build()
        first = loop.run_turn_sync(Session("s1"), IncomingMessage("weather in Oslo?"))
        assert told(llm) == ["Oslo: sunny for 2 day(s)"]
        second = loop.run_turn_sync(Session("s1"), IncomingMessage("and in Bergen?"))
        assert told(llm)[-1] == "Bergen: sunny for 1 day(s)"
    assert [ctx.turn_outcome.assistant_text for ctx in (first, second) if ctx.turn_outcome] == [
        "Sunny in Oslo.", "Sunny in Bergen too."]
    assert first.failures == () and second.failures == ()
    assert [t.name for t in tools] == ["forecast", "station", "radar"]
    (sent,) = [spec for spec in llm.requests[0].tools if spec.name == "forecast"]
    listed = {t.name: t for t in asyncio.run(weather.list_tools())}
    assert sent.description == "The forecast for a city."
    assert sent.parameters == listed["forecast"].input_schema and sent.parameters["required"] == ["city"]
    assert recorder.flush() == 2
    stored = asyncio.run(stores.trajectories.load("s1")).executions
    assert [(e.tool_name, e.arguments, e.result, e.error) for e in stored] == [
        ("forecast", {"city": "Oslo", "days": 2}, "Oslo: sunny for 2 day(s)", None),
        ("forecast", {"city": "Bergen"}, "Bergen: sunny for 1 day(s)", None)]
    stores.close()


def test_arguments_that_do_not_fit_the_servers_schema_are_a_validation_failure_told_to_the_model(
    weather_url: str, tmp_path: Path
) -> None:
    with mcp_tools_sync(url=weather_url) as tools:
        ctx, llm = turn(tools, tmp_path, ScriptedLLM.tool_call("forecast", {"city": 3}),
                        ScriptedLLM.tool_call("forecast", {"days": 2}), "sorry")
    assert told(llm) == ["error: tool 'forecast': city: 3 is not of type 'string'",
                         "error: tool 'forecast': 'city' is a required property"]
    assert [(f.source, f.component, f.kind) for f in ctx.failures] == [
        (FailureSource.TOOL, "forecast", FailureKind.VALIDATION)] * 2


def test_a_tool_the_server_reports_failed_is_a_tool_failure_with_the_servers_message(weather_url: str, tmp_path: Path) -> None:
    with mcp_tools_sync(url=weather_url) as tools:
        ctx, llm = turn(tools, tmp_path, ScriptedLLM.tool_call("station", {"code": "XX"}), "No such station.")
    assert told(llm) == ["error: McpToolError: Error executing tool station: no weather station 'XX'"]
    assert [(f.source, f.component, f.kind) for f in ctx.failures] == [(FailureSource.TOOL, "station", FailureKind.EXCEPTION)]
    (execution,) = ctx.require(ToolExecutions).executions
    assert execution.error == "McpToolError: Error executing tool station: no weather station 'XX'" and execution.result is None
    assert ctx.turn_outcome is not None and ctx.turn_outcome.assistant_text == "No such station."


def test_a_tool_that_does_not_answer_in_time_is_a_tool_failure_and_the_session_goes_on(weather_url: str, tmp_path: Path) -> None:
    with mcp_tools_sync(url=weather_url, timeout=0.5) as tools:
        started = time.monotonic()
        ctx, llm = turn(tools, tmp_path, ScriptedLLM.tool_call("radar", {"seconds": 5}),
                        ScriptedLLM.tool_call("forecast", {"city": "Oslo"}), "Sunny, no radar.")
        took = time.monotonic() - started
    assert told(llm) == [
        "error: TimeoutError: the MCP tool 'radar' did not answer within 0.5 s; pass a larger timeout= to mcp_tools "
        "if it is slow",
        "Oslo: sunny for 1 day(s)"]
    assert [(f.component, f.kind) for f in ctx.failures] == [("radar", FailureKind.EXCEPTION)]
    assert took < 4


def test_calls_from_several_threads_and_loops_at_once_each_get_their_own_answer(weather_url: str) -> None:
    cities = [f"city{n}" for n in range(8)]
    with mcp_tools_sync(url=weather_url) as tools, concurrent.futures.ThreadPoolExecutor(4) as pool:
        forecast = tools.tools[0]

        def ask(city: str) -> str:
            return asyncio.run(forecast.invoke({"city": city}))

        answers = list(pool.map(ask, cities))
    assert answers == [f"{city}: sunny for 1 day(s)" for city in cities]


def test_the_tool_policy_stops_an_mcp_tool_before_it_runs(weather_url: str, tmp_path: Path) -> None:
    options = StandardOptions(tool_policy=lambda ctx, call: "no weather today" if call.name == "forecast" else None)
    with mcp_tools_sync(url=weather_url) as tools:
        ctx, _ = turn(tools, tmp_path, ScriptedLLM.tool_call("forecast", {"city": "Oslo"}), options=options)
    assert ctx.turn_outcome is not None and ctx.turn_outcome.finish_reason is FinishReason.POLICY_DENIED
    assert not ctx.has(ToolExecutions)
    assert [(f.component, f.kind) for f in ctx.failures][0] == ("forecast", FailureKind.POLICY)


def test_async_code_opens_the_tools_with_async_with_or_await_and_closing_ends_the_session(
    weather_url: str, tmp_path: Path
) -> None:
    async def main() -> tuple[AgentContext, str, str]:
        llm = ScriptedLLM([ScriptedLLM.tool_call("forecast", {"city": "Oslo"}), "Sunny."])
        async with mcp_tools(url=weather_url) as tools:
            with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path, tools=tools) as pipeline:
                ctx = await pipeline.build().run_turn(Session("s1"), IncomingMessage("weather?"))
        with pytest.raises(McpServerError, match="are closed; open them again with mcp_tools"):
            await tools.tools[0].invoke({"city": "Oslo"})
        awaited = await mcp_tools(url=weather_url)
        answer = await awaited.tools[0].invoke({"city": "Bergen"})
        await awaited.aclose()
        return ctx, told(llm)[0], answer

    ctx, first, second = asyncio.run(main())
    assert (first, second) == ("Oslo: sunny for 1 day(s)", "Bergen: sunny for 1 day(s)")
    assert ctx.failures == ()
    assert [t.name for t in threading.enumerate() if t.name.startswith("agentloop-mcp")] == []


def test_a_prefix_tells_apart_the_tools_of_two_servers(weather_url: str, tmp_path: Path) -> None:
    with mcp_tools_sync(url=weather_url, prefix="here_") as here, mcp_tools_sync(url=weather_url, prefix="there_") as there:
        ctx, llm = turn([*here, *there], tmp_path, ScriptedLLM.tool_call("there_forecast", {"city": "Oslo"}), "ok")
    assert [t.name for t in here] == ["here_forecast", "here_station", "here_radar"]
    assert told(llm) == ["Oslo: sunny for 1 day(s)"]
    assert ctx.failures == ()


def test_a_server_that_cannot_be_started_or_reached_is_an_error_that_names_it() -> None:
    with pytest.raises(McpServerError, match="could not open the MCP server /no/such/server: FileNotFoundError"):
        mcp_tools_sync(stdio=["/no/such/server"])
    silent = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    with pytest.raises(McpServerError, match=r"no answer within 0.5 s; .* pass a larger connect_timeout="):
        mcp_tools_sync(stdio=silent, connect_timeout=0.5)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(McpServerError, match=f"could not open the MCP server http://127.0.0.1:{port}/mcp: ConnectError"):
        mcp_tools_sync(url=f"http://127.0.0.1:{port}/mcp")


def test_headers_go_with_every_request_to_an_http_server() -> None:
    with serving_weather(token="s3cret") as (url, _):
        with mcp_tools_sync(url=url, headers={"Authorization": "Bearer s3cret"}) as tools:
            assert asyncio.run(tools.tools[0].invoke({"city": "Oslo"})) == "Oslo: sunny for 1 day(s)"
        with pytest.raises(McpServerError, match=f"could not open the MCP server {url}: .* that headers= carries"):
            mcp_tools_sync(url=url)


def test_a_script_helper_called_inside_an_event_loop_says_to_await_instead() -> None:
    async def main() -> None:
        mcp_tools_sync(stdio=WEATHER_STDIO)

    with pytest.raises(RuntimeError, match="inside a running event loop; await mcp_tools instead"):
        asyncio.run(main())


def test_a_server_that_goes_away_mid_session_is_a_tool_failure_that_says_so(tmp_path: Path) -> None:
    with serving_weather() as (url, stop), mcp_tools_sync(url=url) as tools:
        stop()
        ctx, llm = turn(tools, tmp_path, ScriptedLLM.tool_call("forecast", {"city": "Oslo"}), "The forecast is down.")
    assert told(llm) == [
        f"error: McpServerError: the MCP server {url} closed the connection (Connection closed); open the tools "
        f"again with mcp_tools once it is back"]
    assert [(f.component, f.kind) for f in ctx.failures] == [("forecast", FailureKind.EXCEPTION)]


@pytest.mark.parametrize("arguments, fix", [
    ({}, "either stdio=.* or url="),
    ({"stdio": WEATHER_STDIO, "url": "http://127.0.0.1/mcp"}, "not both"),
    ({"stdio": "python server.py"}, "command line as a list"),
    ({"stdio": []}, "command line as a list"),
    ({"url": "http://127.0.0.1/mcp", "timeout": 0}, "must be positive"),
])
def test_asking_for_tools_the_wrong_way_says_how_to_ask(arguments: dict[str, Any], fix: str) -> None:
    with pytest.raises(ValueError, match=fix):
        mcp_tools(**arguments)


def test_odd_tools_a_tool_with_an_invalid_schema_is_left_out_other_content_is_named_and_a_refusal_is_an_error() -> None:
    with capture_logs() as logs, mcp_tools_sync(stdio=[sys.executable, str(SERVERS), "odd"]) as tools:
        assert [t.name for t in tools] == ["mixed", "totals", "closed"]
        mixed, totals, closed = tools.tools
        assert asyncio.run(mixed.invoke({})) == (
            "a chart:\n[image content not shown]\nthe notes\n[resource report: file:///report.pdf]")
        assert asyncio.run(totals.invoke({})) == '{"total": 42}'
        with pytest.raises(McpToolError, match="odd refused the call of 'closed': the counter is closed today"):
            asyncio.run(closed.invoke({}))
    (skipped,) = [e for e in logs if e["event"] == "mcp.tool_skipped"]
    assert skipped["tool"] == "broken" and "not valid JSON Schema" in skipped["reason"]


def test_a_system_exit_inside_the_mcp_client_fails_that_call_and_the_next_call_still_runs(
    weather_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp import Client

    real = Client.call_tool
    exits = [SystemExit(2)]

    async def call_tool(self: Any, *args: Any, **kwargs: Any) -> Any:
        if exits:
            raise exits.pop()
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(Client, "call_tool", call_tool)
    with mcp_tools_sync(url=weather_url) as tools:
        forecast = next(t for t in tools if t.name == "forecast")
        with pytest.raises(McpToolError, match="raised SystemExit: 2"):
            asyncio.run(asyncio.wait_for(forecast.invoke({"city": "Oslo"}), 10))
        after = asyncio.run(asyncio.wait_for(forecast.invoke({"city": "Oslo"}), 10))
    assert after == "Oslo: sunny for 1 day(s)"
