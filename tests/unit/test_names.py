"""Tests for agentloop._names: one safe-name rule for task ids, template names and bot names
(of both the conversation stores and note-taking)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop._names import is_safe_name, new_id
from agentloop.adapters import open_note_taking, open_stores
from agentloop.tasks.errors import InvalidTaskIdError, TemplateError
from agentloop.tasks import load_string, validate_task_id
from agentloop.testing import ScriptedLLM

NAMES = ["a", "Task-1.v2_x", "x" * 128, "", "..", "a..b", "../x", "a/b", ".hidden", "-flag", "a b", "x" * 129]


@pytest.mark.parametrize("name", ["a", "Task-1.v2_x", "x" * 128, "9lives"])
def test_safe_names(name: str) -> None:
    assert is_safe_name(name)


@pytest.mark.parametrize("name", ["", "..", "a..b", "../x", "a/b", "a\\b", ".hidden", "-flag", "a b", "a\x00b", "x" * 129, 7])
def test_unsafe_names(name: object) -> None:
    assert not is_safe_name(name)


@pytest.mark.parametrize("name", NAMES)
def test_task_ids_template_names_and_bot_names_follow_the_same_rule(name: str, tmp_path: Path) -> None:
    accepted = []
    try:
        validate_task_id(name)
        accepted.append(True)
    except InvalidTaskIdError:
        accepted.append(False)
    try:
        load_string(f'<task name="{name}" type="atomic"><description>d</description></task>')
        accepted.append(True)
    except TemplateError:
        accepted.append(False)
    try:
        open_stores(tmp_path, bot=name).close()
        accepted.append(True)
    except ValueError:
        accepted.append(False)
    try:
        open_note_taking(tmp_path, ScriptedLLM(), bot=name).close()
        accepted.append(True)
    except ValueError:
        accepted.append(False)
    assert accepted == [is_safe_name(name)] * 4


def test_open_note_taking_refuses_a_bot_name_that_leaves_its_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with pytest.raises(ValueError, match="bot name '../x' must be 1-128 letters"):
        open_note_taking(data, ScriptedLLM(), bot="../x")
    assert list(tmp_path.iterdir()) == [], "nothing is created, inside or outside the data directory"


def test_new_ids_are_32_hex_digits_and_do_not_repeat() -> None:
    ids = [new_id() for _ in range(10_000)]
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert len(set(ids)) == len(ids)
