"""The admin routes: token roles, erase and export of a user within the admin's chain only, each audited, and an
erase that holds the user's sessions so a turn in flight completes before it or sees nothing after."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentloop import LlmReply, LlmRequest
from agentloop.adapters import open_stores
from agentloop.messages import Finished, StreamEvent, TextDelta
from agentloop.privacy import Subject
from agentloop.context import Session
from agentloop.serve import Caller, TokenFileError, load_tokens
from agentloop.serve.admin import erase_held
from agentloop.serve.limits import RateLimiter
from agentloop.serve.server import Server, serving
from worker_kit import with_worker
from serve_kit import ACME_ADMIN, ALICE, BOB, CAROL, SUPPORT_ADMIN, auth, client, new_session, settings


async def _say(http: httpx.AsyncClient, token: str, session: str, text: str) -> httpx.Response:
    return await http.post(f"/v1/sessions/{session}/messages", json={"text": text}, headers=auth(token))


async def _history(http: httpx.AsyncClient, token: str, session: str) -> list[str]:
    reply = await http.get(f"/v1/sessions/{session}/messages", headers=auth(token))
    assert reply.status_code == 200, reply.text
    return [message["text"] for message in reply.json()["messages"]]


def _kept(stores: str, subject: Subject, bot: str = "bot") -> list[dict[str, Any]]:
    """Everything the stores keep about `subject`, read on their own connections."""

    async def read(opened: Any) -> list[dict[str, Any]]:
        return [record async for record in opened.export(subject, actor="test")]

    with open_stores(stores, bot=bot) as opened:
        return asyncio.run(read(opened))


def _audit(stores: str) -> list[Any]:
    with open_stores(stores) as opened:
        return asyncio.run(opened.audit.records())


def test_a_token_file_role_is_user_or_admin_and_anything_else_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(f'[[tokens]]\ntoken = "{ACME_ADMIN}"\nuser = "root"\norg = "acme"\nrole = "admin"\n'
                    f'[[tokens]]\ntoken = "{ALICE}"\nuser = "alice"\nrole = "user"\n')
    tokens = load_tokens(path)
    assert tokens.caller(ACME_ADMIN) == Caller("root", "acme", admin=True)
    assert tokens.caller(ALICE) == Caller("alice")
    path.write_text(f'[[tokens]]\ntoken = "{ALICE}"\nuser = "alice"\nrole = "superuser"\n')
    with pytest.raises(TokenFileError, match="role must be one of user, admin, not 'superuser'") as refused:
        load_tokens(path)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("admin", "chain", "administers"),
    [
        (Caller("root", "acme", admin=True), ("acme", None, None), True),
        (Caller("root", "acme", admin=True), ("acme", "sales", "p1"), True),
        (Caller("root", "acme", admin=True), ("globex", None, None), False),
        (Caller("root", "acme", admin=True), (None, None, None), False),
        (Caller("lead", "acme", "support", admin=True), ("acme", "support", "p1"), True),
        (Caller("lead", "acme", "support", admin=True), ("acme", "sales", None), False),
        (Caller("lead", "acme", "support", admin=True), ("acme", None, None), False),
        (Caller("lead", None, "support", admin=True), ("acme", "support", None), False),
        (Caller("owner", admin=True), ("globex", "any", "thing"), True),
        (Caller("alice", "acme"), ("acme", None, None), False),
    ],
)
def test_an_admin_administers_its_own_chain_and_those_below_it_only(
    admin: Caller, chain: tuple[str | None, str | None, str | None], administers: bool
) -> None:
    assert admin.administers(*chain) is administers


def test_me_tells_an_admin_token_its_role(tmp_path: Path) -> None:
    async def body() -> httpx.Response:
        async with client(settings(tmp_path)) as http:
            return await http.get("/v1/me", headers=auth(SUPPORT_ADMIN))

    assert asyncio.run(body()).json() == {"user": "lead", "tenant": {"org": "acme", "team": "support", "project": None}, "role": "admin"}


def test_admin_routes_refuse_a_user_token_and_an_admin_of_another_chain_with_403(tmp_path: Path) -> None:
    served = settings(tmp_path)

    async def body() -> list[httpx.Response]:
        async with client(served) as http:
            return [
                await http.delete("/v1/admin/users/alice", headers=auth(ALICE)),
                await http.get("/v1/admin/users/alice/export", headers=auth(ALICE)),
                await http.delete("/v1/admin/users/alice?team=sales", headers=auth(SUPPORT_ADMIN)),
                await http.delete("/v1/admin/users/bob?org=globex", headers=auth(ACME_ADMIN)),
                await http.get("/v1/admin/users/nobody/export?org=globex", headers=auth(ACME_ADMIN)),
                await http.delete("/v1/admin/users/alice"),
            ]

    replies = asyncio.run(body())
    assert [reply.status_code for reply in replies] == [403, 403, 403, 403, 403, 401]
    assert {reply.json()["error"]["code"] for reply in replies[:-1]} == {"forbidden"}
    assert replies[3].json() == replies[4].json()  # a user that exists and one that does not get the same answer
    assert _audit(served.stores) == []


def test_a_team_admin_erases_the_user_in_its_team_only_and_the_erase_is_audited_with_the_admin_as_actor(tmp_path: Path) -> None:
    served = settings(tmp_path)

    async def body() -> tuple[httpx.Response, list[list[str]]]:
        async with client(served) as http:
            sessions = {token: await new_session(http, token) for token in (ALICE, CAROL, BOB)}
            for token, session in sessions.items():
                assert (await _say(http, token, session, f"secret of {token[:5]}")).status_code == 200
            erased = await http.delete("/v1/admin/users/alice", headers=auth(SUPPORT_ADMIN))
            return erased, [await _history(http, token, session) for token, session in sessions.items()]

    erased, (alice, carol, bob) = asyncio.run(body())
    assert erased.status_code == 200, erased.text
    assert erased.json()["erased"]["sessions"] == 2 and erased.json()["total"] == sum(erased.json()["erased"].values())
    assert alice == []
    assert carol == ["secret of carol", "echo: secret of carol"]  # the same user id in another team of the org
    assert bob == ["secret of bob-t", "echo: secret of bob-t"]
    [record] = _audit(served.stores)
    assert record.actor == "serve:lead@acme/support/-" and record.action == "erase"
    assert record.subject["user_id"] == "alice" and record.subject["team_id"] == "support"
    assert "secret" not in json.dumps(record.counts) and SUPPORT_ADMIN not in repr(record)


def test_an_org_admin_exports_the_user_as_one_streamed_json_array_of_records_and_the_export_is_audited(tmp_path: Path) -> None:
    served = settings(tmp_path)

    async def body() -> httpx.Response:
        async with client(served) as http:
            for token in (ALICE, CAROL, BOB):
                assert (await _say(http, token, await new_session(http, token), f"words of {token[:5]}")).status_code == 200
            return await http.get("/v1/admin/users/alice/export", headers=auth(ACME_ADMIN))

    exported = asyncio.run(body())
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("application/json")
    records = exported.json()
    texts = sorted(record["content"] for record in records if record["store"] == "sessions")
    assert texts == ["echo: words of alice", "echo: words of carol", "words of alice", "words of carol"]
    assert "words of bob" not in exported.text
    [record] = _audit(served.stores)
    assert (record.actor, record.action, record.counts["sessions"]) == ("serve:root@acme/-/-", "export", 4)


class HoldingEcho:
    """Echoes at once, except a message with "hold" in it, answered only once `release` is set: a turn in flight."""

    model = "holding-echo"

    def __init__(self) -> None:
        self.entered, self.release = asyncio.Event(), asyncio.Event()

    async def complete(self, request: LlmRequest) -> LlmReply:
        text = str(request.messages[-1].content)
        if "hold" in text:
            self.entered.set()
            await self.release.wait()
        return LlmReply(f"echo: {text}", model=self.model)

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamEvent]:
        reply = await self.complete(request)
        yield TextDelta(reply.content or "")
        yield Finished(reply)


def test_an_admin_erase_waits_for_the_users_turn_in_flight_refuses_new_ones_and_leaves_nothing_after(tmp_path: Path) -> None:
    model = HoldingEcho()
    served = settings(tmp_path, llm=model, rate_burst=1000)

    async def body() -> dict[str, Any]:
        async with client(served) as http:
            held, other = await new_session(http, ALICE), await new_session(http, ALICE)
            bob = await new_session(http, BOB)
            in_flight = asyncio.create_task(_say(http, ALICE, held, "aliceword hold"))
            await model.entered.wait()
            queued = asyncio.create_task(_say(http, ALICE, held, "aliceword queued"))
            erase = asyncio.create_task(http.delete("/v1/admin/users/alice", headers=auth(ACME_ADMIN)))
            probes = [await _say(http, ALICE, other, "aliceword probe 0")]
            while probes[-1].status_code == 200 and len(probes) < 500:  # until the erase holds alice's sessions
                probes.append(await _say(http, ALICE, other, f"aliceword probe {len(probes)}"))
            during_bob = await _say(http, BOB, bob, "bobword during")
            await asyncio.wait({erase}, timeout=0.5)  # time enough to erase, were the turn in flight not waited for
            erase_done_early = erase.done()
            model.release.set()
            return {
                "in_flight": await in_flight, "queued": await queued, "erase": await erase, "probes": probes,
                "bob": during_bob, "early": erase_done_early, "history": await _history(http, BOB, bob),
                "alice": [await _history(http, ALICE, session) for session in (held, other)],
                "again": await _say(http, ALICE, other, "aliceword again"),
            }

    seen = asyncio.run(body())
    assert seen["in_flight"].status_code == 200 and seen["in_flight"].json()["text"] == "echo: aliceword hold"  # completed before
    refused = seen["probes"][-1]
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "erasing" and refused.headers["Retry-After"] == "1"
    assert seen["queued"].status_code == 503 and seen["queued"].json()["error"]["code"] == "erasing"
    assert seen["early"] is False and seen["erase"].status_code == 200, seen["erase"].text
    assert seen["bob"].status_code == 200 and seen["history"] == ["bobword during", "echo: bobword during"]
    assert seen["alice"] == [[], []]  # one erase, after the turn in flight: nothing of it is left
    assert seen["again"].status_code == 200  # once the erase is done, alice talks again (a new turn, stored as any)
    left = [record for record in _kept(served.stores, Subject.user("alice", org_id="acme")) if "again" not in json.dumps(record)]
    assert left == []


def test_feedback_and_end_whose_body_arrives_after_an_admin_erase_began_are_refused(tmp_path: Path) -> None:
    """A request checked before its body is read, then run once the erase is under way, would write what it erases."""
    model = HoldingEcho()
    served = settings(tmp_path, llm=model, rate_burst=1000)

    async def slow(first: bytes, rest: bytes, asked: asyncio.Event, sent: asyncio.Event) -> AsyncIterator[bytes]:
        yield first
        asked.set()  # the app is reading the body: the request is past its session's first check
        await sent.wait()
        yield rest

    async def body() -> dict[str, Any]:
        async with client(served) as http:
            held, late = await new_session(http, ALICE), await new_session(http, ALICE)
            in_flight = asyncio.create_task(_say(http, ALICE, held, "aliceword hold"))
            await model.entered.wait()
            asked, sent = [asyncio.Event(), asyncio.Event()], asyncio.Event()
            requests = [
                asyncio.create_task(http.post(
                    f"/v1/sessions/{late}/{path}", content=slow(first, rest, event, sent),
                    headers={**auth(ALICE), "content-type": "application/json"},
                ))
                for (path, first, rest), event in zip(
                    (("feedback", b'{"turn_id": "t1", ', b'"positive": true}'), ("end", b'{"success"', b": true}")), asked, strict=True
                )
            ]
            for event in asked:
                await event.wait()
            erase = asyncio.create_task(http.delete("/v1/admin/users/alice", headers=auth(ACME_ADMIN)))
            probe = await _say(http, ALICE, late, "aliceword probe")
            while probe.status_code == 200:  # until the erase holds alice's sessions
                probe = await _say(http, ALICE, late, "aliceword probe")
            sent.set()
            answers = [await request for request in requests]
            model.release.set()
            await in_flight
            return {"answers": answers, "erase": await erase}

    seen = asyncio.run(body())
    assert [answer.status_code for answer in seen["answers"]] == [503, 503], [answer.text for answer in seen["answers"]]
    assert all(answer.json()["error"]["code"] == "erasing" for answer in seen["answers"])
    assert seen["erase"].status_code == 200


def test_an_admin_erase_stops_the_idle_watch_of_the_users_sessions_and_keeps_the_others(tmp_path: Path) -> None:
    """An idle session ended after its erase would be distilled from whatever a turn in flight wrote meanwhile."""
    served = settings(tmp_path)

    async def body() -> tuple[int, int]:
        server = Server(served, load_tokens(served.tokens), RateLimiter(60, 10))
        async with serving(server) as bot:
            assert bot.idle is not None
            bot.idle.touch(Session("s1", user_id="alice", org_id="acme"))
            bot.idle.touch(Session("s2", user_id="bob", org_id="acme"))
            before = len(bot.idle)
            await erase_held(server, Subject.user("alice", org_id="acme"), actor="test")
            return before, len(bot.idle)

    assert asyncio.run(body()) == (2, 1)


def test_with_workers_an_admin_erase_removes_the_users_finished_inbox_messages_and_export_lists_them_first(
    tmp_path: Path, postgres_url: str,
) -> None:
    served = settings(tmp_path, stores=postgres_url, bot="helper", turn_timeout=20.0)
    assert served.uses_inbox

    async def body(inbox: Any, channel: Any) -> list[httpx.Response]:
        async with client(served) as http:
            for token in (ALICE, BOB):
                assert (await _say(http, token, await new_session(http, token), f"inboxword of {token[:5]}")).status_code == 200
            exported = await http.get("/v1/admin/users/alice/export", headers=auth(ACME_ADMIN))
            erased = await http.delete("/v1/admin/users/alice", headers=auth(ACME_ADMIN))
            again = await http.get("/v1/admin/users/alice/export", headers=auth(ACME_ADMIN))
            bob = await http.get("/v1/admin/users/bob/export?org=globex", headers=auth(ACME_ADMIN))
            return [exported, erased, again, bob]

    exported, erased, again, bob = asyncio.run(with_worker(postgres_url, body))
    assert [record["message"]["text"] for record in exported.json() if record["store"] == "inbox"] == ["inboxword of alice"]
    assert erased.status_code == 200 and erased.json()["erased"]["inbox"] == 1 and erased.json()["erased"]["sessions"] > 0
    assert again.json() == [] and bob.status_code == 403
    assert "inboxword of bob" in json.dumps(_kept(postgres_url, Subject.user("bob", org_id="globex"), bot="helper"))


def test_an_org_admin_erases_and_exports_one_session_and_a_team_admin_may_not(tmp_path: Path) -> None:
    served = settings(tmp_path)

    async def body() -> dict[str, Any]:
        async with client(served) as http:
            gone, kept = await new_session(http, ALICE), await new_session(http, ALICE)
            for session, text in ((gone, "sessionword gone"), (kept, "sessionword kept")):
                assert (await _say(http, ALICE, session, text)).status_code == 200
            return {
                "team": await http.delete(f"/v1/admin/sessions/{gone}", headers=auth(SUPPORT_ADMIN)),
                "user": await http.delete(f"/v1/admin/sessions/{gone}", headers=auth(ALICE)),
                "other_org": await http.delete(f"/v1/admin/sessions/{gone}?org=globex", headers=auth(ACME_ADMIN)),
                "exported": await http.get(f"/v1/admin/sessions/{gone}/export", headers=auth(ACME_ADMIN)),
                "erased": await http.delete(f"/v1/admin/sessions/{gone}", headers=auth(ACME_ADMIN)),
                "histories": [await _history(http, ALICE, session) for session in (gone, kept)],
            }

    seen = asyncio.run(body())
    assert [seen[name].status_code for name in ("team", "user", "other_org")] == [403, 403, 403]
    assert sorted(record["content"] for record in seen["exported"].json() if record["store"] == "sessions") == [
        "echo: sessionword gone", "sessionword gone",
    ]
    assert seen["erased"].status_code == 200 and seen["erased"].json()["erased"]["sessions"] == 2
    assert seen["histories"] == [[], ["sessionword kept", "echo: sessionword kept"]]
    assert [(record.action, record.subject["kind"]) for record in _audit(served.stores)] == [("export", "session"), ("erase", "session")]
