"""The durable inbox on a real PostgreSQL: submit, await the outcome, resubmit, the schema."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentloop import FinishReason, IncomingMessage, Session, tool
from agentloop.adapters import open_note_taking, open_stores
from agentloop.adapters.errors import NewerSchemaError
from agentloop.errors import StoreUnavailableError
from agentloop.notes import DistillationSettings, IdleSessions, KnowledgeItem, NoteTaking, NoteType
from agentloop.testing import FakeClock, RecordingChannel, ScriptedLLM
from agentloop.workers import (
    SCHEMA_VERSION,
    Inbox,
    InboxUrlError,
    MessageIdConflictError,
    MessageNotAnsweredError,
    UnknownMessageError,
    WorkerSettings,
    migrate_inbox,
    open_inbox,
    run_worker,
)
from agentloop.workers.inbox import CONNECTION_WAIT
from systems import add_note_taking, standard_pipeline
from worker_kit import cuttable, with_worker

SESSION = Session("s1", user_id="u1")
NOTE = "## Context\nA weather question.\n## Solution\nLook the city up.\n## Key Patterns\nLook it up.\n## Tags\nweather"


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


def test_an_approval_decision_crosses_the_inbox_and_a_worker_runs_the_call_it_approves(postgres_url: str) -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("refund", {"order": "A17"}), "Refunded A17."])

    async def body(inbox: Inbox, channel: RecordingChannel) -> Any:
        asked = await inbox.wait(await inbox.submit(SESSION, IncomingMessage("refund A17")), timeout=20)
        assert asked.outcome.approval is not None
        decision = IncomingMessage.approval(asked.outcome.approval.approval_id, approved=True)
        return asked, await inbox.wait(await inbox.submit(SESSION, decision), timeout=20)

    asked, done = run(with_worker(postgres_url, body, llm=llm, tools=[refund]))
    assert asked.finish_reason is FinishReason.AWAITING_APPROVAL and asked.outcome.approval.tool == "refund"
    assert done.finish_reason is FinishReason.SUCCESS and done.reply_text == "Refunded A17."
    assert llm.requests[-1].messages[-1].content == "refunded A17"


def test_a_submitted_message_is_answered_and_its_submitter_gets_the_outcome(postgres_url: str) -> None:
    async def body(inbox: Inbox, channel: RecordingChannel) -> Any:
        message_id = await inbox.submit(SESSION, IncomingMessage("hello"))
        return await inbox.wait(message_id, timeout=20), channel.texts

    result, texts = run(with_worker(postgres_url, body))
    assert result.finish_reason is FinishReason.SUCCESS
    assert result.reply_text == "echo: hello"
    assert result.runs == 1 and result.outcome.failures == ()
    assert texts == ["echo: hello"]


def test_messages_of_one_session_are_answered_in_submission_order(postgres_url: str) -> None:
    async def body(inbox: Inbox, channel: RecordingChannel) -> Any:
        ids = [await inbox.submit(SESSION, IncomingMessage(f"m{i}")) for i in range(6)]
        for message_id in ids:
            await inbox.wait(message_id, timeout=20)
        return channel.texts

    assert run(with_worker(postgres_url, body)) == [f"echo: m{i}" for i in range(6)]


def test_a_sessions_next_message_starts_when_its_turn_ends_not_at_the_next_poll(postgres_url: str) -> None:
    """Finishing a session's turn wakes the workers, so its queued messages never wait for a poll (here 60 s)."""

    async def body(inbox: Inbox, channel: RecordingChannel) -> float:
        ids = [await inbox.submit(SESSION, IncomingMessage(f"m{i}")) for i in range(4)]
        started = time.monotonic()
        for message_id in ids:
            await inbox.wait(message_id, timeout=20)
        return time.monotonic() - started

    assert run(with_worker(postgres_url, body, poll_interval=60)) < 5


@asynccontextmanager
async def noted_worker(
    url: str, llm: ScriptedLLM, clock: FakeClock, *, tools: Sequence[Any] = (), idle_after: float | None = None
) -> AsyncIterator[tuple[Inbox, NoteTaking]]:
    """An in-process worker whose pipeline takes notes (any session with a tool call is worth
    distilling), ending idle sessions after `idle_after` simulated seconds when given."""
    quick = DistillationSettings(min_executions=1, min_duration_s=0)
    with open_stores(url, bot="helper") as stores, \
            open_note_taking(stores, ScriptedLLM([NOTE]), clock=clock, distillation=quick) as note_taking, \
            standard_pipeline(llm, RecordingChannel(), stores=stores, tools=tools) as pipeline:
        loop = add_note_taking(pipeline, note_taking).build()
        idle = None if idle_after is None else IdleSessions(note_taking, idle_after=idle_after, check_every=0.02, clock=clock)
        async with open_inbox(url, bot="helper") as inbox:
            worker = asyncio.create_task(run_worker(inbox, loop, WorkerSettings(), install_signal_handlers=False, idle=idle))
            try:
                yield inbox, note_taking
            finally:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)


def test_a_worker_ends_and_distils_a_session_idle_longer_than_the_idle_time(postgres_url: str) -> None:
    clock = FakeClock()

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return f"{city}: sunny"

    llm = ScriptedLLM([ScriptedLLM.tool_call("lookup", {"city": "Lisbon"}), "Sunny in Lisbon."])

    async def body() -> tuple[int, int]:
        async with noted_worker(postgres_url, llm, clock, tools=[lookup], idle_after=60) as (inbox, note_taking):
            await inbox.wait(await inbox.submit(SESSION, IncomingMessage("weather in Lisbon?")), timeout=20)
            before = await note_taking.knowledge.repository.count()
            clock.advance(61)
            for _ in range(500):
                if await note_taking.knowledge.repository.count():
                    break
                await asyncio.sleep(0.02)
            return before, await note_taking.knowledge.repository.count()

    assert run(body()) == (0, 1), "the session was distilled into one note once idle"


def test_feedback_on_a_message_id_credits_the_notes_its_workers_turn_was_shown(postgres_url: str) -> None:
    """The submitter knows a turn by its message id; the worker's turn had another id, so feedback credited nothing."""
    clock = FakeClock()

    async def body() -> list[int]:
        async with noted_worker(postgres_url, ScriptedLLM(["Restore one."]), clock) as (inbox, note_taking):
            chain = note_taking.chain(SESSION)
            text = "verify backups by restoring them"
            note = KnowledgeItem(NoteType.PATTERN, chain.narrowest(), chain, text, text, note_taking.knowledge.embed(text), clock.now())
            key = (await note_taking.knowledge.add(note)).key
            message_id = await inbox.submit(SESSION, IncomingMessage("how do I verify backups by restoring them?"))
            await inbox.wait(message_id, timeout=20)
            credited = await note_taking.record_feedback(SESSION, positive=True, turn_id=message_id)
            return [key, *(item.key for item in credited)]

    key, *credited = run(body())
    assert credited == [key]


def test_resubmitting_a_message_id_keeps_one_message_and_another_text_under_it_is_refused(postgres_url: str) -> None:
    async def body() -> tuple[bool, int]:
        async with open_inbox(postgres_url, bot="helper") as inbox:
            first = await inbox.submit(SESSION, IncomingMessage("hello"), message_id="client-1")
            again = await inbox.submit(SESSION, IncomingMessage("hello"), message_id="client-1")
            with pytest.raises(MessageIdConflictError, match="'client-1' of bot 'helper' was already submitted"):
                await inbox.submit(SESSION, IncomingMessage("something else"), message_id="client-1")
            assert first == again
        async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
            jobs = await (await conn.execute("SELECT count(*) FROM procrastinate_jobs")).fetchone()
        assert jobs is not None
        return first == again, jobs[0]

    assert run(body()) == (True, 1)


def test_waiting_without_a_worker_times_out_with_a_message_that_says_what_to_do(postgres_url: str) -> None:
    async def body() -> None:
        async with open_inbox(postgres_url, bot="helper") as inbox:
            message_id = await inbox.submit(SESSION, IncomingMessage("hello"))
            assert await inbox.result(message_id) is None
            with pytest.raises(MessageNotAnsweredError, match="not answered within 0.1s .*agentloop worker"):
                await inbox.wait(message_id, timeout=0.1)
            with pytest.raises(UnknownMessageError, match="no message 'nope'"):
                await inbox.result("nope")

    run(body())


def test_inboxes_of_two_bots_in_one_database_keep_their_messages_apart(postgres_url: str) -> None:
    async def body() -> None:
        async with open_inbox(postgres_url, bot="one") as one, open_inbox(postgres_url, bot="two") as two:
            message_id = await one.submit(SESSION, IncomingMessage("hello"), message_id="m")
            with pytest.raises(UnknownMessageError):
                await two.result(message_id)
            assert await two.submit(SESSION, IncomingMessage("other"), message_id="m") != message_id

    run(body())


def test_migrating_twice_changes_nothing_and_a_newer_schema_is_refused(postgres_url: str) -> None:
    async def body() -> None:
        await migrate_inbox(postgres_url)
        await migrate_inbox(postgres_url)
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
            versions = await (await conn.execute("SELECT version FROM agentloop_inbox_schema")).fetchall()
            assert versions == [(SCHEMA_VERSION,)]
            await conn.execute("UPDATE agentloop_inbox_schema SET version = %s", (SCHEMA_VERSION + 1,))
        with pytest.raises(NewerSchemaError, match=f"inbox schema at version {SCHEMA_VERSION + 1}, newer than version {SCHEMA_VERSION}"):
            await migrate_inbox(postgres_url)

    run(body())


def test_an_inbox_url_that_is_not_postgresql_or_not_reachable_is_one_line(tmp_path: Path) -> None:
    async def body(url: str) -> None:
        async with open_inbox(url):
            pass

    with pytest.raises(InboxUrlError, match="the inbox needs PostgreSQL"):
        run(body(f"sqlite:///{tmp_path}"))
    with pytest.raises(InboxUrlError, match=r"postgresql://me:\*\*\*@.*did not accept the connection"):
        run(body(f"postgresql://me:secret@/nodb?host={tmp_path}"))


def test_each_tenant_chain_and_user_has_its_own_message_ids_in_the_inbox(postgres_url: str) -> None:
    tenants = [Session("s1", user_id="u1", org_id="acme"), Session("s2", user_id="u1", org_id="globex"), Session("s3", user_id="u2", org_id="acme")]

    async def body(inbox: Inbox, channel: RecordingChannel) -> list[str | None]:
        keys = [await inbox.submit(session, IncomingMessage(f"from {session.id}"), message_id="m1") for session in tenants]
        assert len(set(keys)) == 3
        with pytest.raises(MessageIdConflictError):
            await inbox.submit(tenants[0], IncomingMessage("another text"), message_id="m1")
        return [(await inbox.wait(key, timeout=20)).reply_text for key in keys]

    assert run(with_worker(postgres_url, body)) == ["echo: from s1", "echo: from s2", "echo: from s3"]


@pytest.mark.parametrize("message_id", ["a" * 12000, "nul\x00", "\ud800", ""], ids=["12 KB", "NUL", "lone surrogate", "empty"])
def test_a_message_id_outside_its_grammar_is_refused_before_it_is_stored(postgres_url: str, message_id: str) -> None:
    async def body() -> int:
        async with open_inbox(postgres_url, bot="helper") as inbox:
            with pytest.raises(ValueError, match="must be 1-128 letters, digits"):
                await inbox.submit(SESSION, IncomingMessage("hello"), message_id=message_id)
        async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
            rows = await (await conn.execute("SELECT count(*) FROM agentloop_inbox")).fetchone()
        assert rows is not None
        return int(rows[0])

    assert run(body()) == 0


def test_nul_and_lone_surrogates_in_a_submitted_message_are_replaced_before_it_is_stored(postgres_url: str) -> None:
    async def body(inbox: Inbox, channel: RecordingChannel) -> str | None:
        key = await inbox.submit(Session("s\x00", user_id="u\ud800"), IncomingMessage("a\x00b\udfffc"))
        return (await inbox.wait(key, timeout=20)).reply_text

    answered = asyncio.wait_for(with_worker(postgres_url, body), 60)  # a regression that hangs (submit, turn or wait) fails
    assert run(answered) == "echo: a\ufffdb\ufffdc"


def test_a_message_stored_before_ids_were_scoped_keeps_its_id_as_its_key_and_is_answered(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentloop.workers import inbox as inbox_module

    async def before() -> None:
        monkeypatch.setattr(inbox_module, "SCHEMA_VERSION", 1)
        monkeypatch.setattr(inbox_module, "_STEPS", inbox_module._STEPS[:1])
        await migrate_inbox(postgres_url)
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
            await conn.execute(
                "INSERT INTO agentloop_inbox (bot, message_id, session, message) VALUES ('helper', 'old-1', %s, %s)",
                ('{"id": "s1", "user_id": "u1", "project_id": null, "team_id": null, "org_id": "acme", "channel": null}',
                 '{"text": "from before", "attachments": [], "auto_mode": false, "metadata": {}, "decision": null}'),
            )
        monkeypatch.undo()

    async def body(inbox: Inbox, channel: RecordingChannel) -> tuple[str | None, str]:
        async with inbox.connector.pool.connection() as conn:  # the job it had, as the version before deferred it
            await inbox.app.configure_task("agentloop.turn", queue="agentloop.helper", lock="agentloop.helper.session.s1",
                                           connection=conn).defer_async(bot="helper", message_id="old-1")
            scope = await (await conn.execute("SELECT scope FROM agentloop_inbox WHERE key = 'old-1'")).fetchone()
        assert scope == (["acme", None, None, "u1"],)
        again = await inbox.submit(Session("s1", user_id="u1", org_id="acme"), IncomingMessage("from before"), message_id="old-1")
        return (await inbox.wait("old-1", timeout=20)).reply_text, again

    run(before())
    assert run(with_worker(postgres_url, body)) == ("echo: from before", "old-1")


@pytest.mark.parametrize("silent", [False, True], ids=["stopped", "answering nothing"])
def test_submit_while_the_database_is_out_of_reach_says_so_within_the_connection_wait_and_works_once_it_is_back(
    postgres_url: str, tmp_path: Path, silent: bool
) -> None:
    """The database stopped (connections closed, new ones refused) or answering nothing: `submit`
    raises `StoreUnavailableError` naming a wait no longer than a call's wait for a connection,
    instead of hanging, stores nothing, and the next submit after the database is back works."""

    async def body() -> tuple[StoreUnavailableError, list[Any]]:
        async with cuttable(postgres_url, tmp_path) as database, open_inbox(database.url, bot="helper") as inbox:
            await inbox.submit(SESSION, IncomingMessage("before"))
            await database.cut(silent=silent)
            with pytest.raises(StoreUnavailableError, match="the inbox at .* its database cannot be reached") as refused:
                await asyncio.wait_for(inbox.submit(SESSION, IncomingMessage("during")), 3 * CONNECTION_WAIT)
            await database.restore()
            await asyncio.wait_for(inbox.submit(SESSION, IncomingMessage("after")), 3 * CONNECTION_WAIT)
        async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
            stored = await (await conn.execute("SELECT message ->> 'text' FROM agentloop_inbox ORDER BY submitted_at")).fetchall()
        return refused.value, [row[0] for row in stored]

    refused, stored = run(body())
    assert 0 < refused.retry_after <= CONNECTION_WAIT
    assert stored == ["before", "after"]
