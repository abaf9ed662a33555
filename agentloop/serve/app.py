"""`create_app`: the ASGI app that serves one bot over HTTP (JSON and Server-Sent Events)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agentloop._log import get_logger
from agentloop._names import MESSAGE_ID_RULE, is_message_id, new_id
from agentloop._text import storable
from agentloop.adapters import Stores, open_note_taking, open_stores
from agentloop.adapters.stores import open_replies
from agentloop.bots import BotError, apply_budgets, built_pipeline, open_bot, pipeline_note_taking
from agentloop.context import IncomingMessage, Session
from agentloop.errors import StoreUnavailableError, TurnInProgressError
from agentloop.loop import AgentLoop
from agentloop.messages import Role
from agentloop.mid_turn import Interruption, MidTurnPolicy, waiting_behind
from agentloop.notes import IdleSessions, NoteTaking
from agentloop.ports.replies import Replies, Reply
from agentloop.scopes import Scope, approval_scope, history_scope
from agentloop.serve.auth import Caller, Tokens, load_tokens, token_digest
from agentloop.serve.channel import Event, HttpChannel
from agentloop.serve.errors import ApiError
from agentloop.serve.headers import SecurityHeaders
from agentloop.serve.limits import RateLimiter
from agentloop.serve.openapi import OPENAPI
from agentloop.serve.outcome import deadline_outcome, error_outcome, outcome_json
from agentloop.serve.replies import message_digest, message_scope
from agentloop.serve.settings import ServeSettings

STATIC = Path(__file__).with_name("static")
"""The chat page's files: `index.html` is served at `/`, the rest under `/static/`."""
INBOX_GRACE = 30.0
"""How much longer than the turn deadline a request waits for a worker's answer."""
READY_TIMEOUT = 2.0
"""Seconds /readyz waits for each of the bot's databases to answer before it calls it unreachable."""
_log = get_logger("agentloop.serve")


@attrs.define
class _Bot:
    """What serves the requests: the loop (None when workers run the turns), the inbox, the stores,
    note-taking and the watch that ends idle sessions."""

    stores: Stores
    note_taking: NoteTaking
    loop: AgentLoop | None = None
    inbox: Any = None
    idle: IdleSessions | None = None
    replies: Replies | None = None


@attrs.define
class _Gate:
    """One session's turn at a time in this server: the lock, and how many requests hold or await it."""

    lock: asyncio.Lock = attrs.Factory(asyncio.Lock)
    users: int = 0


@attrs.define
class _Server:
    """The app's state: settings, callers, limits, the channel and (while running) the bot."""

    settings: ServeSettings
    tokens: Tokens
    limiter: RateLimiter
    channel: HttpChannel = attrs.Factory(HttpChannel)
    bot: _Bot | None = None
    gates: dict[str, _Gate] = attrs.Factory(dict)
    turns: set[asyncio.Task[Any]] = attrs.Factory(set)

    @property
    def running(self) -> _Bot:
        if self.bot is None:
            raise ApiError(503, "starting", "the server is starting or stopping; try again in a moment")
        return self.bot


def create_app(settings: ServeSettings) -> Starlette:
    """The app serving `settings`' bot: the API under /v1, /healthz, /openapi.json and the chat page at /.

    The token file is read now if it was given by path (a bad one raises `TokenFileError`); the bot's stores, pipeline
    and inbox are opened when the app starts (its lifespan) and closed when it stops.
    """
    tokens = settings.tokens if isinstance(settings.tokens, Tokens) else load_tokens(settings.tokens)
    server = _Server(settings, tokens, RateLimiter(settings.rate_per_minute, settings.rate_burst))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with _open(server) as bot:
            server.bot = bot
            try:
                yield
            finally:
                server.bot = None
                await _settle(server.turns)

    routes = [
        Route("/", _page, methods=["GET"]),
        Route("/healthz", _public(server, _health), methods=["GET"]),
        Route("/readyz", _public(server, _ready), methods=["GET"]),
        Route("/openapi.json", _public(server, _openapi), methods=["GET"]),
        Route("/v1/me", _api(server, _me), methods=["GET"]),
        Route("/v1/sessions", _api(server, _new_session), methods=["POST"]),
        Route("/v1/sessions/{session_id}/messages", _api(server, _send), methods=["POST"]),
        Route("/v1/sessions/{session_id}/messages", _api(server, _history), methods=["GET"]),
        Route("/v1/sessions/{session_id}/feedback", _api(server, _feedback), methods=["POST"]),
        Route("/v1/sessions/{session_id}/approvals/{approval_id}", _api(server, _decide), methods=["POST"]),
        Route("/v1/sessions/{session_id}/end", _api(server, _end), methods=["POST"]),
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
    return _error(ApiError(error.status_code, code, message, headers=dict(error.headers or {})))


@asynccontextmanager
async def _open(server: _Server) -> AsyncIterator[_Bot]:
    """Open the bot the settings name: its stores and note-taking, and either its loop or the workers' inbox."""
    settings = server.settings
    async with AsyncExitStack() as closing:
        stack = closing.enter_context(ExitStack())
        try:
            if settings.uses_inbox:
                stores = stack.enter_context(open_stores(settings.stores, bot=settings.bot))
                bot = _Bot(stores, stack.enter_context(open_note_taking(stores, settings.llm)))
                from agentloop.workers import open_inbox  # the postgres extra

                bot.inbox = await closing.enter_async_context(open_inbox(settings.stores, bot=settings.bot, mid_turn=settings.mid_turn))
            elif settings.pipeline is None:
                standard = stack.enter_context(open_bot(settings.stores, settings.llm, server.channel, bot=settings.bot))
                assert standard.pipeline.stores is not None  # open_bot gives the pipeline its stores
                bot = _Bot(standard.pipeline.stores, standard.note_taking, standard.loop)
            else:
                stores = stack.enter_context(open_stores(settings.stores, bot=settings.bot))
                offered: dict[str, Callable[[], Any]] = {
                    "llm": lambda: settings.llm, "channel": lambda: server.channel, "stores": lambda: stores,
                }
                loop = stack.enter_context(built_pipeline(settings.pipeline, offered))
                # the pipeline's own note-taking holds what it captured: ending a session drains it first
                note_taking = pipeline_note_taking(loop) or stack.enter_context(open_note_taking(stores, settings.llm))
                bot = _Bot(stores, note_taking, loop)
        except BotError as error:
            raise RuntimeError(f"agentloop serve cannot open the bot: {error}") from error
        if bot.loop is not None and settings.turn_timeout is not None:
            bot.loop.turn_timeout = settings.turn_timeout
        if bot.loop is not None and settings.max_concurrent_turns is not None:
            bot.loop.max_concurrent_turns = settings.max_concurrent_turns
        if bot.loop is not None:
            bot.loop.mid_turn = settings.mid_turn
            apply_budgets(bot.loop, settings.budgets)
            bot.replies = await closing.enter_async_context(open_replies(bot.stores.url, bot=settings.bot))
        bot.idle = await closing.enter_async_context(IdleSessions(bot.note_taking, idle_after=settings.idle_timeout))
        _log.info("serve.started", bot=settings.bot, inbox=bot.inbox is not None)
        yield bot


async def _settle(tasks: set[asyncio.Task[Any]]) -> None:
    """Let the turns still running (their clients gone) finish before the stores close."""
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


Handler = Callable[[_Server, Request, Caller], Awaitable[Response]]


def _api(server: _Server, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """`handler` behind the bearer token and the caller's rate limit; every error becomes JSON."""

    async def endpoint(request: Request) -> Response:
        async def authorised() -> Response:
            caller, identity = _caller(server, request)
            wait = server.limiter.check(identity)
            if wait:
                raise ApiError(
                    429, "rate_limited", f"too many requests with this token; try again in {wait} s",
                    headers={"Retry-After": str(wait)},
                )
            return await handler(server, request, caller)

        return await _answer(authorised)

    return endpoint


def _public(server: _Server, handler: Callable[[_Server, Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return await _answer(lambda: handler(server, request))

    return endpoint


async def _answer(respond: Callable[[], Awaitable[Response]]) -> Response:
    """The response, or the JSON error a client can show; an unexpected exception is logged, never shown."""
    try:
        return await respond()
    except ApiError as error:
        return _error(error)
    except StoreUnavailableError as error:
        return _error(_unavailable(error))
    except TurnInProgressError as error:
        return _error(ApiError(409, "turn_in_progress", str(error)))
    except Exception as error:
        _log.error("serve.internal_error", exc_info=error)
        return _error(ApiError(500, "internal", "the server failed on this request; try again, and tell its operator if it keeps failing"))


def _unavailable(error: StoreUnavailableError) -> ApiError:
    """A database out of reach, as the 503 a client retries after `Retry-After` seconds."""
    _log.warning("serve.store_unavailable", error=str(error))
    return ApiError(
        503, "unavailable", f"the bot's database cannot be reached just now; send the same request again in {error.retry_after} s",
        headers={"Retry-After": str(error.retry_after)},
    )


def _error(error: ApiError) -> JSONResponse:
    return JSONResponse({"error": {"code": error.code, "message": error.message}}, error.status, headers=error.headers)


def _caller(server: _Server, request: Request) -> tuple[Caller, str]:
    """The caller of the request's bearer token and the token's digest (what its rate limit is kept by).

    The scheme is matched in any case and the credentials may be surrounded by any whitespace (RFC 7235),
    so no respelling of the header names another limit."""
    parts = request.headers.get("authorization", "").split()
    token = parts[1] if len(parts) == 2 and parts[0].lower() == "bearer" else None
    caller = None if token is None else server.tokens.caller(token)
    if token is None or caller is None:
        raise ApiError(
            401, "unauthorized", "a valid token is needed: send the header Authorization: Bearer <token> with a token the server knows"
        )
    return caller, token_digest(token)


def _session(server: _Server, request: Request, caller: Caller) -> Session:
    """The caller's session named in the path; another caller's (or an unknown) id is 404, the same answer for both."""
    session_id = request.path_params["session_id"]
    if not server.tokens.owns(caller, session_id):
        raise ApiError(404, "not_found", f"there is no session {session_id!r} for this token; start one with POST /v1/sessions")
    return caller.session(session_id)


async def _body(server: _Server, request: Request) -> dict[str, Any]:
    """The request's JSON object, read up to the size limit (413 past it, 422 when it is not a JSON object)."""
    limit = server.settings.max_body_bytes
    too_large = ApiError(413, "too_large", f"the request body is larger than {limit} bytes; send less")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    if not body:
        return {}
    try:
        data = json.loads(body, parse_int=_number(int), parse_float=_number(float), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, _Refused) as error:
        raise ApiError(422, "invalid", f"the request body is not valid JSON ({error})") from error
    except RecursionError as error:
        raise ApiError(422, "invalid", f"the request body nests deeper than {MAX_JSON_DEPTH} levels; send a flatter object") from error
    if not isinstance(data, dict):
        raise ApiError(422, "invalid", "the request body must be a JSON object")
    cleaned: dict[str, Any] = _clean(data)
    return cleaned


MAX_JSON_DEPTH = 32
"""How deeply arrays and objects may nest in a request body."""
MAX_NUMBER_CHARS = 64
"""How long a number in a request body may be written."""


class _Refused(ValueError):
    """A JSON value the server does not take (a number too long, NaN or Infinity)."""


def _number(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_CHARS:
            raise _Refused(f"a number is written with {len(text)} characters; the limit is {MAX_NUMBER_CHARS}")
        return kind(text)

    return parse


def _no_constant(text: str) -> Any:
    raise _Refused(f"{text} is not a JSON number")


def _clean(value: Any, depth: int = 1) -> Any:
    """`value` with every string made storable (NUL and lone surrogates replaced by U+FFFD, as all input is);
    422 past `MAX_JSON_DEPTH` levels of arrays and objects."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, (dict, list)) and depth > MAX_JSON_DEPTH:
        raise ApiError(422, "invalid", f"the request body nests deeper than {MAX_JSON_DEPTH} levels; send a flatter object")
    if isinstance(value, dict):
        return {storable(key): _clean(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [_clean(item, depth + 1) for item in value]
    return value


def _field(body: dict[str, Any], name: str, kind: type, *, required: bool = True) -> Any:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ApiError(422, "invalid", f"the field {name!r} must be a {_TYPE_NAMES[kind]}")
    return value


_TYPE_NAMES = {str: "string", bool: "boolean (true or false)", int: "whole number"}


async def _page(request: Request) -> Response:
    index = STATIC / "index.html"
    if not index.is_file():
        return _error(ApiError(404, "not_found", "this server has no chat page installed; use the API under /v1"))
    return FileResponse(index)


async def _health(server: _Server, request: Request) -> Response:
    server.running
    return JSONResponse({"status": "ok"})


async def _ready(server: _Server, request: Request) -> Response:
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


async def _openapi(server: _Server, request: Request) -> Response:
    return JSONResponse(OPENAPI)


async def _me(server: _Server, request: Request, caller: Caller) -> Response:
    tenant = {"org": caller.org, "team": caller.team, "project": caller.project}
    return JSONResponse({"user": caller.user, "tenant": tenant})


async def _new_session(server: _Server, request: Request, caller: Caller) -> Response:
    await _body(server, request)
    return JSONResponse({"session_id": server.tokens.new_session_id(caller)}, 201)


async def _send(server: _Server, request: Request, caller: Caller) -> Response:
    session = _session(server, request, caller)
    body = await _body(server, request)
    text = _field(body, "text", str)
    limit = server.settings.max_message_chars
    if not text.strip():
        raise ApiError(422, "invalid", "the message is empty; send some text")
    if len(text) > limit:
        raise ApiError(422, "invalid", f"the message is {len(text)} characters long; the limit is {limit}")
    given = _field(body, "message_id", str, required=False)
    if given is not None and not is_message_id(given):
        raise ApiError(422, "invalid", f"message_id must be {MESSAGE_ID_RULE}; send another or none (the server then makes one)")
    return await _turn(server, request, session, IncomingMessage(text), given or new_id(), given=given is not None)


async def _decide(server: _Server, request: Request, caller: Caller) -> Response:
    """The user's decision on a pending tool call: a turn that runs the call (or tells the model it was denied)."""
    session = _session(server, request, caller)
    approval_id = request.path_params["approval_id"]
    body = await _body(server, request)
    approve = _field(body, "approve", bool)
    note = _field(body, "note", str, required=False)
    pending = await server.running.stores.approvals.pending(approval_scope(session), session.id)
    if all(waiting.request.approval_id != approval_id for waiting in pending):
        raise ApiError(404, "not_found", f"no tool call awaits approval {approval_id!r} in this session; it may have been decided already")
    incoming = IncomingMessage.approval(approval_id, approved=approve, note=note)
    return await _turn(server, request, session, incoming, new_id())


async def _turn(
    server: _Server, request: Request, session: Session, incoming: IncomingMessage, message_id: str, *, given: bool = False
) -> Response:
    """Run (or submit) the turn; the Outcome as JSON, or as SSE deltas and a final outcome event when the client asks.

    A message id the client `given` that this server already answered (the same session and message) gets the
    stored outcome again, not a second turn; under another session or message it is refused (422)."""
    bot = server.running
    stream = "text/event-stream" in request.headers.get("accept", "")
    if bot.loop is None:
        key = await _submit(bot, session, incoming, message_id)  # refused (409, 422) before any stream opens
        outcome = _watched(bot, session, _inbox_turn(server, bot, key, message_id))
        if stream:
            return _sse(_only(outcome))
        return JSONResponse(await outcome)
    if bot.loop.mid_turn is MidTurnPolicy.REJECT and session.id in server.gates:
        raise TurnInProgressError(session.id)
    gate = server.gates.setdefault(session.id, _Gate())
    gate.users += 1

    def leave() -> None:
        gate.users -= 1
        if not gate.users:
            del server.gates[session.id]

    held = False
    try:
        held = await gate.lock.acquire()  # the session's channel listener is this request's until its turn ends
        stored = await _stored_reply(bot, session, incoming, message_id) if given else None
    except BaseException:
        if held:
            gate.lock.release()
        leave()
        raise
    if stored is not None:
        gate.lock.release()
        leave()
        return _sse(_only(_already(stored))) if stream else JSONResponse(stored)
    kept = bot.replies if given else None
    events = server.channel.listen(session.id)
    newer = waiting_behind(lambda: gate.users > 1) if bot.loop.mid_turn is MidTurnPolicy.INTERRUPT else None  # a request waits
    task = asyncio.create_task(_watched(bot, session, _direct_turn(bot.loop, session, incoming, message_id, kept, newer)))
    server.turns.add(task)

    def finished(done: asyncio.Task[Any]) -> None:
        server.turns.discard(done)
        server.channel.stop_listening(session.id, events)
        gate.lock.release()
        leave()

    task.add_done_callback(finished)
    if stream:
        return _sse(_relay(events, task))
    return JSONResponse(await asyncio.shield(task))


async def _watched(bot: _Bot, session: Session, turn: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """The turn's Outcome; the session counts as active from it, and as failing when the turn erred."""
    outcome = await turn
    if bot.idle is not None:
        bot.idle.touch(session, success=outcome["finish_reason"] != "error")
    return outcome


async def _direct_turn(
    loop: AgentLoop, session: Session, incoming: IncomingMessage, message_id: str, replies: Replies | None,
    interruption: Interruption | None = None,
) -> dict[str, Any]:
    ctx = await loop.run_turn(session, incoming, interruption=interruption)
    outcome = outcome_json(ctx.turn_id, message_id, ctx.turn_outcome)
    if replies is not None:
        await replies.keep(message_scope(session), message_id, Reply(session.id, message_digest(incoming), outcome))
    return outcome


async def _stored_reply(bot: _Bot, session: Session, incoming: IncomingMessage, message_id: str) -> dict[str, Any] | None:
    """The outcome already sent for the client's `message_id` in the session's scope; 422 if it answered another message."""
    assert bot.replies is not None  # opened with the loop
    found = await bot.replies.find(message_scope(session), message_id)
    if found is None:
        return None
    if found.session_id != session.id or found.digest != message_digest(incoming):
        raise ApiError(422, "invalid", f"message_id {message_id!r} was already used for another message; send a new id")
    return found.outcome


async def _already(outcome: dict[str, Any]) -> dict[str, Any]:
    return outcome


async def _submit(bot: _Bot, session: Session, incoming: IncomingMessage, message_id: str) -> str:
    """Submit the message to the workers' inbox; its key there (`TurnInProgressError` under the reject policy)."""
    from agentloop.workers import MessageIdConflictError

    try:
        key: str = await bot.inbox.submit(session, incoming, message_id=message_id)
    except MessageIdConflictError as error:
        raise ApiError(422, "invalid", f"message_id {message_id!r} was already used for another message; send a new id") from error
    return key


async def _inbox_turn(server: _Server, bot: _Bot, key: str, message_id: str) -> dict[str, Any]:
    """Wait for the outcome of the submitted message `key` (a worker runs the turn)."""
    from agentloop.workers import MessageNotAnsweredError

    wait = (server.settings.turn_timeout or 120.0) + INBOX_GRACE
    try:
        result = await bot.inbox.wait(key, timeout=wait)
    except MessageNotAnsweredError:
        return deadline_outcome(message_id, f"no worker answered within {wait:g} s; the message is kept and will be answered later")
    if result.outcome is None:
        return error_outcome(message_id, "the bot could not answer this message", turn_id=key)
    return outcome_json(key, message_id, result.outcome)  # the worker names the turn by the message's key


async def _relay(events: asyncio.Queue[Event], task: asyncio.Task[dict[str, Any]]) -> AsyncIterator[Event]:
    """The turn's deltas and resets as they come, then its outcome."""
    while not task.done():
        getter = asyncio.ensure_future(events.get())
        try:
            await asyncio.wait((getter, task), return_when=asyncio.FIRST_COMPLETED)
        finally:  # the turn ended first, or the client left while waiting
            got = getter.done()
            if not got:
                getter.cancel()
        if got:
            yield getter.result()
    while not events.empty():
        yield events.get_nowait()
    yield "outcome", await task


async def _only(outcome: Awaitable[dict[str, Any]]) -> AsyncIterator[Event]:
    yield "outcome", await outcome


def _sse(events: AsyncIterator[Event]) -> StreamingResponse:
    async def lines() -> AsyncIterator[str]:
        try:
            async for name, data in events:
                yield f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
        except (ApiError, StoreUnavailableError) as error:
            shown = _unavailable(error) if isinstance(error, StoreUnavailableError) else error
            yield f"event: error\ndata: {json.dumps({'error': {'code': shown.code, 'message': shown.message}})}\n\n"
        except Exception as error:
            _log.error("serve.internal_error", exc_info=error)
            failure = {"code": "internal", "message": "the server failed on this message; try again, and tell its operator if it keeps failing"}
            yield f"event: error\ndata: {json.dumps({'error': failure})}\n\n"

    return StreamingResponse(lines(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _history(server: _Server, request: Request, caller: Caller) -> Response:
    session = _session(server, request, caller)
    messages = await server.running.stores.sessions.recent(history_scope(session), server.settings.history_limit)
    shown = [
        {"role": message.role.value, "text": message.content}
        for message in messages
        if message.role in (Role.USER, Role.ASSISTANT) and message.content
    ]
    return JSONResponse({"messages": shown})


async def _feedback(server: _Server, request: Request, caller: Caller) -> Response:
    session = _session(server, request, caller)
    body = await _body(server, request)
    turn_id = _field(body, "turn_id", str)
    positive = _field(body, "positive", bool)
    credited = await server.running.note_taking.record_feedback(session, positive=positive, turn_id=turn_id)
    return JSONResponse({"credited": len(credited)})


async def _end(server: _Server, request: Request, caller: Caller) -> Response:
    session = _session(server, request, caller)
    body = await _body(server, request)
    success = _field(body, "success", bool, required=False)
    idle = server.running.idle
    assert idle is not None  # set when the bot opens
    result = await idle.end(session, success=success)
    return JSONResponse({"status": result.status.value, "reason": result.reason})
