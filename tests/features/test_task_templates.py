"""Steps for task_templates.feature."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from agentloop.testing import FakeClock
from agentloop.testing.tasks import TaskReplySystem, task_loop
from agentloop.tasks import (
    ContextManagementWarning,
    Evaluator,
    ReduceTemplate,
    ResourceExhaustedError,
    SubtaskRequest,
    TaskError,
    TaskFailedError,
    TaskResult,
    TaskStatus,
    TaskTemplate,
    TaskTurn,
    TemplateError,
    TemplateRegistry,
    format_reply,
    render_outputs,
)

scenarios("task_templates.feature")

TEMPLATES = Path(__file__).parent / "templates"


@attrs.define
class World:
    """One scenario: the registry, how the fake model answers, and what happened."""

    tmp_path: Path
    registry: TemplateRegistry = attrs.Factory(TemplateRegistry)
    answers: dict[str, Callable[[TaskTurn], str]] = attrs.Factory(dict)
    system: TaskReplySystem | None = None
    result: TaskResult | None = None
    error: Exception | None = None
    warnings: list[str] = attrs.Factory(list)

    def reply(self, turn: TaskTurn) -> str:
        """The scripted answer for the instruction, else the instruction echoed back."""
        answer = self.answers.get(turn.instruction)
        return answer(turn) if answer is not None else format_reply(turn.instruction)

    def register(self, action: Callable[[], object]) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ContextManagementWarning)
            try:
                action()
            except TemplateError as exc:
                self.error = exc
        self.warnings += [str(w.message) for w in caught if issubclass(w.category, ContextManagementWarning)]

    def run(self, name: str, inputs: dict[str, Any], *, context: dict[str, str] | None = None, max_depth: int = 5) -> None:
        loop, self.system = task_loop(self.reply)
        evaluator = Evaluator(self.registry, loop, clock=FakeClock(), max_depth=max_depth)
        try:
            self.result = evaluator.run_sync(name, inputs, context=context)
        except TaskError as exc:
            self.error = exc

    @property
    def turns(self) -> list[TaskTurn]:
        assert self.system is not None
        return self.system.turns


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def _find(registry: TemplateRegistry, path: str) -> TaskTemplate:
    name, _, part = path.partition(".")
    template = registry.get(name)
    if part:
        assert isinstance(template, ReduceTemplate)
        return template.inner if part == "inner_task" else template.reduction
    return template


# --- registration -------------------------------------------------------------------


@given(parsers.parse('the templates in "{file}" are registered with scripts allowed'))
def registered_with_scripts(world: World, file: str) -> None:
    world.registry = TemplateRegistry(allow_scripts=True)
    world.registry.register_file(TEMPLATES / file)


@given(parsers.parse('the templates in "{file}" are registered'))
def registered(world: World, file: str) -> None:
    world.registry.register_file(TEMPLATES / file)


@given("these templates are registered:")
def registered_inline(world: World, docstring: str) -> None:
    world.registry.register_string(docstring, source="inline.xml")


@when("this template is registered:")
def register_inline(world: World, docstring: str) -> None:
    world.register(lambda: world.registry.register_string(docstring, source="inline.xml"))


@when(parsers.parse('the template file "{file}" is registered'))
def register_file(world: World, file: str) -> None:
    world.register(lambda: world.registry.register_file(TEMPLATES / file))


@then(
    parsers.parse(
        '"{task}" has inherit_context "{inherit}", accumulate_data "{accumulate}", '
        'accumulation_format "{fmt}" and fresh_context "{fresh}"'
    )
)
def has_settings(world: World, task: str, inherit: str, accumulate: str, fmt: str, fresh: str) -> None:
    assert world.error is None, world.error
    settings = _find(world.registry, task).context
    assert settings.inherit_context.value == inherit
    assert ("n/a" if settings.accumulate_data is None else str(settings.accumulate_data).lower()) == accumulate
    assert ("n/a" if settings.accumulation_format is None else settings.accumulation_format.value) == fmt
    assert settings.fresh_context.value == fresh


@then(parsers.parse('registration fails with "{message}"'))
def registration_fails(world: World, message: str) -> None:
    assert isinstance(world.error, TemplateError), world.error
    assert message in str(world.error)
    assert len(world.registry) == 0


@then(parsers.parse('registration warns "{message}"'))
def registration_warns(world: World, message: str) -> None:
    assert world.error is None, world.error
    assert [w for w in world.warnings if message in w and "inline.xml" in w], world.warnings


@then(parsers.parse('"{name}" is registered'))
def is_registered(world: World, name: str) -> None:
    assert name in world.registry


# --- the fake model -----------------------------------------------------------------


@given(parsers.parse('the model answers "{instruction}" with "{content}" and notes {notes}'))
def answers_with_notes(world: World, instruction: str, content: str, notes: str) -> None:
    world.answers[instruction] = lambda turn: format_reply(content, notes=json.loads(notes))


@given(parsers.parse('the model fails "{instruction}" because "{reason}"'))
def answers_failure(world: World, instruction: str, reason: str) -> None:
    world.answers[instruction] = lambda turn: format_reply("", status=TaskStatus.FAILED, reason=reason)


@given(parsers.parse('the model asks for subtask "{template}" with query "{query}" before answering "{instruction}"'))
def asks_for_subtask(world: World, template: str, query: str, instruction: str) -> None:
    def parent(turn: TaskTurn) -> str:
        if not turn.subtask_results:
            request = SubtaskRequest(template=template, inputs={"query": query})
            return format_reply("I need to look this up", status=TaskStatus.CONTINUATION, subtask=request)
        return format_reply(f"answer to {turn.instruction}")

    def child(turn: TaskTurn) -> str:
        return format_reply(f"answer to {turn.instruction}", notes={"answered": turn.instruction})

    world.answers[instruction] = parent
    world.answers[f"Look up {query}"] = child


def _asks_for(template: str) -> Callable[[TaskTurn], str]:
    request = SubtaskRequest(template=template)
    return lambda turn: format_reply("", status=TaskStatus.CONTINUATION, subtask=request)


@given(parsers.parse('the model asks "{first}" for subtask "{second_name}" and "{second}" for subtask "{first_name}"'))
def asks_in_a_cycle(world: World, first: str, second_name: str, second: str, first_name: str) -> None:
    world.answers[first] = _asks_for(second_name)
    world.answers[second] = _asks_for(first_name)


@given(parsers.parse('a chain of {count:d} templates "level-0" to "level-{last:d}", each asking for the next as a subtask'))
def chain_of_templates(world: World, count: int, last: int) -> None:
    assert last == count - 1
    tasks = "".join(
        f'<task name="level-{i}" type="atomic"><description>Level {i}</description></task>' for i in range(count)
    )
    world.registry.register_string(f"<templates>{tasks}</templates>", source="chain.xml")
    for i in range(count - 1):
        world.answers[f"Level {i}"] = _asks_for(f"level-{i + 1}")


@given(parsers.parse('a file "{name}" with {count:d} lines'))
def a_file(world: World, name: str, count: int) -> None:
    (world.tmp_path / name).write_text("".join(f"line {i}\n" for i in range(count)))


# --- running ------------------------------------------------------------------------


@when(parsers.parse('"{name}" runs with topic "{topic}" and context "{key}" = "{value}"'))
def run_with_context(world: World, name: str, topic: str, key: str, value: str) -> None:
    world.run(name, {"topic": topic}, context={key: value})


@when(parsers.parse('"{name}" runs with topic "{topic}"'))
def run_with_topic(world: World, name: str, topic: str) -> None:
    world.run(name, {"topic": topic})


@when(parsers.parse('"{name}" runs with source "{source}"'))
def run_with_source(world: World, name: str, source: str) -> None:
    world.run(name, {"source": source})


@when(parsers.parse('"{name}" runs over the items "{items}"'))
def run_over(world: World, name: str, items: str) -> None:
    world.run(name, {"items": [item.strip() for item in items.split(",")]})


@when(parsers.parse('"{name}" runs with path of "{file}"'))
def run_with_path(world: World, name: str, file: str) -> None:
    world.run(name, {"path": str(world.tmp_path / file)})


@when(parsers.parse('"{name}" runs with a depth limit of {limit:d}'))
def run_with_depth_limit(world: World, name: str, limit: int) -> None:
    world.run(name, {}, max_depth=limit)


@when(parsers.parse('"{name}" runs'))
def run_plain(world: World, name: str) -> None:
    world.run(name, {})


# --- outcomes -----------------------------------------------------------------------


@then(parsers.parse("turn {number:d} sees the previous steps exactly:"))
def sees_previous_steps(world: World, number: int, docstring: str) -> None:
    turn = world.turns[number - 1]
    assert render_outputs(turn.history) == docstring
    assert f"## Previous Steps\n{docstring}\n\n" in world.system.prompts[number - 1]  # type: ignore[union-attr]


@then(parsers.parse('turn {number:d} keeps no output of "{step_id}"'))
def keeps_no_output(world: World, number: int, step_id: str) -> None:
    (entry,) = [e for e in world.turns[number - 1].history if e.step_id == step_id]
    assert entry.output is None


@then(parsers.parse("turn {number:d} sees the subtask results exactly:"))
def sees_subtask_results(world: World, number: int, docstring: str) -> None:
    assert render_outputs(world.turns[number - 1].subtask_results) == docstring


@then(parsers.parse('turn {number:d} is "{instruction}" with fresh_context off and context "{key}"'))
def turn_inherits(world: World, number: int, instruction: str, key: str) -> None:
    turn = world.turns[number - 1]
    assert (turn.instruction, turn.fresh_context, list(turn.context)) == (instruction, False, [key])


@then(parsers.parse('turn {number:d} is "{instruction}" with fresh_context on and no context'))
def turn_fresh(world: World, number: int, instruction: str) -> None:
    turn = world.turns[number - 1]
    assert (turn.instruction, turn.fresh_context, dict(turn.context), turn.depth) == (instruction, True, {}, 1)


@then(parsers.parse('the result is "{content}"'))
def result_is(world: World, content: str) -> None:
    assert world.error is None, world.error
    assert world.result is not None and world.result.content == content


@then(parsers.parse('the result starts with "{prefix}"'))
def result_starts(world: World, prefix: str) -> None:
    assert world.error is None, world.error
    assert world.result is not None and world.result.content.startswith(prefix)


@then(parsers.parse("the result notes say exit_code {code:d}"))
def result_exit_code(world: World, code: int) -> None:
    assert world.result is not None and world.result.notes["exit_code"] == code


@then(parsers.parse("{count:d} turns ran"))
def turns_ran(world: World, count: int) -> None:
    assert len(world.turns) == count


@then(parsers.parse('the run fails with reason "{reason}" and a message containing "{text}"'))
def run_fails(world: World, reason: str, text: str) -> None:
    assert isinstance(world.error, TaskFailedError), world.error
    assert world.error.reason.value == reason
    assert text in str(world.error)


@then(parsers.parse('the run exhausts "{resource}" at {used:d} of {limit:d}'))
def run_exhausts(world: World, resource: str, used: int, limit: int) -> None:
    assert isinstance(world.error, ResourceExhaustedError), world.error
    assert (world.error.resource, world.error.used, world.error.limit) == (resource, used, limit)


@then(parsers.parse('the failure names step {step:d} of {total:d} with the partial result of "{step_id}" being "{content}"'))
def failure_partial(world: World, step: int, total: int, step_id: str, content: str) -> None:
    error = world.error
    assert isinstance(error, TaskFailedError)
    assert (error.failed_step, error.total_steps) == (step, total)
    assert [(p.step_id, p.output) for p in error.partial_results] == [(step_id, content)]
    assert error.result is not None and error.result.detail == "the rows are not CSV"
