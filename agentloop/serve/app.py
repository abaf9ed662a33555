"""`create_app`: the ASGI app that serves one bot over HTTP (JSON and Server-Sent Events)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from agentloop._log import get_logger
from agentloop._names import MESSAGE_ID_RULE, is_message_id, new_id
from agentloop.adapters.retention import pruning
from agentloop.context import IncomingMessage, Session
from agentloop.messages import Role
from agentloop.scopes import Scope, approval_scope, history_scope
from agentloop.serve.admin import admin_routes
from agentloop.serve.auth import Caller, Tokens, load_tokens
from agentloop.serve.errors import ApiError
from agentloop.serve.headers import SecurityHeaders
from agentloop.serve.limits import RateLimiter
from agentloop.serve.openapi import OPENAPI
from agentloop.serve.protocols import mounted, openapi_document
from agentloop.serve.requests import api, field, message_text, native_error, public, read_body
from agentloop.serve.server import Server, serving
from agentloop.serve.settings import ServeSettings
from agentloop.serve.turns import sse, start_turn

STATIC = Path(__file__).with_name("static")
"""The chat page's files: `index.html` is served at `/`, the rest under `/static/`."""
READY_TIMEOUT = 2.0
"""Seconds /readyz waits for each of the bot's databases to answer before it calls it unreachable."""
_log = get_logger("agentloop.serve")


def create_app(settings: ServeSettings) -> Starlette:
    """The app serving `settings`' bot: the API under /v1, /healthz, /openapi.json and the chat page at /.

    The token file is read now if it was given by path (a bad one raises `TokenFileError`); the bot's stores, pipeline
    and inbox are opened when the app starts (its lifespan) and closed when it stops.
    """
    tokens = settings.tokens if isinstance(settings.tokens, Tokens) else load_tokens(settings.tokens)
    server = Server(settings, tokens, RateLimiter(settings.rate_per_minute, settings.rate_burst))
    protocols = mounted(server)
    document = openapi_document(OPENAPI, protocols)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        retention = pruning(settings.stores, bot=settings.bot, retention=settings.retention)
        async with serving(server), retention, AsyncExitStack() as running:
            for protocol in protocols:
                if protocol.lifespan is not None:
                    await running.enter_async_context(protocol.lifespan())
            yield

    async def openapi(server: Server, request: Request) -> Response:
        return JSONResponse(document)

    routes: list[BaseRoute] = [
        Route("/", _page, methods=["GET"]),
        Route("/healthz", public(server, _health), methods=["GET"]),
        Route("/readyz", public(server, _ready), methods=["GET"]),
        Route("/openapi.json", public(server, openapi), methods=["GET"]),
        Route("/v1/me", api(server, _me), methods=["GET"]),
        Route("/v1/sessions", api(server, _new_session), methods=["POST"]),
        Route("/v1/sessions/{session_id}/messages", api(server, _send), methods=["POST"]),
        Route("/v1/sessions/{session_id}/messages", api(server, _history), methods=["GET"]),
        Route("/v1/sessions/{session_id}/feedback", api(server, _feedback), methods=["POST"]),
        Route("/v1/sessions/{session_id}/approvals/{approval_id}", api(server, _decide), methods=["POST"]),
        Route("/v1/sessions/{session_id}/end", api(server, _end), methods=["POST"]),
        *admin_routes(server),
        *(route for protocol in protocols for route in protocol.routes),
        Mount("/static", StaticFiles(directory=STATIC, check_dir=False), name="static"),
    ]
    return Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_error}, middleware=[Middleware(SecurityHeaders)]
    )


async def _http_error(request: Request, error: Exception) -> Response:
    """The router's own refusals (no such route, a method a route does not take) as JSON errors too."""
    assert isinstance(error, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "invalid")
    message = {
        404: f"there is no {request.url.path}; the routes are listed at /openapi.json",
        405: f"{request.url.path} does not take {request.method}; the routes are listed at /openapi.json",
    }.get(error.status_code, str(error.detail))
    return native_error(ApiError(error.status_code, code, message, headers=dict(error.headers or {})))


def _session(server: Server, request: Request, caller: Caller) -> Session:
    """The caller's session named in the path; another caller's (or an unknown) id is 404, the same answer for both,
    and 503 while an admin erases its user (nothing of it is read or written until the erase is done)."""
    session_id = request.path_params["session_id"]
    if not server.tokens.owns(caller, session_id):
        raise ApiError(404, "not_found", f"there is no session {session_id!r} for this token; start one with POST /v1/sessions")
    session = caller.session(session_id)
    server.refuse_if_erasing(session)
    return session


async def _page(request: Request) -> Response:
    index = STATIC / "index.html"
    if not index.is_file():
        return native_error(ApiError(404, "not_found", "this server has no chat page installed; use the API under /v1"))
    return FileResponse(index)


async def _health(server: Server, request: Request) -> Response:
    server.running
    return JSONResponse({"status": "ok"})


async def _ready(server: Server, request: Request) -> Response:
    """200 when the bot's stores (and inbox, with workers) answer within `READY_TIMEOUT`; 503 naming those that do not."""
    bot = server.running
    checks: dict[str, Awaitable[Any]] = {"stores": bot.stores.sessions.recent(Scope(session_id="agentloop-readyz"), 1)}
    if bot.inbox is not None:
        checks["inbox"] = bot.inbox.check(READY_TIMEOUT)
    answers = await asyncio.gather(*(asyncio.wait_for(check, READY_TIMEOUT) for check in checks.values()), return_exceptions=True)
    unreachable = [name for name, answer in zip(checks, answers) if isinstance(answer, BaseException)]
    if unreachable:
        _log.warning("serve.not_ready", unreachable=unreachable)
        return JSONResponse({"status": "unavailable", "unreachable": unreachable}, 503, headers={"Retry-After": "5"})
    return JSONResponse({"status": "ready"})


async def _me(server: Server, request: Request, caller: Caller) -> Response:
    tenant = {"org": caller.org, "team": caller.team, "project": caller.project}
    return JSONResponse({"user": caller.user, "tenant": tenant, "role": "admin" if caller.admin else "user"})


async def _new_session(server: Server, request: Request, caller: Caller) -> Response:
    await read_body(server, request)
    return JSONResponse({"session_id": server.tokens.new_session_id(caller)}, 201)


async def _send(server: Server, request: Request, caller: Caller) -> Response:
    session = _session(server, request, caller)
    body = await read_body(server, request)
    text = message_text(server, field(body, "text", str))
    given = field(body, "message_id", str, required=False)
    if given is not None and not is_message_id(given):
        raise ApiError(422, "invalid", f"message_id must be {MESSAGE_ID_RULE}; send another or none (the server then makes one)")
    return await _turn(server, request, session, IncomingMessage(text), given or new_id(), given=given is not None)


async def _decide(server: Server, request: Request, caller: Caller) -> Response:
    """The user's decision on a pending tool call: a turn that runs the call (or tells the model it was denied)."""
    session = _session(server, request, caller)
    approval_id = request.path_params["approval_id"]
    body = await read_body(server, request)
    approve = field(body, "approve", bool)
    note = field(body, "note", str, required=False)
    pending = await server.running.stores.approvals.pending(approval_scope(session), session.id)
    if all(waiting.request.approval_id != approval_id for waiting in pending):
        raise ApiError(404, "not_found", f"no tool call awaits approval {approval_id!r} in this session; it may have been decided already")
    incoming = IncomingMessage.approval(approval_id, approved=approve, note=note)
    return await _turn(server, request, session, incoming, new_id())


async def _turn(
    server: Server, request: Request, session: Session, incoming: IncomingMessage, message_id: str, *, given: bool = False
) -> Response:
    """Run (or submit) the turn; the Outcome as JSON, or as SSE deltas and a final outcome event when the client asks."""
    stream = "text/event-stream" in request.headers.get("accept", "")
    started = await start_turn(server, session, incoming, message_id, given=given)
    if stream:
        return sse(started.events)
    return JSONResponse(await started.outcome)


async def _history(server: Server, request: Request, caller: Caller) -> Response:
    session = _session(server, request, caller)
    messages = await server.running.stores.sessions.recent(history_scope(session), server.settings.history_limit)
    shown = [
        {"role": message.role.value, "text": message.content}
        for message in messages
        if message.role in (Role.USER, Role.ASSISTANT) and message.content
    ]
    return JSONResponse({"messages": shown})


async def _feedback(server: Server, request: Request, caller: Caller) -> Response:
    session = _session(server, request, caller)
    body = await read_body(server, request)
    turn_id = field(body, "turn_id", str)
    positive = field(body, "positive", bool)
    async with server.holding(session):  # an erase that began while the body was read refuses it
        credited = await server.running.note_taking.record_feedback(session, positive=positive, turn_id=turn_id)
    return JSONResponse({"credited": len(credited)})


async def _end(server: Server, request: Request, caller: Caller) -> Response:
    session = _session(server, request, caller)
    body = await read_body(server, request)
    success = field(body, "success", bool, required=False)
    idle = server.running.idle
    assert idle is not None  # set when the bot opens
    async with server.holding(session):
        result = await idle.end(session, success=success)
    return JSONResponse({"status": result.status.value, "reason": result.reason})
