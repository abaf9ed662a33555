"""FallbackLLM: which failures move a call to the next model, the circuit breaker, streams
that fail before and after their first delta, and a turn over two real HTTP servers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentloop import (
    ChatMessage, FailureKind, FailureSource, FinishReason, IncomingMessage, LlmCallError, LlmReply, LlmRequest,
    ModelSwitched, Session, TextDelta, TurnOutcome, collect,
)
from agentloop.adapters.llm.fallback import FallbackLLM, FallbackOn
from agentloop.adapters.llm.http import RetryPolicy
from agentloop.adapters.llm.openai import OpenAICompatibleLLM
from agentloop.errors import ApiKeyRefusedError, EndpointUnreachableError, ModelServerError
from agentloop.testing import FakeClock, RecordingChannel, ScriptedLLM
from agentloop.testing.http import ScriptedServer, free_port, streamed_completion
from systems import standard_pipeline

HELLO = LlmRequest((ChatMessage.user("hi"),), model="the-bots-model", time_left=10.0)


def server_error(status: int) -> ModelServerError:
    return ModelServerError(f"the model server failed (HTTP {status})", status=status, kind=FailureKind.UNKNOWN, retryable=True)


def events(llm: FallbackLLM, request: LlmRequest = HELLO) -> list[Any]:
    async def read() -> list[Any]:
        return [event async for event in llm.stream(request)]

    return asyncio.run(read())


def test_a_503_moves_the_call_to_the_next_model_which_answers_as_itself() -> None:
    first, second = ScriptedLLM([server_error(503)], model="big"), ScriptedLLM(["hello"], model="small")
    reply = asyncio.run(FallbackLLM([first, second]).complete(HELLO))
    assert (reply.content, reply.model) == ("hello", "small")
    assert [r.model for r in first.requests + second.requests] == [None, None]


@pytest.mark.parametrize("error", [
    LlmCallError("cannot reach the model server", kind=FailureKind.UNKNOWN, retryable=True),
    LlmCallError("the model server did not answer in time", kind=FailureKind.TIMEOUT, retryable=True),
    ModelServerError("rate limited (HTTP 429)", status=429, kind=FailureKind.RATE_LIMIT, retryable=True),
    ModelServerError("model 'big' not found (HTTP 404)", status=404, kind=FailureKind.VALIDATION),
    server_error(500),
], ids=["connection", "timeout", "429", "unknown model", "500"])
def test_outages_rate_limits_and_an_unknown_model_move_on_by_default(error: LlmCallError) -> None:
    reply = asyncio.run(FallbackLLM([ScriptedLLM([error]), ScriptedLLM(["hello"], model="small")]).complete(HELLO))
    assert reply.model == "small"


@pytest.mark.parametrize("error", [
    ModelServerError("the model server refused the request (HTTP 400)", status=400, kind=FailureKind.VALIDATION),
    ModelServerError("the model server refused the request (HTTP 401)", status=401, kind=FailureKind.VALIDATION),
    LlmCallError("no time was left to call the model server before the deadline", kind=FailureKind.TIMEOUT),
], ids=["400", "401", "deadline"])
def test_a_wrong_request_or_key_fails_at_once_without_asking_the_next_model(error: LlmCallError) -> None:
    second = ScriptedLLM(["never"])
    with pytest.raises(LlmCallError) as raised:
        asyncio.run(FallbackLLM([ScriptedLLM([error]), second]).complete(HELLO))
    assert raised.value is error and second.requests == []


def test_the_errors_that_move_on_are_configurable() -> None:
    only_5xx = FallbackOn(statuses=frozenset(range(500, 600)), connection_errors=False)
    assert only_5xx(server_error(502)) and not only_5xx(ModelServerError("429", status=429, kind=FailureKind.RATE_LIMIT))
    assert not only_5xx(LlmCallError("cannot reach", kind=FailureKind.UNKNOWN, retryable=True))
    llm = FallbackLLM([ScriptedLLM([LlmCallError("cannot reach", kind=FailureKind.UNKNOWN, retryable=True)]), ScriptedLLM(["x"])],
                      fall_back_on=only_5xx)
    with pytest.raises(LlmCallError, match="cannot reach"):
        asyncio.run(llm.complete(HELLO))


def test_when_the_last_model_fails_too_its_error_is_raised() -> None:
    with pytest.raises(ModelServerError) as raised:
        asyncio.run(FallbackLLM([ScriptedLLM([server_error(503)]), ScriptedLLM([server_error(502)])]).complete(HELLO))
    assert raised.value.status == 502


def test_a_model_that_keeps_failing_rests_for_its_cool_down_then_is_tried_again() -> None:
    clock = FakeClock()
    first = ScriptedLLM([server_error(503), server_error(503), "back"], model="big")
    second = ScriptedLLM(["one", "two", "three"], model="small")
    llm = FallbackLLM([first, second], failures_to_rest=2, rest=30.0, clock=clock)
    assert [asyncio.run(llm.complete(HELLO)).content for _ in range(3)] == ["one", "two", "three"]
    assert len(first.requests) == 2 and llm.resting() == ("big",)  # the third call skipped it
    clock.advance(29.0)
    assert llm.resting() == ("big",)
    clock.advance(1.0)
    assert llm.resting() == () and asyncio.run(llm.complete(HELLO)).content == "back"


def test_a_success_resets_the_count_of_consecutive_failures() -> None:
    first = ScriptedLLM([server_error(503), "fine", server_error(503), "fine again"], model="big")
    llm = FallbackLLM([first, ScriptedLLM(["spare"] * 2, model="small")], failures_to_rest=2, clock=FakeClock())
    assert [asyncio.run(llm.complete(HELLO)).content for _ in range(4)] == ["spare", "fine", "spare", "fine again"]
    assert llm.resting() == ()


def test_when_every_model_rests_a_call_fails_at_once_and_may_be_tried_later() -> None:
    clock = FakeClock()
    llm = FallbackLLM([ScriptedLLM([server_error(503)], model="a"), ScriptedLLM([server_error(503)], model="b")],
                      failures_to_rest=1, rest=60.0, clock=clock)
    with pytest.raises(ModelServerError):
        asyncio.run(llm.complete(HELLO))
    clock.advance(20.0)
    with pytest.raises(LlmCallError) as raised:
        asyncio.run(llm.complete(HELLO))
    assert raised.value.retryable and str(raised.value) == (
        "every model failed 1 times in a row and is resting ('a', 'b'); the first is tried again in 40s"
    )


def test_a_stream_that_fails_before_its_first_delta_moves_on_with_nothing_to_withdraw() -> None:
    first = ScriptedLLM([ScriptedLLM.cut("never shown", after=0)], model="big")
    got = events(FallbackLLM([first, ScriptedLLM(["hello"], model="small", chunk=3)]))
    switched = got[0]
    assert isinstance(switched, ModelSwitched)
    assert (switched.failed, switched.next_model, switched.withdrawn, switched.kind) == ("big", "small", False, FailureKind.UNKNOWN)
    assert [e.text for e in got if isinstance(e, TextDelta)] == ["hel", "lo"]
    assert got[-1].reply.model == "small"


def test_a_stream_that_fails_after_a_delta_is_withdrawn_and_the_next_model_answers_whole() -> None:
    first = ScriptedLLM([ScriptedLLM.cut("half an answer", after=1)], model="big", chunk=5)
    got = events(FallbackLLM([first, ScriptedLLM(["hello"], model="small")]))
    assert [type(e).__name__ for e in got] == ["TextDelta", "ModelSwitched", "TextDelta", "Finished"]
    assert got[1].withdrawn and got[1].message.startswith(
        "model 'big' failed, so 'small' was asked instead; what 'big' had streamed was withdrawn: the connection"
    )

    async def collected() -> LlmReply:
        return await collect(FallbackLLM([ScriptedLLM([ScriptedLLM.cut("half", after=1)], chunk=2), ScriptedLLM(["hello"])]).stream(HELLO))

    assert asyncio.run(collected()).content == "hello"


def test_each_model_gets_the_time_the_earlier_ones_left() -> None:
    clock = FakeClock()

    def slow_failure(request: LlmRequest) -> BaseException:
        clock.advance(4.0)
        return server_error(503)

    second = ScriptedLLM(["in time"])
    asyncio.run(FallbackLLM([ScriptedLLM(slow_failure), second], clock=clock).complete(HELLO))
    assert second.requests[0].time_left == 6.0


def test_a_turn_over_http_falls_back_to_a_second_server_when_the_first_answers_503(tmp_path: Path) -> None:
    with ScriptedServer() as down, ScriptedServer() as up:
        down.reply(503, {"error": {"message": "overloaded"}})
        up.stream(streamed_completion("Hello from the spare."))
        no_retries = RetryPolicy(max_retries=0)
        llm = FallbackLLM([OpenAICompatibleLLM(down.url, "big", retry=no_retries), OpenAICompatibleLLM(up.url, "spare")])
        channel = RecordingChannel()

        async def turn() -> Any:
            with standard_pipeline(llm, channel, data_dir=tmp_path) as pipeline:
                ctx = await pipeline.build().run_turn(Session("s", user_id="u"), IncomingMessage("hi"))
                return ctx.require(TurnOutcome)

        outcome = asyncio.run(turn())
        assert [r["body"]["model"] for r in down.requests + up.requests] == ["big", "spare"]
    assert outcome.finish_reason is FinishReason.SUCCESS and outcome.assistant_text == "Hello from the spare."
    assert outcome.model == "served-model"  # what the answering server said it is
    assert channel.texts == ["Hello from the spare."]
    assert [(f.source, f.message) for f in outcome.failures] == [(
        FailureSource.LLM,
        "model 'big' failed, so 'spare' was asked instead: the model server failed (HTTP 503): overloaded",
    )]


def test_the_start_up_check_raises_a_refused_key_and_an_unreachable_server_only_when_none_answers() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/v1"
    with ScriptedServer() as server:
        FallbackLLM([OpenAICompatibleLLM(nowhere, "big"), OpenAICompatibleLLM(server.url, "small"), ScriptedLLM()]).check()
        with pytest.raises(EndpointUnreachableError):
            FallbackLLM([OpenAICompatibleLLM(nowhere, "big"), ScriptedLLM()]).check()
        server.models_status = 401
        with pytest.raises(ApiKeyRefusedError):
            FallbackLLM([OpenAICompatibleLLM(server.url, "big"), ScriptedLLM()]).check()


def test_a_fallbacks_context_window_is_the_smallest_its_models_have() -> None:
    """A prompt must fit whichever model answers: the smallest window known, None when none is known."""
    big, small = OpenAICompatibleLLM("http://127.0.0.1:9/v1", "big", context_window=128_000), ScriptedLLM(["hi"])
    assert FallbackLLM([big, small]).context_window == 128_000
    assert FallbackLLM([big, OpenAICompatibleLLM("http://127.0.0.1:9/v1", "s", context_window=8_192)]).context_window == 8_192
    assert FallbackLLM([small]).context_window is None
