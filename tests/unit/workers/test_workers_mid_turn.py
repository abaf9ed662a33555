"""The mid-turn policy through the workers' inbox on a real PostgreSQL: under reject a submit of
a session with an unfinished message is refused; under interrupt the worker running a turn
learns of a newer message of its session at its next safe point."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentloop import FinishReason, IncomingMessage, MidTurnPolicy, Role, Session, TurnInProgressError, history_scope
from agentloop.adapters import open_stores
from agentloop.testing import RecordingChannel
from agentloop.workers import WorkerSettings, open_inbox, run_worker
from systems import standard_pipeline

from mid_turn_kit import HeldModel, lookup_tool

SESSION = Session("s-mid", user_id="u1")


def test_reject_refuses_a_second_message_while_the_first_is_unfinished_and_takes_it_after(postgres_url: str) -> None:
    async def body() -> tuple[list[Any], str, str]:
        async with open_inbox(postgres_url, bot="midreject", mid_turn=MidTurnPolicy.REJECT) as inbox:
            first = await inbox.submit(SESSION, IncomingMessage("first"), message_id="m1")
            again = await inbox.submit(SESSION, IncomingMessage("first"), message_id="m1")  # the client's retry is no new message
            with pytest.raises(TurnInProgressError, match="still running"):
                await inbox.submit(SESSION, IncomingMessage("second"), message_id="m2")
            racing = await asyncio.gather(
                *(inbox.submit(Session("s-race"), IncomingMessage(f"r{i}")) for i in range(5)), return_exceptions=True
            )
            pending = await inbox.start_turn(first)
            assert pending is not None
            await inbox.finish_turn(first, None)
            later = await inbox.submit(SESSION, IncomingMessage("second"), message_id="m2")
            return racing, first == again and "same key", later

    racing, same, later = asyncio.run(body())
    assert same == "same key" and later
    assert sum(not isinstance(r, BaseException) for r in racing) == 1, "of concurrent submits of one session, one is taken"
    assert all(isinstance(r, TurnInProgressError) for r in racing if isinstance(r, BaseException))


def test_interrupt_stops_the_workers_turn_before_its_tool_and_answers_the_newer_message_with_both(postgres_url: str) -> None:
    """I13 under interrupt: each message is answered once (the first with its interrupted outcome),
    history holds the interrupted message once and no partial answer."""
    model, channel, looked = HeldModel(), RecordingChannel(), []

    async def body() -> tuple[Any, Any]:
        with open_stores(postgres_url, bot="midint") as stores, standard_pipeline(
            model, channel, stores=stores, tools=[lookup_tool(looked)]
        ) as pipeline:
            loop = pipeline.build()
            async with open_inbox(postgres_url, bot="midint", mid_turn=MidTurnPolicy.INTERRUPT) as inbox:
                worker = asyncio.create_task(
                    run_worker(inbox, loop, WorkerSettings(concurrency=2, poll_interval=0.2), install_signal_handlers=False)
                )
                try:
                    first = await inbox.submit(SESSION, IncomingMessage("first"))
                    await asyncio.wait_for(model.called.wait(), 30)  # a guard against a hang, not a timing check
                    second = await inbox.submit(SESSION, IncomingMessage("second"))
                    model.release.set()
                    return await inbox.wait(first, timeout=30), await inbox.wait(second, timeout=30)
                finally:
                    worker.cancel()
                    await asyncio.gather(worker, return_exceptions=True)

    first, second = asyncio.run(body())
    assert first.finish_reason is FinishReason.INTERRUPTED and first.outcome.assistant_text is None and first.runs == 1
    assert looked == [], "the tool of the interrupted turn never ran"
    assert channel.streams[0].aborted is not None and "Let me look that up" not in channel.texts
    assert second.finish_reason is FinishReason.SUCCESS and second.reply_text == "answering first + second"
    with open_stores(postgres_url, bot="midint") as stores:
        history = asyncio.run(stores.sessions.recent(history_scope(SESSION), 10))
    assert [(m.role, m.content) for m in history] == [
        (Role.USER, "first"), (Role.USER, "second"), (Role.ASSISTANT, "answering first + second"),
    ]
