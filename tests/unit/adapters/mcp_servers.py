"""Real MCP servers for the MCP tool tests, built with the SDK.

`weather` is an `MCPServer` (the SDK's FastMCP) with a working, a failing and a slow tool;
`odd` is a low-level server whose tools have the shapes a generated server never makes (an
invalid input schema, content that is not text, a structured result only).
`python mcp_servers.py weather|odd` serves one over stdio; tests serve `weather` over HTTP
with `weather.streamable_http_app()`.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server

weather = MCPServer("weather")


@weather.tool()
def forecast(city: str, days: int = 1) -> str:
    """The forecast for a city."""
    return f"{city}: sunny for {days} day(s)"


@weather.tool()
def station(code: str) -> str:
    """The readings of a weather station."""
    raise ToolError(f"no weather station {code!r}")


@weather.tool()
async def radar(seconds: float) -> str:
    """A radar picture, ready after `seconds`."""
    await asyncio.sleep(seconds)
    return "radar ready"


async def _odd_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[
        types.Tool(name="broken", description="Has a schema no validator accepts.",
                   input_schema={"type": "object", "properties": {"x": {"type": 12}}}),
        types.Tool(name="mixed", description="Answers with every kind of content.", input_schema={"type": "object"}),
        types.Tool(name="totals", description="Answers with a structured result only.", input_schema={"type": "object"}),
        types.Tool(name="closed", description="Is refused with a protocol error.", input_schema={"type": "object"}),
    ])


async def _odd_call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "mixed":
        return types.CallToolResult(content=[
            types.TextContent(type="text", text="a chart:"),
            types.ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
            types.EmbeddedResource(type="resource", resource=types.TextResourceContents(uri="file:///notes.txt",
                                                                                      text="the notes")),
            types.ResourceLink(type="resource_link", name="report", uri="file:///report.pdf"),
        ])
    if params.name == "closed":
        raise MCPError(types.INVALID_REQUEST, "the counter is closed today")
    return types.CallToolResult(content=[], structured_content={"total": 42})


odd = Server("odd", on_list_tools=_odd_tools, on_call_tool=_odd_call)


async def _serve_odd() -> None:
    async with stdio_server() as (read, write):
        await odd.run(read, write, odd.create_initialization_options())


if __name__ == "__main__":
    if sys.argv[1] == "weather":
        weather.run()
    else:
        asyncio.run(_serve_odd())
