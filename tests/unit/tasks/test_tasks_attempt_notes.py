"""Tests for agentloop.tasks.attempt_notes: ids, sections, truncation, read and remove."""

from __future__ import annotations

from pathlib import Path

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop.adapters import FileAttemptNotes
from agentloop.tasks.errors import InvalidTaskIdError
from agentloop.testing import FakeClock
from agentloop.tasks import AttemptNotes, count_attempts, format_attempt, tail, validate_task_id


@pytest.mark.parametrize("task_id", ["", "..", "../x", "a/b", "a\\b", "a..b", ".hidden", "-flag", "a\x00b", "x" * 129, "a b"])
def test_unsafe_task_ids_are_refused(task_id: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidTaskIdError, match="no path separators and no '..'"):
        validate_task_id(task_id)
    with pytest.raises(InvalidTaskIdError):
        asyncio.run(AttemptNotes(FileAttemptNotes(tmp_path)).save(task_id, agent="a", output="x", turns=1))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("task_id", ["42", "TASK-42", "fix_login.v2", "x" * 128])
def test_ordinary_task_ids_are_accepted(task_id: str) -> None:
    assert validate_task_id(task_id) == task_id


def test_tail_keeps_short_output_and_cuts_long_output_after_a_marker() -> None:
    assert tail("short") == "short"
    cut = tail("a" * 1000 + "b" * 3000)
    assert cut == "[... output truncated: showing the last 3000 of 4000 characters ...]\n" + "b" * 3000


def test_attempts_are_appended_numbered_and_read_back(tmp_path: Path) -> None:
    clock = FakeClock()
    notes = AttemptNotes(FileAttemptNotes(tmp_path / "notes"), clock=clock)
    assert asyncio.run(notes.read("t1")) is None
    assert asyncio.run(notes.save("t1", agent="impl-agent-1", output="first try", turns=100, commits=0)) == 1
    clock.advance(60)
    assert asyncio.run(notes.save("t1", agent="impl-agent-2", output="second try", turns=3, commits=2)) == 2
    assert asyncio.run(notes.read("t1")) == (
        "## Attempt 1 — impl-agent-1 (2026-01-01T00:00:00+00:00)\nTurns: 100 | Commits: 0\n\n```\nfirst try\n```\n\n"
        "## Attempt 2 — impl-agent-2 (2026-01-01T00:01:00+00:00)\nTurns: 3 | Commits: 2\n\n```\nsecond try\n```\n\n"
    )
    assert (tmp_path / "notes" / "TASK-t1.md").read_text(encoding="utf-8") == asyncio.run(notes.read("t1")), "the embedded layout"


def test_remove_deletes_the_notes_and_is_a_no_op_without_them(tmp_path: Path) -> None:
    notes = AttemptNotes(FileAttemptNotes(tmp_path))
    asyncio.run(notes.save("t1", agent="a", output="x", turns=1))
    assert asyncio.run(notes.remove("t1")) is True
    assert asyncio.run(notes.read("t1")) is None and list(tmp_path.iterdir()) == []
    assert asyncio.run(notes.remove("t1")) is False


def test_an_agent_name_must_be_one_line(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="one non-empty line"):
        asyncio.run(AttemptNotes(FileAttemptNotes(tmp_path)).save("t1", agent="a\n## Attempt 9 — x", output="", turns=0))


@settings(max_examples=60, deadline=None)
@given(outputs=st.lists(st.text(alphabet=st.sampled_from("`#\n Attempt—1x"), max_size=60), min_size=1, max_size=4))
def test_output_can_never_fake_an_attempt_section(outputs: list[str]) -> None:
    """Fenced output with headers and backticks in it never changes the attempt count."""
    text = "".join(format_attempt(i + 1, "a", "t", out, 1, 0) for i, out in enumerate(outputs))
    assert count_attempts(text) == len(outputs)
    assert count_attempts(text + "## Attempt 99 — spoof (t)\n") == len(outputs) + 1
