"""`agentloop chat --mid-turn` at a terminal: a line typed while a turn runs is sent at once."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from agentloop.testing.http import ScriptedServer, completion, streamed_completion

REFUSED = ("agentloop: a turn of this session is still running, so this message was not sent (--mid-turn reject); "
           "send it again once the answer is in")


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


def spawn_chat(server: ScriptedServer, cwd: Path, policy: str) -> pexpect.spawn:
    """`agentloop chat --mid-turn policy` on `server` in a pseudo-terminal, as a user at a terminal runs it."""
    script = shutil.which("agentloop")
    assert script is not None
    environment = {k: v for k, v in os.environ.items() if k not in ("AGENTLOOP_API_KEY", "OPENAI_API_KEY")}
    argv = ["chat", "--base-url", server.url, "--model", "tiny", "--data-dir", "data", "--mid-turn", policy]
    return pexpect.spawn(script, argv, cwd=str(cwd), env=environment, encoding="utf-8", timeout=10)


def type_while_the_model_thinks(chat: pexpect.spawn, server: ScriptedServer, first: str, second: str) -> None:
    """Send `first`, and `second` once the model server holds the first turn's request."""
    chat.expect_exact("you> ")
    chat.sendline(first)
    chat.expect_exact("waiting for the model")
    asked = time.monotonic() + 10
    while not server.requests and time.monotonic() < asked:
        time.sleep(0.02)
    assert server.requests, "the first turn never asked the model"
    chat.sendline(second)


def leave(chat: pexpect.spawn) -> None:
    """Quit at the prompt once it is back."""
    chat.expect_exact("you> ")
    chat.sendline("/quit")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0


def user_messages(request: dict[str, object]) -> list[object]:
    body = request["body"]
    assert isinstance(body, dict)
    return [message["content"] for message in body["messages"] if message["role"] == "user"]


def test_reject_refuses_a_line_typed_mid_turn_and_the_first_answer_still_comes(server: ScriptedServer, tmp_path: Path) -> None:
    """chat read the next line only after the turn ended, so --mid-turn reject could never refuse one."""
    server.stream(streamed_completion("Lisbon is lovely."), delay=1.5)
    chat = spawn_chat(server, tmp_path, "reject")
    type_while_the_model_thinks(chat, server, "where should I go?", "and when?")
    chat.expect_exact(REFUSED)
    chat.expect_exact("bot> Lisbon is lovely.")
    leave(chat)
    assert len(server.requests) == 1 and "and when?" not in user_messages(server.requests[0])


def test_interrupt_stops_the_running_turn_and_answers_the_new_line_with_both_in_history(
    server: ScriptedServer, tmp_path: Path
) -> None:
    server.stream(streamed_completion(tool_calls=[("call_1", "weather", '{"city": "Lisbon"}')]), delay=1.5)
    server.reply(body=completion("Porto, in May."))
    chat = spawn_chat(server, tmp_path, "interrupt")
    type_while_the_model_thinks(chat, server, "where should I go?", "actually, Portugal in spring?")
    chat.expect_exact("bot> I stopped this answer to read your newer message.")
    chat.expect_exact("bot> Porto, in May.")
    leave(chat)
    assert len(server.requests) == 2
    assert user_messages(server.requests[1])[-2:] == ["where should I go?", "actually, Portugal in spring?"]


def test_queue_answers_a_line_typed_mid_turn_after_the_running_turn(server: ScriptedServer, tmp_path: Path) -> None:
    server.stream(streamed_completion("Lisbon is lovely."), delay=1.5)
    server.stream(streamed_completion("In May."))
    chat = spawn_chat(server, tmp_path, "queue")
    type_while_the_model_thinks(chat, server, "where should I go?", "and when?")
    chat.expect_exact("bot> Lisbon is lovely.")
    chat.expect_exact("bot> In May.")
    assert "you> " not in (chat.before or ""), "the prompt showed while the queued turn waited"
    leave(chat)
    assert len(server.requests) == 2
    body = server.requests[1]["body"]
    assert isinstance(body, dict)
    assert [message["content"] for message in body["messages"]][-3:] == ["where should I go?", "Lisbon is lovely.", "and when?"]
