"""The standard protocols one `agentloop serve` speaks beside its native API, each in its own module, mounted by name.

A protocol module plugs in with one line in `PROTOCOLS`: its name (one of `settings.PROTOCOL_NAMES`, which
`ServeSettings.protocols` and the `--no-NAME` flags switch) and "module:function", imported only when the protocol is on.
The function takes the app's `agentloop.serve.server.Server` and returns a `Mounted`: its Starlette routes (or Mounts),
the part of the OpenAPI document they add (or nothing), and a context the app holds open while it runs (or None).
It builds on what the native API uses, so tenancy, limits and delivery stay the same:

- `agentloop.serve.requests.api(server, handler, render=...)`: `handler(server, request, caller)` behind the bearer
  token (401) and the token's rate limit (429 with Retry-After); every error (`ApiError`, 503 for a store out of
  reach, 409 mid-turn, 500 logged) is drawn by `render(ApiError) -> Response` in the protocol's own shape
  (`native_error` by default). `public(...)` is the same without the token; `api_error(exception)` maps an error
  raised mid-stream to the `ApiError` to show.
- `read_body(server, request)`: the JSON object under the size, depth and number limits (413, 422); `field(body,
  name, kind)` and `message_text(server, text)` check what it holds (422).
- Sessions: `server.tokens.owns(caller, session_id)` says whether the id is the caller's (answer the protocol's
  not-found otherwise, the same for another tenant's and an unknown id); `caller.session(session_id)` is the
  `Session`; `server.tokens.new_session_id(caller)` names a new one.
- `agentloop.serve.turns.start_turn(server, session, incoming, message_id, given=...)`: runs the turn here or
  through the workers' inbox (one per session, the mid-turn policy, replies kept for a message id the client gave);
  its `.outcome` is the Outcome dict, its `.events` the deltas and resets then ("outcome", Outcome).
- Approvals: `server.running.stores.approvals.pending(approval_scope(session), session.id)` lists what waits;
  `IncomingMessage.approval(approval_id, approved=..., note=...)` is the decision, started as a turn.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import attrs
from starlette.routing import BaseRoute

if TYPE_CHECKING:
    from agentloop.serve.server import Server

PROTOCOLS: dict[str, str] = {
    "a2a": "agentloop.serve.protocols.a2a:mount",
    "agui": "agentloop.serve.protocols.agui:mount",
    "openai": "agentloop.serve.protocols.openai:mount",
    "mcp": "agentloop.serve.protocols.mcp:mount",
}
"""Each protocol served beside the native API: its name → "module:function" making its `Mounted` from the `Server`."""


@attrs.frozen
class Mounted:
    """What a protocol adds to the app: routes, their OpenAPI `paths` and `components` (merged into /openapi.json),
    and a context the app enters once its bot is open and leaves before the bot closes."""

    routes: list[BaseRoute]
    openapi: dict[str, Any] = attrs.field(factory=dict)
    lifespan: Callable[[], AbstractAsyncContextManager[None]] | None = None


def mounted(server: Server) -> list[Mounted]:
    """The protocols `server.settings.protocols` switches on, in `PROTOCOLS`' order."""
    found = []
    for name, target in PROTOCOLS.items():
        if name in server.settings.protocols:
            module, function = target.split(":")
            mount: Callable[[Server], Mounted] = getattr(importlib.import_module(module), function)
            found.append(mount(server))
    return found


def openapi_document(base: dict[str, Any], protocols: list[Mounted]) -> dict[str, Any]:
    """`base` with each protocol's paths and component schemas added."""
    paths = dict(base["paths"])
    components = {key: dict(value) for key, value in base["components"].items()}
    for protocol in protocols:
        paths.update(protocol.openapi.get("paths", {}))
        for key, value in protocol.openapi.get("components", {}).items():
            components.setdefault(key, {}).update(value)
    return {**base, "paths": paths, "components": components}
