"""Steps for serving.feature: a real uvicorn server on a loopback port, spoken to over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from agentloop.serve import Caller, ServeSettings, create_app
from agentloop.testing.serve import served
import serve_kit
from agentloop.testing import ScriptedLLM
from serve_kit import ALICE, BOB, GatedLLM, auth, seed_note, settings, usefulness
from a2a_steps import *  # noqa: F403  (the A2A scenario's steps)
from agui_steps import *  # noqa: F403  (the AG-UI scenario's steps)

from serving_openai_steps import *  # noqa: E402, F403  (the OpenAI API's steps)
from mcp_steps import *  # noqa: F403  (the steps spoken through MCP)

scenarios("serving.feature")


@attrs.define
class Served:
    """The served bot of one scenario: started on first request, so Given steps can still change its settings."""

    settings: ServeSettings
    stack: ExitStack
    running: ExitStack | None = None
    http: httpx.Client | None = None
    session: str | None = None
    answer: httpx.Response | None = None
    stream: list[str] = attrs.Factory(list)
    note: int | None = None
    approval: str | None = None
    openai: Any = None

    def client(self) -> httpx.Client:
        if self.http is None:
            self.running = self.stack.enter_context(ExitStack())
            url = self.running.enter_context(served(create_app(self.settings)))
            self.http = self.running.enter_context(httpx.Client(base_url=url, timeout=30))
        return self.http

    def stop(self) -> None:
        """Stop the server as SIGTERM would: its stores are closed; nothing but them is kept."""
        if self.running is not None:
            self.running.close()
        self.running = self.http = None


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with ExitStack() as stack:
        yield {"tmp_path": tmp_path, "stack": stack}


TOKENS = {"alice": ALICE, "bob": BOB}


@given(parsers.parse('a bot served over HTTP where alice works in org "acme" team "support" and bob in org "globex"'), target_fixture="bot")
def _bot(world: dict[str, Any]) -> Served:
    return Served(settings(world["tmp_path"]), world["stack"])


@given(parsers.parse('the model writes "{first}" and then, after a pause, "{rest}"'))
def _gated(bot: Served, first: str, rest: str) -> None:
    bot.settings = attrs.evolve(bot.settings, llm=GatedLLM(first, rest))


@given(parsers.parse("the server allows each token {burst:d} requests at once"))
def _burst(bot: Served, burst: int) -> None:
    bot.settings = attrs.evolve(bot.settings, rate_burst=burst, rate_per_minute=1.0)


@given(parsers.parse('a note for alice\'s team says "{text}"'))
def _note(bot: Served, text: str) -> None:
    bot.note = seed_note(bot.settings.stores, text, Caller("alice", "acme", "support"))


@given("alice has a session")
def _session(bot: Served) -> None:
    bot.session = bot.client().post("/v1/sessions", headers=auth(ALICE)).json()["session_id"]


@given(parsers.parse('alice has said "{text}"'))
@when(parsers.parse('alice sends "{text}"'))
def _say(bot: Served, text: str) -> None:
    bot.answer = bot.client().post(f"/v1/sessions/{bot.session}/messages", json={"text": text}, headers=auth(ALICE))
    awaiting = bot.answer.json().get("approval") if bot.answer.status_code == 200 else None
    bot.approval = None if awaiting is None else awaiting["approval_id"]


@when(parsers.parse('alice sends "{text}" asking for a stream'))
def _stream(bot: Served, text: str) -> None:
    headers = {**auth(ALICE), "Accept": "text/event-stream"}
    llm = bot.settings.llm
    assert isinstance(llm, GatedLLM)
    with bot.client().stream("POST", f"/v1/sessions/{bot.session}/messages", json={"text": text}, headers=headers) as answer:
        lines = answer.iter_lines()
        bot.stream = [next(lines), next(lines), "finished" if llm.finished else "still writing"]
        llm.release.set()
        bot.stream += list(lines)


@when(parsers.parse('someone sends "{text}" to alice\'s session with the token "{token}"'))
def _intruder(bot: Served, text: str, token: str) -> None:
    bot.answer = bot.client().post(f"/v1/sessions/{bot.session}/messages", json={"text": text}, headers=auth(token))


@when("bob reads the history of alice's session")
def _bob_reads(bot: Served) -> None:
    bot.answer = bot.client().get(f"/v1/sessions/{bot.session}/messages", headers=auth(BOB))


@when(parsers.parse("alice asks who she is {times:d} times"))
def _ask(bot: Served, times: int) -> None:
    for _ in range(times):
        bot.answer = bot.client().get("/v1/me", headers=auth(ALICE))


@when("alice rates that answer as good")
def _rate(bot: Served) -> None:
    assert bot.answer is not None
    feedback = {"turn_id": bot.answer.json()["turn_id"], "positive": True}
    bot.answer = bot.client().post(f"/v1/sessions/{bot.session}/feedback", json=feedback, headers=auth(ALICE))


@then(parsers.parse('alice sees the delta "{text}" before the model has finished'))
def _early_delta(bot: Served, text: str) -> None:
    assert bot.stream[:3] == ["event: delta", f"data: {json.dumps({'text': text})}", "still writing"]


@then(parsers.parse('the stream ends with one outcome whose text is "{text}"'))
def _outcome(bot: Served, text: str) -> None:
    events = [line for line in bot.stream if line.startswith("event: ")]
    assert events.count("event: outcome") == 1 and events[-1] == "event: outcome"
    outcome = json.loads(bot.stream[bot.stream.index("event: outcome") + 1][len("data: "):])
    assert outcome["text"] == text and outcome["finish_reason"] == "success"


@then(parsers.parse('the answer is {status:d} with the code "{code}"'))
def _status(bot: Served, status: int, code: str) -> None:
    assert bot.answer is not None
    assert bot.answer.status_code == status
    assert bot.answer.json()["error"]["code"] == code


@then(parsers.parse('the answer does not contain "{text}"'))
def _hidden(bot: Served, text: str) -> None:
    assert bot.answer is not None and text not in bot.answer.text


@then("the answer says to retry after some seconds")
def _retry_after(bot: Served) -> None:
    assert bot.answer is not None and int(bot.answer.headers["Retry-After"]) >= 1


@then("bob can still ask who he is")
def _bob_asks(bot: Served) -> None:
    assert bot.client().get("/v1/me", headers=auth(BOB)).json()["user"] == "bob"


@then(parsers.parse("{count:d} note is credited"))
def _credited(bot: Served, count: int) -> None:
    assert bot.answer is not None and bot.answer.json() == {"credited": count}


@then(parsers.parse("the note's usefulness is {score:d}"))
def _usefulness(bot: Served, score: int) -> None:
    assert bot.note is not None
    bot.stop()  # the server closes its stores before they are read
    assert usefulness(bot.settings.stores, bot.note) == score


@given("the bot's tool delete_file runs only with the user's approval")
def _approval_bot(bot: Served) -> None:
    serve_kit.deleted.clear()
    bot.settings = attrs.evolve(bot.settings, pipeline="serve_kit:approval_bot")


@given(parsers.parse('the model asks to delete "{path}" and then says "{text}"'))
def _asks_to_delete(bot: Served, path: str, text: str) -> None:
    bot.settings = attrs.evolve(bot.settings, llm=ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": path}), text]))


@when("the server restarts")
def _restart(bot: Served) -> None:
    bot.stop()
    bot.client()


@when(parsers.parse("alice {decision} that call"))
def _decide(bot: Served, decision: str) -> None:
    assert bot.approval is not None
    url = f"/v1/sessions/{bot.session}/approvals/{bot.approval}"
    bot.answer = bot.client().post(url, json={"approve": decision == "approves"}, headers=auth(ALICE))


@then(parsers.parse('the answer awaits approval of delete_file for "{path}"'))
def _awaits(bot: Served, path: str) -> None:
    assert bot.answer is not None
    outcome = bot.answer.json()
    assert outcome["finish_reason"] == "awaiting_approval"
    assert (outcome["approval"]["tool"], outcome["approval"]["arguments"]) == ("delete_file", {"path": path})
    assert outcome["text"]  # the user is told what awaits approval


@then("nothing is deleted")
def _nothing_deleted() -> None:
    assert serve_kit.deleted == []


@then(parsers.parse('"{path}" is deleted'))
@then(parsers.parse('"{path}" is deleted once'))
def _deleted(path: str) -> None:
    assert serve_kit.deleted == [path]


@then(parsers.parse('the answer says "{text}"'))
def _says(bot: Served, text: str) -> None:
    assert bot.answer is not None
    assert bot.answer.status_code == 200 and bot.answer.json()["text"] == text


@then("the model was told the call was denied")
def _told(bot: Served) -> None:
    llm = bot.settings.llm
    assert isinstance(llm, ScriptedLLM)
    last = llm.requests[-1].messages
    assert any(message.role.value == "tool" and "denied" in (message.content or "") for message in last)
