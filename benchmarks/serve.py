"""Requests/s and latency of streamed (SSE) turns against one `agentloop serve` process at
1, 50 and 500 concurrent clients, each figure next to a bare Starlette floor as a ratio, and
the same turns through each standard protocol it speaks (OpenAI streamed chat completions,
A2A `SendStreamingMessage`, AG-UI runs, MCP `ask` calls) next to its native API, beside the
target of at most 1.2x the native latency.

The bot is the standard pipeline on SQLite stores with a model double that awaits
`--model-delay` seconds (50 ms) and then streams a short answer in small pieces. The floor
is a Starlette app with the same routes whose message endpoint awaits the same delay and
streams the same SSE bytes (the answer's deltas, then an outcome event) and does nothing
else. Both run under uvicorn on 127.0.0.1, each in its own process, so the clients (httpx,
one AsyncClient and connection per client, in this process) share no interpreter with them.

A client opens a session (not timed), sends `--turns-per-session` messages one after the
other, each as a stream read to its `outcome` event, then opens a new session, until the
level's time is up. Latency is request start to the outcome event; "first delta" is
request start to the first piece of the answer. Requests/s counts the outcomes received
in the `--duration` window after `--warmup`; latencies are of the requests started in it.
Errors (HTTP status, transport error, or a finish reason other than success) are counted,
never timed. Through a protocol a client's first message starts its session and the others
name it (OpenAI `metadata.session_id`, A2A `contextId`, AG-UI `threadId`, MCP `session_id`);
latency is to the protocol's end of the answer (the finishing chunk, the completed status, the
`RUN_FINISHED` event, the tool result: MCP's result is not streamed, so it has no first delta).
An MCP client initialises its MCP session once, untimed. The protocols' clients are plain
httpx speaking each wire format, as the native client is, so client-side costs are alike.
A native message carries a `message_id`, as an A2A or AG-UI message does and an MCP `ask` may
(the server keeps the reply under it, for exactly-once delivery), so both sides do that work;
an OpenAI chat completion carries none.
The figures depend on the machine; nothing is asserted.

    python benchmarks/serve.py [--clients 1,50,500] [--duration 10] [--warmup 2]
                               [--model-delay 0.05] [--protocols openai,a2a,agui,mcp] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from agentloop import LlmReply, TextDelta
from agentloop.ports import Channel, Stores
from agentloop.streaming import reply_events
from agentloop.testing import ScriptedLLM
from agentloop.testing.http import free_port
from systems import StandardPipeline, standard_pipeline

HERE = Path(__file__).resolve().parent
QUESTION = "When does the office open?"
ANSWER = "The office opens at eight on Mondays and closes at six."
CHUNK = 8
MODEL_DELAY_VARIABLE = "AGENTLOOP_BENCH_MODEL_DELAY"
SERVER_START_SECONDS = 60.0
RATE_PER_MINUTE = 1_000_000_000
PROTOCOL_TARGET = 1.2
"""A protocol's latency beside the native API's, at most."""
BURST = 1_000_000


def model_delay() -> float:
    return float(os.environ.get(MODEL_DELAY_VARIABLE, "0.05"))


def pieces() -> list[str]:
    """The answer's text deltas, cut as the model double streams them."""
    return [event.text for event in reply_events(LlmReply(ANSWER), CHUNK) if isinstance(event, TextDelta)]


def factory(stores: Stores, channel: Channel) -> StandardPipeline:
    """The served bot (`--pipeline serve:factory`, run from this directory): the standard
    pipeline with a model that awaits the delay, then streams the answer."""
    llm = ScriptedLLM(lambda request: ANSWER, latency=model_delay(), chunk=CHUNK)
    return standard_pipeline(llm, channel, stores=stores)


def sse(event: str, data: object) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def floor_app() -> Starlette:
    """The same routes as the server, doing nothing but awaiting the delay and streaming the same bytes."""
    delay = model_delay()

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def models(request: Request) -> JSONResponse:  # serve's start-up check of its model server
        return JSONResponse({"object": "list", "data": [{"id": "llama3.1", "object": "model"}]})

    async def new_session(request: Request) -> JSONResponse:
        return JSONResponse({"session_id": uuid.uuid4().hex}, status_code=201)

    async def message(request: Request) -> StreamingResponse:
        body = await request.json()

        async def events() -> AsyncIterator[bytes]:
            await asyncio.sleep(delay)
            for piece in pieces():
                yield sse("delta", {"text": piece})
            yield sse("outcome", {
                "turn_id": uuid.uuid4().hex, "message_id": body.get("message_id") or uuid.uuid4().hex,
                "finish_reason": "success", "text": ANSWER, "fallback": False, "failures": [], "approval": None,
            })

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[
        Route("/healthz", health),
        Route("/models", models),
        Route("/v1/sessions", new_session, methods=["POST"]),
        Route("/v1/sessions/{sid}/messages", message, methods=["POST"]),
    ])


class Server:
    """One server process on a loopback port, and what it has spent of the CPU; its output
    goes to a file in `scratch` (a pipe nobody reads while the clients run could fill and stall it)."""

    def __init__(self, label: str, command: list[str], port: int, env: dict[str, str], scratch: Path) -> None:
        self.label = label
        self.url = f"http://127.0.0.1:{port}"
        self.log = scratch / f"{label}.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(command, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the {self.label} server exited with {self.process.returncode}:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"the {self.label} server did not answer {self.url}/healthz within {SERVER_START_SECONDS:.0f} s")

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the process so far (Linux /proc), or None elsewhere."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Level:
    """What the clients of one level measured against one server."""

    def __init__(self, measure_from: float, stop: float) -> None:
        self.measure_from = measure_from
        self.stop = stop
        self.completed = 0
        self.latencies: list[float] = []
        self.first_deltas: list[float] = []
        self.errors: Counter[str] = Counter()
        self.client_cpu = 0.0

    def record(self, started: float, first: float | None, ended: float) -> None:
        if self.measure_from <= ended <= self.stop:
            self.completed += 1
        if started >= self.measure_from:
            self.latencies.append((ended - started) * 1000.0)
            if first is not None:
                self.first_deltas.append((first - started) * 1000.0)


async def turn(http: httpx.AsyncClient, url: str, headers: dict[str, str], level: Level) -> None:
    """One message as an SSE stream, read to its end; timed to the outcome event."""
    started = time.perf_counter()
    first: float | None = None
    ended: float | None = None
    finish = "no outcome event"
    async with http.stream("POST", url, json={"text": QUESTION, "message_id": uuid.uuid4().hex},
                           headers={**headers, "Accept": "text/event-stream"}) as response:
        if response.status_code != 200:
            await response.aread()
            level.errors[f"HTTP {response.status_code}"] += 1
            return
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "delta" and first is None:
                first = time.perf_counter()
            elif line.startswith("data:") and event == "outcome":
                ended = time.perf_counter()
                finish = json.loads(line[5:])["finish_reason"]
    if ended is None or finish != "success":
        level.errors[finish] += 1
        return
    level.record(started, first, ended)


async def client(http: httpx.AsyncClient, base: str, token: str, turns_per_session: int, level: Level) -> None:
    """One user: sessions of `turns_per_session` messages, one after the other, until the level stops."""
    headers = {"Authorization": f"Bearer {token}"}
    while time.perf_counter() < level.stop:
        try:
            created = await http.post(f"{base}/v1/sessions", headers=headers)
            if created.status_code != 201:
                level.errors[f"HTTP {created.status_code}"] += 1
                await asyncio.sleep(0.1)
                continue
            url = f"{base}/v1/sessions/{created.json()['session_id']}/messages"
            for _ in range(turns_per_session):
                if time.perf_counter() >= level.stop:
                    return
                await turn(http, url, headers, level)
        except httpx.HTTPError as error:
            level.errors[type(error).__name__] += 1
            await asyncio.sleep(0.1)



class Streamed:
    """What one streamed turn showed so far: its session, when its first piece and its end came, how it ended."""

    def __init__(self, session: str | None, finish: str) -> None:
        self.session, self.finish = session, finish
        self.first: float | None = None
        self.ended: float | None = None

    def piece(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def end(self, finish: str) -> None:
        self.ended, self.finish = time.perf_counter(), finish


async def streamed_turn(
    http: httpx.AsyncClient, url: str, body: dict[str, object], headers: dict[str, str], level: Level,
    turn: Streamed, read: Callable[[dict[str, Any], Streamed], None],
) -> str | None:
    """POST `body` and read its SSE stream to its end, each JSON `data:` given to `read`; timed from the request
    to `turn.end`. The turn's session."""
    started = time.perf_counter()
    async with http.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            level.errors[f"HTTP {response.status_code}"] += 1
            return turn.session
        turn.session = response.headers.get("X-Agentloop-Session", turn.session)
        async for line in response.aiter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                read(json.loads(line[5:]), turn)
    if turn.ended is None or turn.finish != "success":
        level.errors[turn.finish] += 1
    else:
        level.record(started, turn.first, turn.ended)
    return turn.session


async def openai_turn(http: httpx.AsyncClient, base: str, headers: dict[str, str], session: str | None, level: Level) -> str | None:
    """One message as a streamed chat completion, read to `[DONE]`; timed to its finishing chunk. Its session."""
    body: dict[str, object] = {"model": "bot", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    if session is not None:
        body["metadata"] = {"session_id": session}

    def read(chunk: dict[str, Any], turn: Streamed) -> None:
        choice = (chunk.get("choices") or [{}])[0]
        if choice.get("delta", {}).get("content"):
            turn.piece()
        if choice.get("finish_reason"):
            turn.end(chunk["metadata"]["finish_reason"])

    url = f"{base}/openai/v1/chat/completions"
    return await streamed_turn(http, url, body, headers, level, Streamed(session, "no finishing chunk"), read)


_A2A_ENDS = ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_CANCELED")


async def a2a_turn(http: httpx.AsyncClient, base: str, headers: dict[str, str], session: str | None, level: Level) -> str | None:
    """One message as a streamed A2A `SendStreamingMessage`, read to its end; timed to the final status update
    (the task completed). Its context, the session."""
    message: dict[str, object] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": QUESTION}]}
    if session is not None:
        message["contextId"] = session
    body: dict[str, object] = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": message}}

    def read(data: dict[str, Any], turn: Streamed) -> None:
        if "error" in data:
            turn.finish = f"JSON-RPC {data['error'].get('code')}"
            return
        result = data["result"]
        if "task" in result:
            turn.session = result["task"]["contextId"]
        elif "artifactUpdate" in result:
            turn.piece()
        elif "statusUpdate" in result and (state := result["statusUpdate"]["status"]["state"]) in _A2A_ENDS:
            turn.end("success" if state == "TASK_STATE_COMPLETED" else state)

    headers = {**headers, "A2A-Version": "1.0"}
    return await streamed_turn(http, f"{base}/a2a", body, headers, level, Streamed(session, "no final status"), read)


async def agui_turn(http: httpx.AsyncClient, base: str, headers: dict[str, str], session: str | None, level: Level) -> str | None:
    """One AG-UI run with the message, read to its end; timed to `RUN_FINISHED`. A new thread's session id is
    taken from the run's first event, and later runs name it as their thread."""
    thread = session or f"bench-{uuid.uuid4().hex}"
    body: dict[str, object] = {"threadId": thread, "runId": uuid.uuid4().hex, "state": {}, "tools": [], "context": [],
                               "forwardedProps": {}, "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": QUESTION}]}

    def read(event: dict[str, Any], turn: Streamed) -> None:
        kind = event["type"]
        if kind == "RUN_STARTED":
            turn.session = event["metadata"]["agentloop"]["sessionId"]
        elif kind == "TEXT_MESSAGE_CONTENT":
            turn.piece()
        elif kind == "RUN_FINISHED":
            turn.end(event["result"]["finishReason"])
        elif kind == "RUN_ERROR":
            turn.finish = f"RUN_ERROR {event.get('code')}"

    headers = {**headers, "Accept": "text/event-stream"}
    return await streamed_turn(http, f"{base}/agui/run", body, headers, level, Streamed(session, "no RUN_FINISHED"), read)


class McpSession:
    """An MCP session over streamable HTTP as a client holds one: initialised once (not timed), then tool calls."""

    def __init__(self, http: httpx.AsyncClient, base: str, token: str) -> None:
        self.http, self.url = http, f"{base}/mcp"
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
        self.calls = itertools.count(1)

    async def open(self) -> None:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
        answer = await self.http.post(self.url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}, headers=self.headers)
        answer.raise_for_status()
        self.headers["Mcp-Session-Id"] = answer.headers["mcp-session-id"]
        self.headers["MCP-Protocol-Version"] = json.loads(_sse_data(answer.text))["result"]["protocolVersion"]
        done = await self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers)
        done.raise_for_status()

    async def close(self) -> None:
        await self.http.delete(self.url, headers=self.headers)


def _sse_data(body: str) -> str:
    """The data of a one-message SSE body (or the body itself when the server answered with plain JSON)."""
    return next((line[5:] for line in body.splitlines() if line.startswith("data:")), body)


async def mcp_turn(mcp: McpSession, session: str | None, level: Level) -> str | None:
    """One call of the `ask` tool, timed to its result (MCP's tool result is not streamed). Its session."""
    arguments = {"message": QUESTION, "message_id": uuid.uuid4().hex, **({} if session is None else {"session_id": session})}
    body = {"jsonrpc": "2.0", "id": next(mcp.calls), "method": "tools/call", "params": {"name": "ask", "arguments": arguments}}
    started = time.perf_counter()
    response = await mcp.http.post(mcp.url, json=body, headers=mcp.headers)
    ended = time.perf_counter()
    if response.status_code != 200:
        level.errors[f"HTTP {response.status_code}"] += 1
        return session
    result = json.loads(_sse_data(response.text)).get("result") or {}
    outcome = result.get("structuredContent") or {}
    finish = "tool error" if result.get("isError") else outcome.get("finish_reason", "no result")
    if finish != "success":
        level.errors[finish] += 1
        return outcome.get("session_id", session)
    level.record(started, None, ended)
    return str(outcome["session_id"])


async def mcp_client(http: httpx.AsyncClient, base: str, token: str, turns_per_session: int, level: Level) -> None:
    """`client` through MCP: one MCP session per client, each conversation started by its first `ask`."""
    mcp = McpSession(http, base, token)
    try:
        await mcp.open()
    except (httpx.HTTPError, KeyError, ValueError) as error:
        level.errors[f"MCP initialize: {type(error).__name__}"] += 1
        return
    try:
        await sessions_of(http, base, {}, turns_per_session, level, lambda _h, _b, _hd, session, lvl: mcp_turn(mcp, session, lvl))
    finally:
        await mcp.close()


Turn = Callable[[httpx.AsyncClient, str, dict[str, str], "str | None", Level], Awaitable["str | None"]]
"""`(http, base url, headers, session or None for a new one, level)` -> the session the turn ran in."""


async def sessions_of(http: httpx.AsyncClient, base: str, headers: dict[str, str], turns_per_session: int, level: Level,
                      one: Turn) -> None:
    """Conversations of `turns_per_session` turns by `one`, each started by its first message, until the level stops."""
    while time.perf_counter() < level.stop:
        try:
            session = None
            for _ in range(turns_per_session):
                if time.perf_counter() >= level.stop:
                    return
                session = await one(http, base, headers, session, level)
        except httpx.HTTPError as error:
            level.errors[type(error).__name__] += 1
            await asyncio.sleep(0.1)


def protocol_client(one: Turn) -> Callable[[httpx.AsyncClient, str, str, int, Level], Awaitable[None]]:
    """A client whose turns are `one`, with the token as a bearer header."""

    async def user(http: httpx.AsyncClient, base: str, token: str, turns_per_session: int, level: Level) -> None:
        await sessions_of(http, base, {"Authorization": f"Bearer {token}"}, turns_per_session, level, one)

    return user


PROTOCOL_CLIENTS = {"openai": protocol_client(openai_turn), "a2a": protocol_client(a2a_turn), "agui": protocol_client(agui_turn), "mcp": mcp_client}
"""The standard protocols `agentloop serve` speaks, each as a client of this benchmark, beside the native API."""


async def run_level(
    server: Server, clients: int, token: str, args: argparse.Namespace, *, protocol: str | None = None
) -> tuple[Level, float | None]:
    """`clients` users against `server` (through `protocol`, else its native API) for the warm-up and the window;
    the level's figures and the server's CPU seconds spent in the window."""
    tls = ssl.create_default_context()  # one context for every client: httpx makes one per client otherwise
    https = [httpx.AsyncClient(timeout=httpx.Timeout(120.0), verify=tls) for _ in range(clients)]
    try:
        now = time.perf_counter()
        level = Level(now + args.warmup, now + args.warmup + args.duration)
        user = client if protocol is None else PROTOCOL_CLIENTS[protocol]
        users = [asyncio.create_task(user(http, server.url, token, args.turns_per_session, level)) for http in https]
        await asyncio.sleep(max(0.0, level.measure_from - time.perf_counter()))
        cpu_before, client_before = server.cpu_seconds(), time.process_time()
        await asyncio.sleep(max(0.0, level.stop - time.perf_counter()))
        cpu_after, level.client_cpu = server.cpu_seconds(), time.process_time() - client_before
        await asyncio.gather(*users)
    finally:
        await asyncio.gather(*(http.aclose() for http in https))
    spent = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return level, spent


def raise_open_files_limit(needed: int) -> str:
    """Lift the soft limit on open files (inherited by the servers) so every client's socket fits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        soft = wanted
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)


@contextmanager
def servers(args: argparse.Namespace, scratch: Path) -> Iterator[tuple[Server, Server, str, str]]:
    """The floor and the agentloop server, both answering; the token to use and how tokens are set up."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")])),
        MODEL_DELAY_VARIABLE: str(args.model_delay),
    }
    token = uuid.uuid4().hex
    tokens = scratch / "tokens.toml"
    tokens.write_text(f'secret = "{uuid.uuid4().hex}"\n[[tokens]]\ntoken = "{token}"\nuser = "bench"\norg = "bench"\n'
                      'team = "bench"\nproject = "bench"\n')
    setup = f"one token shared by every client, --rate-limit {RATE_PER_MINUTE} --burst {BURST} (no request waits for it)"
    floor_port, ours_port = free_port(), free_port()
    with ExitStack() as stack:
        floor = Server("floor", [sys.executable, str(Path(__file__).resolve()), "--floor", "--port", str(floor_port)],
                       floor_port, env, scratch)
        stack.callback(floor.close)
        floor.wait_ready()
        # --base-url: the model `serve` distils ended sessions with, checked to answer at start; no
        # session ends here, so any HTTP server will do, and the floor is one
        ours = Server("agentloop", [
            sys.executable, "-m", "agentloop.cli", "serve", "--pipeline", "serve:factory", "--stores", str(scratch / "data"),
            "--tokens", str(tokens), "--host", "127.0.0.1", "--port", str(ours_port), "--base-url", floor.url,
            "--rate-limit", str(RATE_PER_MINUTE), "--burst", str(BURST),
        ], ours_port, env, scratch)
        stack.callback(ours.close)
        ours.wait_ready()
        yield ours, floor, token, setup


def quantile(values: list[float], q: int) -> float:
    """The q-th percentile (the value itself with one sample)."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def figures(level: Level, cpu: float | None, duration: float) -> dict[str, float | None]:
    times = level.latencies or [float("nan")]
    return {
        "requests/s": level.completed / duration,
        "latency p50 (ms)": quantile(times, 50),
        "latency p99 (ms)": quantile(times, 99),
        "first delta p50 (ms)": quantile(level.first_deltas, 50) if level.first_deltas else None,
        "server CPU per request (ms)": None if cpu is None or not level.completed else cpu * 1000.0 / level.completed,
        "client CPU per request (ms)": level.client_cpu * 1000.0 / level.completed if level.completed else None,
    }


def shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def report(args: argparse.Namespace, setup: str, limit: str, results: dict[int, dict[str, tuple[Level, float | None]]]) -> None:
    print(f"SSE turns against one uvicorn process each, 127.0.0.1; model double awaits {args.model_delay * 1000:.0f} ms, "
          f"then streams {len(ANSWER)} characters in {len(pieces())} deltas")
    print(f"{args.warmup:g} s warm-up, then {args.duration:g} s measured per level; {args.turns_per_session} messages per "
          f"session; httpx clients in one process, one connection each; tokens: {setup}; open files limit {limit}")
    print(f"{'clients':>7}  {'figure':<28} {'agentloop':>10} {'floor':>10} {'agentloop/floor':>16}")
    for clients, measured in results.items():
        ours = figures(*measured["agentloop"], args.duration)
        floor = figures(*measured["floor"], args.duration)
        for name, value in ours.items():
            base = floor[name]
            ratio = "-" if value is None or not base else f"{value / base:.2f}x"
            print(f"{clients:>7}  {name:<28} {shown(value):>10} {shown(base):>10} {ratio:>16}")
    protocols = [label for label in PROTOCOL_CLIENTS if label in next(iter(results.values()))]
    print(f"{'clients':>7}  {'protocol':<8} {'figure':<28} {'protocol':>10} {'native':>10} {'protocol/native':>16}  (target <= {PROTOCOL_TARGET:.2f}x latency)")
    for clients, measured in results.items():
        native = figures(*measured["agentloop"], args.duration)
        for label in protocols:
            through = figures(*measured[label], args.duration)
            for name, value in through.items():
                base = native[name]
                ratio = "-" if value is None or not base else f"{value / base:.2f}x"
                print(f"{clients:>7}  {label:<8} {name:<28} {shown(value):>10} {shown(base):>10} {ratio:>16}")
    for clients, measured in results.items():
        for label, (level, _) in measured.items():
            if level.errors:
                listed = ", ".join(f"{count} {kind}" for kind, count in level.errors.most_common())
                print(f"{clients:>7}  errors ({label}): {listed}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,50,500", help="concurrent clients per level, comma-separated")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per level and server")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds per level and server before measuring")
    parser.add_argument("--turns-per-session", type=int, default=5, help="messages a client sends in one session")
    parser.add_argument("--model-delay", type=float, default=0.05, help="seconds the model double awaits")
    parser.add_argument("--protocols", default=",".join(PROTOCOL_CLIENTS),
                        help=f"protocols to measure beside the native API, comma-separated, of {', '.join(PROTOCOL_CLIENTS)}")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 and 5 clients, 1 s per level")
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor:
        import uvicorn

        uvicorn.run(floor_app(), host="127.0.0.1", port=args.port, log_level="warning")
        return
    if args.quick:
        args.clients, args.duration, args.warmup = "1,5", 1.0, 0.3
    levels = [int(n) for n in args.clients.split(",")]
    unknown = set(args.protocols.split(",")) - set(PROTOCOL_CLIENTS)
    if unknown:
        parser.error(f"unknown protocol(s) {', '.join(sorted(unknown))}; choose from {', '.join(PROTOCOL_CLIENTS)}")
    limit = raise_open_files_limit(2 * max(levels) + 256)
    results: dict[int, dict[str, tuple[Level, float | None]]] = {}
    with tempfile.TemporaryDirectory(prefix="agentloop-bench-serve-") as scratch, \
            servers(args, Path(scratch)) as (ours, floor, token, setup):
        for clients in levels:
            results[clients] = {server.label: asyncio.run(run_level(server, clients, token, args)) for server in (ours, floor)}
            for protocol in args.protocols.split(","):
                results[clients][protocol] = asyncio.run(run_level(ours, clients, token, args, protocol=protocol))
    report(args, setup, limit, results)


if __name__ == "__main__":
    main()
