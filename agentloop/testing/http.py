"""`ScriptedServer`: a real OpenAI-compatible HTTP server on 127.0.0.1 that answers from a script.

Tests of HTTP model adapters, and of bots or commands that use them, talk to it over a
real socket instead of mocking the client:

    with ScriptedServer() as server:
        server.reply(body=completion("hello"))
        llm = OpenAICompatibleLLM(server.url, "any-model")
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["ScriptedServer", "completion"]


def completion(content: str | None = None, tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A chat completion body with one assistant message (text, tool calls or both)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"model": "served-model", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


class ScriptedServer:
    """Answers each POST with the next queued (status, body, headers, delay); keeps the requests.

    `requests` holds each POST as `{"path", "auth", "body"}` (the body parsed from JSON).
    `headers` holds each POST's headers (names in lower case), in the same order.
    A POST with nothing queued gets HTTP 500. `start()` serves on a background thread;
    `close()` (or leaving the `with` block) stops it.
    """

    def __init__(self) -> None:
        self.responses: list[tuple[int, bytes, dict[str, str], float]] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                server.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": json.loads(self.rfile.read(length))}
                )
                server.headers.append({key.lower(): value for key, value in self.headers.items()})
                if server.responses:
                    status, body, headers, delay = server.responses.pop(0)
                else:
                    status, body, headers, delay = 500, b'{"error": "nothing scripted"}', {}, 0.0
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread: threading.Thread | None = None

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
        self.responses.append((status, data, {"Content-Type": "application/json", **(headers or {})}, delay))

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
