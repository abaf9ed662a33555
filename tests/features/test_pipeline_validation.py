"""Steps for pipeline_validation.feature."""

from __future__ import annotations

import attrs
import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from agentloop import AgentContext, AgentLoop, PipelineError, System

scenarios("pipeline_validation.feature")


@attrs.frozen
class Draft:
    text: str


@attrs.frozen
class Review:
    ok: bool


COMPONENTS: dict[str, type] = {"Draft": Draft, "Review": Review}


@attrs.define
class Build:
    systems: list[System] = attrs.Factory(list)
    inputs: list[type] = attrs.Factory(list)
    loop: AgentLoop | None = None
    error: PipelineError | None = None


@pytest.fixture
def build() -> Build:
    return Build()


def _add(build: Build, name: str, order: int, reads: str = "", writes: str = "", optional: str = "") -> None:
    def process(self: System, ctx: AgentContext) -> None:
        pass

    def types(names: str) -> tuple[type, ...]:
        return tuple(COMPONENTS[n.strip()] for n in names.split(",") if n.strip())

    declared = {"reads": types(reads), "optional_reads": types(optional), "writes": types(writes)}
    cls = type(name, (System,), {"order": order, **declared, "process": process})
    build.systems.append(cls())


@given(parsers.parse('a system "{name}" at order {order:d}'))
def plain_system(build: Build, name: str, order: int) -> None:
    _add(build, name, order)


@given(parsers.parse('a system "{name}" at order {order:d} that reads "{reads}"'))
def reading_system(build: Build, name: str, order: int, reads: str) -> None:
    _add(build, name, order, reads=reads)


@given(parsers.parse('a system "{name}" at order {order:d} that writes "{writes}"'))
def writing_system(build: Build, name: str, order: int, writes: str) -> None:
    _add(build, name, order, writes=writes)


@given(parsers.parse('a system "{name}" at order {order:d} that reads "{reads}" and writes "{writes}"'))
def reading_writing_system(build: Build, name: str, order: int, reads: str, writes: str) -> None:
    _add(build, name, order, reads=reads, writes=writes)


@given(parsers.parse('a system "{name}" at order {order:d} that reads "{reads}" when present'))
def optionally_reading_system(build: Build, name: str, order: int, reads: str) -> None:
    _add(build, name, order, optional=reads)


@given(parsers.parse('"{component}" is declared as a turn input'))
def turn_input(build: Build, component: str) -> None:
    build.inputs.append(COMPONENTS[component])


@when("the pipeline is built")
def build_pipeline(build: Build) -> None:
    try:
        build.loop = AgentLoop(build.systems, inputs=build.inputs)
    except PipelineError as error:
        build.error = error


@then(parsers.parse('building fails with a message containing "{text}"'))
def fails_with(build: Build, text: str) -> None:
    assert build.loop is None and build.error is not None
    assert text in str(build.error)


@then(parsers.parse('the message also contains "{text}"'))
def message_contains(build: Build, text: str) -> None:
    assert text in str(build.error)


@then(parsers.parse('the pipeline runs "{names}" in that order'))
def runs_in_order(build: Build, names: str) -> None:
    assert build.error is None and build.loop is not None
    assert [s.name for s in build.loop.systems] == [n.strip() for n in names.split(",")]


@then("its description is")
def description_is(build: Build, docstring: str) -> None:
    assert build.loop is not None
    assert build.loop.describe().to_text() == docstring


@then("its Mermaid description is")
def mermaid_is(build: Build, docstring: str) -> None:
    assert build.loop is not None
    assert build.loop.describe().to_mermaid() == docstring
