"""The admin routes: erase and export a user's (or a session's) data over HTTP, for a token whose role is admin,
within its tenant chain.

An erase holds the user's sessions while it runs: no turn of theirs starts (503, `Retry-After`), the turns already
running finish, their captured tool executions are written, and only then are the stores erased, so a turn in flight
either completes before the erase or sees nothing after it.
"""

from __future__ import annotations

import asyncio

import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentloop._log import get_logger
from agentloop.notes import NoteTaking
from agentloop.notes.errors import CaptureDrainError
from agentloop.privacy import Subject, chained, json_array
from agentloop.scopes import history_scope
from agentloop.serve.auth import Caller
from agentloop.serve.errors import ApiError
from agentloop.serve.requests import api
from agentloop.serve.server import Server

_log = get_logger("agentloop.serve")


def admin_routes(server: Server) -> list[Route]:
    """The admin routes under /v1/admin, behind the token like the rest of the API."""
    return [
        Route("/v1/admin/users/{user}", api(server, _erase), methods=["DELETE"]),
        Route("/v1/admin/users/{user}/export", api(server, _export), methods=["GET"]),
        Route("/v1/admin/sessions/{session_id}", api(server, _erase), methods=["DELETE"]),
        Route("/v1/admin/sessions/{session_id}/export", api(server, _export), methods=["GET"]),
    ]


def _subject(request: Request, caller: Caller) -> Subject:
    """The user or session the path names within the chain the query names (each layer defaults to the admin's own);
    403 for a token that is no admin or an admin of another chain, the same answer whoever the subject is.

    A session is known by its org alone, so only an admin of a whole org (or of every chain) names one."""
    if not caller.admin:
        raise ApiError(403, "forbidden", "this token is not an administrator; the token file gives a token role = \"admin\"")
    query = request.query_params
    chain = [query.get(layer) or mine for layer, mine in (("org", caller.org), ("team", caller.team), ("project", caller.project))]
    if not caller.administers(*chain):
        raise ApiError(403, "forbidden", "this token administers its own tenant chain and those below it only; ask within it")
    org, team, project = chain
    if "session_id" not in request.path_params:
        return Subject.user(request.path_params["user"], org_id=org, team_id=team, project_id=project)
    if team is not None or project is not None:
        raise ApiError(403, "forbidden", "a session is erased or exported by an admin of its whole org; erase its user instead")
    return Subject.session(request.path_params["session_id"], org_id=org)


async def _erase(server: Server, request: Request, caller: Caller) -> Response:
    subject = _subject(request, caller)
    counts = await erase_held(server, subject, actor=caller.actor)
    return JSONResponse({"erased": counts, "total": sum(counts.values())})


async def erase_held(server: Server, subject: Subject, *, actor: str) -> dict[str, int]:
    """Erase `subject` with its sessions held (`Server.refuse_if_erasing`): the rows removed per store (and the
    finished inbox messages, when workers run the turns)."""
    bot = server.running
    server.erasing.append(subject)
    try:
        for gate in [gate for gate in server.gates.values() if subject.matches(history_scope(gate.session))]:
            async with gate.lock:  # behind the session's running turn (and those queued before this erase)
                pass
        if bot.idle is not None:
            bot.idle.forget(subject.matches)
        await _drain(bot.note_taking)
        counts: dict[str, int] = attrs.asdict(await bot.stores.erase(subject, actor=actor))
        if bot.inbox is not None:
            from agentloop.workers import erase_inbox  # the postgres extra

            counts["inbox"] = await erase_inbox(bot.stores.url, bot.stores.bot, subject)
    finally:
        server.erasing.remove(subject)
    _log.info("serve.admin_erase", actor=actor, subject=subject.described(), rows=sum(counts.values()))
    return counts


async def _drain(note_taking: NoteTaking) -> None:
    """Write the tool executions the finished turns captured, so none lands after the erase; 503 if they cannot be."""
    wait = note_taking.recorder.settings.drain_timeout_s
    try:
        await asyncio.wait_for(asyncio.to_thread(note_taking.recorder.drain, timeout=wait), wait + 0.5)
    except (CaptureDrainError, TimeoutError) as error:
        _log.warning("serve.admin_erase.capture_pending", error=str(error))
        raise ApiError(
            503, "unavailable", "the bot's captured tool calls cannot be written just now, so nothing was erased; "
            "send the same request again in a moment", headers={"Retry-After": "5"},
        ) from error


async def _export(server: Server, request: Request, caller: Caller) -> Response:
    subject = _subject(request, caller)
    bot = server.running
    records = bot.stores.export(subject, actor=caller.actor)
    if bot.inbox is not None:
        from agentloop.workers import export_inbox  # the postgres extra

        records = chained(records, export_inbox(bot.stores.url, bot.stores.bot, subject))
    return StreamingResponse(json_array(records), media_type="application/json")
