"""Tools from typed functions: schema from the signature, validation before the call."""

from __future__ import annotations

import asyncio
import enum
import dataclasses
import functools
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

import attrs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop.tools
from agentloop import (
    Tool,
    ToolArgumentError,
    ToolDefinitionError,
    ToolRegistry,
    current_execution_id,
    enclosing_turn,
    running_execution,
    tool,
)
from agentloop.tools import TOOL_THREADS_VARIABLE, ToolThreads, tool_threads


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


@tool
def forecast(city: Annotated[str, "the city name"], days: int = 1, unit: Unit = Unit.CELSIUS,
             tags: list[str] | None = None) -> str:
    """The weather forecast for a city."""
    return f"{city}:{days}:{unit.value}:{tags}"


def test_schema_comes_from_the_signature_and_docstring() -> None:
    assert forecast.name == "forecast"
    assert forecast.spec.description == "The weather forecast for a city."
    assert forecast.spec.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "the city name"},
            "days": {"type": "integer", "default": 1},
            "unit": {"$ref": "#/$defs/Unit", "default": "c"},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": None},
        },
        "required": ["city"],
        "additionalProperties": False,
        "$defs": {"Unit": {"enum": ["c", "f"], "title": "Unit", "type": "string"}},
    }


def test_valid_arguments_are_converted_and_the_function_runs() -> None:
    result = asyncio.run(forecast.invoke({"city": "Oslo", "days": 3.0, "unit": "f", "tags": ["a"]}))
    assert result == "Oslo:3:f:['a']"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({}, "the argument 'city' is required"), ({"city": 5}, "city: input should be a valid string, got 5"),
     ({"city": "x", "days": "many"}, "days: input should be a valid integer"), ({"city": "x", "unit": "kelvin"}, "unit"),
     ({"city": "x", "mood": "happy"}, "there is no argument 'mood'"), ({"city": "x", "tags": ["a", 1]}, "tags[1]")],
)
def test_bad_arguments_never_reach_the_function(arguments: dict[str, Any], message: str) -> None:
    calls: list[str] = []

    @tool
    def record(city: str, days: int = 1, unit: Unit = Unit.CELSIUS, tags: list[str] | None = None) -> None:
        calls.append(city)

    with pytest.raises(ToolArgumentError, match=message.replace("[", r"\[").replace("]", r"\]")):
        asyncio.run(record.invoke(arguments))
    assert calls == []


def test_async_tools_and_named_decorator() -> None:
    @tool(name="lookup", description="Find a key.")
    async def find(key: Literal["a", "b"], table: dict[str, int]) -> int:
        return table[key]

    assert find.spec.name == "lookup" and find.spec.description == "Find a key."
    assert find.spec.parameters["properties"]["key"] == {"enum": ["a", "b"], "type": "string"}
    assert asyncio.run(find.invoke({"key": "b", "table": {"b": 2}})) == 2


class Opaque:
    """A class that is neither attrs, a dataclass nor anything pydantic knows."""


@pytest.mark.parametrize("annotation", [Opaque, list[Opaque], Callable[[int], int]])
def test_types_without_a_json_schema_are_refused(annotation: Any) -> None:
    def f(x: Any) -> None: ...
    f.__annotations__["x"] = annotation
    with pytest.raises(ToolDefinitionError, match="parameter 'x'"):
        tool(f)


@attrs.frozen
class Trip:
    city: str
    plan: Itinerary  # type: ignore[name-defined]  # noqa: F821 - a class never defined


def test_a_class_whose_field_names_a_type_that_does_not_exist_is_refused_naming_the_tool() -> None:
    def book(trip: Trip) -> str:
        return "booked"

    with pytest.raises(ToolDefinitionError, match="tool 'book' parameter 'trip': cannot resolve a type annotation"):
        tool(book)


def test_missing_annotation_and_var_args_are_refused() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    def star(*args: int) -> None: ...

    with pytest.raises(ToolDefinitionError, match="needs a type annotation"):
        tool(untyped)
    with pytest.raises(ToolDefinitionError, match="named parameters only"):
        tool(star)


def test_registry_refuses_duplicate_names_and_accepts_plain_functions() -> None:
    def ping() -> str:
        """Answer pong."""
        return "pong"

    registry = ToolRegistry([forecast, ping])
    assert isinstance(registry.get("ping"), Tool) and len(registry) == 2
    assert [s.name for s in registry.specs] == ["forecast", "ping"]
    with pytest.raises(ToolDefinitionError, match="two tools are named 'ping'"):
        registry.add(ping)


@settings(deadline=None, max_examples=60)
@given(st.dictionaries(st.sampled_from(["city", "days", "unit", "tags", "extra"]),
                       st.none() | st.integers() | st.text(max_size=5) | st.booleans() | st.lists(st.text(max_size=3))))
def test_validation_accepts_exactly_what_the_schema_allows(arguments: dict[str, Any]) -> None:
    """Whatever a model sends, validation either converts it to the declared types or raises."""
    try:
        checked = forecast.validate(arguments)
    except ToolArgumentError:
        return
    assert isinstance(checked["city"], str)
    assert isinstance(checked.get("days", 1), int) and not isinstance(checked.get("days", 1), bool)
    assert isinstance(checked.get("unit", Unit.CELSIUS), Unit)
    assert set(checked) <= {"city", "days", "unit", "tags"}


@attrs.frozen
class Point:
    """A place on the map.

    Args:
        lat: latitude in degrees north.
    """

    lat: float
    lon: float = 0.0
    labels: tuple[str, ...] = attrs.field(factory=tuple)


@dataclasses.dataclass
class Route:
    start: Point
    stops: list[Point]
    mode: Literal["walk", "drive"] = "walk"


def test_nested_attrs_classes_and_dataclasses_arrive_built() -> None:
    @tool
    def plan(route: Route, around: Point | None = None) -> str:
        """Plan a route."""
        return repr((route, around))

    result = asyncio.run(plan.invoke({"route": {"start": {"lat": 1}, "stops": [{"lat": 2, "lon": 3.5}]}}))
    assert result == repr((Route(Point(1.0), [Point(2.0, 3.5)]), None))
    defs = plan.spec.parameters["$defs"]
    assert defs["Point"]["properties"]["lat"] == {"type": "number", "description": "latitude in degrees north."}
    assert defs["Point"]["description"] == "A place on the map." and defs["Point"]["required"] == ["lat"]
    assert defs["Route"]["properties"]["mode"] == {"enum": ["walk", "drive"], "type": "string", "default": "walk"}
    with pytest.raises(ToolArgumentError, match=r"route.stops\[0\].lat: input should be a valid number"):
        plan.validate({"route": {"start": {"lat": 1}, "stops": [{"lat": "north"}]}})
    with pytest.raises(ToolArgumentError, match=r"there is no argument 'route.start.height'"):
        plan.validate({"route": {"start": {"lat": 1, "height": 3}, "stops": []}})


@pytest.mark.parametrize("doc", [
    """Send a parcel.

    Args:
        weight (float): the weight in kg,
            rounded up.
        express: whether it flies.

    Returns:
        the tracking number.
    """,
    """Send a parcel.

    Parameters
    ----------
    weight : float
        the weight in kg,
        rounded up.
    express : bool
        whether it flies.
    """,
    """Send a parcel.

    :param weight: the weight in kg,
        rounded up.
    :param bool express: whether it flies.
    :returns: the tracking number.
    """,
])
def test_parameter_descriptions_come_from_the_docstring(doc: str) -> None:
    def send(weight: float, express: bool = False) -> str:
        return "T1"

    send.__doc__ = doc
    made = tool(send)
    assert made.spec.description == "Send a parcel."
    assert made.spec.parameters["properties"] == {
        "weight": {"type": "number", "description": "the weight in kg, rounded up."},
        "express": {"type": "boolean", "description": "whether it flies.", "default": False},
    }


def test_tool_threads_run_at_most_their_bound_at_once_and_the_rest_once_a_thread_is_free() -> None:
    pool = ToolThreads(2)
    release = threading.Event()

    def blocked(n: int) -> int:
        release.wait(30)
        return n

    futures = [pool.submit(functools.partial(blocked, n)) for n in range(4)]
    for future in futures[:2]:
        while not future.running():
            release.wait(0.01)
    waiting = [future.running() or future.done() for future in futures[2:]]
    release.set()
    assert waiting == [False, False], "a third call ran while two held the pool's both threads"
    assert [future.result(30) for future in futures] == [0, 1, 2, 3]


def test_a_sync_tool_runs_off_the_event_loop_thread_with_the_callers_context() -> None:
    seen: list[tuple[str, str | None]] = []

    @tool
    def where() -> str:
        """Say which thread runs the tool."""
        seen.append((threading.current_thread().name, current_execution_id()))
        return "here"

    async def run() -> None:
        with running_execution("exec-1"):
            assert await where.invoke({}) == "here"

    asyncio.run(run())
    assert seen[0][0].startswith("agentloop-tool-") and seen[0][1] == "exec-1"


@pytest.mark.parametrize("value", ["0", "many", "-3"])
def test_a_bad_agentloop_tool_threads_value_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(TOOL_THREADS_VARIABLE, value)
    monkeypatch.setattr(agentloop.tools, "_POOL", agentloop.tools._ProcessPool())
    with pytest.raises(ValueError, match=f"AGENTLOOP_TOOL_THREADS='{value}': give a whole number of threads"):
        tool_threads()


def test_agentloop_tool_threads_sets_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOOL_THREADS_VARIABLE, "3")
    monkeypatch.setattr(agentloop.tools, "_POOL", agentloop.tools._ProcessPool())
    assert tool_threads().size == 3


def test_the_enclosing_turn_is_the_one_given_to_the_innermost_running_execution_and_none_outside() -> None:
    outer, inner = object(), object()
    assert enclosing_turn() is None
    with running_execution("e1", outer):  # type: ignore[arg-type]
        assert enclosing_turn() is outer
        with running_execution("e2"):
            assert enclosing_turn() is None and current_execution_id() == "e2"
        with running_execution("e3", inner):  # type: ignore[arg-type]
            assert enclosing_turn() is inner
        assert enclosing_turn() is outer and current_execution_id() == "e1"
    assert enclosing_turn() is None and current_execution_id() is None
