"""`agentloop serve`: the HTTP API over a bot, its tokens and tenants, its limits and its errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from agentloop.serve import TokenFileError, create_app, load_tokens
from agentloop.testing.serve import served
from serve_kit import ALICE, BOB, CAROL, GatedLLM, auth, client, new_session, settings


def test_health_answers_without_a_token(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            return await http.get("/healthz")

    assert asyncio.run(body()).json() == {"status": "ok"}


@pytest.mark.parametrize("header", [None, "Bearer not-a-known-token", f"Basic {ALICE}"])
def test_a_request_without_a_valid_bearer_token_gets_401_with_a_json_error(tmp_path: Path, header: str | None) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            return await http.post("/v1/sessions", headers={} if header is None else {"Authorization": header})

    answer = asyncio.run(body())
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthorized"
    assert "Authorization: Bearer" in answer.json()["error"]["message"]


def test_me_tells_the_user_and_tenant_of_the_token(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            return await http.get("/v1/me", headers=auth(ALICE))

    assert asyncio.run(body()).json() == {"user": "alice", "tenant": {"org": "acme", "team": "support", "project": None}}


def test_a_message_gets_the_reply_as_json_and_lands_in_the_history(tmp_path: Path) -> None:
    async def body() -> tuple[httpx.Response, httpx.Response]:
        async with client(settings(tmp_path)) as http:
            session = await new_session(http)
            reply = await http.post(f"/v1/sessions/{session}/messages", json={"text": "hello"}, headers=auth(ALICE))
            history = await http.get(f"/v1/sessions/{session}/messages", headers=auth(ALICE))
            return reply, history

    reply, history = asyncio.run(body())
    assert reply.status_code == 200
    outcome = reply.json()
    assert outcome["finish_reason"] == "success"
    assert outcome["text"] == "echo: hello"
    assert outcome["failures"] == [] and outcome["fallback"] is False and outcome["approval"] is None
    assert outcome["turn_id"] and outcome["message_id"]
    assert history.json() == {"messages": [{"role": "user", "text": "hello"}, {"role": "assistant", "text": "echo: hello"}]}


@pytest.mark.parametrize("intruder", [BOB, CAROL], ids=["another org", "the same user in another team"])
def test_a_session_is_not_found_for_a_token_of_another_tenant_chain(tmp_path: Path, intruder: str) -> None:
    async def body() -> list[httpx.Response]:
        async with client(settings(tmp_path)) as http:
            session = await new_session(http, ALICE)
            await http.post(f"/v1/sessions/{session}/messages", json={"text": "secret plans"}, headers=auth(ALICE))
            return [
                await http.get(f"/v1/sessions/{session}/messages", headers=auth(intruder)),
                await http.post(f"/v1/sessions/{session}/messages", json={"text": "hi"}, headers=auth(intruder)),
                await http.post(f"/v1/sessions/{session}/feedback", json={"turn_id": "t", "positive": True}, headers=auth(intruder)),
                await http.post(f"/v1/sessions/{session}/end", headers=auth(intruder)),
            ]

    for answer in asyncio.run(body()):
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not_found"
        assert "secret plans" not in answer.text


def test_a_session_id_made_up_by_the_client_is_not_found(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            return await http.get("/v1/sessions/my-own-id/messages", headers=auth(ALICE))

    assert asyncio.run(body()).status_code == 404


def test_sse_sends_a_delta_before_the_model_has_finished_then_one_outcome(tmp_path: Path) -> None:
    llm = GatedLLM("Hel", "lo there")
    with served(create_app(settings(tmp_path, llm))) as url, httpx.Client(base_url=url, timeout=30) as http:
        session = http.post("/v1/sessions", headers=auth(ALICE)).json()["session_id"]
        headers = {**auth(ALICE), "Accept": "text/event-stream"}
        with http.stream("POST", f"/v1/sessions/{session}/messages", json={"text": "hi"}, headers=headers) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.iter_lines()
            first = [next(lines), next(lines)]
            assert first == ["event: delta", 'data: {"text": "Hel"}']
            assert not llm.finished
            llm.release.set()
            rest = list(lines)
    events = [(name[len("event: "):], json.loads(data[len("data: "):])) for name, data, *_ in zip(rest[1::3], rest[2::3])]
    assert [name for name, _ in events if name == "outcome"] == ["outcome"]
    assert events[-1][0] == "outcome"
    assert events[-1][1]["text"] == "Hello there" and events[-1][1]["finish_reason"] == "success"
    assert "Hel" + "".join(data["text"] for name, data in events if name == "delta") == "Hello there"


def test_a_token_file_without_tokens_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text('secret = "0123456789abcdef0123"\n')
    with pytest.raises(TokenFileError, match=r"\[\[tokens\]\]"):
        load_tokens(path)


def test_a_token_may_be_listed_by_its_sha256(tmp_path: Path) -> None:
    import hashlib

    path = tmp_path / "tokens.toml"
    path.write_text(f'[[tokens]]\nsha256 = "{hashlib.sha256(ALICE.encode()).hexdigest()}"\nuser = "alice"\n')
    tokens = load_tokens(path)
    assert tokens.caller(ALICE) is not None and tokens.caller(ALICE).user == "alice"  # type: ignore[union-attr]
    assert tokens.caller(BOB) is None
