"""The OpenAI API at `/openai/v1`: the bot listed as a model, its turns as chat completions and as responses.

A session is named by the `X-Agentloop-Session` header or `metadata.session_id` (and, for responses, by
`previous_response_id` or `conversation`); without one, the request's messages seed a new session's history and its
last (user) message is the turn. Every reply names its session (the header, and `metadata.session_id`). The bot's
tools run inside it: a call awaiting approval is an assistant message saying so, with `metadata.approval_id`, and
`/approve [ID [NOTE]]` or `/deny [ID [NOTE]]` as the next user message decides it.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentloop.serve.auth import Caller
from agentloop.serve.protocols import Mounted
from agentloop.serve.protocols.openai.chat import chat_completions
from agentloop.serve.protocols.openai.conversation import openai_error
from agentloop.serve.protocols.openai.document import OPENAPI
from agentloop.serve.protocols.openai.responses import responses
from agentloop.serve.requests import api
from agentloop.serve.server import Server

PREFIX = "/openai/v1"
"""Where the OpenAI API is served: a client's `base_url` is the server's URL followed by it."""


def mount(server: Server) -> Mounted:
    """The OpenAI API's routes, each behind the bearer token and rate limit, every error in OpenAI's shape."""
    started = int(time.time())

    async def models(server: Server, request: Request, caller: Caller) -> Response:
        model: dict[str, Any] = {"id": server.settings.bot, "object": "model", "created": started, "owned_by": "agentloop"}
        return JSONResponse({"object": "list", "data": [model]})

    return Mounted(
        [
            Route(f"{PREFIX}/models", api(server, models, render=openai_error), methods=["GET"]),
            Route(f"{PREFIX}/chat/completions", api(server, chat_completions, render=openai_error), methods=["POST"]),
            Route(f"{PREFIX}/responses", api(server, responses, render=openai_error), methods=["POST"]),
        ],
        OPENAPI,
    )
