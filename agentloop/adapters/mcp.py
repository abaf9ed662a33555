"""Tools from MCP servers, over stdio or streamable HTTP, as agentloop tools. Needs the `mcp` extra.

    async with mcp_tools(stdio=["python", "weather_server.py"]) as tools:
        pipeline = standard_pipeline(llm, channel, tools=tools)

Each tool keeps the JSON schema the server gives it, and its arguments are checked against
that schema before the call. A tool the server reports as failed (`isError`) raises
`McpToolError`, one that does not answer in time raises `TimeoutError`: the tool loop turns
both into tool failures the model is told about, and the tool policy and trajectory
capture apply as to any tool.

The MCP client session is bound to the event loop and task that opened it, while a turn
may run on any loop (`run_turn_sync` starts a fresh one each turn). So the session lives on
a loop thread of its own for as long as the toolset is open, and a call from any loop or
thread is handed to it there (docs/adr/0015-mcp-sessions-on-their-own-loop-thread.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import threading
from collections.abc import Coroutine, Generator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import attrs
import httpx2
import jsonschema
import mcp_types
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agentloop._containment import passes_through, running_task
from agentloop._log import get_logger
from agentloop.errors import AgentloopError, ToolArgumentError
from agentloop.messages import ToolSpec
from agentloop.tools import Tool

__all__ = [
    "DEFAULT_MCP_CONNECT_TIMEOUT", "DEFAULT_MCP_TIMEOUT", "McpOpening", "McpServerError", "McpTool", "McpToolError",
    "McpToolset", "mcp_tools", "mcp_tools_sync",
]

_log = get_logger("agentloop.mcp")

DEFAULT_MCP_TIMEOUT = 30.0
"""Seconds a tool call may take before it fails with `TimeoutError`."""
DEFAULT_MCP_CONNECT_TIMEOUT = 60.0
"""Seconds allowed to start or reach a server and list its tools (a server fetched by a
package runner on first use can take that long)."""
_SSE_READ_TIMEOUT = 300.0
"""How long an HTTP server may keep a response stream silent (the SDK's own default); each
call is still bounded by its timeout."""

T = TypeVar("T")


class McpServerError(ConnectionError, AgentloopError):
    """An MCP server could not be started or reached, closed the connection, or its toolset is closed."""


class McpToolError(RuntimeError, AgentloopError):
    """An MCP server ran a tool and reported that it failed; the message is the server's."""


@attrs.frozen
class McpTool(Tool):
    """A tool an MCP server runs: the server's schema checks the arguments, the server runs the call."""

    validator: Validator = attrs.field(repr=False, eq=False, kw_only=True)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments unchanged if they fit the server's schema; `ToolArgumentError` if not."""
        error = best_match(self.validator.iter_errors(dict(arguments)))
        if error is None:
            return dict(arguments)
        path = ".".join(str(step) for step in error.absolute_path)
        raise ToolArgumentError(f"tool {self.name!r}: {path + ': ' if path else ''}{error.message}")


@attrs.frozen
class _Server:
    """Where an MCP server is and how long to wait for it; checked when `mcp_tools` is called."""

    stdio: tuple[str, ...] | None
    url: str | None
    env: Mapping[str, str] | None
    cwd: str | None
    headers: Mapping[str, str]
    timeout: float
    connect_timeout: float
    prefix: str

    def __attrs_post_init__(self) -> None:
        if (self.stdio is None) == (self.url is None):
            raise ValueError("give mcp_tools either stdio=[command, *args] or url='http://.../mcp', not both or neither")
        if self.stdio == ():
            raise ValueError("stdio is the server's command line as a list, such as ['python', 'server.py']")
        if self.timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError(
                f"timeout and connect_timeout are in seconds and must be positive, got {self.timeout} "
                f"and {self.connect_timeout}"
            )

    @property
    def where(self) -> str:
        """The server for a message: its command line or URL."""
        return " ".join(self.stdio) if self.stdio is not None else str(self.url)

    async def client(self, stack: contextlib.AsyncExitStack) -> Client:
        """An MCP client for the server, not yet entered; an HTTP client it needs goes on `stack`."""
        if self.stdio is not None:
            command, *args = self.stdio
            env = dict(self.env) if self.env is not None else None
            return Client(StdioServerParameters(command=command, args=args, env=env, cwd=self.cwd))
        assert self.url is not None, "checked when the server was made"
        timeout = httpx2.Timeout(self.connect_timeout, read=_SSE_READ_TIMEOUT)
        http = await stack.enter_async_context(httpx2.AsyncClient(headers=dict(self.headers), timeout=timeout))
        return Client(streamable_http_client(self.url, http_client=http))


class _Connection:
    """One MCP client session, opened, used and closed in one task on its own event-loop thread."""

    def __init__(self, server: _Server) -> None:
        self.server = server
        self._client: Client | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"agentloop-mcp {server.where}", daemon=True)
        self._stop = asyncio.Event()
        self._session: concurrent.futures.Future[None] | None = None
        self._closed = False

    def open(self) -> concurrent.futures.Future[list[mcp_types.Tool]]:
        """Start the thread and the session; the future holds the server's tools once both are up."""
        self._thread.start()
        listed: concurrent.futures.Future[list[mcp_types.Tool]] = concurrent.futures.Future()
        self._session = asyncio.run_coroutine_threadsafe(self._hold_session(listed), self._loop)
        return listed

    async def _hold_session(self, listed: concurrent.futures.Future[list[mcp_types.Tool]]) -> None:
        """Open the session and list the tools, then keep the session open until `close()`."""
        task = running_task()
        async with contextlib.AsyncExitStack() as stack:
            try:
                async with asyncio.timeout(self.server.connect_timeout):
                    client = await stack.enter_async_context(await self.server.client(stack))
                    tools = await _list_tools(client)
            except BaseException as exc:  # a SystemExit too: the opener must hear of it, not wait forever
                if passes_through(exc, task):
                    raise
                listed.set_exception(self._unreachable(exc))
                return
            self._client = client
            listed.set_result(tools)
            await self._stop.wait()

    def _unreachable(self, exc: BaseException) -> McpServerError:
        timeout = self.server.connect_timeout
        cause = f"no answer within {timeout} s" if isinstance(exc, TimeoutError) else _describe(exc)
        return McpServerError(
            f"could not open the MCP server {self.server.where}: {cause}; check that it runs and speaks MCP (over "
            f"HTTP, that headers= carries what it asks for), or pass a larger connect_timeout= if it is slow to start"
        )

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call tool `name` on the session's thread, from any event loop."""
        return await asyncio.wrap_future(self._submit(self._call(name, arguments)))

    async def _call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        assert self._client is not None, "tools exist only once the session is open"
        timeout = self.server.timeout
        task = running_task()
        try:
            return await self._client.call_tool(name, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise TimeoutError(
                    f"the MCP tool {name!r} did not answer within {timeout} s; pass a larger timeout= to mcp_tools "
                    f"if it is slow"
                ) from exc
            if exc.code == mcp_types.CONNECTION_CLOSED:
                raise McpServerError(
                    f"the MCP server {self.server.where} closed the connection ({exc.message}); open the tools again "
                    f"with mcp_tools once it is back"
                ) from exc
            raise McpToolError(f"the MCP server {self.server.where} refused the call of {name!r}: {exc.message}") from exc
        except BaseException as exc:  # a SystemExit would end the session's event loop, and every later call with it
            if isinstance(exc, Exception) or passes_through(exc, task):
                raise
            raise McpToolError(f"calling {name!r} on the MCP server {self.server.where} raised {_describe(exc)}") from exc

    def _submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._closed:
            coroutine.close()
            raise McpServerError(
                f"the tools of the MCP server {self.server.where} are closed; open them again with mcp_tools"
            )
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def close(self) -> None:
        """End the session (a stdio server's process exits) and the thread."""
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._stop.set)
        if self._session is not None:
            try:
                self._session.result(self.server.connect_timeout)
            except Exception as exc:
                _log.warning("mcp.close_failed", server=self.server.where, error=_describe(exc))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(self.server.connect_timeout)
        if not self._thread.is_alive():
            self._loop.close()


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    """Every tool of the server, page after page."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools


def _describe(exc: BaseException) -> str:
    """One line for an error, looking inside the exception groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    message = exc.message if isinstance(exc, MCPError) else str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _result_text(result: mcp_types.CallToolResult) -> str:
    """What the model is told a call returned: its text, other content named, or the structured result."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(block.resource, mcp_types.TextResourceContents):
            parts.append(block.resource.text)
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource {block.name}: {block.uri}]")
        else:
            parts.append(f"[{block.type} content not shown]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, default=str)
    return "\n".join(parts)


def _tool(connection: _Connection, listed: mcp_types.Tool) -> McpTool | None:
    """The agentloop tool for a listed MCP tool; None (and a warning) if its schema is not valid JSON Schema."""
    schema = dict(listed.input_schema)
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        _log.warning("mcp.tool_skipped", server=connection.server.where, tool=listed.name,
                     reason=f"its input schema is not valid JSON Schema: {exc.message}")
        return None

    async def call(**arguments: Any) -> str:
        result = await connection.call(listed.name, arguments)
        text = _result_text(result)
        if result.is_error:
            raise McpToolError(text or f"the MCP server {connection.server.where} reported that {listed.name!r} failed")
        return text

    spec = ToolSpec(connection.server.prefix + listed.name, listed.description or listed.title or "", schema)
    return McpTool(spec, call, validator=validator_class(schema))


class McpToolset:
    """The tools of one MCP server and the session they share; iterate it for the tools, close it when done.

    A tool whose input schema is not valid JSON Schema is left out, with a warning in the log.
    """

    def __init__(self, connection: _Connection, listed: Sequence[mcp_types.Tool]) -> None:
        self._connection = connection
        self.tools: tuple[McpTool, ...] = tuple(t for t in (_tool(connection, item) for item in listed) if t is not None)
        _log.info("mcp.connected", server=self.server, tools=[t.name for t in self.tools])

    @property
    def server(self) -> str:
        """The server: its command line or URL."""
        return self._connection.server.where

    def __iter__(self) -> Iterator[McpTool]:
        return iter(self.tools)

    def close(self) -> None:
        """End the session; a stdio server's process exits. A call after this raises `McpServerError`."""
        self._connection.close()

    async def aclose(self) -> None:
        """`close()` without blocking the event loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> McpToolset:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


class McpOpening:
    """What `mcp_tools` returns: `await` it for an open `McpToolset`, or `async with` it to close the toolset on leaving."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._toolset: McpToolset | None = None

    async def _open(self) -> McpToolset:
        connection = _Connection(self._server)
        try:
            listed = await asyncio.wrap_future(connection.open())
            return McpToolset(connection, listed)
        except BaseException:
            await asyncio.to_thread(connection.close)
            raise

    def __await__(self) -> Generator[Any, None, McpToolset]:
        return self._open().__await__()

    async def __aenter__(self) -> McpToolset:
        self._toolset = await self._open()
        return self._toolset

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._toolset is not None:
            await self._toolset.aclose()


def mcp_tools(
    *,
    stdio: Sequence[str] | None = None,
    url: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_MCP_TIMEOUT,
    connect_timeout: float = DEFAULT_MCP_CONNECT_TIMEOUT,
    prefix: str = "",
) -> McpOpening:
    """The tools of the MCP server started by the command line `stdio`, or served at `url`.

    `tools = await mcp_tools(...)` (then `await tools.aclose()`), or `async with mcp_tools(...) as tools:`.
    `env` and `cwd` are for a stdio server, `headers` (an Authorization, say) for an HTTP one;
    `prefix` goes before every tool name, to tell apart two servers that have tools of one name.
    """
    if isinstance(stdio, str):
        raise ValueError("stdio is the server's command line as a list, such as ['python', 'server.py']")
    return McpOpening(
        _Server(
            stdio=tuple(stdio) if stdio is not None else None,
            url=url,
            env=dict(env) if env is not None else None,
            cwd=os.fspath(cwd) if cwd is not None else None,
            headers=dict(headers or {}),
            timeout=timeout,
            connect_timeout=connect_timeout,
            prefix=prefix,
        )
    )


def mcp_tools_sync(
    *,
    stdio: Sequence[str] | None = None,
    url: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_MCP_TIMEOUT,
    connect_timeout: float = DEFAULT_MCP_CONNECT_TIMEOUT,
    prefix: str = "",
) -> McpToolset:
    """`mcp_tools` for scripts that run turns with `run_turn_sync`: blocks until the tools are listed."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("mcp_tools_sync was called inside a running event loop; await mcp_tools instead")
    opening = mcp_tools(
        stdio=stdio, url=url, env=env, cwd=cwd, headers=headers, timeout=timeout, connect_timeout=connect_timeout,
        prefix=prefix,
    )
    return asyncio.run(opening._open())
