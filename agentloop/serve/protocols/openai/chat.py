"""`POST /openai/v1/chat/completions`: a turn of the bot as a chat completion, whole or streamed as chunks."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from agentloop._names import new_id
from agentloop.context import Session
from agentloop.serve.auth import Caller
from agentloop.serve.errors import ApiError
from agentloop.serve.protocols.openai.conversation import (
    SESSION_HEADER, Asked, Written, begin, check_model, error_body, messages, metadata, named_session, reply_text, usage,
)
from agentloop.serve.requests import api_error, field, read_body
from agentloop.serve.server import Server
from agentloop.serve.turns import StartedTurn


async def chat_completions(server: Server, request: Request, caller: Caller) -> Response:
    """The turn of the request's last (user) message, in the session it names or a new one seeded with its messages."""
    body = await read_body(server, request)
    model = check_model(server, body)
    if field(body, "tools", list, required=False) or field(body, "functions", list, required=False):
        raise ApiError(422, "invalid", "tools run inside the bot; send the request without tools (or functions)")
    if field(body, "n", int, required=False) not in (None, 1):
        raise ApiError(422, "invalid", "the bot gives one answer per request; send n 1 or leave it out")
    given = field(body, "metadata", dict, required=False) or {}
    named = named_session([(SESSION_HEADER, request.headers.get(SESSION_HEADER)), ("metadata.session_id", given.get("session_id"))])
    history, text = messages(server, field(body, "messages", list), "messages")
    stream = field(body, "stream", bool, required=False)
    options = field(body, "stream_options", dict, required=False) or {}
    begun = await begin(server, caller, Asked(named, history, text))
    headers = {SESSION_HEADER: begun.session.id}
    if not stream:
        return JSONResponse(completion(model, begun.session, await begun.turn.outcome), headers=headers)
    return _streamed(_chunks(model, begun.session, begun.turn, options.get("include_usage") is True), headers)


def completion(model: str, session: Session, outcome: dict[str, Any]) -> dict[str, Any]:
    """The `chat.completion` of a turn's Outcome."""
    message = {"role": "assistant", "content": reply_text(outcome), "refusal": None}
    return {
        "id": f"chatcmpl-{outcome['turn_id']}", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
        "usage": _usage(outcome), "metadata": metadata(session, outcome),
    }


def _usage(outcome: dict[str, Any]) -> dict[str, Any] | None:
    reported = usage(outcome)
    if reported is None:
        return None
    read, written, cached = reported
    return {"prompt_tokens": read, "completion_tokens": written, "total_tokens": read + written,
            "prompt_tokens_details": {"cached_tokens": cached}}


async def _chunks(model: str, session: Session, started: StartedTurn, include_usage: bool) -> AsyncIterator[dict[str, Any]]:
    """The turn as `chat.completion.chunk`s: the role, the text as it comes, the finish (with the metadata), the usage."""
    created = int(time.time())
    identity = f"chatcmpl-{new_id()}"

    def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
        return {"id": identity, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices, **extra}

    yield chunk({"role": "assistant", "content": ""})
    written = Written()
    async for name, data in started.events:
        piece = written.event(name, data)
        if piece:
            yield chunk({"content": piece})
        if name == "outcome":
            yield chunk({}, "stop", metadata=metadata(session, data))
            if include_usage:  # the last chunk: no choices, the usage (null when the model reported none)
                yield chunk(None, usage=_usage(data))


def _streamed(chunks: AsyncIterator[dict[str, Any]], headers: dict[str, str]) -> StreamingResponse:
    """`chunks` as OpenAI's Server-Sent Events: `data: CHUNK` lines, then `data: [DONE]`; a failure mid-stream is one
    `data: {"error": ...}` line (which the SDKs raise)."""

    async def lines() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
        except Exception as error:
            yield f"data: {json.dumps(error_body(api_error(error)))}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(lines(), media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
