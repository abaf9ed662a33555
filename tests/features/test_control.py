"""Steps for control.feature."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from agentloop import FinishReason, IncomingMessage, MidTurnPolicy, Session, TurnInProgressError, history_scope
from agentloop.testing import RecordingChannel
from systems import StandardPipeline, standard_pipeline

from mid_turn_kit import HeldModel, lookup_tool

scenarios("control.feature")

SESSION = Session("control", user_id="u1")


@attrs.define
class MidTurnBot:
    """A bot whose model is held on its first call, and what its two turns gave."""

    pipeline: StandardPipeline
    model: HeldModel
    channel: RecordingChannel
    looked: list[str]
    results: dict[str, Any] = attrs.Factory(dict)


@pytest.fixture
def mid_turn_bots() -> Iterator[list[MidTurnBot]]:
    bots: list[MidTurnBot] = []
    yield bots
    for bot in bots:
        bot.pipeline.close()


@given(parsers.parse("a bot whose mid-turn policy is {policy}"), target_fixture="bot")
def _bot(policy: str, tmp_path: Path, mid_turn_bots: list[MidTurnBot]) -> MidTurnBot:
    model, channel, looked = HeldModel(), RecordingChannel(), []
    pipeline = standard_pipeline(model, channel, data_dir=tmp_path, tools=[lookup_tool(looked)])
    bot = MidTurnBot(pipeline, model, channel, looked)
    mid_turn_bots.append(bot)
    bot.results["policy"] = MidTurnPolicy(policy)
    return bot


@when(parsers.parse('the user says "{first}" and, while the bot works on it, "{second}"'))
def _two_messages(bot: MidTurnBot, first: str, second: str) -> None:
    loop = bot.pipeline.build()
    loop.mid_turn = bot.results["policy"]

    async def send() -> list[Any]:
        running = asyncio.create_task(loop.run_turn(SESSION, IncomingMessage(first)))
        await asyncio.wait_for(bot.model.called.wait(), 30)  # a guard against a hang, not a timing check
        newer = asyncio.create_task(loop.run_turn(SESSION, IncomingMessage(second)))
        await asyncio.sleep(0)  # the newer message reaches the session
        bot.model.release.set()
        return await asyncio.gather(running, newer, return_exceptions=True)

    bot.results[first], bot.results[second] = asyncio.run(send())


@then(parsers.parse('the turn of "{text}" finishes with {reason}'))
def _finishes(bot: MidTurnBot, text: str, reason: str) -> None:
    assert bot.results[text].turn_outcome.finish_reason is FinishReason[reason]


@then(parsers.parse("the lookup tool ran {times:d} time"))
@then(parsers.parse("the lookup tool ran {times:d} times"))
def _tool_ran(bot: MidTurnBot, times: int) -> None:
    assert len(bot.looked) == times


@then(parsers.parse('the answer to "{text}" is "{answer}"'))
def _answer(bot: MidTurnBot, text: str, answer: str) -> None:
    assert bot.results[text].turn_outcome.assistant_text == answer
    assert answer in bot.channel.texts


@then(parsers.parse('"{text}" is refused because a turn is still running'))
def _refused(bot: MidTurnBot, text: str) -> None:
    error = bot.results[text]
    assert isinstance(error, TurnInProgressError) and "still running" in str(error)


@then(parsers.parse('what "{text}" streamed was withdrawn, never sent as an answer'))
def _withdrawn(bot: MidTurnBot, text: str) -> None:
    (stream, *_) = bot.channel.streams
    assert stream.shown and stream.aborted is not None and stream.closed is None
    assert stream.shown not in bot.channel.texts
    assert bot.results[text].turn_outcome.assistant_text is None


def _history(bot: MidTurnBot) -> list[str]:
    assert bot.pipeline.stores is not None
    return [str(m.content) for m in asyncio.run(bot.pipeline.stores.sessions.recent(history_scope(SESSION), 20))]


@then(parsers.parse('history holds "{kept}" and not "{missing}"'))
def _history_without(bot: MidTurnBot, kept: str, missing: str) -> None:
    history = _history(bot)
    assert kept in history and missing not in history


@then(parsers.parse('history holds "{a}", "{b}" and "{c}", in that order'))
def _history_in_order(bot: MidTurnBot, a: str, b: str, c: str) -> None:
    assert _history(bot) == [a, b, c]
