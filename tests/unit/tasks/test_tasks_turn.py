"""Tests for agentloop.tasks.turn: the reply format, the prompt and the retrieval contract."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import TurnPolicy
from agentloop.testing.strategies import task_notes
from agentloop.tasks import (
    REPLY_FORMAT,
    SubtaskRequest,
    TaskFailureReason,
    TaskOutput,
    TaskResult,
    TaskStatus,
    TaskTurn,
    format_reply,
    parse_reply,
)



def test_a_plain_reply_is_complete_with_no_notes() -> None:
    assert parse_reply("Just the answer.") == TaskResult("Just the answer.")


def test_a_reply_block_carries_status_notes_and_subtask() -> None:
    request = SubtaskRequest(template="lookup", inputs={"q": "cats"})
    text = format_reply("Need data", status=TaskStatus.CONTINUATION, notes={"k": [1, 2]}, subtask=request)
    assert parse_reply(text) == TaskResult("Need data", TaskStatus.CONTINUATION, {"k": [1, 2]}, subtask=request)


def test_a_failed_reply_keeps_its_reason() -> None:
    result = parse_reply(format_reply("partial", status=TaskStatus.FAILED, reason="no access"))
    assert (result.status, result.reason, result.detail) == (
        TaskStatus.FAILED,
        TaskFailureReason.TASK_REPORTED_FAILURE,
        "no access",
    )


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        (None, "the turn produced no assistant text"),
        ("x\n```task-result\n{}\n", "must end the reply and be closed"),
        ("x\n```task-result\nnot json\n```", "is not JSON"),
        ("x\n```task-result\n[1]\n```", "must hold a JSON object"),
        ('x\n```task-result\n{"status": "DONE"}\n```', "status must be COMPLETE, CONTINUATION or FAILED, not 'DONE'"),
        ('x\n```task-result\n{"notes": "text"}\n```', "notes must be a JSON object"),
        ('x\n```task-result\n{"mood": 1}\n```', "unknown key(s) 'mood'"),
        ('x\n```task-result\n{"status": "CONTINUATION"}\n```', "status CONTINUATION needs a subtask request"),
        ('x\n```task-result\n{"subtask": {"template": "a"}}\n```', "only be requested with status CONTINUATION"),
        (
            'x\n```task-result\n{"status": "CONTINUATION", "subtask": {"template": "a", "description": "b"}}\n```',
            'exactly one of "template" or "description"',
        ),
        (
            'x\n```task-result\n{"status": "CONTINUATION", "subtask": {"template": "a", "inputs": {"n": 1}}}\n```',
            "inputs must map names to strings",
        ),
    ],
)
def test_a_malformed_reply_is_a_failed_result_saying_why(text: str | None, detail: str) -> None:
    result = parse_reply(text)
    assert result.status is TaskStatus.FAILED
    assert result.reason is TaskFailureReason.OUTPUT_FORMAT_FAILURE
    assert result.detail is not None and detail in result.detail


@settings(max_examples=100, deadline=None)
@given(content=st.text().map(str.rstrip), notes=task_notes)
def test_notes_survive_the_reply_format_unchanged(content: str, notes: dict[str, object]) -> None:
    """I10: whatever notes a task writes come back from parse_reply exactly."""
    result = parse_reply(format_reply(content, notes=notes))
    assert result.status is TaskStatus.COMPLETE
    assert result.notes == notes and result.content == content


def test_the_prompt_orders_instruction_then_sections() -> None:
    when = datetime(2026, 1, 1, tzinfo=UTC)
    turn = TaskTurn(
        task_name="t",
        instruction="Write it",
        context={"conversation": "hi"},
        history=(TaskOutput("step-1", None, {"a": 1}, when),),
        subtask_results=(TaskOutput("lookup", "found", {}, when),),
        previous_notes="## Attempt 1 — a (t)\nTurns: 1 | Commits: 0",
    )
    assert turn.render() == (
        "Write it\n\n"
        "## Inherited Context\n### conversation\nhi\n\n"
        '## Previous Steps\n### step-1\nNotes: {"a": 1}\n\n'
        "## Subtask Results\n### lookup\nNotes: {}\nOutput:\nfound\n\n"
        "## Previous Agent Notes\n## Attempt 1 — a (t)\nTurns: 1 | Commits: 0\n\n"
        f"## Reply Format\n{REPLY_FORMAT}"
    )


def test_a_task_turn_is_never_stored_and_retrieves_only_with_fresh_context() -> None:
    assert TaskTurn("t", "x", fresh_context=True).policy == TurnPolicy(fresh_retrieval=True, persist=False)
    assert TaskTurn("t", "x", fresh_context=False).policy == TurnPolicy(fresh_retrieval=False, persist=False)
