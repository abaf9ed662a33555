"""`POST /openai/v1/responses`: a turn of the bot as a Responses API response, whole or streamed as its typed events.

A response's id is `resp_<session>_<message>` and its conversation's `conv_<session>`: `previous_response_id` and
`conversation` name the session they came from, which only its own tenant's token owns (404 for any other)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from agentloop.serve.auth import Caller
from agentloop.serve.errors import ApiError
from agentloop.serve.protocols.openai.conversation import (
    SESSION_HEADER, Asked, Begun, Written, begin, check_model, metadata, messages, named_session, reply_text, usage,
)
from agentloop.serve.requests import api_error, field, message_text, read_body
from agentloop.serve.server import Server

RESPONSE_PREFIX = "resp_"
CONVERSATION_PREFIX = "conv_"


async def responses(server: Server, request: Request, caller: Caller) -> Response:
    """The turn of the request's input, in the session its previous response, conversation or session names, or a new one."""
    body = await read_body(server, request)
    model = check_model(server, body)
    if field(body, "tools", list, required=False):
        raise ApiError(422, "invalid", "tools run inside the bot; send the request without tools")
    asked = _asked(server, request, body)
    instructions = field(body, "instructions", str, required=False)
    stream = field(body, "stream", bool, required=False)
    begun = await begin(server, caller, asked, instructions=instructions)
    shown = _Shown(model, begun, field(body, "previous_response_id", str, required=False), instructions, int(time.time()))
    headers = {SESSION_HEADER: begun.session.id}
    if not stream:
        outcome = await begun.turn.outcome
        return JSONResponse(shown.response("completed", reply_text(outcome), outcome), headers=headers)
    return StreamingResponse(_lines(shown), media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache"})


def _asked(server: Server, request: Request, body: dict[str, Any]) -> Asked:
    given = field(body, "metadata", dict, required=False) or {}
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    previous = field(body, "previous_response_id", str, required=False)
    named = named_session([
        (SESSION_HEADER, request.headers.get(SESSION_HEADER)), ("metadata.session_id", given.get("session_id")),
        ("conversation", _unprefixed(conversation, CONVERSATION_PREFIX)),
        ("previous_response_id", None if previous is None else _unprefixed(previous, RESPONSE_PREFIX).partition("_")[0]),
    ])
    entered = body.get("input")
    if isinstance(entered, str):
        return Asked(named, (), message_text(server, entered))
    if not isinstance(entered, list):
        raise ApiError(422, "invalid", "the field 'input' must be a string or a list of messages")
    history, text = messages(server, entered, "input")
    return Asked(named, history, text)


def _unprefixed(value: Any, prefix: str) -> Any:
    """`value` without `prefix`; anything else as it is (it then names no session of anyone's)."""
    return value[len(prefix):] if isinstance(value, str) and value.startswith(prefix) else value


@attrs.frozen
class _Shown:
    """What every form of one response carries: its model, turn, where it continued from, and when it was made."""

    model: str
    begun: Begun
    previous: str | None
    instructions: str | None
    created: int

    @property
    def id(self) -> str:
        return f"{RESPONSE_PREFIX}{self.begun.session.id}_{self.begun.message_id}"

    @property
    def item_id(self) -> str:
        return f"msg_{self.begun.message_id}"

    def item(self, status: str, text: str | None) -> dict[str, Any]:
        content = [] if text is None else [_part(text)]
        return {"id": self.item_id, "type": "message", "status": status, "role": "assistant", "content": content}

    def response(self, status: str, text: str | None, outcome: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status, "model": self.model,
            "output": [] if text is None else [self.item("completed", text)],
            "usage": None if outcome is None else _usage(outcome),
            "metadata": {"session_id": self.begun.session.id} if outcome is None else metadata(self.begun.session, outcome),
            "conversation": {"id": f"{CONVERSATION_PREFIX}{self.begun.session.id}"},
            "previous_response_id": self.previous, "instructions": self.instructions,
            "error": None, "incomplete_details": None, "tools": [], "tool_choice": "auto", "parallel_tool_calls": False,
            "temperature": None, "top_p": None,
        }


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def _usage(outcome: dict[str, Any]) -> dict[str, Any] | None:
    reported = usage(outcome)
    if reported is None:
        return None
    read, written, cached = reported
    return {"input_tokens": read, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": written,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": read + written}


async def _events(shown: _Shown) -> AsyncIterator[dict[str, Any]]:
    """The Responses API's events for the turn: created, the message and its text as it comes, completed."""
    item = {"item_id": shown.item_id, "output_index": 0}
    yield {"type": "response.created", "response": shown.response("in_progress", None, None)}
    yield {"type": "response.in_progress", "response": shown.response("in_progress", None, None)}
    yield {"type": "response.output_item.added", "output_index": 0, "item": shown.item("in_progress", None)}
    yield {"type": "response.content_part.added", **item, "content_index": 0, "part": _part("")}
    written, text, outcome = Written(), "", None
    async for name, data in shown.begun.turn.events:
        piece = written.event(name, data)
        text += piece
        if piece:
            yield {"type": "response.output_text.delta", **item, "content_index": 0, "delta": piece, "logprobs": []}
        if name == "outcome":
            outcome = data
    yield {"type": "response.output_text.done", **item, "content_index": 0, "text": text, "logprobs": []}
    yield {"type": "response.content_part.done", **item, "content_index": 0, "part": _part(text)}
    yield {"type": "response.output_item.done", "output_index": 0, "item": shown.item("completed", text)}
    yield {"type": "response.completed", "response": shown.response("completed", text, outcome)}


async def _lines(shown: _Shown) -> AsyncIterator[str]:
    """The events as Server-Sent Events (`event: TYPE`, `data: EVENT` with its sequence number); a failure mid-stream
    is one `error` event."""
    number = 0
    try:
        async for event in _events(shown):
            yield f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': number}, ensure_ascii=False)}\n\n"
            number += 1
    except Exception as error:
        shown_error = api_error(error)
        failure = {"type": "error", "code": shown_error.code, "message": shown_error.message, "param": None, "sequence_number": number}
        yield f"event: error\ndata: {json.dumps(failure)}\n\n"
