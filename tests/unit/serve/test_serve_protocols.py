"""Protocols mounted beside the native API by name: switched on and off, sharing its token, limits, errors and turns."""

from __future__ import annotations

import asyncio
import sys
import types
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import agentloop.serve.command
from agentloop.cli import main
from agentloop.cli.serve import PROTOCOLS as CLI_PROTOCOLS
from agentloop.context import IncomingMessage
from agentloop.serve import ApiError, Caller, ServeSettings
from agentloop.serve.protocols import PROTOCOLS, Mounted
from agentloop.serve.requests import api, field, message_text, read_body
from agentloop.serve.server import Server
from agentloop.serve.settings import PROTOCOL_NAMES
from agentloop.serve.turns import start_turn
from serve_kit import ALICE, BOB, auth, client, new_session, settings

_FRAGMENT = {"paths": {"/echo/ask": {"post": {"summary": "ask the bot", "responses": {}}}}, "components": {"schemas": {"EchoError": {}}}}


def _echo_error(error: ApiError) -> Response:
    return JSONResponse({"fault": {"kind": error.code, "text": error.message}}, error.status, headers=error.headers)


async def _ask(server: Server, request: Request, caller: Caller) -> Response:
    body = await read_body(server, request)
    session_id = field(body, "session", str)
    if not server.tokens.owns(caller, session_id):
        raise ApiError(404, "not_found", f"no session {session_id!r}")
    started = await start_turn(server, caller.session(session_id), IncomingMessage(message_text(server, field(body, "text", str))), "m-1")
    return JSONResponse({"answer": (await started.outcome)["text"]})


def _mount(server: Server, seen: list[str]) -> Mounted:
    @asynccontextmanager
    async def running() -> AsyncIterator[None]:
        seen.append("entered with the bot open" if server.bot is not None else "entered without the bot")
        yield
        seen.append("left with the bot open" if server.bot is not None else "left without the bot")

    return Mounted([Route("/echo/ask", api(server, _ask, render=_echo_error), methods=["POST"])], _FRAGMENT, running)


@pytest.fixture
def echo_protocol(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An "openai" protocol that asks the bot through the shared parts; what its lifespan saw."""
    seen: list[str] = []
    module = types.ModuleType("echo_protocol_for_test")
    module.mount = lambda server: _mount(server, seen)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(PROTOCOLS, "openai", f"{module.__name__}:mount")
    return seen


def test_a_mounted_protocol_answers_through_the_shared_token_body_and_turn_in_its_own_error_shape(tmp_path: Path, echo_protocol: list[str]) -> None:
    async def body() -> list[Any]:
        async with client(settings(tmp_path)) as http:
            session = await new_session(http)
            asked = await http.post("/echo/ask", json={"session": session, "text": "hi"}, headers=auth(ALICE))
            anonymous = await http.post("/echo/ask", json={"session": session, "text": "hi"})
            other_tenant = await http.post("/echo/ask", json={"session": session, "text": "hi"}, headers=auth(BOB))
            empty = await http.post("/echo/ask", json={"session": session, "text": " "}, headers=auth(ALICE))
            document = (await http.get("/openapi.json")).json()
            return [asked.json(), (anonymous.status_code, anonymous.json()["fault"]["kind"]), other_tenant.status_code,
                    (empty.status_code, empty.json()["fault"]["kind"]), "/echo/ask" in document["paths"],
                    "EchoError" in document["components"]["schemas"], "Error" in document["components"]["schemas"]]

    assert asyncio.run(body()) == [{"answer": "echo: hi"}, (401, "unauthorized"), 404, (422, "invalid"), True, True, True]
    assert echo_protocol == ["entered with the bot open", "left with the bot open"]


def test_a_protocol_switched_off_is_neither_routed_nor_documented_nor_started(tmp_path: Path, echo_protocol: list[str]) -> None:
    async def body() -> tuple[int, bool]:
        async with client(settings(tmp_path, protocols=frozenset({"a2a"}))) as http:
            asked = await http.post("/echo/ask", json={}, headers=auth(ALICE))
            return asked.status_code, "/echo/ask" in (await http.get("/openapi.json")).json()["paths"]

    assert asyncio.run(body()) == (404, False)
    assert echo_protocol == []


def test_settings_refuse_a_protocol_they_do_not_know_and_name_those_they_do(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="protocols grpc are not served; the protocols are openai, a2a, agui, mcp"):
        settings(tmp_path, protocols=frozenset({"grpc", "mcp"}))
    assert settings(tmp_path).protocols == frozenset(PROTOCOL_NAMES)


def test_every_registered_protocol_has_a_name_the_settings_and_the_no_flags_know() -> None:
    assert set(PROTOCOLS) <= set(PROTOCOL_NAMES) and tuple(CLI_PROTOCOLS) == PROTOCOL_NAMES


def test_the_no_flags_switch_off_exactly_the_protocols_they_name(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[frozenset[str]] = []

    def serve(options: agentloop.serve.command.ServeOptions, out: Any) -> int:
        asked.append(options.protocols)
        return 0

    monkeypatch.setattr(agentloop.serve.command, "serve", serve)
    for flags in ([], ["--no-openai", "--no-mcp"]):
        assert main(["serve", "--tokens", "tokens.toml", *flags], out=StringIO()) == 0
    assert asked == [frozenset(PROTOCOL_NAMES), frozenset({"a2a", "agui"})]
