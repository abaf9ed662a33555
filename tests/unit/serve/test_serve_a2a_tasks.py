"""The A2A server's task table: bounded, oldest finished task forgotten first, and the task awaiting a decision
found by its context."""

from __future__ import annotations

import pytest
from a2a.types.a2a_pb2 import Task, TaskState, TaskStatus

from agentloop.serve.protocols.a2a import handler
from agentloop.serve.protocols.a2a.handler import Record, Tasks


def _record(task_id: str, context_id: str, state: TaskState) -> Record:
    return Record(Task(id=task_id, context_id=context_id, status=TaskStatus(state=state)))


def test_the_newest_task_awaiting_a_decision_is_found_in_its_context_only() -> None:
    tasks = Tasks()
    tasks.add(_record("t1", "c1", TaskState.TASK_STATE_INPUT_REQUIRED))
    tasks.add(_record("t2", "c1", TaskState.TASK_STATE_COMPLETED))
    tasks.add(_record("t3", "c1", TaskState.TASK_STATE_INPUT_REQUIRED))
    tasks.add(_record("t4", "c2", TaskState.TASK_STATE_COMPLETED))
    found = tasks.waiting("c1")
    assert found is not None and found.task.id == "t3"
    assert tasks.waiting("c2") is None and tasks.waiting("unknown") is None


def test_past_the_bound_the_oldest_finished_task_is_forgotten_with_its_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handler, "MAX_TASKS", 2)
    tasks = Tasks()
    tasks.add(_record("waits", "c1", TaskState.TASK_STATE_INPUT_REQUIRED))
    tasks.add(_record("done", "c2", TaskState.TASK_STATE_COMPLETED))
    tasks.add(_record("new", "c3", TaskState.TASK_STATE_WORKING))
    assert list(tasks.records) == ["waits", "new"] and set(tasks.contexts) == {"c1", "c3"}
    found = tasks.waiting("c1")
    assert found is not None and found.task.id == "waits"
