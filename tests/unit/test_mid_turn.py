"""The mid-turn policy in direct mode: a message arriving while a turn of its session runs is
queued, refused or interrupts the running turn at its next safe point."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import (
    AgentContext,
    AgentLoop,
    FinishReason,
    IncomingMessage,
    LlmReply,
    LlmRequest,
    MidTurnPolicy,
    Role,
    Session,
    System,
    Tool,
    TurnInProgressError,
    history_scope,
    tool,
)
from agentloop.testing import RecordingChannel
from systems import standard_pipeline

from mid_turn_kit import HeldModel, lookup_tool

SESSION = Session("s", user_id="u")


def _bot(tmp_path: Path) -> tuple[HeldModel, RecordingChannel, list[str], Any]:
    model, channel, looked = HeldModel(), RecordingChannel(), []
    pipeline = standard_pipeline(model, channel, data_dir=tmp_path, tools=[lookup_tool(looked)])
    return model, channel, looked, pipeline


async def _two_messages(loop: AgentLoop, model: HeldModel) -> tuple[Any, Any]:
    """Send "first", and "second" while the first turn waits on the model; both results (or errors)."""
    first = asyncio.create_task(loop.run_turn(SESSION, IncomingMessage("first")))
    await asyncio.wait_for(model.called.wait(), 30)  # a guard against a hang, not a timing check
    second = asyncio.create_task(loop.run_turn(SESSION, IncomingMessage("second")))
    await asyncio.sleep(0)  # the second message reaches the session's gate
    model.release.set()
    done = await asyncio.gather(first, second, return_exceptions=True)
    return done[0], done[1]


def test_queue_runs_the_second_message_after_the_first_turn_finished(tmp_path: Path) -> None:
    model, channel, looked, pipeline = _bot(tmp_path)
    with pipeline:
        loop = pipeline.build()
        first, second = asyncio.run(_two_messages(loop, model))
    assert first.turn_outcome.finish_reason is FinishReason.SUCCESS and looked == ["ran"]
    assert second.turn_outcome.assistant_text == "answering first + second"


def test_reject_refuses_the_second_message_and_the_first_turn_runs_on(tmp_path: Path) -> None:
    model, channel, looked, pipeline = _bot(tmp_path)
    with pipeline:
        loop = pipeline.build()
        loop.mid_turn = MidTurnPolicy.REJECT
        first, second = asyncio.run(_two_messages(loop, model))
        history = asyncio.run(pipeline.stores.sessions.recent(history_scope(SESSION), 10))
    assert isinstance(second, TurnInProgressError) and "still running" in str(second)
    assert first.turn_outcome.finish_reason is FinishReason.SUCCESS and looked == ["ran"]
    assert "second" not in [m.content for m in history]
    assert loop._gates._queues == {}, "a refused message must not hold the session"


def test_interrupt_stops_the_running_turn_before_its_tool_and_runs_the_new_message_with_it_in_history(tmp_path: Path) -> None:
    model, channel, looked, pipeline = _bot(tmp_path)
    with pipeline:
        loop = pipeline.build()
        loop.mid_turn = MidTurnPolicy.INTERRUPT
        first, second = asyncio.run(_two_messages(loop, model))
        history = asyncio.run(pipeline.stores.sessions.recent(history_scope(SESSION), 10))
    interrupted = first.turn_outcome
    assert interrupted.finish_reason is FinishReason.INTERRUPTED and interrupted.assistant_text is None
    assert looked == [], "the tool of the interrupted turn never ran"
    assert channel.streams[0].shown == "Let me look that up" and channel.streams[0].aborted is not None
    assert "Let me look that up" not in channel.texts
    assert second.turn_outcome.finish_reason is FinishReason.SUCCESS
    assert second.turn_outcome.assistant_text == "answering first + second"
    assert [(m.role, m.content) for m in history] == [
        (Role.USER, "first"), (Role.USER, "second"), (Role.ASSISTANT, "answering first + second"),
    ]


def test_interrupt_with_no_newer_message_lets_the_turn_finish(tmp_path: Path) -> None:
    model, channel, looked, pipeline = _bot(tmp_path)
    with pipeline:
        loop = pipeline.build()
        loop.mid_turn = MidTurnPolicy.INTERRUPT

        async def alone() -> Any:
            model.release.set()
            return await loop.run_turn(SESSION, IncomingMessage("first"))

        ctx = asyncio.run(alone())
    assert ctx.turn_outcome.finish_reason is FinishReason.SUCCESS and looked == ["ran"]


def test_a_policy_is_named_by_its_word() -> None:
    assert AgentLoop([], mid_turn="reject").mid_turn is MidTurnPolicy.REJECT
    with pytest.raises(ValueError, match="'sometimes' is not a valid MidTurnPolicy"):
        AgentLoop([], mid_turn="sometimes")


class Journal(System):
    """Logs each turn's start and end, sleeping its message's delay in between; a turn that
    learns of a newer message at its midpoint logs that it was interrupted and stops."""

    order = 10

    def __init__(self, log: list[tuple[str, str, str]], delays: dict[str, float]) -> None:
        self.log = log
        self.delays = delays

    async def process(self, ctx: AgentContext) -> None:
        text = ctx.incoming.text
        self.log.append(("start", ctx.session.id, text))
        await asyncio.sleep(self.delays[text])
        if await ctx.interrupted():
            self.log.append(("interrupted", ctx.session.id, text))
        await asyncio.sleep(self.delays[text])
        self.log.append(("end", ctx.session.id, text))


@settings(deadline=None, max_examples=30)
@given(
    st.sampled_from(list(MidTurnPolicy)),
    st.lists(st.tuples(st.sampled_from(["s1", "s2"]), st.floats(0, 0.002)), min_size=1, max_size=10),
)
def test_i9_holds_under_every_mid_turn_policy(policy: MidTurnPolicy, arrivals: list[tuple[str, float]]) -> None:
    """I9: whatever the mid-turn policy, turns of one session never interleave and none is lost or
    run twice: each message runs exactly once, or (reject) its sender is told it was refused; under
    interrupt only a turn with a newer message waiting behind it learns of one."""
    log: list[tuple[str, str, str]] = []
    named = [(sid, f"{sid}-{i}") for i, (sid, _) in enumerate(arrivals)]
    delays = {text: delay for (_, text), (_, delay) in zip(named, arrivals, strict=True)}
    loop = AgentLoop([Journal(log, delays)], mid_turn=policy)

    async def send_all() -> list[Any]:
        tasks = [asyncio.create_task(loop.run_turn(Session(sid), IncomingMessage(text))) for sid, text in named]
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(send_all())
    refused = {text for (_, text), result in zip(named, results, strict=True) if isinstance(result, TurnInProgressError)}
    assert all(not isinstance(r, BaseException) or isinstance(r, TurnInProgressError) for r in results)
    if policy is not MidTurnPolicy.REJECT:
        assert not refused
    for sid in {sid for sid, _ in named}:
        events = [(kind, text) for kind, s, text in log if s == sid and kind != "interrupted"]
        expected = [text for s, text in named if s == sid and text not in refused]
        assert events == [pair for text in expected for pair in (("start", text), ("end", text))]
        interrupted = [text for kind, s, text in log if s == sid and kind == "interrupted"]
        assert policy is MidTurnPolicy.INTERRUPT or not interrupted
        assert expected[-1] not in interrupted, "the last message of a session has none behind it"
    assert loop._gates._queues == {}, "session gates must not leak"
