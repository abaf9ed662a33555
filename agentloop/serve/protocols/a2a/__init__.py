"""A2A 1.0 over JSON-RPC (HTTP): the bot as an agent other agents call, at `/a2a`, its card at `/.well-known/agent-card.json`.

The a2a-sdk's `JsonRpcDispatcher` reads each request and writes its answer (the protocol's wire format, errors and
SSE); behind it `A2aHandler` runs each message as a turn, after this server's token, rate limit and body limits.
A context id is a session id (the same as the native API's); a task is one message's turn, kept by this process.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import Any

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_1_0, TransportProtocol
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message

from agentloop.serve.auth import Caller
from agentloop.serve.errors import ApiError
from agentloop.serve.protocols import Mounted
from agentloop.serve.protocols.a2a.handler import CALLER, A2aHandler, as_a2a_error
from agentloop.serve.requests import api, public, read_body
from agentloop.serve.server import Bot, Server
from agentloop.tools import Tool

RPC_PATH = "/a2a"
"""Where the JSON-RPC endpoint is served; the agent card names it by its full URL."""
BEARER = "bearer"
"""The agent card's name for the security scheme of this server's bearer tokens."""


def mount(server: Server) -> Mounted:
    """The agent card and the JSON-RPC endpoint behind the token, the rate limit and the body limits."""
    dispatcher = JsonRpcDispatcher(A2aHandler(server), context_builder=_CallerContext())

    async def rpc(server: Server, request: Request, caller: Caller) -> Response:
        body = await read_body(server, request)
        return await dispatcher.handle_requests(_replayed(request, body, caller))

    routes: list[BaseRoute] = [
        Route(AGENT_CARD_WELL_KNOWN_PATH, public(server, _card, render=rpc_error), methods=["GET"]),
        Route(RPC_PATH, api(server, rpc, render=rpc_error), methods=["POST"]),
    ]
    return Mounted(routes, _OPENAPI)


def rpc_error(error: ApiError) -> Response:
    """A refusal before the JSON-RPC request is read (401, 413, 422, 429, 503) as a JSON-RPC error, with its HTTP status."""
    return JSONResponse(build_error_response(None, as_a2a_error(error)), error.status, headers=error.headers)


async def _card(server: Server, request: Request) -> Response:
    return JSONResponse(agent_card_to_dict(agent_card(server, str(request.base_url).rstrip("/") + RPC_PATH)))


def agent_card(server: Server, url: str) -> AgentCard:
    """The card of the served bot: its JSON-RPC endpoint at `url`, streaming, bearer tokens, a skill per tool."""
    bearer = HTTPAuthSecurityScheme(
        scheme="Bearer", description="a token from this server's token file (ask its operator); it names your user and tenant",
    )
    return AgentCard(
        name=server.settings.bot,
        description=f"The agentloop bot {server.settings.bot!r}: it answers messages, remembers each context as a session "
        "and asks before running a tool that needs the user's approval.",
        supported_interfaces=[AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC.value, protocol_version=PROTOCOL_VERSION_1_0)],
        version=version("agentloop-ecs"),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={BEARER: SecurityScheme(http_auth_security_scheme=bearer)},
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList()})],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=_skills(server.running),
    )


def _skills(bot: Bot) -> list[AgentSkill]:
    """A conversation skill, and one skill per tool of the bot's pipeline (none known when workers run the turns)."""
    skills = [AgentSkill(
        id="chat", name="chat", tags=["chat"],
        description="Talk with the bot: a context is one conversation it remembers, and it may use its tools to answer.",
    )]
    tools: dict[str, Tool] = {}
    for system in bot.loop.systems if bot.loop is not None else ():
        for found in getattr(system, "tools", ()):
            if isinstance(found, Tool):
                tools.setdefault(found.name, found)
    for name, found in tools.items():
        description = found.spec.description or f"the tool {name}"
        approval = " (it runs only once the user approves the call)" if found.requires_approval else ""
        skills.append(AgentSkill(id=name, name=name, description=description + approval, tags=["tool"]))
    return skills


class _User(User):
    """The token's user, as the a2a-sdk's server sees it."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


class _CallerContext(DefaultServerCallContextBuilder):
    """The call context of a request whose token was checked: its `Caller` under `CALLER` in the state."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[CALLER] = request.scope[CALLER]
        return context

    def build_user(self, request: Request) -> User:
        caller: Caller = request.scope[CALLER]
        return _User(caller.user)


def _replayed(request: Request, body: dict[str, Any], caller: Caller) -> Request:
    """`request` with its body (already read under the limits) given again, and the caller in its scope."""
    data = json.dumps(body).encode()
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await request.receive()  # after the body: the client leaving, which a stream listens for
        sent = True
        return {"type": "http.request", "body": data, "more_body": False}

    return Request({**request.scope, CALLER: caller}, receive)


_OPENAPI: dict[str, Any] = {
    "paths": {
        AGENT_CARD_WELL_KNOWN_PATH: {"get": {
            "summary": "A2A agent card: the bot's name, skills, JSON-RPC endpoint, streaming and bearer security scheme",
            "tags": ["a2a"], "security": [],
            "responses": {"200": {"description": "the AgentCard (A2A 1.0)", "content": {"application/json": {}}}},
        }},
        RPC_PATH: {"post": {
            "summary": "A2A 1.0 JSON-RPC: SendMessage, SendStreamingMessage (SSE), GetTask, CancelTask",
            "description": "Send the header A2A-Version: 1.0. A contextId is a session id; a task is one message's turn.",
            "tags": ["a2a"],
            "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
            "responses": {
                "200": {"description": "a JSON-RPC response, or for SendStreamingMessage a text/event-stream of them",
                        "content": {"application/json": {}, "text/event-stream": {}}},
                "401": {"description": "no valid bearer token"},
                "413": {"description": "the body is too large"},
                "422": {"description": "the body is not a JSON object within the limits"},
                "429": {"description": "too many requests with this token; see Retry-After"},
            },
        }},
    },
}
