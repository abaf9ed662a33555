"""`ScriptedServer`: a real OpenAI-compatible HTTP server on 127.0.0.1 that answers from a script.

Tests of HTTP model adapters, and of bots or commands that use them, talk to it over a
real socket instead of mocking the client:

    with ScriptedServer() as server:
        server.reply(body=completion("hello"))
        server.stream(streamed_completion("hello, in pieces"))
        llm = OpenAICompatibleLLM(server.url, "any-model")

`stream` answers with server-sent events in the chat-completions chunk format;
`completion`, `chunk`, `usage_chunk` and `streamed_completion` build the bodies.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import attrs

__all__ = [
    "ScriptedServer", "chunk", "completion", "free_port", "streamed_completion", "usage_body", "usage_chunk", "wait_until_healthy",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a server a test starts as a subprocess."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_healthy(url: str, process: subprocess.Popen[Any], *, timeout: float = 60.0) -> None:
    """Wait until the server `process` started answers 200 at `url`/healthz; AssertionError if it
    exits or `timeout` seconds pass first."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and process.poll() is None, "the server did not come up"
        time.sleep(0.1)


def completion(content: str | None = None, tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A chat completion body with one assistant message (text, tool calls or both)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"model": "served-model", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def chunk(delta: dict[str, Any] | None = None, *, finish_reason: str | None = None) -> dict[str, Any]:
    """One `chat.completion.chunk` of a streamed answer, with `delta` as its first choice's change."""
    return {
        "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": "served-model",
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}],
    }


def usage_chunk(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
    """The last chunk a server sends when asked for `stream_options.include_usage`: no choices, the usage
    (with `prompt_tokens_details.cached_tokens`, the part of the prompt read from the cache, when given)."""
    return {
        "id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": "served-model", "choices": [],
        "usage": usage_body(prompt_tokens, completion_tokens, cached_tokens),
    }


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
    """A chat completion's `usage` as the API documents it; `prompt_tokens` counts the cached part too."""
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens, "audio_tokens": 0}
    return usage


def streamed_completion(
    content: str | None = None,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    *,
    size: int = 4,
    usage: tuple[int, int] | tuple[int, int, int] | None = (12, 5),
) -> list[dict[str, Any]]:
    """The chunks an OpenAI server streams for this answer, in its documented order: the
    role, the text `size` characters at a time, each tool call `(id, name, arguments JSON)`
    (id and name first, then its arguments in pieces), the finish reason, the usage."""
    chunks = [chunk({"role": "assistant", "content": "" if content else None})]
    for start in range(0, len(content or ""), size):
        chunks.append(chunk({"content": (content or "")[start : start + size]}))
    for index, (call_id, name, arguments) in enumerate(tool_calls):
        opening = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        chunks.append(chunk({"tool_calls": [opening]}))
        for start in range(0, len(arguments), size):
            piece = {"index": index, "function": {"arguments": arguments[start : start + size]}}
            chunks.append(chunk({"tool_calls": [piece]}))
    chunks.append(chunk(finish_reason="tool_calls" if tool_calls else "stop"))
    if usage is not None:
        chunks.append(usage_chunk(*usage))
    return chunks


@attrs.frozen
class _Answer:
    status: int
    parts: tuple[bytes, ...]
    headers: dict[str, str]
    delay: float
    pause: float = 0.0
    streamed: bool = False


class ScriptedServer:
    """Answers each POST with the next queued answer; keeps the requests.

    `requests` holds each POST as `{"path", "auth", "body"}` (the body parsed from JSON).
    `headers` holds each POST's headers (names in lower case), in the same order.
    A POST with nothing queued gets HTTP 500. GET `/v1/models` lists `models` (while it is None,
    a listing without entries the start-up check can read, which it takes at its word), or
    answers `models_status` when that is not 200 (401 for a refused key, say); a model's entry has
    the fields `model_fields` gives it (`{"qwen": {"max_model_len": 8192}}`, as vLLM lists), and the
    listing itself those `listing_fields` gives (`{"has_more": True}`, a page of a longer list). Each GET is
    kept in `gets` as `{"path", "auth", "headers"}`. `start()` serves on a background thread; `close()`
    (or leaving the `with` block) stops it.
    """

    def __init__(self) -> None:
        self.responses: list[_Answer] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.models: list[str] | None = None
        self.models_status = 200
        self.model_fields: dict[str, dict[str, Any]] = {}
        self.listing_fields: dict[str, Any] = {}
        self.gets: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                headers = {key.lower(): value for key, value in self.headers.items()}
                server.gets.append({"path": self.path, "auth": headers.get("authorization"), "headers": headers})
                if self.path != "/v1/models":
                    self._answer(_Answer(404, (b'{"error": {"message": "no such endpoint"}}',), {"Content-Type": "application/json"}, 0.0))
                elif server.models_status != 200:
                    said = json.dumps({"error": {"message": f"scripted HTTP {server.models_status}"}}).encode()
                    self._answer(_Answer(server.models_status, (said,), {"Content-Type": "application/json"}, 0.0))
                else:
                    self._answer(_Answer(200, (server._listing(),), {"Content-Type": "application/json"}, 0.0))

            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                server.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": json.loads(self.rfile.read(length))}
                )
                server.headers.append({key.lower(): value for key, value in self.headers.items()})
                if server.responses:
                    self._answer(server.responses.pop(0))
                else:
                    self._answer(_Answer(500, (b'{"error": "nothing scripted"}',), {}, 0.0))

            def _answer(self, answer: _Answer) -> None:
                if answer.delay:
                    time.sleep(answer.delay)
                try:
                    self.send_response(answer.status)
                    for key, value in answer.headers.items():
                        self.send_header(key, value)
                    if not answer.streamed:
                        self.send_header("Content-Length", str(sum(len(part) for part in answer.parts)))
                    self.end_headers()
                    for index, part in enumerate(answer.parts):
                        if index and answer.pause:
                            time.sleep(answer.pause)
                        self.wfile.write(part)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread: threading.Thread | None = None


    def _listing(self) -> bytes:
        """The body of GET `/v1/models`: `models` with their `model_fields`, and the `listing_fields`."""
        listing: dict[str, Any] = {"object": "list", **self.listing_fields}
        if self.models is not None:
            listing["data"] = [{"id": name, "object": "model", **self.model_fields.get(name, {})} for name in self.models]
        return json.dumps(listing).encode()

    def reply(
        self,
        status: int = 200,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Queue one response: `body` as JSON (or `raw` bytes), after `delay` seconds."""
        data = raw if raw is not None else json.dumps(body).encode()
        self.responses.append(_Answer(status, (data,), {"Content-Type": "application/json", **(headers or {})}, delay))

    def stream(
        self,
        events: Sequence[dict[str, Any] | str],
        *,
        done: bool = True,
        delay: float = 0.0,
        pause: float = 0.0,
        named: bool = False,
    ) -> None:
        """Queue one streamed response: each event as a server-sent `data:` line (a dict as
        JSON, a string as it is), then `data: [DONE]` unless `done` is false (a stream cut
        off). The first byte comes after `delay` seconds, each later event `pause` seconds apart.
        `named` puts an `event:` line with a dict event's `type` before it, as the Anthropic API does."""
        parts = [
            (f"event: {event['type']}\n" if named and isinstance(event, dict) else "")
            + f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n"
            for event in events
        ]
        if done:
            parts.append("data: [DONE]\n\n")
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        self.responses.append(_Answer(200, tuple(part.encode() for part in parts), headers, delay, pause, streamed=True))

    def start(self) -> ScriptedServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
