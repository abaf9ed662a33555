"""Tools: typed Python functions a model can call, with a JSON schema from the signature.

    @tool
    def weather(city: str, days: int = 1) -> str:
        '''The forecast for a city.'''

Arguments are validated against the signature before the call; a bad call raises
`ToolArgumentError` and never reaches the function.
"""

from __future__ import annotations

import enum
import inspect
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints, overload

import attrs

from agentloop.errors import ToolArgumentError, ToolDefinitionError
from agentloop.messages import ToolSpec

_CURRENT_EXECUTION: ContextVar[str | None] = ContextVar("agentloop_current_execution", default=None)


def current_execution_id() -> str | None:
    """The id of the tool execution running now (in this task or thread), if any: a turn
    run from inside a tool records its own executions as that execution's children."""
    return _CURRENT_EXECUTION.get()


@contextmanager
def running_execution(execution_id: str) -> Iterator[None]:
    """Mark `execution_id` as the execution running inside this block (see `current_execution_id`)."""
    token = _CURRENT_EXECUTION.set(execution_id)
    try:
        yield
    finally:
        _CURRENT_EXECUTION.reset(token)


_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema(annotation: Any, where: str) -> dict[str, Any]:
    """The JSON schema of a parameter type; raises for types a model cannot produce."""
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *meta = get_args(annotation)
        schema = _schema(base, where)
        descriptions = [m for m in meta if isinstance(m, str)]
        return {**schema, "description": descriptions[0]} if descriptions else schema
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if annotation is Any:
        return {}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [member.value for member in annotation]}
    if origin is Literal:
        return {"enum": list(get_args(annotation))}
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        inner = [_schema(a, where) for a in options]
        schema = inner[0] if len(inner) == 1 else {"anyOf": inner}
        return {"anyOf": [schema, {"type": "null"}]} if len(options) < len(get_args(annotation)) else schema
    if origin in (list, tuple, Sequence) or annotation in (list, tuple):
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        return {"type": "array", "items": _schema(args[0], where) if args else {}}
    if origin in (dict, Mapping) or annotation is dict:
        key_value = get_args(annotation)
        if key_value and key_value[0] is not str:
            raise ToolDefinitionError(f"{where}: JSON object keys are strings, so use dict[str, ...]")
        return {"type": "object", "additionalProperties": _schema(key_value[1], where) if key_value else {}}
    raise ToolDefinitionError(
        f"{where}: type {annotation!r} has no JSON schema; use str, int, float, bool, an Enum, "
        f"a Literal, list[...], dict[str, ...] or an Optional of these"
    )


def _check(value: Any, annotation: Any, where: str) -> Any:
    """`value` converted to `annotation` (ints become floats, values become enums), or raise."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _check(value, get_args(annotation)[0], where)
    if annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif annotation is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        try:
            return annotation(value)
        except ValueError:
            pass
    elif origin is Literal:
        if value in get_args(annotation):
            return value
    elif origin in (Union, types.UnionType):
        if value is None and type(None) in get_args(annotation):
            return None
        options = [a for a in get_args(annotation) if a is not type(None)]
        if len(options) == 1:
            return _check(value, options[0], where)
        for option in options:
            try:
                return _check(value, option, where)
            except ToolArgumentError:
                continue
    elif origin in (list, tuple, Sequence) or annotation in (list, tuple):
        if isinstance(value, list):
            args = [a for a in get_args(annotation) if a is not Ellipsis]
            items = [_check(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)] if args else list(value)
            return tuple(items) if origin is tuple or annotation is tuple else items
    elif origin in (dict, Mapping) or annotation is dict:
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            key_value = get_args(annotation)
            if not key_value:
                return dict(value)
            return {k: _check(v, key_value[1], f"{where}.{k}") for k, v in value.items()}
    raise ToolArgumentError(f"{where}: expected {_describe(annotation)}, got {value!r}")


def _describe(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


@attrs.frozen
class _Parameter:
    name: str
    annotation: Any
    required: bool


@attrs.frozen
class Tool:
    """A callable the model may use: its `spec` (name, description, schema) and function."""

    spec: ToolSpec
    function: Callable[..., Any]
    parameters: tuple[_Parameter, ...] = attrs.field(repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments converted to the signature's types; `ToolArgumentError` if they do not fit."""
        known = {p.name for p in self.parameters}
        unknown = sorted(set(arguments) - known)
        if unknown:
            raise ToolArgumentError(f"tool {self.name!r} has no parameter {', '.join(map(repr, unknown))}")
        checked: dict[str, Any] = {}
        for parameter in self.parameters:
            if parameter.name in arguments:
                checked[parameter.name] = _check(arguments[parameter.name], parameter.annotation, parameter.name)
            elif parameter.required:
                raise ToolArgumentError(f"tool {self.name!r} needs the argument {parameter.name!r}")
        return checked

    async def invoke(self, arguments: Mapping[str, Any]) -> Any:
        """Validate `arguments` and call the function (awaiting it if it is async)."""
        result = self.function(**self.validate(arguments))
        if inspect.isawaitable(result):
            return await result
        return result


def _make_tool(function: Callable[..., Any], name: str | None, description: str | None) -> Tool:
    tool_name = name or function.__name__
    try:
        hints = get_type_hints(function, include_extras=True)
    except NameError as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot resolve a type annotation ({exc})") from exc
    parameters: list[_Parameter] = []
    properties: dict[str, Any] = {}
    for param in inspect.signature(function).parameters.values():
        where = f"tool {tool_name!r} parameter {param.name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolDefinitionError(f"{where}: a tool takes named parameters only")
        if param.name not in hints:
            raise ToolDefinitionError(f"{where} needs a type annotation")
        required = param.default is inspect.Parameter.empty
        parameters.append(_Parameter(param.name, hints[param.name], required))
        properties[param.name] = _schema(hints[param.name], where)
    schema = {
        "type": "object",
        "properties": properties,
        "required": [p.name for p in parameters if p.required],
        "additionalProperties": False,
    }
    doc = description if description is not None else inspect.getdoc(function) or ""
    return Tool(ToolSpec(tool_name, doc.strip(), schema), function, tuple(parameters))


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(*, name: str | None = None, description: str | None = None) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None, /, *, name: str | None = None, description: str | None = None
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function (sync or async) into a `Tool`; the docstring is its description.

    Use `@tool` or `@tool(name=..., description=...)`. `Annotated[str, "what it is"]`
    adds a parameter description to the schema.
    """
    if function is not None:
        return _make_tool(function, name, description)
    return lambda f: _make_tool(f, name, description)


@attrs.frozen
class VoiceReply:
    """Return this from a tool to have `text` spoken to the user as a voice message."""

    text: str


class ToolRegistry:
    """The tools of a bot by name; refuses two tools with one name."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.add(item)

    def add(self, item: Tool | Callable[..., Any]) -> Tool:
        """Register a `Tool`, or a plain typed function (turned into one)."""
        found = item if isinstance(item, Tool) else tool(item)
        if found.name in self._tools:
            raise ToolDefinitionError(f"two tools are named {found.name!r}; pass name=... to one of them")
        self._tools[found.name] = found
        return found

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec for t in self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(tuple(self._tools.values()))

