"""The Anthropic Messages API's streamed wire format, for `ScriptedServer` to answer with.

    with ScriptedServer() as server:
        queue_stream(server, message_events("hello", input_tokens=12))
        llm = AnthropicLLM(server.url, "any-model")

`message_events` is the documented event sequence of one streamed message; a test cuts
it short or appends an `api_error` event to script a broken stream.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentloop.testing.http import ScriptedServer

__all__ = ["api_error", "message_body", "message_events", "queue_stream"]


def message_events(
    text: str | None = None,
    tool_uses: Sequence[tuple[str, str, dict[str, Any]]] = (),
    *,
    input_tokens: int = 10,
    output_tokens: int = 5,
    model: str = "served-claude",
    chunk: int = 4,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> list[dict[str, Any]]:
    """One streamed message: `text` in `chunk`-character `text_delta`s, then each (id, name,
    input) tool use with its input as `input_json_delta` fragments, usage and a stop reason.

    The usage is as documented: `message_start` counts the input apart from what was written
    to (`cache_creation_input_tokens`) and read from (`cache_read_input_tokens`) the prompt
    cache; `message_delta` carries the cumulative `output_tokens`."""
    usage = {"input_tokens": input_tokens, "cache_creation_input_tokens": cache_write_tokens,
             "cache_read_input_tokens": cache_read_tokens, "output_tokens": 1}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
                                              "content": [], "stop_reason": None, "stop_sequence": None,
                                              "usage": usage}},
        {"type": "ping"},
    ]
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    if text is not None:
        blocks.append(({"type": "text", "text": ""}, [{"type": "text_delta", "text": part} for part in _pieces(text, chunk)]))
    for call_id, name, arguments in tool_uses:
        fragments = [""] + _pieces(json.dumps(arguments), chunk)
        blocks.append(({"type": "tool_use", "id": call_id, "name": name, "input": {}},
                       [{"type": "input_json_delta", "partial_json": part} for part in fragments]))
    for index, (block, deltas) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events.extend({"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas)
        events.append({"type": "content_block_stop", "index": index})
    stop_reason = "tool_use" if tool_uses else "end_turn"
    events.append({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                   "usage": {"output_tokens": output_tokens}})
    events.append({"type": "message_stop"})
    return events


def message_body(
    text: str | None = None,
    *,
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    model: str = "served-claude",
) -> dict[str, Any]:
    """One whole (not streamed) message, as the API answers a request without `stream`."""
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": model,
        "content": [] if text is None else [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": cache_write_tokens,
                  "cache_read_input_tokens": cache_read_tokens, "output_tokens": output_tokens},
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]


def api_error(error_type: str, message: str) -> dict[str, Any]:
    """The API's error body (also the data of an `error` event): `overloaded_error`, `invalid_request_error`, ..."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


def queue_stream(
    server: ScriptedServer, events: Sequence[dict[str, Any] | str], *, delay: float = 0.0, pause: float = 0.0
) -> None:
    """Queue one 200 answer on `server` that streams `events` as the API does (each named by its
    type, no end marker): the first after `delay` seconds, the others `pause` seconds apart.
    A string is sent as an event's data as it is, to script a malformed one."""
    server.stream(events, done=False, delay=delay, pause=pause, named=True)
