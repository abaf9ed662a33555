"""`agentloop serve` with postgresql stores: two servers submit to one inbox and a worker runs the turns, whichever
protocol the message came by."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx

from agentloop import Role
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.workers import Inbox
from protocols_kit import PROTOCOLS, Answered, NotFound
from serve_kit import ALICE, BOB, auth, client, new_session, serve_command, settings
from worker_kit import with_worker


def test_two_servers_on_one_inbox_keep_a_sessions_turns_in_order_and_answered_once(tmp_path: Path, postgres_url: str) -> None:
    """I9: turns of one session run one at a time in submission order, whichever server took them."""
    first, second = (settings(tmp_path, stores=postgres_url, bot="helper", turn_timeout=20.0) for _ in range(2))
    assert first.uses_inbox

    async def body(inbox: Inbox, channel: RecordingChannel) -> tuple[list[dict[str, Any]], httpx.Response, list[str]]:
        async with client(first) as one, client(second) as two:
            session = await new_session(one)
            sends = []
            for number, http in enumerate((one, two, one, two)):
                sends.append(asyncio.create_task(http.post(f"/v1/sessions/{session}/messages", json={"text": f"m{number}"}, headers=auth(ALICE))))
                await asyncio.sleep(0.05)  # submitted in this order
            replies = [reply.json() for reply in await asyncio.gather(*sends)]
            streamed = await two.post(
                f"/v1/sessions/{session}/messages", json={"text": "last"}, headers={**auth(ALICE), "Accept": "text/event-stream"}
            )
            history = await one.get(f"/v1/sessions/{session}/messages", headers=auth(ALICE))
            return replies, streamed, [message["text"] for message in history.json()["messages"]]

    replies, streamed, history = asyncio.run(with_worker(postgres_url, body))
    assert [reply["text"] for reply in replies] == ["echo: m0", "echo: m1", "echo: m2", "echo: m3"]
    assert all(reply["finish_reason"] == "success" for reply in replies)
    assert streamed.text.startswith("event: outcome\n") and '"echo: last"' in streamed.text
    assert history == ["m0", "echo: m0", "m1", "echo: m1", "m2", "echo: m2", "m3", "echo: m3", "last", "echo: last"]


def test_in_inbox_mode_one_tenant_can_neither_see_nor_claim_another_tenants_message_id(tmp_path: Path, postgres_url: str) -> None:
    served = settings(tmp_path, stores=postgres_url, bot="helper", turn_timeout=20.0)

    async def body(inbox: Inbox, channel: RecordingChannel) -> list[httpx.Response]:
        async with client(served) as http:
            bobs, alices = await new_session(http, BOB), await new_session(http, ALICE)
            claimed = await http.post(f"/v1/sessions/{bobs}/messages", json={"text": "bob first", "message_id": "m1"}, headers=auth(BOB))
            sent = await http.post(f"/v1/sessions/{alices}/messages", json={"text": "alice", "message_id": "m1"}, headers=auth(ALICE))
            retried = await http.post(f"/v1/sessions/{alices}/messages", json={"text": "alice", "message_id": "m1"}, headers=auth(ALICE))
            return [claimed, sent, retried]

    claimed, sent, retried = asyncio.run(with_worker(postgres_url, body))
    assert [answer.status_code for answer in (claimed, sent, retried)] == [200, 200, 200]
    assert sent.json()["text"] == "echo: alice" and sent.json()["message_id"] == "m1"
    assert retried.json() == sent.json()
    assert claimed.json()["turn_id"] != sent.json()["turn_id"]


def test_inbox_mode_answers_input_with_nul_or_lone_surrogates_and_refuses_a_12_kb_message_id_with_422(
    tmp_path: Path, postgres_url: str,
) -> None:
    served = settings(tmp_path, stores=postgres_url, bot="helper", turn_timeout=20.0)

    async def body(inbox: Inbox, channel: RecordingChannel) -> list[httpx.Response]:
        async with client(served) as http:
            session = await new_session(http)
            url = f"/v1/sessions/{session}/messages"
            return [
                await http.post(url, content='{"text": "a\\u0000b\\ud800c"}', headers=auth(ALICE)),
                await http.post(url, content='{"text": "hi", "message_id": "\\ud800"}', headers=auth(ALICE)),
                await http.post(url, content='{"text": "hi", "message_id": "a\\u0000"}', headers=auth(ALICE)),
                await http.post(url, json={"text": "hi", "message_id": "x" * 12_000}, headers=auth(ALICE)),
                await http.get(url, headers=auth(ALICE)),
            ]

    replaced, surrogate_id, nul_id, long_id, history = asyncio.run(with_worker(postgres_url, body))
    assert replaced.status_code == 200 and replaced.json()["text"] == "echo: a\ufffdb\ufffdc"
    assert [answer.status_code for answer in (surrogate_id, nul_id, long_id)] == [422, 422, 422]
    assert [message["text"] for message in history.json()["messages"]] == ["a\ufffdb\ufffdc", "echo: a\ufffdb\ufffdc"]



def test_two_serve_processes_on_one_inbox_answer_a_message_through_each_protocol_exactly_once(tmp_path: Path, postgres_url: str) -> None:
    """One session goes on through every protocol, alternating between two `agentloop serve` processes: each message
    is one model call by the worker and one reply, in the order sent (a server's own model would say HELLO)."""
    llm = ScriptedLLM(lambda request: f"turn {sum(m.role is Role.USER for m in request.messages)}: {request.messages[-1].content}")
    sends = [("native", 0), ("openai", 1), ("a2a", 0), ("agui", 1), ("mcp", 0), ("native", 1)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH", "")])}

    async def body(urls: tuple[str, str]) -> tuple[list[Answered | NotFound], list[str]]:
        started = await PROTOCOLS["native"](urls[0], ALICE, "m0", None)
        assert isinstance(started, Answered)
        answers: list[Answered | NotFound] = [started]
        for number, (protocol, server) in enumerate(sends[1:], start=1):
            answers.append(await PROTOCOLS[protocol](urls[server], ALICE, f"m{number}", started.session_id))
        async with httpx.AsyncClient(base_url=urls[1], headers=auth(ALICE)) as http:
            history = (await http.get(f"/v1/sessions/{started.session_id}/messages")).json()["messages"]
        return answers, [message["text"] for message in history]

    options = ("--stores", postgres_url, "--bot", "helper", "--burst", "100")
    for place in ("one", "two"):
        (tmp_path / place).mkdir()
    with serve_command(tmp_path / "one", *options, env=env) as one, serve_command(tmp_path / "two", *options, env=env) as two:
        answers, history = asyncio.run(with_worker(postgres_url, lambda inbox, channel: body((one.url, two.url)), llm=llm))
    session = answers[0].session_id  # type: ignore[union-attr]
    assert answers == [Answered(session, f"turn {number + 1}: m{number}") for number in range(len(sends))]
    assert history == [text for number in range(len(sends)) for text in (f"m{number}", f"turn {number + 1}: m{number}")]
    assert len(llm.requests) == len(sends)
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
