"""The bot as an MCP server (the `mcp` extra): the tools `ask` and `decide`, over streamable HTTP at /mcp behind the
served app's bearer token, and over stdio (`agentloop mcp`) for one local caller.

`ask` takes a message and an optional `session_id` (without one, a new session of the caller's, its id in the
result) and answers with the turn's Outcome as structured content and its text as text content. A tool call that
waits for the user's approval ends the turn with `finish_reason` "awaiting_approval" and the approval's id; `decide`
(the session, the approval id, approve true or false) resumes it. A session id that is not the caller's (another
tenant's or an unknown one), a blank message or a refused turn is a tool error (`isError`) saying why.
Over HTTP each call is answered as one JSON body: the tools stream nothing, and an event stream per
request costs the server more than the turn's own routing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import Server as McpServer
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from agentloop._names import MESSAGE_ID_RULE, is_message_id, new_id
from agentloop.context import IncomingMessage, Session
from agentloop.scopes import approval_scope
from agentloop.serve.auth import Caller
from agentloop.serve.errors import ApiError
from agentloop.serve.openapi import OPENAPI
from agentloop.serve.protocols import Mounted
from agentloop.serve.requests import api, api_error, message_text
from agentloop.serve.server import Server, serving
from agentloop.serve.turns import start_turn

MCP_PATH = "/mcp"
"""Where the streamable HTTP endpoint is mounted."""

_OUTCOME = OPENAPI["components"]["schemas"]["Outcome"]
_RESULT: dict[str, Any] = {
    **_OUTCOME,
    "required": ["session_id", *_OUTCOME["required"]],
    "properties": {"session_id": {"type": "string", "description": "the session to pass to the next call"}, **_OUTCOME["properties"]},
}
_SESSION_ARGUMENT = {"type": "string", "description": "a session_id an earlier result gave"}
TOOLS = [
    types.Tool(
        name="ask",
        description="Send a message to the bot and get its reply. Pass the session_id of an earlier result to continue "
        "that conversation; without one a new session starts. When a tool call awaits your approval, the result's "
        "finish_reason is awaiting_approval: answer it with decide.",
        input_schema={
            "type": "object",
            "required": ["message"],
            "properties": {
                "message": {"type": "string", "description": "what the user says"},
                "session_id": _SESSION_ARGUMENT,
                "message_id": {
                    "type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$",
                    "description": "your id for this message: sent again, it gets the same reply, not a second turn",
                },
            },
            "additionalProperties": False,
        },
        output_schema=_RESULT,
    ),
    types.Tool(
        name="decide",
        description="Approve or deny the tool call a reply said awaits approval; the bot then goes on with that turn.",
        input_schema={
            "type": "object",
            "required": ["session_id", "approval_id", "approve"],
            "properties": {
                "session_id": _SESSION_ARGUMENT,
                "approval_id": {"type": "string", "description": "the approval.approval_id of that reply"},
                "approve": {"type": "boolean", "description": "true runs the call, false tells the bot it was denied"},
                "note": {"type": "string", "description": "optional words for the bot with the decision"},
            },
            "additionalProperties": False,
        },
        output_schema=_RESULT,
    ),
]
"""The tools the server lists."""

_CALLER: ContextVar[Caller] = ContextVar("agentloop_mcp_caller")
"""The caller of the HTTP request being answered (its token's), set before the SDK handles the request."""


def mcp_server(server: Server, caller: Callable[[], Caller]) -> McpServer[Any]:
    """The MCP server of `server`'s bot; `caller()` is who makes the current call."""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await _call(server, caller(), params.name, params.arguments or {})
        except Exception as error:  # every refusal, as a sentence the client can show
            refusal = api_error(error)
            return types.CallToolResult(content=[types.TextContent(type="text", text=refusal.message)], is_error=True)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_said(result))], structured_content=result,
            is_error=result["finish_reason"] == "error",
        )

    return McpServer("agentloop", on_list_tools=list_tools, on_call_tool=call_tool)


async def _call(server: Server, caller: Caller, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The result of tool `name`: the session id and the Outcome of the turn it ran."""
    if name == "ask":
        session_id = _text(arguments, "session_id", required=False)
        session = _session(server, caller, session_id) if session_id else caller.session(server.tokens.new_session_id(caller))
        message = message_text(server, _text(arguments, "message"))
        given = _text(arguments, "message_id", required=False)
        if given is not None and not is_message_id(given):
            raise ApiError(422, "invalid", f"message_id must be {MESSAGE_ID_RULE}; send another or none")
        started = await start_turn(server, session, IncomingMessage(message), given or new_id(), given=given is not None)
    elif name == "decide":
        session = _session(server, caller, _text(arguments, "session_id"))
        approval_id = _text(arguments, "approval_id")
        approve, note = arguments.get("approve"), _text(arguments, "note", required=False)
        if not isinstance(approve, bool):
            raise ApiError(422, "invalid", "approve must be true or false")
        pending = await server.running.stores.approvals.pending(approval_scope(session), session.id)
        if all(waiting.request.approval_id != approval_id for waiting in pending):
            raise ApiError(404, "not_found", f"no tool call awaits approval {approval_id!r} in this session; it may have been decided already")
        started = await start_turn(server, session, IncomingMessage.approval(approval_id, approved=approve, note=note), new_id())
    else:
        raise ApiError(404, "not_found", f"there is no tool {name!r}; the tools are ask and decide")
    return {"session_id": session.id, **await started.outcome}


def _session(server: Server, caller: Caller, session_id: str) -> Session:
    """The caller's session `session_id`; another caller's and an unknown id get the same not-found."""
    if not server.tokens.owns(caller, session_id):
        raise ApiError(404, "not_found", f"there is no session {session_id!r} for you; call ask without a session_id to start one")
    return caller.session(session_id)


def _text(arguments: Mapping[str, Any], name: str, *, required: bool = True) -> Any:
    value = arguments.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ApiError(422, "invalid", f"the argument {name!r} must be a string")
    return value


def _said(result: Mapping[str, Any]) -> str:
    """The result as text for a client that reads no structured content: the reply, or what awaits approval."""
    approval = result["approval"]
    if approval is not None:
        return (
            f"The bot waits for approval to run {approval['tool']} with {json.dumps(approval['arguments'])}: call decide "
            f"with session_id {result['session_id']!r}, approval_id {approval['approval_id']!r} and approve true or false."
        )
    if result["text"] is not None:
        return str(result["text"])
    return "The bot could not answer: " + "; ".join(result["failures"] or ["no reason was given"])


def mount(server: Server) -> Mounted:
    """MCP over streamable HTTP at `MCP_PATH`, each request behind the bearer token and its rate limit.

    The SDK's session manager runs once: each start of the app (its lifespan) makes a new one."""
    mcp = mcp_server(server, _CALLER.get)
    managers: list[StreamableHTTPSessionManager] = []

    @asynccontextmanager
    async def running() -> AsyncIterator[None]:
        manager = StreamableHTTPSessionManager(mcp, json_response=True, max_request_body_size=server.settings.max_body_bytes)
        async with manager.run():
            managers.append(manager)
            try:
                yield
            finally:
                managers.remove(manager)

    async def relay(server: Server, request: Request, caller: Caller) -> Response:
        if not managers:
            raise ApiError(503, "starting", "the server is starting or stopping; try again in a moment", headers={"Retry-After": "1"})
        return _Relayed(managers[-1], caller, request.headers.get("authorization", ""))

    endpoint = api(server, relay, render=_unauthorised_with_challenge)
    return Mounted([Route(MCP_PATH, endpoint, methods=["GET", "POST", "DELETE"])], _OPENAPI, running)


class _Relayed(Response):
    """The SDK's answer to an authorised request: written by the session manager, as the caller of its token.

    The caller is also the request's `AuthenticatedUser`, so an MCP session stays with the token that opened it."""

    def __init__(self, manager: StreamableHTTPSessionManager, caller: Caller, authorization: str) -> None:
        self.manager, self.caller, self.authorization = manager, caller, authorization

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        who = "\x1f".join((self.caller.user, self.caller.org or "", self.caller.team or "", self.caller.project or ""))
        scope["user"] = AuthenticatedUser(AccessToken(token=self.authorization, client_id=who, scopes=[]))
        reset = _CALLER.set(self.caller)
        try:
            await self.manager.handle_request(scope, receive, send)
        finally:
            _CALLER.reset(reset)


def _unauthorised_with_challenge(error: ApiError) -> Response:
    """The native error, with the `WWW-Authenticate: Bearer` challenge an MCP client expects on a 401."""
    headers = {**error.headers, **({"WWW-Authenticate": "Bearer"} if error.status == 401 else {})}
    return JSONResponse({"error": {"code": error.code, "message": error.message}}, error.status, headers=headers)


async def serve_stdio(server: Server, caller: Caller) -> None:
    """Serve `server`'s bot over this process's standard input and output until the client closes them."""
    async with serving(server):
        mcp = mcp_server(server, lambda: caller)
        async with stdio_server() as (read, write):
            await mcp.run(read, write, mcp.create_initialization_options())


_BEARER: list[dict[str, list[str]]] = [{"bearer": []}]
_MCP_ANSWER = {
    "200": {
        "description": "the JSON-RPC answer, as JSON or a Server-Sent Events stream (the MCP streamable HTTP transport)",
        "content": {"application/json": {"schema": {"type": "object"}}, "text/event-stream": {"schema": {"type": "string"}}},
    },
    "401": {"description": "no valid bearer token (code unauthorized), with WWW-Authenticate: Bearer"},
    "429": {"description": "this token's rate limit; the Retry-After header says how many seconds to wait (code rate_limited)"},
}
_OPENAPI: dict[str, Any] = {
    "paths": {
        MCP_PATH: {
            "post": {
                "summary": "MCP over streamable HTTP: a JSON-RPC message (the tools ask and decide)",
                "security": _BEARER,
                "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": _MCP_ANSWER,
            },
            "get": {"summary": "MCP: the stream of the server's messages of an MCP session", "security": _BEARER, "responses": _MCP_ANSWER},
            "delete": {"summary": "MCP: end an MCP session", "security": _BEARER, "responses": _MCP_ANSWER},
        }
    }
}
