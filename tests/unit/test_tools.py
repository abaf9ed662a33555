"""Tools from typed functions: schema from the signature, validation before the call."""

from __future__ import annotations

import asyncio
import enum
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import Tool, ToolArgumentError, ToolDefinitionError, ToolRegistry, tool


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
            "days": {"type": "integer"},
            "unit": {"enum": ["c", "f"]},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        },
        "required": ["city"],
        "additionalProperties": False,
    }


def test_valid_arguments_are_converted_and_the_function_runs() -> None:
    result = asyncio.run(forecast.invoke({"city": "Oslo", "days": 3.0, "unit": "f", "tags": ["a"]}))
    assert result == "Oslo:3:f:['a']"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({}, "needs the argument 'city'"), ({"city": 5}, "city: expected str"),
     ({"city": "x", "days": True}, "days: expected int"), ({"city": "x", "unit": "kelvin"}, "unit"),
     ({"city": "x", "mood": "happy"}, "no parameter 'mood'"), ({"city": "x", "tags": ["a", 1]}, "tags[1]")],
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
    assert find.spec.parameters["properties"]["key"] == {"enum": ["a", "b"]}
    assert asyncio.run(find.invoke({"key": "b", "table": {"b": 2}})) == 2


@pytest.mark.parametrize("annotation", [object, set[int], dict[int, str]])
def test_types_without_a_json_schema_are_refused(annotation: Any) -> None:
    def f(x: Any) -> None: ...
    f.__annotations__["x"] = annotation
    with pytest.raises(ToolDefinitionError, match="parameter 'x'"):
        tool(f)


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
