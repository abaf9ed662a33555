"""The OpenAI API of `agentloop serve`, driven by the official `openai` SDK against a real server on a loopback port."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from agentloop.serve import create_app
from agentloop.serve.protocols.openai.conversation import Written
from agentloop.testing.serve import served
from serve_kit import ALICE, BOB, CAROL, serve_command, settings

TESTS = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`agentloop serve` of openai_kit's bot; its URL."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    with serve_command(tmp_path_factory.mktemp("openai"), "--pipeline", "openai_kit:bot", "--rate-limit", "100000", "--burst", "1000", env=env) as run:
        yield run.url


def sdk(url: str, token: str = ALICE) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/openai/v1", api_key=token, max_retries=0)


def ask(url: str, *messages: dict[str, Any], token: str = ALICE, **options: Any) -> Any:
    return sdk(url, token).chat.completions.create(model="bot", messages=list(messages), **options)  # type: ignore[call-overload]


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_the_models_are_the_one_bot_the_server_hosts(url: str) -> None:
    assert [model.id for model in sdk(url).models.list()] == ["bot"]


def test_a_chat_completion_without_a_session_answers_after_the_messages_sent_and_names_its_new_session(url: str) -> None:
    sent = [{"role": "system", "content": "be brief"}, user("one"), {"role": "assistant", "content": "uno"}, user("two")]
    raw = sdk(url).chat.completions.with_raw_response.create(model="bot", messages=sent)  # type: ignore[arg-type]
    completion = raw.parse()
    # the history the model is shown starts at a user message: a system message before the first is kept, not shown
    assert completion.choices[0].message.content == "echo: two (after one / uno)"
    assert completion.choices[0].finish_reason == "stop"
    assert raw.headers["X-Agentloop-Session"] == completion.metadata["session_id"]  # type: ignore[attr-defined]
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens, completion.usage.total_tokens) == (12, 3, 15)


def test_two_chat_turns_of_one_session_the_second_streamed_with_its_usage(url: str) -> None:
    first = ask(url, user("one"))
    session = first.metadata["session_id"]
    chunks = list(ask(url, user("two"), metadata={"session_id": session}, stream=True, stream_options={"include_usage": True}))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "echo: two (after one / echo: one)"
    assert len([chunk for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]) > 1  # streamed in pieces
    finish = [chunk for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert [chunk.choices[0].finish_reason for chunk in finish] == ["stop"] and finish[0].metadata["session_id"] == session
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 15
    third = ask(url, user("three"), extra_headers={"X-Agentloop-Session": session})
    assert third.choices[0].message.content.startswith("echo: three (after one / echo: one / two /")


def test_responses_continue_by_previous_response_id_and_conversation_streamed_and_not(url: str) -> None:
    client = sdk(url)
    first = client.responses.create(model="bot", input="one", instructions="be brief")
    assert first.output_text == "echo: one" and first.usage is not None and first.usage.total_tokens == 15
    events = list(client.responses.create(model="bot", input="two", previous_response_id=first.id, stream=True))
    types = [event.type for event in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    completed = events[-1].response  # type: ignore[union-attr]
    assert deltas == completed.output_text == "echo: two (after one / echo: one)"
    assert completed.previous_response_id == first.id and completed.conversation == first.conversation
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert first.conversation is not None
    third = client.responses.create(model="bot", input=[user("three")], conversation=first.conversation.id)
    assert third.output_text.startswith("echo: three (after one / echo: one / two /")


def test_a_wrong_token_is_refused_with_401_in_openai_error_shape(url: str) -> None:
    with pytest.raises(openai.AuthenticationError) as refused:
        ask(url, user("hi"), token="not-a-token-anyone-was-given")
    assert refused.value.status_code == 401
    assert refused.value.body == {"message": refused.value.body["message"], "type": "authentication_error", "param": None, "code": "unauthorized"}  # type: ignore[index]


@pytest.mark.parametrize("token", [BOB, CAROL], ids=["another org", "another team of the same org and user"])
def test_another_tenants_session_is_not_found_however_it_is_named(url: str, token: str) -> None:
    first = sdk(url).responses.create(model="bot", input="our launch date is secret")
    session = first.metadata["session_id"]  # type: ignore[index]
    other = sdk(url, token)
    attempts = [
        lambda: ask(url, user("what was said?"), token=token, metadata={"session_id": session}),
        lambda: ask(url, user("what was said?"), token=token, extra_headers={"X-Agentloop-Session": session}),
        lambda: other.responses.create(model="bot", input="what was said?", previous_response_id=first.id),
        lambda: other.responses.create(model="bot", input="what was said?", conversation=first.conversation.id),  # type: ignore[union-attr]
    ]
    for attempt in attempts:
        with pytest.raises(openai.NotFoundError) as refused:
            attempt()
        assert refused.value.body["code"] == "not_found" and "launch" not in str(refused.value.body)  # type: ignore[index]
    assert "launch" in sdk(url).responses.create(model="bot", input="and?", previous_response_id=first.id).output_text


def test_an_unknown_session_is_refused_as_another_tenants_is(url: str) -> None:
    with pytest.raises(openai.NotFoundError) as refused:
        ask(url, user("hi"), metadata={"session_id": "0123.abcd"})
    assert refused.value.body["message"] == (  # type: ignore[index]
        "metadata.session_id names no session of this token; send the messages without it to start a new one"
    )


@pytest.mark.parametrize(("messages", "said"), [
    ([user("hi"), {"role": "tool", "content": "42", "tool_call_id": "call_1"}, user("and?")], "the bot runs its own tools"),
    ([user("hi"), {"role": "assistant", "content": "hello"}], "must be the user's message"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}], "images, audio and files"),
    ([], "send at least the user's message"),
    ([user("x" * 9000)], "the limit is 8000"),
])
def test_a_conversation_the_bot_cannot_take_is_refused_with_422_saying_why(url: str, messages: list[Any], said: str) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        ask(url, *messages)
    assert said in refused.value.body["message"] and refused.value.body["type"] == "invalid_request_error"  # type: ignore[index]


def test_a_model_other_than_the_bot_is_not_found(url: str) -> None:
    with pytest.raises(openai.NotFoundError) as refused:
        sdk(url).chat.completions.create(model="gpt-4o", messages=[user("hi")])  # type: ignore[list-item]
    assert refused.value.body["code"] == "model_not_found"  # type: ignore[index]


def test_a_tool_call_awaiting_approval_is_an_assistant_message_and_approve_runs_it_once(url: str) -> None:
    waiting = ask(url, user("delete a.txt"))
    found = waiting.metadata
    assert (found["finish_reason"], found["approval_tool"]) == ("awaiting_approval", "delete_file")
    assert waiting.choices[0].message.content  # the user is told what awaits approval
    session = {"session_id": found["session_id"]}
    done = ask(url, user(f"/approve {found['approval_id']}"), metadata=session)
    assert done.choices[0].message.content == "the tool said: deleted a.txt"
    with pytest.raises(openai.NotFoundError):
        ask(url, user(f"/approve {found['approval_id']}"), metadata=session)
    assert ask(url, user("delete b.txt"), metadata=session).metadata["finish_reason"] == "awaiting_approval"
    denied = ask(url, user("/deny"), metadata=session)  # the one call awaiting needs no id
    assert "denied" in denied.choices[0].message.content and denied.metadata["finish_reason"] == "success"


def test_a_token_over_its_rate_limit_gets_429_with_retry_after_in_openai_error_shape(tmp_path: Path) -> None:
    with served(create_app(settings(tmp_path, rate_burst=2, rate_per_minute=1.0))) as url:
        for _ in range(2):
            sdk(url).models.list()
        with pytest.raises(openai.RateLimitError) as refused:
            sdk(url).models.list()
        assert sdk(url, BOB).models.list().data[0].id == "bot"
    assert int(refused.value.response.headers["Retry-After"]) >= 1
    assert (refused.value.body["type"], refused.value.body["code"]) == ("rate_limit_error", "rate_limited")  # type: ignore[index]


def test_a_streamed_answer_that_restarts_goes_on_in_a_new_paragraph_and_is_never_shown_twice() -> None:
    written = Written()
    shown = [written.event("delta", {"text": "Hel"}), written.event("delta", {"text": "lo"}), written.event("text", {"text": "Hello"}),
             written.event("reset", {"reason": "retry"}), written.event("delta", {"text": "Hi"}),
             written.event("outcome", {"text": "Hi there", "failures": []})]
    assert shown == ["Hel", "lo", "", "", "\n\nHi", " there"]
