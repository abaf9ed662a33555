"""Reusable pytest-bdd steps for pipeline scenarios (needs the `test` extra).

Load them with one line in your `conftest.py`, and provide an `agentloop_bot` fixture
that builds your bot around the scripted model and the recording channel:

    import pytest
    from agentloop.testing.bdd import *  # noqa: F403  (the steps and their fixtures)
    from agentloop.testing.bdd import BotUnderTest
    from systems import standard_pipeline

    @pytest.fixture
    def agentloop_bot(scripted_llm, recording_channel, tmp_path):
        pipeline = standard_pipeline(scripted_llm, recording_channel, data_dir=tmp_path)
        yield BotUnderTest(pipeline.build(), scripted_llm, recording_channel, pipeline.stores)
        pipeline.close()

Fixtures this module provides: `scripted_llm` (a fresh `ScriptedLLM`; the `Given the
model ...` steps add to its script), `recording_channel` (a `RecordingChannel`), and
`bot` (the `BotUnderTest` of the scenario, set by `Given a pipeline`; your own steps
take it as a parameter). The fixture you provide: `agentloop_bot`, returning a
`BotUnderTest`; pass `stores` for the history, memory and RAG steps. Your own `Given a
pipeline ...` variants return a `BotUnderTest` with `target_fixture="bot"`.

Steps (quoted parts, capitals and numbers are parameters):

    Given a pipeline
    Given the model replies "TEXT"
    Given the model calls the tool "NAME"
    Given the model calls the tool "NAME" with {"json": "arguments"}
    Given the model says "TEXT" and calls the tool "NAME" with {"json": "arguments"}
    Given the model streams in pieces of 5 characters
    Given the model starts replying "TEXT" but its stream is cut off after 3 pieces
    Given the model takes 2 seconds to answer
    Given the model fails with a rate limit|timeout|validation|unknown error
    Given the model returns an empty reply
    Given the channel cannot deliver
    Given the session is in org "ORG" and project "PROJECT"
    When the session is in org "ORG" and project "PROJECT"
    When the user says "TEXT"
    When an automatic task says "TEXT"
    When the user starts a new session
    When the user approves the pending call
    When the user approves the pending call again
    When the user denies the pending call saying "NOTE"
    Then the user receives "TEXT"
    Then the user receives a fallback message
    Then the user receives a voice message "TEXT"
    Then the user receives the attachment "NAME"
    Then the user receives no text
    Then the user receives nothing
    Then the user saw "TEXT" appear piece by piece
    Then the streamed message was closed with "TEXT"
    Then the streamed message was withdrawn
    Then nothing was streamed
    Then the finish reason is SUCCESS|ERROR|ITERATION_LIMIT|DEADLINE|POLICY_DENIED|PLAN_MODE|AWAITING_APPROVAL|INTERRUPTED|BUDGET_EXCEEDED
    Then the user is asked to approve the tool "NAME" with {"json": "arguments"}
    Then a failure from LLM|TOOL|SYSTEM|TRANSPORT of kind KIND is recorded
    Then a failure from the system "NAME" is recorded
    Then no failure is recorded
    Then the delivery failed with "TEXT"
    Then the assistant text is "TEXT"
    Then the model's prompt contains "TEXT"
    Then the model's prompt does not contain "TEXT"
    Then the model was told "TOOL RESULT"
    Then no tool ran
    Then the tool "NAME" ran with {"json": "arguments"}
    Then history holds the user message and "TEXT"
    Then history holds only the user message
    Then history is empty
    Then memory holds "TEXT"
    Then memory is empty
    Then the RAG index finds "TEXT" for "QUERY"
    Then the RAG index is empty

The session (`bot.session`) keeps its id and user when it moves to another org and
project: what the bot stored for one tenant chain must not reach the other (I11).

"The user receives" looks at what the last turn sent (a streamed message closed with a
text counts as that text sent); "the user saw" and "the streamed message" look at the
message the last turn streamed; "the model's prompt" is the last request the model got
(its system prompt with every section, and the messages). "The pending call" is the one the
latest turn that asked for an approval asked about; "again" decides it a second time.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import attrs
import pytest
from pytest_bdd import given, parsers, then, when

from agentloop.ports.stores import Stores
from agentloop.components import ToolExecutions
from agentloop.context import AgentContext, IncomingMessage, Session
from agentloop.errors import LlmCallError
from agentloop.loop import AgentLoop
from agentloop.messages import ChatMessage, LlmReply, LlmRequest, Role
from agentloop.outcome import FailureKind, FailureSource, FinishReason, TurnOutcome
from agentloop.scopes import DEFAULT_COMPANY, history_scope, knowledge_scope, memory_scope
from agentloop.adapters.channels.recording import RecordedStream, RecordingChannel, Sent
from agentloop.adapters.llm.scripted import ScriptedLLM


@attrs.define
class BotUnderTest:
    """A built pipeline with its scripted model, recording channel and stores (of the
    deployment `company_id`, as the pipeline was built with)."""

    loop: AgentLoop
    llm: ScriptedLLM
    channel: RecordingChannel
    stores: Stores | None = None
    session: Session = Session("bdd-session", user_id="bdd-user")
    turns: list[AgentContext] = attrs.Factory(list)
    sent_per_turn: list[list[Sent]] = attrs.Factory(list)
    streams_per_turn: list[list[RecordedStream]] = attrs.Factory(list)
    sessions_started: int = 1
    history_before: list[int] = attrs.Factory(list)
    company_id: str = DEFAULT_COMPANY

    def say(self, text: str, *, auto_mode: bool = False, metadata: dict[str, str] | None = None) -> AgentContext:
        """Run one turn and remember what it sent."""
        return self.send(IncomingMessage(text, auto_mode=auto_mode, metadata=metadata or {}))

    def decide(self, *, approved: bool, note: str | None = None) -> AgentContext:
        """Answer the call the latest turn asking for approval asked about, in a turn of its own."""
        asked = next((ctx.turn_outcome.approval for ctx in reversed(self.turns)
                      if ctx.turn_outcome is not None and ctx.turn_outcome.approval is not None), None)
        if asked is None:
            raise AssertionError("no turn asked for an approval; script a call to a tool that needs one first")
        return self.send(IncomingMessage.approval(asked.approval_id, approved=approved, note=note))

    def send(self, incoming: IncomingMessage) -> AgentContext:
        """Run one turn for `incoming` and remember what it sent."""
        before, streams_before = len(self.channel.sent), len(self.channel.streams)
        self.history_before.append(len(self.history()) if self.stores is not None else 0)
        ctx = self.loop.run_turn_sync(self.session, incoming)
        self.turns.append(ctx)
        self.sent_per_turn.append(self.channel.sent[before:])
        self.streams_per_turn.append(self.channel.streams[streams_before:])
        return ctx

    def history(self) -> tuple[ChatMessage, ...]:
        """The stored history of the current session, oldest first."""
        return asyncio.run(self.require_stores().sessions.recent(history_scope(self.session, self.company_id), 1_000_000))

    def history_added(self) -> tuple[ChatMessage, ...]:
        """What the last turn added to the session's history."""
        if not self.history_before:
            raise AssertionError("no turn has run yet; add a step like: When the user says \"hello\"")
        return self.history()[self.history_before[-1] :]

    def new_session(self) -> Session:
        """Start another conversation of the same user: later turns use a fresh session id."""
        self.sessions_started += 1
        self.session = attrs.evolve(self.session, id=f"{self.session.id.split('#')[0]}#{self.sessions_started}")
        return self.session

    @property
    def last(self) -> AgentContext:
        if not self.turns:
            raise AssertionError("no turn has run yet; add a step like: When the user says \"hello\"")
        return self.turns[-1]

    @property
    def outcome(self) -> TurnOutcome:
        outcome = self.last.turn_outcome
        if outcome is None:
            raise AssertionError(f"the last turn has no TurnOutcome; failures: {self.last.failures}")
        return outcome

    @property
    def last_sent(self) -> list[Sent]:
        return self.sent_per_turn[-1] if self.sent_per_turn else []

    @property
    def last_stream(self) -> RecordedStream:
        """The message the last turn streamed."""
        streams = self.streams_per_turn[-1] if self.streams_per_turn else []
        if len(streams) != 1:
            raise AssertionError(f"the last turn streamed {len(streams)} messages, not one: {streams!r}")
        return streams[0]

    @property
    def last_request(self) -> LlmRequest:
        """The last request the model received."""
        if not self.llm.requests:
            raise AssertionError("the model was never called")
        return self.llm.requests[-1]

    @property
    def last_prompt(self) -> str:
        """Everything the model was shown in its last request, one message per line."""
        return "\n".join(m.content or "" for m in self.last_request.messages)

    def require_stores(self) -> Stores:
        if self.stores is None:
            raise AssertionError("this bot has no stores; build BotUnderTest with stores=pipeline.stores")
        return self.stores


def _enum(enum_type: type[Any], words: str) -> Any:
    return enum_type[words.strip().upper().replace(" ", "_")]


@pytest.fixture
def scripted_llm() -> ScriptedLLM:
    """The model of the scenario; `Given the model ...` steps add to its script."""
    return ScriptedLLM()


@pytest.fixture
def recording_channel() -> RecordingChannel:
    return RecordingChannel()


@given("a pipeline", target_fixture="bot")
def given_a_pipeline(agentloop_bot: BotUnderTest) -> BotUnderTest:
    return agentloop_bot


@given(parsers.parse('the model replies "{text}"'))
def given_model_replies(scripted_llm: ScriptedLLM, text: str) -> None:
    scripted_llm.add(text)


@given(parsers.re(r'the model calls the tool "(?P<name>[^"]+)"(?: with (?P<arguments>\{.*\}))?$'))
def given_model_calls_tool(scripted_llm: ScriptedLLM, name: str, arguments: str | None) -> None:
    scripted_llm.add(ScriptedLLM.tool_call(name, json.loads(arguments) if arguments else {}))


@given(parsers.re(r'the model says "(?P<text>[^"]*)" and calls the tool "(?P<name>[^"]+)" with (?P<arguments>\{.*\})$'))
def given_model_says_and_calls_tool(scripted_llm: ScriptedLLM, text: str, name: str, arguments: str) -> None:
    scripted_llm.add(ScriptedLLM.tool_call(name, json.loads(arguments), text=text))


@given(parsers.parse("the model streams in pieces of {size:d} characters"))
def given_model_streams_in_pieces(scripted_llm: ScriptedLLM, size: int) -> None:
    scripted_llm.chunk = size


@given(parsers.parse('the model starts replying "{text}" but its stream is cut off after {pieces:d} pieces'))
def given_model_stream_cut(scripted_llm: ScriptedLLM, text: str, pieces: int) -> None:
    scripted_llm.add(ScriptedLLM.cut(text, after=pieces))


@given(parsers.parse("the model takes {seconds:g} seconds to answer"))
def given_model_is_slow(scripted_llm: ScriptedLLM, seconds: float) -> None:
    scripted_llm.latency = seconds


@given(parsers.parse("the model fails with a {kind} error"))
def given_model_fails(scripted_llm: ScriptedLLM, kind: str) -> None:
    failure_kind = _enum(FailureKind, kind)
    scripted_llm.add(LlmCallError(f"scripted {failure_kind.value} failure", kind=failure_kind))


@given("the model returns an empty reply")
def given_model_empty(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.add(LlmReply(content=""))


@given("the channel cannot deliver")
def given_channel_fails(recording_channel: RecordingChannel) -> None:
    recording_channel.fail_with()


@given(parsers.parse('the session is in org "{org}" and project "{project}"'))
@when(parsers.parse('the session is in org "{org}" and project "{project}"'))
def session_in_org(bot: BotUnderTest, org: str, project: str) -> None:
    bot.session = attrs.evolve(bot.session, org_id=org, project_id=project)


@when(parsers.parse('the user says "{text}"'))
def when_user_says(bot: BotUnderTest, text: str) -> None:
    bot.say(text)


@when(parsers.parse('an automatic task says "{text}"'))
def when_task_says(bot: BotUnderTest, text: str) -> None:
    bot.say(text, auto_mode=True)


@when("the user starts a new session")
def when_new_session(bot: BotUnderTest) -> None:
    bot.new_session()


@when("the user approves the pending call")
@when("the user approves the pending call again")
def when_user_approves(bot: BotUnderTest) -> None:
    bot.decide(approved=True)


@when(parsers.parse('the user denies the pending call saying "{note}"'))
def when_user_denies(bot: BotUnderTest, note: str) -> None:
    bot.decide(approved=False, note=note)


@then(parsers.parse('the user receives "{text}"'))
def then_user_receives(bot: BotUnderTest, text: str) -> None:
    texts = [s.text for s in bot.last_sent if s.kind == "text"]
    assert texts == [text], f"the user received {texts!r}"


@then("the user receives a fallback message")
def then_user_receives_fallback(bot: BotUnderTest) -> None:
    outcome = bot.outcome
    assert outcome.fallback, f"the outcome is not a fallback: {outcome!r}"
    response = outcome.outgoing_response
    assert response is not None and response.text
    assert [s.text for s in bot.last_sent if s.kind == "text"] == [response.text]


@then(parsers.parse('the user receives a voice message "{text}"'))
def then_user_receives_voice(bot: BotUnderTest, text: str) -> None:
    voices = [s.text for s in bot.last_sent if s.kind == "voice"]
    assert voices == [text], f"the user received voice messages {voices!r}"


@then(parsers.parse('the user receives the attachment "{name}"'))
def then_user_receives_attachment(bot: BotUnderTest, name: str) -> None:
    names = [s.attachment.name for s in bot.last_sent if s.attachment is not None]
    assert name in names, f"the user received attachments {names!r}"


@then("the user receives no text")
def then_user_receives_no_text(bot: BotUnderTest) -> None:
    assert not [s for s in bot.last_sent if s.kind == "text"], f"sent: {bot.last_sent!r}"


@then("the user receives nothing")
def then_user_receives_nothing(bot: BotUnderTest) -> None:
    assert bot.last_sent == [], f"sent: {bot.last_sent!r}"


@then(parsers.parse('the user saw "{text}" appear piece by piece'))
def then_user_saw_streamed(bot: BotUnderTest, text: str) -> None:
    stream = bot.last_stream
    assert stream.shown == text and len(stream.deltas) > 1, f"the user saw the pieces {stream.deltas!r}"


@then(parsers.parse('the streamed message was closed with "{text}"'))
def then_stream_closed(bot: BotUnderTest, text: str) -> None:
    stream = bot.last_stream
    assert (stream.closed, stream.aborted) == (text, None), stream


@then("the streamed message was withdrawn")
def then_stream_withdrawn(bot: BotUnderTest) -> None:
    stream = bot.last_stream
    assert stream.closed is None and stream.aborted, stream


@then("nothing was streamed")
def then_nothing_streamed(bot: BotUnderTest) -> None:
    assert bot.streams_per_turn and bot.streams_per_turn[-1] == [], bot.streams_per_turn


@then(parsers.parse("the finish reason is {reason}"))
def then_finish_reason(bot: BotUnderTest, reason: str) -> None:
    assert bot.outcome.finish_reason is _enum(FinishReason, reason)


@then(parsers.re(r'the user is asked to approve the tool "(?P<name>[^"]+)" with (?P<arguments>\{.*\})$'))
def then_asked_to_approve(bot: BotUnderTest, name: str, arguments: str) -> None:
    asked = bot.outcome.approval
    assert asked is not None, f"the last turn asks for no approval; it ended {bot.outcome.finish_reason}"
    assert (asked.tool, asked.arguments, asked.session_id) == (name, json.loads(arguments), bot.session.id), asked


@then(parsers.parse("a failure from {source} of kind {kind} is recorded"))
def then_failure_recorded(bot: BotUnderTest, source: str, kind: str) -> None:
    wanted = (_enum(FailureSource, source), _enum(FailureKind, kind))
    seen = [(f.source, f.kind) for f in bot.last.failures]
    assert wanted in seen, f"failures: {bot.last.failures!r}"
    assert bot.outcome.failures == bot.last.failures


@then(parsers.parse('a failure from the system "{name}" is recorded'))
def then_system_failure(bot: BotUnderTest, name: str) -> None:
    matching = [f for f in bot.last.failures if f.source is FailureSource.SYSTEM and f.component == name]
    assert len(matching) == 1, f"failures: {bot.last.failures!r}"


@then("no failure is recorded")
def then_no_failure(bot: BotUnderTest) -> None:
    assert bot.last.failures == () and bot.outcome.failures == ()


@then(parsers.parse('the delivery failed with "{message}"'))
def then_delivery_failed(bot: BotUnderTest, message: str) -> None:
    routing = bot.outcome.routing_outcome
    assert routing is not None and routing.attempted and not routing.delivered
    assert routing.error_message == message


@then(parsers.parse('the assistant text is "{text}"'))
def then_assistant_text(bot: BotUnderTest, text: str) -> None:
    assert bot.outcome.assistant_text == text


@then(parsers.parse('the model\'s prompt contains "{text}"'))
def then_prompt_contains(bot: BotUnderTest, text: str) -> None:
    assert text in bot.last_prompt, bot.last_prompt


@then(parsers.parse('the model\'s prompt does not contain "{text}"'))
def then_prompt_lacks(bot: BotUnderTest, text: str) -> None:
    assert text not in bot.last_prompt, bot.last_prompt


@then(parsers.parse('the model was told "{content}"'))
def then_model_was_told(bot: BotUnderTest, content: str) -> None:
    tool_results = [m.content for m in bot.last_request.messages if m.role is Role.TOOL]
    assert content in tool_results, tool_results


@then("no tool ran")
def then_no_tool_ran(bot: BotUnderTest) -> None:
    assert bot.last.get(ToolExecutions) is None, bot.last.get(ToolExecutions)


@then(parsers.re(r'the tool "(?P<name>[^"]+)" ran with (?P<arguments>\{.*\})$'))
def then_tool_ran_with(bot: BotUnderTest, name: str, arguments: str) -> None:
    executions = bot.last.get(ToolExecutions)
    ran = [(e.tool_name, e.arguments) for e in executions.executions] if executions is not None else []
    assert (name, json.loads(arguments)) in ran, ran


@then(parsers.parse('history holds the user message and "{text}"'))
def then_history_holds(bot: BotUnderTest, text: str) -> None:
    added = bot.history_added()
    assert added == (ChatMessage.user(bot.last.incoming.text), ChatMessage.assistant(text)), added


@then("history holds only the user message")
def then_history_only_user(bot: BotUnderTest) -> None:
    added = bot.history_added()
    assert added == (ChatMessage.user(bot.last.incoming.text),), added


@then("history is empty")
def then_history_empty(bot: BotUnderTest) -> None:
    assert bot.history() == ()


def _memory(bot: BotUnderTest) -> list[str]:
    scope = memory_scope(bot.session, bot.company_id)
    return [e.assistant_text for e in asyncio.run(bot.require_stores().memory.recent(scope, 1000))]


@then(parsers.parse('memory holds "{text}"'))
def then_memory_holds(bot: BotUnderTest, text: str) -> None:
    assert text in _memory(bot), _memory(bot)


@then("memory is empty")
def then_memory_empty(bot: BotUnderTest) -> None:
    assert _memory(bot) == []


@then(parsers.parse('the RAG index finds "{text}" for "{query}"'))
def then_rag_finds(bot: BotUnderTest, text: str, query: str) -> None:
    hits = asyncio.run(bot.require_stores().rag.search(knowledge_scope(bot.session, bot.company_id), query, 5))
    assert text in [h.text for h in hits], hits


@then("the RAG index is empty")
def then_rag_empty(bot: BotUnderTest) -> None:
    assert asyncio.run(bot.require_stores().rag.count()) == 0


__all__ = [
    "BotUnderTest",
    "recording_channel",
    "scripted_llm",
    *sorted(name for name in dict(globals()) if name.startswith("pytestbdd_")),
]
"""What `from agentloop.testing.bdd import *` brings into a conftest: the step fixtures
pytest-bdd registered above, the two fixtures, and `BotUnderTest`."""
