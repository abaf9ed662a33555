"""Running a turn for a request, whatever protocol it came by (`start_turn`), and the native API's SSE writer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
from starlette.responses import StreamingResponse

from agentloop._log import get_logger
from agentloop.components import ToolExecutions, TurnUsage
from agentloop.context import IncomingMessage, Session
from agentloop.errors import StoreUnavailableError, TurnInProgressError
from agentloop.loop import AgentLoop
from agentloop.mid_turn import Interruption, MidTurnPolicy, waiting_behind
from agentloop.ports.replies import Replies, Reply
from agentloop.serve.channel import Event
from agentloop.serve.errors import ApiError
from agentloop.serve.outcome import deadline_outcome, error_outcome, outcome_json
from agentloop.serve.replies import message_digest, message_scope
from agentloop.serve.requests import unavailable
from agentloop.serve.server import Bot, Gate, Server

INBOX_GRACE = 30.0
"""How much longer than the turn deadline a request waits for a worker's answer."""
_log = get_logger("agentloop.serve")


@attrs.frozen
class StartedTurn:
    """A turn started (or submitted to the workers) for a request. Read one of `outcome` and `events`, once.

    `outcome` is the Outcome as the native API's JSON (`agentloop.serve.outcome.outcome_json`); `events` is what the
    turn streams as it runs (("delta", {text}), ("reset", {reason}), ("text", {text})) and last ("outcome", Outcome).
    A turn run here goes on if the client leaves; a submitted one is answered by a worker all the same."""

    _outcome: Callable[[], Awaitable[dict[str, Any]]]
    _events: Callable[[], AsyncIterator[Event]]

    @property
    def outcome(self) -> Awaitable[dict[str, Any]]:
        return self._outcome()

    @property
    def events(self) -> AsyncIterator[Event]:
        return self._events()


async def start_turn(
    server: Server, session: Session, incoming: IncomingMessage, message_id: str, *, given: bool = False
) -> StartedTurn:
    """Run (or submit) the turn of `incoming` in `session`; refusals (409 under the reject policy, 422, 503 while an
    admin erases the session's user) are raised here, before a client's stream opens.

    A message id the client `given` that this server already answered (the same session and message) gets the
    stored outcome again, not a second turn; under another session or message it is refused (422)."""
    bot = server.running
    server.refuse_if_erasing(session)
    if bot.loop is None:
        key = await _submit(bot, session, incoming, message_id)

        def waited() -> Awaitable[dict[str, Any]]:
            return _watched(bot, session, _inbox_turn(server, bot, key, message_id))

        return StartedTurn(waited, lambda: _only(waited()))
    return await _start_here(server, bot, bot.loop, session, incoming, message_id, given=given)


async def _start_here(
    server: Server, bot: Bot, loop: AgentLoop, session: Session, incoming: IncomingMessage, message_id: str, *, given: bool
) -> StartedTurn:
    """The turn run by this server's loop, one per session at a time (the session's `Gate`)."""
    if loop.mid_turn is MidTurnPolicy.REJECT and session.id in server.gates:
        raise TurnInProgressError(session.id)
    gate = server.gates.setdefault(session.id, Gate(session))
    gate.users += 1

    def leave() -> None:
        gate.users -= 1
        if not gate.users:
            del server.gates[session.id]

    held = False
    try:
        held = await gate.lock.acquire()  # the session's channel listener is this request's until its turn ends
        server.refuse_if_erasing(session)  # an erase began while this request waited behind the session's turn
        stored = await _stored_reply(bot, session, incoming, message_id) if given else None
    except BaseException:
        if held:
            gate.lock.release()
        leave()
        raise
    if stored is not None:
        gate.lock.release()
        leave()
        return StartedTurn(lambda: _already(stored), lambda: _only(_already(stored)))
    kept = bot.replies if given else None
    events = server.channel.listen(session.id)
    newer = waiting_behind(lambda: gate.users > 1) if loop.mid_turn is MidTurnPolicy.INTERRUPT else None  # a request waits
    task = asyncio.create_task(_watched(bot, session, _direct_turn(loop, session, incoming, message_id, kept, newer)))
    server.turns.add(task)

    def finished(done: asyncio.Task[Any]) -> None:
        server.turns.discard(done)
        server.channel.stop_listening(session.id, events)
        gate.lock.release()
        leave()

    task.add_done_callback(finished)
    return StartedTurn(lambda: asyncio.shield(task), lambda: _relay(events, task))


async def _watched(bot: Bot, session: Session, turn: Awaitable[dict[str, Any]]) -> dict[str, Any]:
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
    usage, executions = ctx.get(TurnUsage), ctx.get(ToolExecutions)
    outcome = outcome_json(
        ctx.turn_id, message_id, ctx.turn_outcome, usage.total if usage is not None and usage.calls else None,
        executions.executions if executions is not None else (),
    )
    if replies is not None:
        await replies.keep(message_scope(session), message_id, Reply(session.id, message_digest(incoming), outcome))
    return outcome


async def _stored_reply(bot: Bot, session: Session, incoming: IncomingMessage, message_id: str) -> dict[str, Any] | None:
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


async def _submit(bot: Bot, session: Session, incoming: IncomingMessage, message_id: str) -> str:
    """Submit the message to the workers' inbox; its key there (`TurnInProgressError` under the reject policy)."""
    from agentloop.workers import MessageIdConflictError

    try:
        key: str = await bot.inbox.submit(session, incoming, message_id=message_id)
    except MessageIdConflictError as error:
        raise ApiError(422, "invalid", f"message_id {message_id!r} was already used for another message; send a new id") from error
    return key


async def _inbox_turn(server: Server, bot: Bot, key: str, message_id: str) -> dict[str, Any]:
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


def sse(events: AsyncIterator[Event]) -> StreamingResponse:
    """`events` as the native API's Server-Sent Events (`event: NAME`, `data: JSON`); a failure mid-stream is one `error` event."""

    async def lines() -> AsyncIterator[str]:
        try:
            async for name, data in events:
                yield f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
        except (ApiError, StoreUnavailableError) as error:
            shown = unavailable(error) if isinstance(error, StoreUnavailableError) else error
            yield f"event: error\ndata: {json.dumps({'error': {'code': shown.code, 'message': shown.message}})}\n\n"
        except Exception as error:
            _log.error("serve.internal_error", exc_info=error)
            failure = {"code": "internal", "message": "the server failed on this message; try again, and tell its operator if it keeps failing"}
            yield f"event: error\ndata: {json.dumps({'error': failure})}\n\n"

    return StreamingResponse(lines(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
