"""`ScriptedServer`: the OpenAI-compatible test server answers in order over real HTTP."""

from __future__ import annotations

import httpx

from agentloop.testing.http import ScriptedServer, completion


def test_answers_in_order_keeps_requests_and_fails_when_nothing_is_queued() -> None:
    with ScriptedServer() as server:
        server.reply(body=completion("one"))
        server.reply(429, {"error": "slow"}, headers={"Retry-After": "2"})
        with httpx.Client(headers={"Authorization": "Bearer k"}) as client:
            first = client.post(f"{server.url}/chat/completions", json={"n": 1})
            second = client.post(f"{server.url}/chat/completions", json={"n": 2})
            third = client.post(f"{server.url}/chat/completions", json={"n": 3})
    assert first.json()["choices"][0]["message"] == {"role": "assistant", "content": "one"}
    assert (second.status_code, second.headers["retry-after"]) == (429, "2")
    assert third.status_code == 500 and third.json() == {"error": "nothing scripted"}
    assert [r["body"]["n"] for r in server.requests] == [1, 2, 3]
    assert {r["path"] for r in server.requests} == {"/v1/chat/completions"} and server.requests[0]["auth"] == "Bearer k"
