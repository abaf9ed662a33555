"""AG-UI against a real `agentloop serve` on a loopback port: every event the runs stream is validated with the
official `ag-ui-protocol` models, and its order with the protocol's framing rules (tests/agui_kit.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ag_ui.core import EventType, ResumeEntry

from agui_kit import kinds, run, run_input, said
from serve_kit import ALICE, BOB, auth, serve_command


def _env() -> dict[str, str]:
    """The environment of a serve subprocess that loads a bot of tests/agui_kit.py."""
    root = Path(__file__).resolve().parents[3]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests"), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_command(tmp_path_factory.mktemp("agui"), "--pipeline", "agui_kit:tool_bot", "--burst", "100", env=_env()) as served:
        yield served.url


def test_a_text_run_streams_the_answer_as_it_is_written_and_the_next_run_of_the_thread_continues_its_session(url: str) -> None:
    first, events = run(url, ALICE, run_input("thread-text", "hello"))
    second, again = run(url, ALICE, run_input("thread-text", "and again"))
    assert first.status_code == second.status_code == 200
    assert kinds(events)[:2] == ["RUN_STARTED", "TEXT_MESSAGE_START"] and kinds(events)[-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert kinds(events).count("TEXT_MESSAGE_CONTENT") > 1  # streamed in pieces, not sent whole
    assert said(events) == ["You said 'hello'; this is turn 1 of this thread."]
    assert said(again) == ["You said 'and again'; this is turn 2 of this thread."]
    assert events[0].thread_id == "thread-text" and events[-1].outcome.type == "success"  # type: ignore[attr-defined]
    session = events[0].metadata["agentloop"]["sessionId"]  # type: ignore[attr-defined]
    assert again[0].metadata == events[0].metadata  # type: ignore[attr-defined]
    history = httpx.get(f"{url}/v1/sessions/{session}/messages", headers=auth(ALICE)).json()["messages"]
    assert [m["text"] for m in history if m["role"] == "user"] == ["hello", "and again"]


def test_a_session_id_as_thread_id_continues_that_session_from_the_native_api(url: str) -> None:
    session = httpx.post(f"{url}/v1/sessions", headers=auth(ALICE)).json()["session_id"]
    httpx.post(f"{url}/v1/sessions/{session}/messages", json={"text": "first"}, headers=auth(ALICE), timeout=30)
    _, events = run(url, ALICE, run_input(session, "second"))
    assert said(events) == ["You said 'second'; this is turn 2 of this thread."]
    assert events[0].metadata["agentloop"]["sessionId"] == session  # type: ignore[attr-defined]


def test_a_tool_run_streams_the_call_its_arguments_and_its_result_before_the_answer(url: str) -> None:
    _, events = run(url, ALICE, run_input("thread-tool", "weather in Oslo"))
    streamed = [kind for kind in kinds(events) if kind != "TEXT_MESSAGE_CONTENT"]
    assert streamed == [
        "RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_END", "RUN_FINISHED",
    ]
    start, arguments, _, result = events[1:5]
    assert start.tool_call_name == "weather"  # type: ignore[attr-defined]
    assert arguments.delta == '{"city": "Oslo"}'  # type: ignore[attr-defined]
    assert result.tool_call_id == start.tool_call_id and result.content == "sunny in Oslo"  # type: ignore[attr-defined]
    assert said(events) == ["The tool said: sunny in Oslo."]


def test_an_approval_ends_the_run_with_an_interrupt_and_the_resuming_run_runs_the_tool_once(url: str) -> None:
    _, asked = run(url, ALICE, run_input("thread-approval", "delete notes.txt"))
    finished = asked[-1]
    assert finished.type is EventType.RUN_FINISHED and finished.outcome.type == "interrupt"  # type: ignore[attr-defined]
    interrupt = finished.outcome.interrupts[0]  # type: ignore[attr-defined]
    pending_call = [event for event in asked if event.type is EventType.TOOL_CALL_START]
    assert [call.tool_call_name for call in pending_call] == ["delete_file"]  # type: ignore[attr-defined]
    assert interrupt.tool_call_id == pending_call[0].tool_call_id == interrupt.id  # type: ignore[attr-defined]
    assert interrupt.reason == "tool_approval" and interrupt.response_schema["required"] == ["approved"]
    assert "TOOL_CALL_RESULT" not in kinds(asked)
    resume = [ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload={"approved": True})]
    _, resumed = run(url, ALICE, run_input("thread-approval", resume=resume))
    results = [event.content for event in resumed if event.type is EventType.TOOL_CALL_RESULT]  # type: ignore[attr-defined]
    assert results == ["deleted notes.txt"]
    assert said(resumed)[-1] == "The tool said: deleted notes.txt." and resumed[-1].outcome.type == "success"  # type: ignore[attr-defined]
    again, none = run(url, ALICE, run_input("thread-approval", resume=resume))
    assert again.status_code == 404 and none == [] and again.json()["error"]["code"] == "not_found"


def test_a_denied_approval_runs_no_tool_and_the_model_is_told(url: str) -> None:
    _, asked = run(url, ALICE, run_input("thread-deny", "delete secrets.txt"))
    interrupt = asked[-1].outcome.interrupts[0]  # type: ignore[attr-defined]
    resume = [ResumeEntry(interrupt_id=interrupt.id, status="cancelled")]
    _, resumed = run(url, ALICE, run_input("thread-deny", resume=resume))
    assert "TOOL_CALL_RESULT" not in kinds(resumed) and resumed[-1].type is EventType.RUN_FINISHED
    assert said(resumed) == ["The tool said: the user denied this call: the user cancelled this call."]


def test_a_run_without_a_valid_token_is_refused_with_401_before_any_event(url: str) -> None:
    anonymous, none = run(url, None, run_input("thread-401", "hi"))
    wrong, nothing = run(url, "not-a-token-of-this-server", run_input("thread-401", "hi"))
    assert (anonymous.status_code, wrong.status_code) == (401, 401) and none == nothing == []
    assert anonymous.json()["error"]["code"] == "unauthorized"


def test_another_tenants_thread_is_not_found_and_the_same_thread_name_is_a_session_of_ones_own(url: str) -> None:
    _, alices = run(url, ALICE, run_input("thread-shared-name", "mine"))
    alice_session = alices[0].metadata["agentloop"]["sessionId"]  # type: ignore[attr-defined]
    taken, none = run(url, BOB, run_input(alice_session, "let me in"))
    unknown, nothing = run(url, ALICE, run_input("0" * 24 + "." + "0" * 32, "hi"))
    _, bobs = run(url, BOB, run_input("thread-shared-name", "mine too"))
    assert (taken.status_code, unknown.status_code) == (404, 404) and none == nothing == []
    assert taken.json() == {"error": {"code": "not_found", "message": taken.json()["error"]["message"]}}
    assert bobs[0].metadata["agentloop"]["sessionId"] != alice_session  # type: ignore[attr-defined]
    assert said(bobs) == ["You said 'mine too'; this is turn 1 of this thread."]


def test_a_run_that_is_no_run_agent_input_or_ends_without_a_user_message_is_refused_with_422(url: str) -> None:
    shapeless, _ = run(url, ALICE, {"threadId": "thread-422", "messages": "hi"})
    no_user, _ = run(url, ALICE, run_input("thread-422"))
    assert (shapeless.status_code, no_user.status_code) == (422, 422)
    assert "runId" in shapeless.json()["error"]["message"] or "run_id" in shapeless.json()["error"]["message"]
    assert "user" in no_user.json()["error"]["message"]


def test_an_answer_withdrawn_mid_stream_is_ended_replaced_and_left_out_of_the_thread_by_a_snapshot(tmp_path: Path) -> None:
    with serve_command(tmp_path, "--pipeline", "agui_kit:falling_back_bot", env=_env()) as served:
        _, events = run(served.url, ALICE, run_input("thread-reset", "hello"))
    assert said(events) == ["I was saying so", "The second model's answer."]
    snapshot = [event for event in events if event.type is EventType.MESSAGES_SNAPSHOT]
    assert len(snapshot) == 1 and kinds(events)[-2:] == ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    kept = [(message.role, message.content) for message in snapshot[0].messages]  # type: ignore[attr-defined]
    assert kept == [("user", "hello"), ("assistant", "The second model's answer.")]
