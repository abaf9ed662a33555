"""Steps for attempt_notes.feature."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import attrs
import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from agentloop.adapters import open_stores
from agentloop.testing import FakeClock
from agentloop.testing.tasks import TaskReplySystem, task_loop
from agentloop.tasks import (
    AttemptNotes,
    AttemptRunner,
    Evaluator,
    InvalidTaskIdError,
    TaskLifecycle,
    TaskState,
    TaskStatus,
    TaskTurn,
    TemplateRegistry,
    count_attempts,
    format_reply,
)

scenarios("attempt_notes.feature")


@attrs.define
class Desk:
    """The task store, the notes directory, the evaluator and the fake model's behaviour."""

    lifecycle: TaskLifecycle
    registry: TemplateRegistry = attrs.Factory(TemplateRegistry)
    failing_attempts: tuple[int, ...] = ()
    long_output: str | None = None
    system: TaskReplySystem | None = None
    attempts: int = 0
    error: Exception | None = None

    def reply(self, turn: TaskTurn) -> str:
        number = self.attempts
        if number in self.failing_attempts:
            return format_reply(
                f"attempt {number} failed: the form still rejects valid passwords",
                status=TaskStatus.FAILED,
                reason="tests still red",
            )
        return format_reply(self.long_output or f"attempt {number}: fixed the validator")


@pytest.fixture
def desk(tmp_path: Path) -> Desk:
    clock = FakeClock()
    with open_stores(tmp_path) as stores:
        yield Desk(TaskLifecycle(stores.tasks, AttemptNotes(stores.attempt_notes, clock=clock), clock=clock))


@given(parsers.parse('the template "{name}" asking the model to "{instruction}"'))
def template(desk: Desk, name: str, instruction: str) -> None:
    desk.registry.register_string(f'<task name="{name}" type="atomic"><description>{instruction}</description></task>')


@given(parsers.parse('a task "{task_id}" for "{name}" in the task store'))
def task(desk: Desk, task_id: str, name: str) -> None:
    asyncio.run(desk.lifecycle.create(task_id, name))


@given(parsers.parse("the model fails attempts {first:d} and {second:d} and succeeds afterwards"))
def fails_twice(desk: Desk, first: int, second: int) -> None:
    desk.failing_attempts = (first, second)


@given(parsers.parse("the model fails attempt {number:d} and succeeds afterwards"))
def fails_once(desk: Desk, number: int) -> None:
    desk.failing_attempts = (number,)


@when(parsers.parse('agent "{agent}" claims "{task_id}" and dies'))
def claims_and_dies(desk: Desk, agent: str, task_id: str) -> None:
    asyncio.run(desk.lifecycle.claim(task_id, agent))


@then(parsers.parse('agent "{agent}" finds nothing to claim'))
def nothing_to_claim(desk: Desk, agent: str) -> None:
    assert asyncio.run(desk.lifecycle.claim_next(agent)) is None


@when(parsers.parse("{minutes:d} minutes pass"))
def minutes_pass(desk: Desk, minutes: int) -> None:
    clock = desk.lifecycle.clock
    assert isinstance(clock, FakeClock)
    clock.advance(minutes * 60)


@given("the model succeeds every attempt")
def succeeds(desk: Desk) -> None:
    desk.failing_attempts = ()


@given(parsers.parse('the model answers with {size:d} characters ending in "{ending}"'))
def long_answer(desk: Desk, size: int, ending: str) -> None:
    desk.long_output = "START" + "x" * (size - len(ending) - 5) + ending


@when(
    parsers.re(r'agent "(?P<agent>[^"]+)" makes (?P<count>\d+) attempts? at "(?P<task_id>[^"]+)"'),
    converters={"count": int},
)
def make_attempts(desk: Desk, agent: str, count: int, task_id: str) -> None:
    loop, system = task_loop(desk.reply)
    if desk.system is not None:
        system.turns, system.prompts = desk.system.turns, desk.system.prompts
    desk.system = system
    runner = AttemptRunner(desk.lifecycle, Evaluator(desk.registry, loop), agent=agent)
    for _ in range(count):
        desk.attempts += 1
        asyncio.run(runner.run(task_id))


@when(parsers.parse('"{task_id}" is rejected'))
def reject(desk: Desk, task_id: str) -> None:
    asyncio.run(desk.lifecycle.reject(task_id))


@when(parsers.parse('"{task_id}" is accepted'))
def accept(desk: Desk, task_id: str) -> None:
    asyncio.run(desk.lifecycle.accept(task_id))


@when(parsers.parse('a task "{task_id}" is created'))
def create(desk: Desk, task_id: str) -> None:
    try:
        asyncio.run(desk.lifecycle.create(task_id, "fix-login"))
    except InvalidTaskIdError as exc:
        desk.error = exc


@then("the task id is refused")
def refused(desk: Desk) -> None:
    assert isinstance(desk.error, InvalidTaskIdError)
    assert "no path separators and no '..'" in str(desk.error)


def _notes(desk: Desk, task_id: str) -> str:
    notes = asyncio.run(desk.lifecycle.notes.read(task_id))
    assert notes is not None
    return notes


@then(parsers.parse('the notes of "{task_id}" hold attempts {first:d} and {second:d} by "{agent}" with "{counts}"'))
def notes_hold(desk: Desk, task_id: str, first: int, second: int, agent: str, counts: str) -> None:
    notes = _notes(desk, task_id)
    for number in (first, second):
        header = re.search(rf"^## Attempt {number} — {agent} \((\S+)\)\n{re.escape(counts)}$", notes, re.MULTILINE)
        assert header is not None, notes
        assert header.group(1) == "2026-01-01T00:00:00+00:00"


@then(
    parsers.re(r'the notes of "(?P<task_id>[^"]+)" hold (?P<count>\d+) attempts?$'),
    converters={"count": int},
)
def notes_count(desk: Desk, task_id: str, count: int) -> None:
    assert count_attempts(_notes(desk, task_id)) == count


@then(parsers.parse('the prompt of attempt {number:d} has a "## Previous Agent Notes" section holding both attempts'))
def prompt_has_both(desk: Desk, number: int) -> None:
    prompt = desk.system.prompts[number - 1]  # type: ignore[union-attr]
    section = prompt.split("## Previous Agent Notes\n", 1)[1]
    assert section.index("## Attempt 1 — ") < section.index("## Attempt 2 — ")


@then(parsers.parse('the prompt of attempt {number:d} has a "## Previous Agent Notes" section holding {count:d} attempt'))
def prompt_has_count(desk: Desk, number: int, count: int) -> None:
    prompt = desk.system.prompts[number - 1]  # type: ignore[union-attr]
    section = prompt.split("## Previous Agent Notes\n", 1)[1].split("\n## Reply Format\n", 1)[0]
    assert count_attempts(section) == count


@then(parsers.parse('the prompt of attempt {number:d} says "{text}"'))
def prompt_says(desk: Desk, number: int, text: str) -> None:
    prompt = desk.system.prompts[number - 1]  # type: ignore[union-attr]
    assert text in prompt.split("## Previous Agent Notes\n", 1)[1]


@then(parsers.parse('"{task_id}" is {state}'))
def state_is(desk: Desk, task_id: str, state: str) -> None:
    assert asyncio.run(desk.lifecycle.get(task_id)).state is TaskState(state)


@then(parsers.parse('"{task_id}" has no notes'))
def no_notes(desk: Desk, task_id: str) -> None:
    assert asyncio.run(desk.lifecycle.notes.read(task_id)) is None


@then(parsers.parse('the notes of "{task_id}" keep only the last {limit:d} characters of the output after a truncation marker'))
def notes_truncated(desk: Desk, task_id: str, limit: int) -> None:
    notes = _notes(desk, task_id)
    assert desk.long_output is not None
    output = desk.long_output
    assert f"[... output truncated: showing the last {limit} of " in notes
    assert output[-limit:] in notes
    assert "START" not in notes


@then(parsers.parse('the notes of "{task_id}" contain "{text}"'))
def notes_contain(desk: Desk, task_id: str, text: str) -> None:
    assert text in _notes(desk, task_id)
