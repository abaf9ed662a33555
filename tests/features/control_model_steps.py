"""Steps of control.feature for a model that fails (fallback to a second model) and for a long session."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from pytest_bdd import given, parsers, then, when

from agentloop import ContextBudget, EstimatedTokens, IncomingMessage, history_scope
from agentloop.adapters.llm.fallback import FallbackLLM
from agentloop.adapters.llm.http import RetryPolicy
from agentloop.adapters.llm.openai import OpenAICompatibleLLM
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.bdd import BotUnderTest
from agentloop.testing.http import ScriptedServer, streamed_completion
from systems import StandardOptions, StandardPipeline, standard_pipeline

from compaction_kit import ForgetfulBot


@pytest.fixture
def model_pipelines() -> Iterator[list[StandardPipeline]]:
    """The pipelines these steps build, closed when the scenario ends."""
    opened: list[StandardPipeline] = []
    yield opened
    for pipeline in opened:
        pipeline.close()


@pytest.fixture
def model_servers() -> Iterator[tuple[ScriptedServer, ScriptedServer]]:
    """Two real OpenAI-compatible servers on 127.0.0.1, for a bot's first and second model."""
    with ExitStack() as stack:
        yield stack.enter_context(ScriptedServer()), stack.enter_context(ScriptedServer())


def _bot(llm: FallbackLLM, first: ScriptedLLM | FallbackLLM, opened: list[StandardPipeline], data_dir: Path,
         options: StandardOptions | None = None) -> BotUnderTest:
    channel = RecordingChannel()
    pipeline = standard_pipeline(llm, channel, data_dir=data_dir, options=options or StandardOptions())
    opened.append(pipeline)
    return BotUnderTest(pipeline.build(), first, channel, pipeline.stores)


# ---- A model that fails ----


@given(parsers.parse('a bot whose first model server is overloaded and answers 503, and whose second answers "{text}"'),
       target_fixture="bot")
def _over_http(text: str, model_servers: tuple[ScriptedServer, ScriptedServer], model_pipelines: list[StandardPipeline],
               tmp_path: Path) -> BotUnderTest:
    down, up = model_servers
    down.reply(503, {"error": {"message": "overloaded"}})
    up.stream(streamed_completion(text))
    llm = FallbackLLM([OpenAICompatibleLLM(down.url, "big", retry=RetryPolicy(max_retries=0)), OpenAICompatibleLLM(up.url, "spare")])
    return _bot(llm, llm, model_pipelines, tmp_path)


@then(parsers.parse('the first model server was asked for "{first}" once and the second for "{second}" once'))
def _servers_asked(model_servers: tuple[ScriptedServer, ScriptedServer], first: str, second: str) -> None:
    down, up = model_servers
    assert [r["body"]["model"] for r in down.requests] == [first]
    assert [r["body"]["model"] for r in up.requests] == [second]


@given(parsers.parse('a bot with two models, "{first}" then "{second}", where "{answering}" answers "{text}"'), target_fixture="bot")
def _two_models(first: str, second: str, answering: str, text: str, model_pipelines: list[StandardPipeline], tmp_path: Path) -> BotUnderTest:
    assert answering == second, "the second model is the one that answers when the first fails"
    failing = ScriptedLLM(model=first)
    return _bot(FallbackLLM([failing, ScriptedLLM([text], model=second, chunk=3)]), failing, model_pipelines, tmp_path)


@given(parsers.parse('"{name}" breaks before it has streamed anything'))
def _breaks_at_once(bot: BotUnderTest, name: str) -> None:
    assert bot.llm.model == name
    bot.llm.add(ScriptedLLM.cut("never shown", after=0))


@given(parsers.parse('"{name}" streams "{text}" in pieces of {size:d} characters and breaks after the first piece'))
def _breaks_after_a_piece(bot: BotUnderTest, name: str, text: str, size: int) -> None:
    assert bot.llm.model == name
    bot.llm.chunk = size
    bot.llm.add(ScriptedLLM.cut(text, after=1))


@then(parsers.parse('the user saw "{text}" in a message that was then withdrawn'))
def _saw_then_withdrawn(bot: BotUnderTest, text: str) -> None:
    withdrawn = [s for s in bot.streams_per_turn[-1] if s.aborted is not None]
    assert [s.shown for s in withdrawn] == [text] and withdrawn[0].closed is None, bot.streams_per_turn[-1]
    assert text not in [s.text for s in bot.last_sent]


@then(parsers.parse('the turn records "{message}"'))
def _records(bot: BotUnderTest, message: str) -> None:
    assert [f.message for f in bot.outcome.failures] == [message], bot.outcome.failures


# ---- A long session ----


@pytest.fixture
def forgetful_bot() -> ForgetfulBot:
    """The long session's scripted model and summariser; it records each prompt's size."""
    return ForgetfulBot(EstimatedTokens())


@given(parsers.parse("a bot with a context window of {window:d} tokens, {reserve:d} of them kept for the answer"), target_fixture="bot")
def _budgeted(window: int, reserve: int, forgetful_bot: ForgetfulBot, model_pipelines: list[StandardPipeline], tmp_path: Path) -> BotUnderTest:
    options = StandardOptions(context_budget=ContextBudget(window=window, answer_reserve=reserve), token_counter=forgetful_bot.counter,
                              history_window=60, memory_limit=0, rag_k=0)
    model, channel = ScriptedLLM(forgetful_bot.reply), RecordingChannel()
    pipeline = standard_pipeline(model, channel, data_dir=tmp_path, options=options)
    model_pipelines.append(pipeline)
    return BotUnderTest(pipeline.build(), model, channel, pipeline.stores)


@when(parsers.parse('the user chats for {turns:d} turns, saying "{fact}" at turn {at:d}'))
def _chats(bot: BotUnderTest, turns: int, fact: str, at: int) -> None:
    for turn in range(1, turns + 1):
        text = fact if turn == at else f"Turn {turn}: " + "some chatter about the weather " * (turn % 9)
        bot.loop.run_turn_sync(bot.session, IncomingMessage(text))


@then(parsers.parse("no prompt of the session was over {tokens:d} tokens"))
def _within_budget(forgetful_bot: ForgetfulBot, tokens: int) -> None:
    assert len(forgetful_bot.sizes) > 2000 and max(forgetful_bot.sizes) <= tokens


@then(parsers.parse('every version of the session\'s summary still says "{fact}"'))
def _summaries_keep(bot: BotUnderTest, forgetful_bot: ForgetfulBot, fact: str) -> None:
    versions = asyncio.run(bot.require_stores().summaries.versions(history_scope(bot.session)))
    assert len(versions) > 10 and [v.version for v in versions] == list(range(1, len(versions) + 1))
    assert all(fact in v.text for v in versions)
